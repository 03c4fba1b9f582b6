/**
 * Guest agents run on the host for the tests: the compiled dsec-guest
 * listening on a socket in a temp dir (optionally as PID 1 of its own pid
 * namespace, as in a VM or a FnCall worker), and Debian's qemu-ga in
 * unix-listen mode. Each is stopped and its dir removed by stop().
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
