/**
 * Running one command in a sandbox with `runc exec`, with its output capped
 * and its run time bounded.
 *
 * The plumbing, and why: runc exec (without --detach) copies the process's
 * stdout/stderr through pipes of its own and exits only when those reach
 * end-of-file, so a command leaving a process in the background would keep
 * runc, and us, waiting for ever. With --detach nobody reaps the process
 * (it is re-parented outside the sandbox) and its exit status is lost. So
 * runc runs a small shell wrapper in the foreground (runc is its reaper and
 * reports its status), and the command's stdout and stderr go straight into
 * our pipes, passed as fds 3 and 4 (--preserve-fds) and closed in the
 * wrapper before it exits. runc's own stderr then carries only runc's errors.
 */
import { spawn } from 'node:child_process';
import { readdir, readFile, rm } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import type { Readable } from 'node:stream';
import { stdinBytes, type ExecIO, type ExecOutput, type ExecRequest, type OutputStream } from '../../core/plugin-api.js';
import { SANDBOX_BUSYBOX } from './bundle.js';
import { runtimeCommand, type Runtime } from './runtime.js';

export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
export const DEFAULT_OUTPUT_CAP_BYTES = 1024 * 1024;
/** How long output may still arrive after the command exited before the pipes are cut. */
const DRAIN_MS = 100;
/** After a timeout kill, how long runc gets to report before it is killed too. */
const RUNTIME_KILL_GRACE_MS = 5_000;

/**
 * Runs the command with stdout on fd 3 and stderr on fd 4, then exits with
 * its status. The shell is the host's busybox (see SANDBOX_BUSYBOX), so the
 * sandbox cannot forge a status by replacing its /bin/sh. That busybox
 * prefers its own applets and builtins to PATH, so the wrapper looks a bare
 * command name up in the sandbox's PATH itself: the command run is still the
 * sandbox's own binary, as with the sandbox's shell before.
 */
const EXEC_SCRIPT = [
  'cmd=$1; shift',
  'case $cmd in */*) ;; *) found=; set -f; IFS=:',
  'for dir in $PATH; do if [ -f "${dir:-.}/$cmd" ] && [ -x "${dir:-.}/$cmd" ]; then found=${dir:-.}/$cmd; break; fi; done',
  'unset IFS; set +f',
  'if [ -z "$found" ]; then echo "dsec-exec: $cmd: not found" >&4; exit 127; fi',
  'cmd=$found;; esac',
  '"$cmd" "$@" >&3 2>&4 3>&- 4>&-; status=$?; exec 3>&- 4>&-; exit $status',
].join('\n');

export const EXEC_WRAPPER = Object.freeze([SANDBOX_BUSYBOX, 'sh', '-c', EXEC_SCRIPT, 'dsec-exec']);

export interface ExecOptions {
  readonly containerId: string;
  /** Where runc writes the exec'd process's host pid (needed to kill it on timeout). */
  readonly pidFile: string;
  readonly request: ExecRequest;
  readonly defaultOutputCapBytes?: number;
  /** Words before runc (the native helper's `spawn ... --`), so the process gets the sandbox's traits. @default [] */
  readonly prefix?: readonly string[];
}

/** Collects up to `cap` bytes (or hands them to `stream` as they come); reads and drops the rest. */
class CappedBuffer {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(
    private readonly cap: number,
    private readonly stream?: (chunk: Buffer) => void,
  ) {}

