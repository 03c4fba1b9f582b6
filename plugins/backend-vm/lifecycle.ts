/**
 * What each lifecycle tap of the full-VM backend does, for one plugin
 * instance (one agent): the qemu processes and guest agent connections it
 * holds live here, in memory; everything needed to find them again after an
 * agent restart is in the sandbox's record (`sandbox.backend`, a VmRecord).
 */
import { rm, stat } from 'node:fs/promises';
import path from 'node:path';
import {
  chooseAccel,
  DsecError,
  findGuestKernel,
  findQemu as findQemuBinary,
  qemuUsage,
  savedVmUsage,
  type AccelChoice,
  type BackendProbe,
  type NodeContext,
  type QemuBinary,
  type SandboxContext,
  type SandboxUsage,
} from '../../core/plugin-api.js';
import { connectGuest, GuestConnections, type GuestConnection } from './guest.js';
import { checkImage, createOverlay } from './image.js';
import { machineArgs, SHORT_SOCKET_ROOT, vmPaths, type VmPaths } from './machine.js';
import { PLUGIN_NAME, sandboxOptions, type BackendVmOptions } from './options.js';
import { handleOf, QemuProcesses, restore, saveAndQuit, startQemu, waitForGuest, type VmRecord } from './vm.js';

/** How long a resumed VM's guest agent has to answer again (its guest was running when saved). */
const RESUME_GUEST_TIMEOUT_MS = 30_000;

interface Machine {
  readonly qemu: QemuBinary;
  readonly accel: AccelChoice;
}

export class VmLifecycle {
  private readonly guests = new GuestConnections();
  private readonly vms = new QemuProcesses();
  private machine: Promise<Machine> | undefined;

  constructor(private readonly options: Required<BackendVmOptions>) {}

  /** The guest agent of a running VM (connected again when the connection dropped). */
  guest(sandbox: SandboxContext): Promise<GuestConnection> {
    return this.guests.get(sandbox.spec.id, vmPaths(sandbox.dir).guestAgent);
  }

  async provision(sandbox: SandboxContext): Promise<true> {
    const { spec } = sandbox;
    const vmOptions = sandboxOptions(spec.backendOptions);
    await checkImage(spec.image);
    const image = spec.image!;
    const { qemu, accel } = await this.getMachine(sandbox.node);
    const files = vmPaths(sandbox.dir);
    const vnc = vmOptions.display?.vnc ? files.vnc : undefined;
    let record: VmRecord = {
      handle: handleOf(undefined, vnc),
      qemu: qemu.path,
      accel: accel.accel,
      argv: machineArgs({ spec, paths: files, accel: accel.accel, tcgCacheMiB: this.options.tcgCacheMiB, options: vmOptions }),
      socketDir: files.socketDir,
      ...(vnc ? { vnc } : {}),
    };
    sandbox.backend = { ...record };
    const bootTimeoutMs = vmOptions.bootTimeoutSeconds !== undefined ? vmOptions.bootTimeoutSeconds * 1000 : this.options.bootTimeoutMs;
    try {
      await createOverlay(image, files.overlay);
      const started = performance.now();
      const vm = await startQemu(record, files, sandbox.traits);
      this.vms.set(spec.id, vm);
      record = { ...record, pid: vm.pid, handle: handleOf(vm.pid, vnc) };
      sandbox.backend = { ...record };
      this.guests.adopt(spec.id, await waitForGuest(vm, files, spec.id, bootTimeoutMs));
      const bootMs = Math.round(performance.now() - started);
      sandbox.backend = { ...record, bootMs };
      sandbox.node.log.info(`sandbox ${spec.id}: VM booted in ${bootMs} ms under ${accel.accel.toUpperCase()}`);
      return true;
    } catch (error) {
      // Nothing of a failed create is left: no qemu, no overlay, no sockets.
      await this.remove(spec.id, files).catch((cleanup: Error) =>
        sandbox.node.log.warn(`sandbox ${spec.id}: cleaning up the failed VM: ${cleanup.message}`),
      );
      throw error;
    }
  }

  async probe(sandbox: SandboxContext): Promise<BackendProbe> {
    const record = recordOf(sandbox);
    if (!record) return 'stopped';
    const files = vmPaths(sandbox.dir);
    if (record.saved) return (await exists(files.state)) ? 'paused' : 'stopped';
    return (await this.vms.find(sandbox.spec.id, files)) ? 'running' : 'stopped';
  }

