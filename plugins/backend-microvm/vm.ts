/**
 * The life of one microVM: boot, pause to a file, resume from it, probe,
 * destroy. A running VM's qemu process and its guest agent session
 * (guest.ts) are kept in memory (`live`); `sandbox.backend` (persisted by
 * the agent) keeps what a restarted agent needs to find them again: the
 * machine's command line, and the pidfile and sockets in the sandbox's folder.
 */
import { execFile } from 'node:child_process';
import { mkdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import {
  DsecError,
  INCOMING_DEFER,
  QemuProcess,
  restoreVmFromFile,
  saveVmToFile,
  spawnPrefix,
  tailOf,
  type BackendProbe,
  type GuestSession,
  type SandboxContext,
} from '../../core/plugin-api.js';
import type { AssetCache } from './assets.js';
import { pluginDir } from './assets.js';
import { GuestLink, openGuestSession } from './guest.js';
import { DEFAULT_PATH, INIT_DONE_MARKER, INIT_FAILED_PREFIX } from './guest-init.js';
import { layerImages } from './layer-images.js';
import { machineArgs, vcpusFor } from './machine.js';
import { type MicrovmSandboxOptions, type ResolvedPluginOptions } from './options.js';
import { microvmPaths, type MicrovmPaths } from './paths.js';

const execFileAsync = promisify(execFile);

/** How long a resumed guest's agent has to answer again (it was running when saved: no boot). */
const RESUME_AGENT_TIMEOUT_MS = 15_000;
/** How long a call waits to reconnect to a running guest's agent (a new sync and hello). */
const RECONNECT_TIMEOUT_MS = 10_000;
const CONSOLE_LINES = 12;

/** What this backend keeps in `sandbox.backend` (persisted by the agent). */
export interface MicrovmRecord {
  /** Reported as SandboxInfo.handle. */
  readonly handle: string;
  readonly qemu: string;
  /** The machine's command line (QemuProcess adds QMP, pidfile, console): a resume starts exactly this again. */
  readonly args: readonly string[];
  readonly accel: 'kvm' | 'tcg';
  readonly accelReason: string;
  readonly pid?: number;
  /** Set while it is saved to `vm.state` and no qemu runs. */
  readonly paused?: boolean;
}

interface LiveVm {
  readonly qemu: QemuProcess;
  readonly guest: GuestLink;
}

/** The running VMs of this process, by sandbox folder. */
const live = new Map<string, LiveVm>();

export function recordOf(sandbox: SandboxContext): MicrovmRecord | undefined {
  const record = sandbox.backend as Partial<MicrovmRecord>;
  return typeof record.qemu === 'string' && Array.isArray(record.args) ? (record as MicrovmRecord) : undefined;
}

function setRecord(sandbox: SandboxContext, record: MicrovmRecord): void {
  sandbox.backend = { ...record };
}

export async function provisionVm(assets: AssetCache, options: ResolvedPluginOptions, sandbox: SandboxContext, vmOptions: MicrovmSandboxOptions): Promise<void> {
  const boot = await assets.get(sandbox.node);
  const paths = microvmPaths(sandbox.dir);
  await mkdir(sandbox.dir, { recursive: true });
  if (paths.socketDir) await mkdir(paths.socketDir, { recursive: true, mode: 0o700 });
  const layers = await layerImages(sandbox, `${pluginDir(sandbox.node)}/images`);
  if (vmOptions.upper === 'disk') await makeUpperDisk(paths.upperDisk, vmOptions.upperMiB!);
  const args = machineArgs({
    accel: boot.accel.accel,
    tcgCacheMiB: options.tcgCacheMiB,
    memoryMiB: sandbox.spec.resources.memoryMiB,
    vcpus: vcpusFor(sandbox.spec.resources.cpu),
    kernel: boot.kernel,
    initrd: boot.initrd,
    layers,
    ...(vmOptions.upper === 'disk' ? { upperDisk: paths.upperDisk } : vmOptions.upperMiB !== undefined ? { upperMiB: vmOptions.upperMiB } : {}),
    agentSocket: paths.agentSocket,
    ...(boot.tscKhz ? { tscKhz: boot.tscKhz } : {}),
    hostname: sandbox.spec.id,
  });
  const record: MicrovmRecord = { handle: 'qemu (starting)', qemu: boot.qemu.path, args, accel: boot.accel.accel, accelReason: boot.accel.reason };
  setRecord(sandbox, record);
  const started = Date.now();
  const qemu = await startQemu(sandbox, record, paths, false);
  setRecord(sandbox, { ...record, pid: qemu.pid, handle: handleOf(qemu.pid, record.accel) });
  try {
    const session = await waitForAgent(sandbox, qemu, paths, options.bootTimeoutMs);
    live.set(sandbox.dir, { qemu, guest: linkOf(sandbox, session) });
    await settle(sandbox, qemu);
    sandbox.node.log.debug(`microvm ${sandbox.spec.id}: booted in ${Date.now() - started} ms (${record.accel})`);
  } catch (error) {
    forget(sandbox.dir);
    await qemu.kill().catch(() => undefined);
    throw error;
  }
}

/**
 * A VM that answers: its console goes to a ring in memory from now on (code
 * in the guest writing to /dev/console must not fill the host's disk), and
 * QMP is let go of until a pause needs it.
 */
async function settle(sandbox: SandboxContext, qemu: QemuProcess): Promise<void> {
  await qemu.stopConsoleLog().catch((error: Error) => sandbox.node.log.warn(`microvm ${sandbox.spec.id}: its console still goes to a file: ${error.message}`));
  qemu.releaseQmp();
}

/** Wait for the guest agent to answer, failing fast when qemu exits first (a panic, a failed /init). */
async function waitForAgent(sandbox: SandboxContext, qemu: QemuProcess, paths: MicrovmPaths, timeoutMs: number): Promise<GuestSession> {
  const id = sandbox.spec.id;
  const connecting = openGuestSession(paths.agentSocket, id, timeoutMs);
  let watching = true;
  const exited = (async () => {
    while (watching) {
      if (!(await qemu.isAlive())) return true;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return false;
  })();
  try {
    const first = await Promise.race([connecting.then((client) => ({ client })), exited.then((gone) => ({ gone }))]);
    if ('client' in first) return first.client;
    connecting.then((session) => session.close(), () => undefined); // gave up on it: never left open
  } catch {
    // no answer within the boot timeout
  } finally {
    watching = false;
  }
  // A panicking guest powers off: give qemu a moment to be gone before saying which it was.
  const alive = !(await qemu.waitForExit(1000));
  const console = await consoleSummary(paths);
  const initSaid = console.split(' | ').filter((line) => line.startsWith(INIT_FAILED_PREFIX) && line !== INIT_DONE_MARKER).pop();
  const why = initSaid ?? (alive ? `its guest agent did not answer within ${timeoutMs} ms` : 'qemu exited during the boot');
  throw new DsecError('DSEC_GUEST_BOOT_FAILED', { id, message: `${why}; console: ${console || '(nothing)'}` });
}

/**
 * What the console says about a failed boot: the lines that name the
 * reason (a panic, the init's own words, a mount the kernel refused), then
 * the last lines, which under a panic are only its stack trace.
 */
async function consoleSummary(paths: MicrovmPaths): Promise<string> {
  const all = (await tailOf(paths.qemu.console, 400)).split(' | ').filter(Boolean);
  const telling = all.filter((line) => /Kernel panic|Out of memory|dsec-init: |VFS: |Unable to|not syncing/.test(line)).slice(-4);
  const last = all.slice(-CONSOLE_LINES).filter((line) => !telling.includes(line));
  return [...telling, ...(telling.length > 0 && last.length > 0 ? ['...'] : []), ...last].join(' | ');
}

async function startQemu(sandbox: SandboxContext, record: MicrovmRecord, paths: MicrovmPaths, incoming: boolean): Promise<QemuProcess> {
  await Promise.all([rm(paths.agentSocket, { force: true }), incoming ? undefined : writeFile(paths.qemu.console, '')]);
  return QemuProcess.start({
    qemu: record.qemu,
    args: incoming ? [...record.args, ...INCOMING_DEFER] : record.args,
    paths: paths.qemu,
    prefix: spawnPrefix(sandbox.traits),
  });
}

function handleOf(pid: number, accel: string): string {
  return `qemu pid ${pid} (${accel})`;
}

/** A sparse raw disk formatted ext4 on the host (the guest kernel has ext4 built in). */
async function makeUpperDisk(file: string, sizeMiB: number): Promise<void> {
  await rm(file, { force: true });
  await writeFile(file, '');
  await truncate(file, sizeMiB * 1024 * 1024);
  try {
    await execFileAsync('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1', file], { timeout: 60_000 });
  } catch (error) {
    throw new Error(`mkfs.ext4 of the upper disk failed: ${(error as { stderr?: string }).stderr?.trim() || (error as Error).message}`);
  }
}

/** The running VM of a sandbox: this process's, or one a previous agent started (adopted from its pidfile). */
async function liveVm(sandbox: SandboxContext): Promise<LiveVm | undefined> {
  const known = live.get(sandbox.dir);
  if (known && (await known.qemu.isAlive())) return known;
  if (known) forget(sandbox.dir);
  const paths = microvmPaths(sandbox.dir);
  const adopted = await QemuProcess.adopt(paths.qemu);
  if (!adopted || !(await finishInterruptedPause(sandbox, adopted, paths))) return undefined;
  const vm = { qemu: adopted, guest: new GuestLink(paths.agentSocket, sandbox.spec.id) };
  live.set(sandbox.dir, vm);
  return vm;
}

/**
 * A qemu a previous agent left behind may be half-way through a pause that
 * agent did not live to finish: saved (`postmigrate`, the state file
 * complete) but not quit, which is quit now (the sandbox is paused); or
 * stopped before the state was complete, which runs on. Returns whether the
 * VM still runs. QMP may be held by someone else: then it is left alone.
 */
async function finishInterruptedPause(sandbox: SandboxContext, qemu: QemuProcess, paths: MicrovmPaths): Promise<boolean> {
  try {
    const qmp = await qemu.qmp(2000);
    const { status } = await qmp.execute<{ status: string }>('query-status', undefined, { timeoutMs: 2000 });
    const saved = (await stat(paths.stateFile).catch(() => undefined))?.isFile();
    if (status === 'postmigrate' && saved) {
      sandbox.node.log.info(`microvm ${sandbox.spec.id}: its pause was saved but qemu not ended (the agent stopped meanwhile): ending it now`);
      await qemu.quit();
      return false;
    }
    if (status === 'paused' || status === 'postmigrate' || status === 'finish-migrate') {
      sandbox.node.log.info(`microvm ${sandbox.spec.id}: found stopped half-way through a pause (${status}): letting it run`);
      await qmp.execute('cont');
    }
  } catch {
    // QMP busy or slow: take the VM as it is
  } finally {
    qemu.releaseQmp();
  }
  return true;
}

function forget(dir: string): void {
  const vm = live.get(dir);
  vm?.guest.close();
  live.delete(dir);
}

/** A VM's link to its guest agent, holding the session the boot or resume opened. */
function linkOf(sandbox: SandboxContext, session: GuestSession): GuestLink {
  const link = new GuestLink(microvmPaths(sandbox.dir).agentSocket, sandbox.spec.id);
  link.adopt(session);
  return link;
}

/**
 * The guest agent session of a running VM, opened (again) when needed: after
 * an agent restart, a resume, or a session that failed. DSEC_GUEST_UNREACHABLE
 * when the guest does not answer.
 */
export async function guestOf(sandbox: SandboxContext): Promise<GuestSession> {
  const vm = await liveVm(sandbox);
  if (!vm) throw new Error('its qemu process is gone');
  return vm.guest.get(RECONNECT_TIMEOUT_MS);
}

/** The qemu pid of a running VM (for usage), or undefined. */
export async function runningPid(sandbox: SandboxContext): Promise<number | undefined> {
  return (await liveVm(sandbox))?.qemu.pid;
}

export async function probeVm(sandbox: SandboxContext): Promise<BackendProbe> {
  if (await liveVm(sandbox)) return 'running';
  // The state file is complete or absent (written beside and renamed), and removed once resumed.
  const saved = await stat(microvmPaths(sandbox.dir).stateFile).catch(() => undefined);
  return saved?.isFile() ? 'paused' : 'stopped';
}

/** Save the VM (memory and devices) to vm.state and end its qemu: its memory is then on disk, not in RAM. */
export async function pauseVm(sandbox: SandboxContext): Promise<void> {
  const record = recordOf(sandbox);
  const vm = await liveVm(sandbox);
  if (!record || !vm) throw new Error('it is not running (no qemu process)');
  const paths = microvmPaths(sandbox.dir);
  // Nothing in flight while it is saved; the resumed guest gets a new session (its background processes and sessions stay).
  vm.guest.close();
  const qmp = await vm.qemu.qmp();
  try {
    await saveVmToFile(qmp, paths.stateFile);
  } catch (error) {
    await qmp.execute('cont').catch(() => undefined); // not saved: let it run on
    throw error;
  }
  await vm.qemu.quit();
  forget(sandbox.dir);
  const { pid: _pid, ...rest } = record;
  setRecord(sandbox, { ...rest, paused: true, handle: `saved to ${paths.stateFile} (${record.accel})` });
}

/** Start qemu again from vm.state and wait for the guest agent; the state file is removed once it runs. */
export async function resumeVm(sandbox: SandboxContext): Promise<void> {
  const record = recordOf(sandbox);
  if (!record) throw new Error('it has no microVM record');
  const running = await liveVm(sandbox);
  if (running) return; // a pause that never finished, or a resume retried: it runs
  const paths = microvmPaths(sandbox.dir);
  if (!(await stat(paths.stateFile).catch(() => undefined))?.isFile()) throw new Error(`its saved state ${paths.stateFile} is missing`);
  const qemu = await startQemu(sandbox, record, paths, true);
  try {
    await restoreVmFromFile(await qemu.qmp(), paths.stateFile);
    const session = await openGuestSession(paths.agentSocket, sandbox.spec.id, RESUME_AGENT_TIMEOUT_MS);
    live.set(sandbox.dir, { qemu, guest: linkOf(sandbox, session) });
    await settle(sandbox, qemu);
    await setGuestClock(sandbox, session);
  } catch (error) {
    // The saved state stays: the sandbox is still paused and a later resume may succeed.
    forget(sandbox.dir);
    await qemu.kill().catch(() => undefined);
    throw error;
  }
  const { paused: _paused, ...rest } = record;
  setRecord(sandbox, { ...rest, pid: qemu.pid, handle: handleOf(qemu.pid, record.accel) });
  await rm(paths.stateFile, { force: true });
}

/**
 * The guest's wall clock stood still while it was saved (it resumes where
 * it stopped): set it to the host's time again. Best effort, through the
 * guest's own `date` (a layer without one keeps the lagging clock); the
 * monotonic clocks are left alone, as after any suspend.
 */
async function setGuestClock(sandbox: SandboxContext, guest: GuestSession): Promise<void> {
  const now = `@${Math.round(Date.now() / 1000)}`;
  const set = await guest.exec({ path: 'date', args: ['-u', '-s', now], env: { PATH: DEFAULT_PATH }, timeoutMs: 5000, maxOutputBytes: 4096 }).catch((error: Error) => error);
  if (set instanceof Error || set.exitCode !== 0) {
    const why = set instanceof Error ? set.message : set.stderr.toString('utf8').trim();
    sandbox.node.log.debug(`microvm ${sandbox.spec.id}: the guest clock was not set after the resume (${why})`);
  }
}

/** Kill qemu and remove every file of the VM. Idempotent, and safe on a half-made sandbox. */
export async function destroyVm(sandbox: SandboxContext): Promise<void> {
  const paths = microvmPaths(sandbox.dir);
  const vm = await liveVm(sandbox);
  forget(sandbox.dir);
  if (vm) await vm.qemu.kill();
  await Promise.all(
    [paths.stateFile, `${paths.stateFile}.partial`, paths.upperDisk, paths.agentSocket, paths.qemu.qmp, paths.qemu.pidFile].map((file) =>
      rm(file, { force: true }),
    ),
  );
  if (paths.socketDir) await rm(paths.socketDir, { recursive: true, force: true });
}

/** The last console lines, for errors about a VM that misbehaved. */
export function consoleTail(sandbox: SandboxContext): Promise<string> {
  return tailOf(microvmPaths(sandbox.dir).qemu.console, CONSOLE_LINES);
}