  push(chunk: Buffer): void {
    const room = this.cap - this.size;
    if (chunk.length > room) this.truncated = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.size += kept.length;
    if (this.stream) this.stream(kept);
    else this.chunks.push(kept);
  }

  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

export function execArgs(options: ExecOptions): string[] {
  const { request } = options;
  const envFlags = Object.entries(request.env ?? {}).flatMap(([key, value]) => ['--env', `${key}=${value}`]);
  const cwdFlags = request.workdir ? ['--cwd', request.workdir] : [];
  return [
    'exec', '--preserve-fds', '2', '--pid-file', options.pidFile,
    ...envFlags, ...cwdFlags, options.containerId, ...EXEC_WRAPPER, ...request.cmd,
  ];
}

/**
 * The runtime's exec: output streamed as it comes when the caller streams,
 * killed when the caller goes away. No open stdin or terminal here (the
 * sandbox's exec server has them): a request for one is refused.
 */
export function execInContainer(runtime: Runtime, options: ExecOptions, io: ExecIO = {}): Promise<ExecOutput> {
  const { request } = options;
  const cap = request.maxOutputBytes ?? options.defaultOutputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES;
  const timeoutMs = request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  const started = performance.now();
  const streamTo = (stream: OutputStream) => (io.onOutput ? (chunk: Buffer) => io.onOutput!(stream, chunk) : undefined);
  const stdout = new CappedBuffer(cap, streamTo('stdout'));
  const stderr = new CappedBuffer(cap, streamTo('stderr'));
  const runtimeErrors = new CappedBuffer(64 * 1024);
  const input = stdinBytes(request);
  const hasStdin = input !== undefined;

  return new Promise<ExecOutput>((resolve, reject) => {
    const [file, args] = runtimeCommand(runtime, execArgs(options), options.prefix);
    const child = spawn(file, args, {
      stdio: [hasStdin ? 'pipe' : 'ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
    });
    const [, , runcErr, out, err] = child.stdio as unknown as [unknown, unknown, Readable, Readable, Readable];
    let timedOut = false;
    let settled = false;
    let runtimeKillTimer: NodeJS.Timeout | undefined;

    out.on('data', (chunk: Buffer) => stdout.push(chunk));
    err.on('data', (chunk: Buffer) => stderr.push(chunk));
    runcErr.on('data', (chunk: Buffer) => runtimeErrors.push(chunk));
    if (hasStdin) {
      child.stdin!.on('error', () => {}); // the command may exit without reading its input
      child.stdin!.end(input);
    }

    const kill = () =>
      void killExecTree(options.pidFile).then((killed) => {
        // No pid yet (runc still starting the process): kill runc itself.
        if (!killed) child.kill('SIGKILL');
        runtimeKillTimer = setTimeout(() => child.kill('SIGKILL'), RUNTIME_KILL_GRACE_MS);
      });
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, timeoutMs);
    // The caller went away: the command goes too, never left running for nobody.
    const onAbort = () => kill();
    if (io.signal?.aborted) onAbort();
    io.signal?.addEventListener('abort', onAbort, { once: true });

    child.on('error', (error) => {
      clearTimeout(timer);
      if (!settled) {
        settled = true;
        reject(error);
      }
    });

    child.on('exit', (code) => {
      clearTimeout(timer);
      clearTimeout(runtimeKillTimer);
      io.signal?.removeEventListener('abort', onAbort);
      const finish = () => {
        if (settled) return;
        settled = true;
        for (const stream of [out, err, runcErr]) stream.destroy();
        void rm(options.pidFile, { force: true });
        // Runs from a timer or a stream event: a throw here (output too big to
        // become a string) would otherwise leave the call unanswered for ever.
        try {
          const runcSaid = runtimeErrors.bytes().toString('utf8').trim();
          // A failing runc speaks on its own stderr; the command's go to fd 4.
          if (code !== 0 && runcSaid && !timedOut) return reject(new Error(`runc exec exited ${code}: ${runcSaid}`));
          resolve({
            ...exitStatus(code, timedOut),
            stdout: stdout.bytes(),
            stderr: stderr.bytes(),
            truncated: stdout.truncated || stderr.truncated,
            timedOut,
            durationMs: Math.round(performance.now() - started),
          });
        } catch (error) {
          reject(error);
        }
      };
      // Output written just before the exit may still be in flight; background processes may hold the pipes for ever.
      let open = 2;
      const drain = setTimeout(finish, DRAIN_MS);
      const closed = () => {
        if (--open === 0) {
          clearTimeout(drain);
          finish();
        }
      };
      for (const stream of [out, err]) {
        if (stream.readableEnded || stream.destroyed) closed();
        else stream.once('close', closed);
      }
    });
  });
}

/**
 * The shell (and runc) report a command killed by signal N as exit status
 * 128+N; `signal` is filled from it (so an `exit 137` also reads SIGKILL).
 */
export function exitStatus(code: number | null, timedOut: boolean): { exitCode: number | null; signal: string | null } {
  if (timedOut) return { exitCode: code, signal: 'SIGKILL' };
  if (code === null) return { exitCode: null, signal: 'SIGKILL' };
  if (code > 128 && code <= 128 + 64) {
    const name = Object.entries(osConstants.signals).find(([, number]) => number === code - 128)?.[0];
    return { exitCode: code, signal: name ?? null };
  }
  return { exitCode: code, signal: null };
}

/**
 * SIGKILL the exec'd process and everything it started. runc cannot forward
 * SIGKILL, so this works on host pids: stop the whole tree first (so nothing
 * forks away while we look), then kill it. Returns false if there was no pid yet.
 */
async function killExecTree(pidFile: string): Promise<boolean> {
  // runc writes the pid file just before it exits; a timeout that fires earlier waits for it.
  for (let i = 0; i < 100 && !(await readFile(pidFile, 'utf8').catch(() => '')); i++) await new Promise((r) => setTimeout(r, 20));
  const pid = Number.parseInt(await readFile(pidFile, 'utf8').catch(() => ''), 10);
  if (!Number.isInteger(pid) || pid <= 1) return false;
  let tree = new Set<number>([pid]);
  for (let round = 0; round < 5; round++) {
    for (const member of tree) signal(member, 'SIGSTOP');
    const grown = await descendants(pid);
    if (grown.size === tree.size) break;
    tree = grown;
  }
  for (const member of tree) signal(member, 'SIGKILL');
  return true;
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

/** `root` and every process below it, from the parent pids in /proc. */
async function descendants(root: number): Promise<Set<number>> {
  const children = new Map<number, number[]>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // The command name (field 2) may hold spaces and parens: parse after the last ')'.
    const ppid = Number.parseInt(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] ?? '', 10);
    if (!Number.isInteger(ppid)) continue;
    const list = children.get(ppid) ?? [];
    list.push(Number(entry));
    children.set(ppid, list);
  }
  const found = new Set<number>([root]);
  const queue = [root];
  while (queue.length > 0) {
    for (const child of children.get(queue.pop()!) ?? []) {
      if (!found.has(child)) {
        found.add(child);
        queue.push(child);
      }
    }
  }
  return found;
}
