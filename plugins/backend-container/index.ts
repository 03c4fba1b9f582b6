/**
 * The container backend: each sandbox is an OCI container run by runc, whose
 * root filesystem is an overlay of the sandbox's read-only layers and a
 * private writable upper dir in the sandbox's folder.
 *
 *   provision  upper/ work/ rootfs/ -> overlay mount -> config.json -> runc run --detach
 *              (mount, umount and runc are started by launcher.ts, a small shell),
 *              behind the native helper when the sandbox has process traits;
 *              its init is the exec server (dsec-guest, exec-server.ts) on two
 *              FIFOs in the sandbox's host folder; then sandbox.cgroups, and
 *              cpu.idle for idleCpu (traits.ts)
 *   exec       through the exec server (server-calls.ts): no process spawned per call;
 *              streams, stdin, terminals; runc exec for a sandbox without a server
 *   process, session  background commands and persistent shells, through the exec server
 *   update     runc update (memory, swap, pids, cpu)
 *   probe      the init's pid + start time (runc state when unknown)
 *   pause      runc pause, confirmed FROZEN in the freezer cgroup (freeze.ts)
 *   resume     runc resume
 *   usage      the cgroup's counters (usage.ts)
 *   snapshot   runc pause, copy the upper dir, runc resume (snapshot.ts)
 *   readFile, writeFile  through the exec server, inside the sandbox; without one through
 *              /proc/<init pid>/root, resolved inside it by the native helper (files.ts)
 *   destroy    kill the init, runc delete, unmount, sweep cgroups (idempotent)
 *   validate   (engine) a container fleet asks for at least MIN_CONTAINER_MEMORY_MIB (validate.ts)
 *
 * A backend built on this one (FnCall) sets `sandbox.container` (a
 * ContainerShape: its own init, binds, capped tmpfs, a read-only root) and
 * calls the provision tap above through the hook table; every field is
 * honoured or the create fails (shape.ts). Such a sandbox is this plugin's
 * to destroy too, whatever its backend kind: the destroy tap below acts on
 * any sandbox with a shape.
 *
 * It imports only the public plugin API, like any third-party backend.
 */
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  DsecError,
  failAsBackend,
  MAX_EXEC_OUTPUT_BYTES,
  STAGE,
  type BackendProbe,
  type Dsec,
  type DsecPlugin,
  type ExecIO,
  type ExecOutput,
  type ExecRequest,
  type Resources,
  type SandboxCgroups,
  type SandboxContext,
  type SandboxUsage,
  execOnGuest,
  guestAgentBinaryPath,
  processOnGuest,
  sessionOnGuest,
  spawnPrefix,
} from '../../core/plugin-api.js';
import { bundleConfig, cpuShares, CPU_PERIOD_US, HOST_BUSYBOX, SANDBOX_PRIVATE_DIR } from './bundle.js';
import { removeCgroupDirs, sandboxCgroups } from './cgroups.js';
import { killInit, processStartTime, quickProbe } from './liveness.js';
import { DEFAULT_OUTPUT_CAP_BYTES, execInContainer } from './exec.js';
import { pauseContainer, resumeContainer } from './freeze.js';
import { mountOverlay, unmountAll } from './rootfs.js';
import { buildMountPointLayer, checkContainerShape, mountPointsOf } from './shape.js';
import { findRuntime, makeFifos, runRuntime, runRuntimeOk, startDetached, type Runtime, type RuntimeName } from './runtime.js';
import { readSandboxFile, writeSandboxFile } from './files.js';
import { ExecServers, execServerFifos, execServerOf, type ExecServerRecord } from './exec-server.js';
import { readThroughServer, serverTarget, writeThroughServer } from './server-calls.js';
import { snapshotContainer } from './snapshot.js';
import { setCpuIdle, withCpuIdleLifted } from './traits.js';
import { readUsage } from './usage.js';
import { resolveUser } from './users.js';
import { checkFleetMemory } from './validate.js';

export const PLUGIN_NAME = 'backend-container';
/** The backend kind this plugin provisions (`backend: container` in a fleet). */
export const BACKEND_KIND = 'container';

export interface BackendContainerOptions {
  /** The OCI runtime. Only runc is tested; crun takes the same commands. @default 'runc' */
  readonly runtime?: RuntimeName;
  /** Absolute path of the runtime binary. @default looked up on PATH */
  readonly runtimePath?: string;
  /** Per-stream output cap of exec when the request gives none, at most MAX_EXEC_OUTPUT_BYTES (32 MiB). @default 1 MiB */
  readonly defaultOutputCapBytes?: number;
}

