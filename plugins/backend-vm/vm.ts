/**
 * One VM's qemu process through its life: start (fresh, or from a saved
 * state), wait for the guest agent, save to a file and quit (pause), find
 * it again after an agent restart, kill it. Built on core/qemu's
 * QemuProcess and save/restore.
 */
import { mkdir, rm } from 'node:fs/promises';
import {
  DsecError,
  INCOMING_DEFER,
  QemuProcess,
  restoreVmFromFile,
  saveVmToFile,
  spawnPrefix,
  tailOf,
  type Accel,
  type ProcessTraits,
} from '../../core/plugin-api.js';
import { connectGuest, type GuestConnection } from './guest.js';
import type { VmPaths } from './machine.js';

/** What the plugin keeps in `sandbox.backend` (persisted by the agent as JSON). */
export interface VmRecord {
  /** SandboxInfo.handle: `qemu pid=<pid>`, and ` vnc=<socket>` when the VM serves VNC. */
  readonly handle: string;
  /** The qemu binary it runs on (a resume uses the same one). */
  readonly qemu: string;
  readonly accel: Accel;
  /** The machine's arguments, kept so a resume starts exactly the machine the state was saved from. */
  readonly argv: readonly string[];
  /** Where its sockets are (the sandbox folder, or a short folder under /run when that is too deep). */
  readonly socketDir: string;
  readonly pid?: number;
  /** Paused: the VM lives in the state file, no qemu runs. */
  readonly saved?: boolean;
  /** CPU seconds of the qemu processes before the current one (a resume starts a new process). */
  readonly cpuSecondsBefore?: number;
  /** The VNC server's unix socket, when the fleet asked for one. */
  readonly vnc?: string;
  /** How long the last boot took, qemu start to the guest agent's first answer. */
  readonly bootMs?: number;
}

export function handleOf(pid: number | undefined, vnc: string | undefined): string {
  return `qemu pid=${pid ?? 'none'}${vnc ? ` vnc=${vnc}` : ''}`;
}

/**
 * Start qemu on the record's machine (with `-incoming defer` to restore a
 * saved state), behind the native helper when the sandbox has process
 * traits: every qemu thread then inherits them (KSM merging of guest memory
 * for memoryMerge, SCHED_IDLE for idleCpu, a core-scheduling cookie).
 */
export async function startQemu(record: VmRecord, paths: VmPaths, traits: ProcessTraits, incoming = false): Promise<QemuProcess> {
  await mkdir(paths.socketDir, { recursive: true, mode: 0o700 });
  // A socket left by an earlier qemu would make this one's bind fail.
  await Promise.all([paths.guestAgent, paths.vnc].map((socket) => rm(socket, { force: true })));
  try {
    return await QemuProcess.start({
      qemu: record.qemu,
      args: [...record.argv, ...(incoming ? INCOMING_DEFER : [])],
      paths: paths.qemu,
      prefix: spawnPrefix(traits),
      readyTimeoutMs: 15_000,
    });
  } catch (error) {
    if (error instanceof DsecError) throw error;
    throw new Error(`qemu did not start: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * Wait until the guest agent answers, watching qemu meanwhile: a qemu that
 * exits (a guest that panicked, with -no-reboot) or a guest silent until
 * the deadline is DSEC_GUEST_BOOT_FAILED with the end of its console and
 * firmware logs. The caller kills qemu and cleans up.
 */
export async function waitForGuest(vm: QemuProcess, paths: VmPaths, id: string, timeoutMs: number): Promise<GuestConnection> {
  const deadline = Date.now() + timeoutMs;
  let lastError: Error | undefined;
  for (;;) {
    if (!(await vm.isAlive())) throw await bootFailed(paths, id, 'qemu exited before the guest agent answered');
    const left = deadline - Date.now();
    if (left <= 0) {
      throw await bootFailed(
        paths,
        id,
        `the guest agent did not answer within ${Math.round(timeoutMs / 1000)} s${lastError ? ` (${lastError.message})` : ''}`,
      );
    }
    try {
      // Short attempts, so an exited qemu is noticed within a second or two rather than at the deadline.
      return await connectGuest(paths.guestAgent, id, Math.min(left, 2000));
    } catch (error) {
      lastError = error as Error;
    }
  }
}

async function bootFailed(paths: VmPaths, id: string, why: string): Promise<DsecError> {
  const [console, firmware, qemu] = await Promise.all([
    tailOf(paths.qemu.console, 8),
    tailOf(paths.firmwareLog, 2),
    tailOf(paths.qemu.log, 3),
  ]);
  const parts = [why];
  parts.push(console ? `console: ${console}` : 'the console is empty');
  if (firmware) parts.push(`firmware: ${firmware}`);
  if (qemu) parts.push(`qemu: ${qemu}`);
  return new DsecError('DSEC_GUEST_BOOT_FAILED', { id, message: parts.join('; ') });
}

/** Stop the VM and write its memory and device state to `paths.state`, then quit qemu. */
export async function saveAndQuit(vm: QemuProcess, paths: VmPaths): Promise<void> {
  const qmp = await vm.qmp();
  await saveVmToFile(qmp, paths.state);
  await vm.quit();
}

/** Start qemu on the saved state and let the VM run on. The state file is removed once it runs. */
export async function restore(record: VmRecord, paths: VmPaths, traits: ProcessTraits): Promise<QemuProcess> {
  const vm = await startQemu(record, paths, traits, true);
  try {
    await restoreVmFromFile(await vm.qmp(), paths.state);
  } catch (error) {
    await vm.kill().catch(() => undefined);
    throw error;
  }
  await rm(paths.state, { force: true });
  return vm;
}

/**
 * The VMs' qemu processes this agent holds, by sandbox id. A qemu's QMP
 * socket takes one client at a time, so each process is kept with its open
 * connection rather than adopted afresh per call; one this agent did not
 * start (it restarted under running VMs) is adopted from its pidfile,
 * checked against its QMP socket so a recycled pid is never taken for it.
 */
export class QemuProcesses {
  private readonly live = new Map<string, QemuProcess>();

  set(id: string, vm: QemuProcess): void {
    this.live.set(id, vm);
  }

  /** The sandbox's qemu if it still runs. */
  async find(id: string, paths: VmPaths): Promise<QemuProcess | undefined> {
    const known = this.live.get(id);
    if (known && (await known.isAlive())) return known;
    this.live.delete(id);
    const adopted = await QemuProcess.adopt(paths.qemu);
    if (adopted) this.live.set(id, adopted);
    return adopted;
  }

  /** Kill the sandbox's qemu if one runs; harmless when none does. */
  async kill(id: string, paths: VmPaths): Promise<void> {
    const vm = await this.find(id, paths);
    this.live.delete(id);
    await vm?.kill();
  }

  forget(id: string): void {
    this.live.delete(id);
  }
}
