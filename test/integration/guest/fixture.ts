/**
 * Guest agents run on the host for the tests: the compiled dsec-guest
 * listening on a socket in a temp dir, or on a FIFO pair (--fds, as in a
 * container sandbox), optionally as PID 1 of its own pid namespace (as in a
 * VM, a FnCall worker or a container), and Debian's qemu-ga in unix-listen
 * mode. Each is stopped, with everything it started, and its dir removed by
 * stop().
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, constants, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { guestAgentBinaryPath } from '../../../core/guest/binary.js';

export interface RunningAgent {
  readonly socket: string;
  /** A scratch dir of the test's own (the socket is in it). */
  readonly dir: string;
  readonly process: ChildProcess;
  /** What the agent wrote to stderr so far. */
  stderr(): string;
  stop(): Promise<void>;
}

export const QEMU_GA = '/usr/sbin/qemu-ga';

/** The agent binary the tests run: the build's, or DSEC_TEST_GUEST_AGENT (e.g. a build with -fsanitize=address,undefined). */
export function guestAgentUnderTest(): string {
  return process.env.DSEC_TEST_GUEST_AGENT || guestAgentBinaryPath();
}

export function buildGuestAgent(): string {
  execFileSync('node', ['scripts/build-native.mjs'], { stdio: 'inherit' });
  return guestAgentUnderTest();
}

export interface DsecGuestOptions {
  /**
   * PID 1 of a new pid namespace (with its own /proc), as in a VM or a FnCall
   * worker. Always with an IPC namespace of its own too: a reset as PID 1
   * removes every SysV IPC object it sees, and must never see the host's.
   */
  readonly pidNamespace?: boolean;
  /** An IPC namespace of its own (implied by pidNamespace). */
  readonly ipcNamespace?: boolean;
  /** Run the agent, as root, with only these capabilities (e.g. a container sandbox's, SANDBOX_CAPABILITIES). */
  readonly capabilities?: readonly string[];
}

/** dsec-guest --listen, on the host or in namespaces of its own (see DsecGuestOptions). */
export async function startDsecGuest(options: DsecGuestOptions = {}): Promise<RunningAgent> {
  const dir = mkdtempSync(join(tmpdir(), 'dsec-guest-test-'));
  const socket = join(dir, 'agent.sock');
  const agent = [...(options.capabilities ? withOnlyCapabilities(options.capabilities) : []), guestAgentUnderTest(), '--listen', socket];
  const namespaces = [
    ...(options.pidNamespace ? ['--pid', '--fork', '--kill-child', '--mount-proc'] : []),
    ...(options.pidNamespace || options.ipcNamespace ? ['--ipc'] : []),
  ];
  return start(namespaces.length > 0 ? ['unshare', ...namespaces, ...agent] : agent, dir, socket);
}

/**
 * setpriv's prefix that runs a root command with only `capabilities`
 * (CAP_* names): the bounding set is cut, so what root execs gets no more.
 */
function withOnlyCapabilities(capabilities: readonly string[]): string[] {
  const kept = capabilities.map((name) => `+${name.replace(/^CAP_/, '').toLowerCase()}`);
  return ['setpriv', '--inh-caps', '-all', '--bounding-set', ['-all', ...kept].join(',')];
}

/** Debian's QEMU guest agent on a unix socket: the agent a full VM's image runs. */
export async function startQemuGa(): Promise<RunningAgent> {
  const dir = mkdtempSync(join(tmpdir(), 'dsec-qemu-ga-test-'));
  const socket = join(dir, 'qga.sock');
  return start([QEMU_GA, '-m', 'unix-listen', '-p', socket, '-t', dir, '-f', join(dir, 'qemu-ga.pid')], dir, socket);
}