/** What this plugin keeps in `sandbox.backend` (persisted by the agent). */
export interface ContainerRecord {
  /** The agent reports it as SandboxInfo.handle: the container id. */
  readonly handle: string;
  readonly runtime: RuntimeName;
  readonly containerId: string;
  readonly cgroupsPath: string;
  readonly initPid?: number;
  /** The init's start time (/proc/<pid>/stat field 22): with the pid, tells it from a recycled pid. */
  readonly initStart?: string;
}

/**
 * The runtime's container id: unique per agent root, so several agents (one
 * per project) on a machine never collide, and `runc list` shows whose it is.
 */
export function containerId(agentRoot: string, sandboxId: string): string {
  const rootHash = createHash('sha256').update(path.resolve(agentRoot)).digest('hex').slice(0, 8);
  return `dsec-${rootHash}-${sandboxId}`;
}

export function cgroupsPathOf(containerIdValue: string): string {
  return `/dsec/${containerIdValue}`;
}

export function sandboxPaths(dir: string) {
  return {
    upper: path.join(dir, 'upper'),
    work: path.join(dir, 'work'),
    rootfs: path.join(dir, 'rootfs'),
    config: path.join(dir, 'config.json'),
    initLog: path.join(dir, 'init.log'),
    initPid: path.join(dir, 'init.pid'),
    /** A read-only root's extra lower layer of mount points (shape.ts). */
    mountPoints: path.join(dir, 'mountpoints'),
  };
}

export default function backendContainer(options: BackendContainerOptions = {}): DsecPlugin {
  validateOptions(options);
  const runtimeName = options.runtime ?? 'runc';
  let runtime: Runtime | undefined;
  // Looked up on first use, so an agent without runc still starts (and says why a container cannot).
  const getRuntime = () => (runtime ??= findRuntime(runtimeName, options.runtimePath));

  return {
    name: PLUGIN_NAME,
    apply(dsec: Dsec) {
      const tap = { name: PLUGIN_NAME, stage: STAGE.BACKEND };
      dsec.hooks.provision.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('provision', sandbox, () => provision(getRuntime(), sandbox)),
      );
      const servers = new ExecServers();
      const defaultCap = options.defaultOutputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES;
      /** The sandbox's exec server, ready to call; undefined: fall back to runc exec and the native helper. */
      const serverOf = async (sandbox: SandboxContext) => {
        const session = await servers.tryGet(sandbox);
        return session && serverTarget(sandbox, session, execServerOf(sandbox)!.user, defaultCap);
      };
      const mustServer = async (sandbox: SandboxContext) => serverTarget(sandbox, await servers.get(sandbox), execServerOf(sandbox)!.user, defaultCap);
      dsec.hooks.exec.for(BACKEND_KIND).tapPromise(tap, (sandbox, request, io) =>
        failAs('exec', sandbox, async () => {
          const target = await serverOf(sandbox);
          return target ? execOnGuest(target, request, io) : exec(getRuntime(), sandbox, request, io, options.defaultOutputCapBytes);
        }),
      );
      dsec.hooks.process.for(BACKEND_KIND).tapPromise(tap, (sandbox, call) => failAs('run a command in', sandbox, async () => processOnGuest(await mustServer(sandbox), call)));
      dsec.hooks.session.for(BACKEND_KIND).tapPromise(tap, (sandbox, call) => failAs('run a session in', sandbox, async () => sessionOnGuest(await mustServer(sandbox), call)));
      dsec.hooks.update.for(BACKEND_KIND).tapPromise(tap, (sandbox, resources) =>
        failAs('update', sandbox, () => update(getRuntime(), sandbox, resources)),
      );
      dsec.hooks.probe.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('probe', sandbox, () => probe(getRuntime(), sandbox)));
      dsec.hooks.pause.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('pause', sandbox, async () => {
          await pauseContainer(getRuntime(), containerIdOf(sandbox), await cgroupsOf(sandbox));
          return true as const;
        }),
      );
      dsec.hooks.resume.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('resume', sandbox, async () => {
          const init = { pid: sandbox.backend.initPid, start: sandbox.backend.initStart };
          await resumeContainer(getRuntime(), containerIdOf(sandbox), await cgroupsOf(sandbox), init);
          return true as const;
        }),
      );
      dsec.hooks.usage.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('read the usage of', sandbox, async (): Promise<SandboxUsage> => readUsage(await cgroupsOf(sandbox))),
      );
      // Engine side: refuse, at plan time, a container fleet too small to start.
      dsec.hooks.validate.tap(PLUGIN_NAME, (config, diagnostics) => diagnostics.push(...checkFleetMemory(config, BACKEND_KIND)));
      dsec.hooks.snapshot.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) =>
        failAs('snapshot', sandbox, () =>
          snapshotContainer(getRuntime(), { containerId: containerIdOf(sandbox), upperDir: sandboxPaths(sandbox.dir).upper }, request),
        ),
      );
      // Files through the exec server when the sandbox has one, else the native helper in the init's root.
      dsec.hooks.readFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) =>
        failAs('read a file in', sandbox, async () => {
          const target = await serverOf(sandbox);
          return target ? readThroughServer(target, request) : readSandboxFile(sandbox, request);
        }),
      );
      dsec.hooks.writeFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) =>
        failAs('write a file in', sandbox, async () => {
          const target = await serverOf(sandbox);
          return target ? writeThroughServer(target, request) : writeSandboxFile(sandbox, request);
        }),
      );
      dsec.hooks.destroy.tapPromise(tap, async (sandbox) => {
        // A backend built on this one marks its sandboxes with a shape (before this tap runs).
        if (sandbox.spec.backend !== BACKEND_KIND && sandbox.container === undefined) return;
        servers.forget(sandbox.spec.id);
        await failAs('destroy', sandbox, () => destroy(getRuntime(), sandbox));
      });
    },
  };
}