  async pause(sandbox: SandboxContext): Promise<true> {
    const record = requireRecord(sandbox);
    if (record.saved) return true;
    const { id } = sandbox.spec;
    const files = vmPaths(sandbox.dir);
    const vm = await this.vms.find(id, files);
    if (!vm) throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: 'stopped (its qemu is gone)' });
    this.guests.forget(id);
    const cpu = await qemuUsage(vm.pid).then((used) => used.cpuSeconds, () => 0);
    await saveAndQuit(vm, files);
    this.vms.forget(id);
    const { pid: _gone, ...rest } = record;
    sandbox.backend = { ...rest, saved: true, cpuSecondsBefore: (record.cpuSecondsBefore ?? 0) + cpu, handle: handleOf(undefined, record.vnc) };
    return true;
  }

  async resume(sandbox: SandboxContext): Promise<true> {
    const record = requireRecord(sandbox);
    const { id } = sandbox.spec;
    const files = vmPaths(sandbox.dir);
    if (!record.saved) {
      if (await this.vms.find(id, files)) return true;
      throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: 'stopped (its qemu is gone)' });
    }
    if (!(await exists(files.state))) throw new Error(`its saved state ${files.state} is gone; destroy it and create it again`);
    const vm = await restore(record, files, sandbox.traits);
    this.vms.set(id, vm);
    const { saved: _saved, ...rest } = record;
    sandbox.backend = { ...rest, pid: vm.pid, handle: handleOf(vm.pid, record.vnc) };
    try {
      this.guests.adopt(id, await connectGuest(files.guestAgent, id, RESUME_GUEST_TIMEOUT_MS));
    } catch (error) {
      // Running but deaf: say so; it stays running (the probe sees qemu), and destroy kills it.
      throw new DsecError('DSEC_GUEST_UNREACHABLE', { id, message: `after the resume: ${(error as Error).message}` }, { cause: error });
    }
    return true;
  }

  async usage(sandbox: SandboxContext): Promise<SandboxUsage> {
    const record = requireRecord(sandbox);
    const files = vmPaths(sandbox.dir);
    const before = record.cpuSecondsBefore ?? 0;
    if (record.saved) return savedVmUsage(files.state, before);
    const vm = await this.vms.find(sandbox.spec.id, files);
    if (!vm) return { cpuSeconds: before, memoryMiB: 0, cacheMiB: 0, swapMiB: 0, processes: 0 };
    const used = await qemuUsage(vm.pid);
    return { ...used, cpuSeconds: used.cpuSeconds + before };
  }

  /** Tolerates every half-made state: no record, no qemu, no files. */
  async destroy(sandbox: SandboxContext): Promise<void> {
    await this.remove(sandbox.spec.id, vmPaths(sandbox.dir));
  }

  private async remove(id: string, files: VmPaths): Promise<void> {
    this.guests.forget(id);
    await this.vms.kill(id, files);
    const made = [
      files.overlay,
      files.state,
      `${files.state}.partial`,
      files.guestAgent,
      files.vnc,
      files.firmwareLog,
      files.qemu.qmp,
      files.qemu.pidFile,
      files.qemu.console,
      files.qemu.log,
    ];
    await Promise.all(made.map((file) => rm(file, { force: true })));
    if (files.socketDir.startsWith(`${SHORT_SOCKET_ROOT}/`)) await rm(files.socketDir, { recursive: true, force: true });
  }

  /** The binary and the accelerator, found on first use (an agent without qemu still starts, and says why a VM cannot). */
  private getMachine(node: NodeContext): Promise<Machine> {
    if (!this.machine) {
      const pending = findMachine(node, this.options.qemu, this.options.accel);
      this.machine = pending;
      pending.catch(() => {
        if (this.machine === pending) this.machine = undefined; // installed later: look again
      });
    }
    return this.machine;
  }
}

async function findMachine(node: NodeContext, qemuName: string, request: 'auto' | 'kvm' | 'tcg'): Promise<Machine> {
  const qemu = await findQemuBinary(qemuName);
  let accel: AccelChoice;
  if (request !== 'auto') accel = { accel: request, reason: `accel: ${request} was asked for`, source: 'forced' };
  else {
    // The probe boots the node's guest kernel under KVM; without one there is nothing to probe with.
    const kernel = await findGuestKernel().catch(() => undefined);
    accel = kernel
      ? await chooseAccel({ qemu, kernel, cacheDir: path.join(node.root, PLUGIN_NAME), request })
      : { accel: 'tcg', reason: 'no guest kernel to probe KVM with: emulating with TCG', source: 'forced' };
  }
  node.log.info(`${PLUGIN_NAME}: qemu ${qemu.version} at ${qemu.path}; ${accel.accel.toUpperCase()} (${accel.reason})`);
  return { qemu, accel };
}

function recordOf(sandbox: SandboxContext): VmRecord | undefined {
  const record = sandbox.backend as Partial<VmRecord>;
  return Array.isArray(record.argv) && typeof record.qemu === 'string' ? (record as VmRecord) : undefined;
}

function requireRecord(sandbox: SandboxContext): VmRecord {
  const record = recordOf(sandbox);
  if (!record) throw new Error('it has no VM on record (its create did not get as far as starting qemu)');
  return record;
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(() => true, () => false);
}