async function start(command: string[], dir: string, socket: string): Promise<RunningAgent> {
  const child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const running: RunningAgent = {
    socket,
    dir,
    process: child,
    stderr: () => stderr,
    async stop() {
      try {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGKILL');
          await exited;
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      // A sanitizer build (DSEC_TEST_GUEST_AGENT) reports memory and undefined-behaviour errors on stderr.
      if (/Sanitizer|runtime error/.test(stderr)) throw new Error(`the agent reported errors:\n${stderr.slice(0, 4000)}`);
    },
  };
  // Wait until the socket listens, so a test's connect timeout measures the agent, not its start
  // (the file appears at bind(), a moment before listen(): a connect then is refused).
  const deadline = Date.now() + 10_000;
  while (!listening(socket)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await running.stop();
      throw new Error(`${command.join(' ')} did not start: ${stderr}`);
    }
    await sleep(10);
  }
  return running;
}

/** Whether a unix socket at `path` is listening (the __SO_ACCEPTCON flag in /proc/net/unix; the agents share the host's network namespace). */
function listening(path: string): boolean {
  if (!existsSync(path)) return false;
  return readFileSync('/proc/net/unix', 'utf8')
    .split('\n')
    .some((line) => line.endsWith(` ${path}`) && line.trim().split(/\s+/)[3] === '00010000');
}

/** Whether a host process is still alive (and not a zombie). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

export interface FifoAgent {
  /** The FIFO the agent reads requests from (its fd 3) and the one it writes to (fd 4). */
  readonly inPath: string;
  readonly outPath: string;
  /** A scratch dir of the test's own (the FIFOs are in it). */
  readonly dir: string;
  readonly process: ChildProcess;
  /** The agent's pid on the host (in a pid namespace: the namespace's PID 1). */
  readonly agentPid: number;
  stderr(): string;
  stop(): Promise<void>;
}

/**
 * dsec-guest --fds 3,4 on a FIFO pair, opened read-write for it as a
 * container's launcher does (`3<>in 4<>out`), so it never reads end-of-file
 * when a host goes away. With pidNamespace it is PID 1 of its own pid and
 * IPC namespaces. stop() kills it and, on the host, every process it started.
 */
export async function startDsecGuestFifos(options: DsecGuestOptions = {}): Promise<FifoAgent> {
  const dir = mkdtempSync(join(tmpdir(), 'dsec-guest-fifo-'));
  const inPath = join(dir, 'in');
  const outPath = join(dir, 'out');
  execFileSync('mkfifo', ['-m', '0600', inPath, outPath]);
  const agent = [...(options.capabilities ? withOnlyCapabilities(options.capabilities) : []), guestAgentUnderTest(), '--fds', '3,4'];
  const namespaces = [
    ...(options.pidNamespace ? ['--pid', '--fork', '--kill-child', '--mount-proc'] : []),
    ...(options.pidNamespace || options.ipcNamespace ? ['--ipc'] : []),
  ];
  const command = namespaces.length > 0 ? ['unshare', ...namespaces, ...agent] : agent;
  const fds = [openSync(inPath, constants.O_RDWR), openSync(outPath, constants.O_RDWR)];
  let child: ChildProcess;
  try {
    child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'pipe', fds[0]!, fds[1]!] });
  } finally {
    for (const fd of fds) closeSync(fd); // the agent holds them now, as after the launcher's exec
  }
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    try {
      // On the host its processes would outlive it (in a pid namespace they die with its PID 1).
      if (!options.pidNamespace && child.pid !== undefined) for (const pid of descendants(child.pid)) kill(pid);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    if (/Sanitizer|runtime error/.test(stderr)) throw new Error(`the agent reported errors:\n${stderr.slice(0, 4000)}`);
  };
  // Wait until the agent itself runs (unshare and setpriv exec or fork it), so its pid is known.
  const deadline = Date.now() + 10_000;
  let agentPid: number | undefined;
  while ((agentPid = [child.pid!, ...descendants(child.pid!)].find((pid) => commandLine(pid).includes('--fds'))) === undefined) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`${command.join(' ')} did not start: ${stderr}`);
    }
    await sleep(10);
  }
  return { inPath, outPath, dir, process: child, agentPid, stderr: () => stderr, stop };
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

function kill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
}

/** Every live descendant of a host process (through /proc parent links), deepest last. */
export function descendants(root: number): number[] {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // exited meanwhile
    }
  }
  const found: number[] = [];
  const walk = (pid: number) => {
    for (const [child, parent] of parents) if (parent === pid) { found.push(child); walk(child); }
  };
  walk(root);
  return found;
}