async function provision(runtime: Runtime, sandbox: SandboxContext): Promise<true> {
  const paths = sandboxPaths(sandbox.dir);
  const cid = containerId(sandbox.node.root, sandbox.spec.id);
  const record: ContainerRecord = { handle: cid, runtime: runtime.name, containerId: cid, cgroupsPath: cgroupsPathOf(cid) };
  sandbox.backend = { ...record };

  const shape = sandbox.container;
  const problems = shape ? checkContainerShape(shape) : [];
  if (problems.length > 0) throw new Error(`the container shape asked for cannot be honoured: ${problems.join('; ')}`);
  await requireHostBusybox();
  const mountPoints = shape ? await mountPointsOf(shape) : [];
  if (shape?.readonlyRoot) {
    // No upper dir: the layers and a layer of mount points, all read-only.
    await mkdir(paths.rootfs, { recursive: true });
    await buildMountPointLayer(paths.mountPoints, sandbox.lowerDirs, mountPoints);
    await mountOverlay({ lowerDirs: [...sandbox.lowerDirs, paths.mountPoints], target: paths.rootfs });
  } else {
    await Promise.all([mkdir(paths.upper, { recursive: true }), mkdir(paths.work, { recursive: true }), mkdir(paths.rootfs, { recursive: true })]);
    // A shape's mount points go in the upper dir first, so its scratch gets the mode it should (shape.ts).
    if (shape) await buildMountPointLayer(paths.upper, sandbox.lowerDirs, mountPoints);
    await mountOverlay({ lowerDirs: sandbox.lowerDirs, upperDir: paths.upper, workDir: paths.work, target: paths.rootfs });
  }

  // runc resolves the bind's destination inside the rootfs: a layer's /.dsec that is no directory
  // (a symlink, say) would move the mount somewhere the init and exec wrapper do not look.
  const privateDir = await lstat(path.join(paths.rootfs, SANDBOX_PRIVATE_DIR)).catch(() => undefined);
  if (privateDir && !privateDir.isDirectory()) {
    throw new Error(`the layers hold ${SANDBOX_PRIVATE_DIR}, which is reserved for dsec; remove it from the layer that holds it`);
  }

  // The exec server is the init of every sandbox but those whose backend brings its own (a shape's).
  const execServer = shape?.init === undefined ? guestAgentBinaryPath() : undefined;
  const fifos = execServerFifos(sandbox.dir);
  if (execServer) await makeFifos([fifos.in, fifos.out]);
  const user = await resolveUser(paths.rootfs, sandbox.spec.user);
  const config = bundleConfig({
    sandboxId: sandbox.spec.id,
    rootfs: paths.rootfs,
    env: sandbox.spec.env,
    workdir: sandbox.spec.workdir || '/',
    user,
    resources: sandbox.spec.resources,
    cgroupsPath: record.cgroupsPath,
    maxOpenFiles: await openFilesLimit(),
    ...(shape ? { shape } : {}),
    ...(execServer ? { execServer: { binary: execServer } } : {}),
  });
  await writeFile(paths.config, JSON.stringify(config, null, 2), { mode: 0o600 });

  // Traits are inherited from runc's own process: the helper sets them and execs runc (no trait: no helper).
  const prefix = spawnPrefix(sandbox.traits);
  // --pid-file rather than a `runc state` afterwards: one process spawn less per create.
  const serverFds = execServer ? ['--preserve-fds', '2'] : [];
  await startDetached(runtime, ['run', '--detach', ...serverFds, '--pid-file', paths.initPid, '--bundle', sandbox.dir, cid], paths.initLog, prefix, execServer ? [fifos.in, fifos.out] : []);
  const initPid = Number.parseInt(await readFile(paths.initPid, 'utf8').catch(() => ''), 10);
  const initStart = Number.isInteger(initPid) ? await processStartTime(initPid) : undefined;
  const server: ExecServerRecord | undefined = execServer
    ? { transport: 'fifo', user: { uid: user.uid, gid: user.gid, groups: [user.gid, ...(user.additionalGids ?? [])], home: user.home ?? '/' } }
    : undefined;
  sandbox.backend = { ...record, ...(Number.isInteger(initPid) ? { initPid } : {}), ...(initStart ? { initStart } : {}), ...(server ? { execServer: server } : {}) };
  // The exec server is never the one the kernel kills when the sandbox runs out of memory: its commands are.
  if (execServer && Number.isInteger(initPid)) await writeFile(`/proc/${initPid}/oom_score_adj`, '-1000').catch(() => undefined);
  sandbox.cgroups = await sandboxCgroups(record.cgroupsPath);
  if (sandbox.traits.idleCpu) await setCpuIdle(sandbox.cgroups, true);
  return true;
}

/** The init and every exec run the host's static busybox (see bundle.ts): without it no sandbox can start. */
async function requireHostBusybox(): Promise<void> {
  const found = await stat(HOST_BUSYBOX).catch(() => undefined);
  if (!found?.isFile()) {
    throw new Error(
      `${HOST_BUSYBOX} is missing on this machine; the sandbox init and exec wrapper run it. Install busybox-static (scripts/setup.sh does).`,
    );
  }
}

async function exec(runtime: Runtime, sandbox: SandboxContext, request: ExecRequest, io: ExecIO, defaultCap?: number): Promise<ExecOutput> {
  if (request.openStdin || request.tty) {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: BACKEND_KIND, operation: `exec with ${request.tty ? 'a terminal' : 'an open stdin'} through runc exec (this sandbox has no exec server)` });
  }
  return execInContainer(
    runtime,
    {
      containerId: containerIdOf(sandbox),
      pidFile: path.join(sandbox.dir, `exec-${randomBytes(6).toString('hex')}.pid`),
      request,
      defaultOutputCapBytes: defaultCap ?? DEFAULT_OUTPUT_CAP_BYTES,
      prefix: spawnPrefix(sandbox.traits),
    },
    io,
  );
}

async function update(runtime: Runtime, sandbox: SandboxContext, resources: Resources): Promise<true> {
  const memory = String(Math.round(resources.memoryMiB * 1024 * 1024));
  const runUpdate = () => runRuntimeOk(runtime, [
    'update',
    '--memory', memory,
    '--memory-swap', memory,
    '--pids-limit', String(resources.pids),
    '--cpu-period', String(CPU_PERIOD_US),
    '--cpu-quota', String(Math.max(1000, Math.round(resources.cpu * CPU_PERIOD_US))),
    '--cpu-share', String(cpuShares(resources.cpu)),
    containerIdOf(sandbox),
  ]);
  if (sandbox.traits.idleCpu) await withCpuIdleLifted(await cgroupsOf(sandbox), runUpdate);
  else await runUpdate();
  return true;
}

async function probe(runtime: Runtime, sandbox: SandboxContext): Promise<BackendProbe> {
  const cid = containerIdOf(sandbox);
  const quick = await quickProbe(sandbox.backend.initPid, sandbox.backend.initStart, cgroupsPathOf(cid));
  if (quick !== undefined) return quick;
  const state = await containerState(runtime, cid);
  if (state?.status === 'running') return 'running';
  if (state?.status === 'paused') return 'paused';
  return 'stopped';
}

/**
 * Tolerates every half-made state: no container, no mount, no cgroup.
 *
 * The init must be dead before `runc delete --force`, or runc kills it itself
 * and then polls every 100 ms until it is gone (a tenth of a second per
 * sandbox). A running init the record knows (pid + start time, so a
 * recycled pid is never hit) is killed here with kill(2), which spares
 * spawning `runc kill`; a paused or unknown one is left to `runc kill`.
 */
async function destroy(runtime: Runtime, sandbox: SandboxContext): Promise<void> {
  const cid = containerIdOf(sandbox);
  const { initPid, initStart } = sandbox.backend;
  const seen = await quickProbe(initPid, initStart, cgroupsPathOf(cid));
  // A frozen init dies only once thawed, which runc does; an unknown one is runc's to find.
  const dead = seen === 'stopped' || (seen === 'running' && (await killInit(initPid, initStart)));
  if (!dead) await runRuntime(runtime, ['kill', cid, 'KILL']); // fails harmlessly when not running or missing
  const deleted = await runRuntime(runtime, ['delete', '--force', cid]);
  if (deleted.code !== 0 && !/does not exist|not exist/.test(deleted.stderr)) {
    throw new Error(`runc delete: ${deleted.stderr.trim()}`);
  }
  await unmountAll(sandboxPaths(sandbox.dir).rootfs);
  await removeCgroupDirs(cgroupsPathOf(cid));
}

/**
 * 65536 open files, or the agent's own hard limit if lower: raising a limit
 * needs CAP_SYS_RESOURCE, which the agent may lack (it does in some CI sandboxes).
 */
let openFilesCeiling: Promise<number> | undefined;
function openFilesLimit(): Promise<number> {
  openFilesCeiling ??= readFile('/proc/self/limits', 'utf8')
    .catch(() => '')
    .then((limits) => {
      const hard = /^Max open files\s+\S+\s+(\d+|unlimited)/m.exec(limits)?.[1];
      return Math.min(65536, hard === undefined || hard === 'unlimited' ? Infinity : Number(hard));
    });
  return openFilesCeiling;
}

async function containerState(runtime: Runtime, cid: string): Promise<{ status: string; pid: number } | undefined> {
  const result = await runRuntime(runtime, ['state', cid]);
  if (result.code !== 0) return undefined; // "container does not exist"
  return JSON.parse(result.stdout) as { status: string; pid: number };
}

/** The cgroup folders on record; derived again for a sandbox provisioned before they were recorded. */
async function cgroupsOf(sandbox: SandboxContext): Promise<SandboxCgroups> {
  sandbox.cgroups ??= await sandboxCgroups(cgroupsPathOf(containerIdOf(sandbox)));
  return sandbox.cgroups;
}

/** The record's id when provision got that far; else the same derivation (a crash mid-provision). */
function containerIdOf(sandbox: SandboxContext): string {
  const recorded = sandbox.backend.containerId;
  return typeof recorded === 'string' ? recorded : containerId(sandbox.node.root, sandbox.spec.id);
}

/** One step of this backend: a failure that is not a DsecError is DSEC_BACKEND_FAILED naming it. */
function failAs<T>(operation: string, sandbox: SandboxContext, work: () => Promise<T>): Promise<T> {
  return failAsBackend(BACKEND_KIND, operation, sandbox.spec.id, work);
}

function validateOptions(options: BackendContainerOptions): void {
  const problems: string[] = [];
  const known = new Set(['runtime', 'runtimePath', 'defaultOutputCapBytes']);
  for (const key of Object.keys(options)) if (!known.has(key)) problems.push(`unknown option ${key}`);
  if (options.runtime !== undefined && options.runtime !== 'runc' && options.runtime !== 'crun') {
    problems.push(`runtime must be "runc" or "crun", not ${JSON.stringify(options.runtime)}`);
  }
  if (options.runtimePath !== undefined && (typeof options.runtimePath !== 'string' || !path.isAbsolute(options.runtimePath))) {
    problems.push('runtimePath must be an absolute path');
  }
  const cap = options.defaultOutputCapBytes;
  if (cap !== undefined && (!Number.isInteger(cap) || cap < 0 || cap > MAX_EXEC_OUTPUT_BYTES)) {
    problems.push(`defaultOutputCapBytes must be a whole number from 0 to ${MAX_EXEC_OUTPUT_BYTES}`);
  }
  if (problems.length > 0) throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
}
