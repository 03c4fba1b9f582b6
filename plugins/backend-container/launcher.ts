/**
 * Starting the short-lived helper processes of the backend (mount, umount,
 * runc) through one small long-lived shell instead of forking the agent.
 *
 * Why: fork(2) copies the page tables of the process that forks and leaves
 * it to take copy-on-write faults afterwards, and libuv's spawn blocks the
 * event loop until the child has exec'd. For a ~90 MB Node agent that is
 * ~3.4 ms of machine CPU per child (measured: bench/README.md); a 1 MB shell
 * forks for ~1.6 ms, and the agent only writes a line to a pipe. A create
 * and a destroy start four such processes.
 *
 * Protocol: one request per job, a shell command line whose every word is
 * single-quoted (nothing the caller passes is ever interpreted):
 *
 *   { 'runc' 'delete' ... </dev/null >'<out>' 2>'<err>'; echo "r <id> $?"; } & echo "p <id> $!"
 *
 * The shell answers `p <id> <pid>` when it started the job and `r <id>
 * <status>` when it ended; the agent then sends `wait <pid>` so the shell
 * reaps it (a non-interactive shell keeps finished jobs until waited for).
 * Output goes to files, never to a pipe: `runc run --detach` hands its
 * stdio to the container's init, which outlives it.
 *
 * If the shell dies, the jobs in flight fail and the next one starts a new
 * shell. Nothing is lost: callers already treat a failed runtime call as
 * failed and clean up, and the jobs themselves run on without the shell.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import path from 'node:path';

export interface LaunchOptions {
  /** Append the job's stdout and stderr to this file (for processes that leave children behind). */
  readonly logFile?: string;
  /** Files the job gets open read-write as fds 3, 4, ... (the exec server's FIFOs, for `runc run --preserve-fds`). */
  readonly fds?: readonly string[];
}

export interface LaunchResult {
  /** The exit code; null when a signal ended the process. */
  readonly code: number | null;
  /** The signal that ended it (the shell reports that as status 128 + n). */
  readonly signal: NodeJS.Signals | null;
  /** Captured output; empty when `logFile` was given. */
  readonly stdout: string;
  readonly stderr: string;
}

interface Job {
  readonly resolve: (result: LaunchResult) => void;
  readonly reject: (error: Error) => void;
  readonly outFile?: string;
  readonly errFile?: string;
  pid?: number;
  status?: number;
}

/** Shell single quotes: the only character to escape is the quote itself. */
export function shellQuote(word: string): string {
  if (word.includes('\0')) throw new Error('an argument holds a NUL byte');
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, number]) => [number, name as NodeJS.Signals]));

/** A shell status back into code and signal (128 + n is death by signal n). */
function exitOf(status: number): { code: number | null; signal: NodeJS.Signals | null } {
  const signal = status > 128 ? SIGNAL_NAMES.get(status - 128) : undefined;
  return signal ? { code: null, signal } : { code: status, signal: null };
}

/**
 * One shell and the jobs it was asked to start. When the shell dies, its jobs
 * run on (each in its own subshell, which holds the answer pipe and still
 * reports), so they are settled only once that pipe closes: a job is never
 * reported failed while its process may still be doing its work.
 */
class ShellSession {
  readonly jobs = new Map<number, Job>();
  readonly child: ChildProcessWithoutNullStreams;
  alive = true;
  private buffered = '';
  private complaint = '';

  constructor(shellPath: string, onDead: () => void) {
    this.child = spawn(shellPath, ['-s'], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (chunk: string) => this.receive(chunk));
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk: string) => (this.complaint = (this.complaint + chunk).slice(-2000)));
    // Writes after the shell died fail with EPIPE; 'exit' and 'close' below say what happened.
    this.child.stdin.on('error', () => {});
    const dead = () => {
      this.alive = false;
      onDead();
    };
    this.child.on('exit', dead);
    this.child.on('error', (error) => {
      dead();
      this.settle(`could not start: ${error.message}`);
    });
    this.child.on('close', (code, signal) => this.settle(`exited (${signal ?? code})`));
    this.hold(false);
  }

  send(id: number, job: Job, line: string): void {
    this.jobs.set(id, job);
    if (this.jobs.size === 1) this.hold(true);
    this.child.stdin.write(line);
  }

  /** Keep the process alive while jobs are in flight, and only then: an idle shell must not. */
  private hold(active: boolean): void {
    for (const handle of [this.child, this.child.stdin, this.child.stdout, this.child.stderr] as { ref(): void; unref(): void }[]) {
      if (active) handle.ref();
      else handle.unref();
    }
  }

  private receive(chunk: string): void {
    this.buffered += chunk;
    for (let end = this.buffered.indexOf('\n'); end !== -1; end = this.buffered.indexOf('\n')) {
      const [kind, idText, value] = this.buffered.slice(0, end).split(' ');
      this.buffered = this.buffered.slice(end + 1);
      const id = Number(idText);
      const job = this.jobs.get(id);
      if (!job) continue;
      if (kind === 'p') job.pid = Number(value);
      if (kind === 'r') job.status = Number(value);
      if (job.pid !== undefined && job.status !== undefined) this.finish(id, job);
    }
  }

  private finish(id: number, job: Job): void {
    this.jobs.delete(id);
    if (this.jobs.size === 0) this.hold(false);
    // A non-interactive shell keeps a finished job until it is waited for.
    if (this.alive) this.child.stdin.write(`wait ${job.pid}\n`);
    job.resolve({ ...exitOf(job.status!), stdout: takeOutput(job.outFile), stderr: takeOutput(job.errFile) });
  }

  /** The shell is gone and its pipe closed: what was not answered never will be. */
  private settle(why: string): void {
    const error = new Error(`the launcher shell ${why}${this.complaint ? `: ${this.complaint.trim()}` : ''}`);
    for (const [id, job] of this.jobs) {
      this.jobs.delete(id);
      takeOutput(job.outFile);
      takeOutput(job.errFile);
      job.reject(error);
    }
  }
}

/** A job's captured stream, then the file is removed. Small and in the page cache: read at once, off the thread pool. */
function takeOutput(file: string | undefined): string {
  if (!file) return '';
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  } finally {
    rmSync(file, { force: true });
  }
}

export class Launcher {
  private session: ShellSession | undefined;
  private nextId = 0;
  private outputDir: string | undefined;

  constructor(private readonly shellPath = '/bin/sh') {}

  /** Run `file args` to completion. Rejects only when the shell failed before it could report. */
  run(file: string, args: readonly string[], options: LaunchOptions = {}): Promise<LaunchResult> {
    const words = [file, ...args].map(shellQuote).join(' ');
    const id = this.nextId++;
    const extraFds = (options.fds ?? []).map((fdPath, index) => ` ${index + 3}<>${shellQuote(fdPath)}`).join('');
    let redirect: string;
    let files: { outFile?: string; errFile?: string } = {};
    if (options.logFile) {
      redirect = `>>${shellQuote(options.logFile)} 2>&1`;
    } else {
      files = { outFile: path.join(this.dir(), `${id}.out`), errFile: path.join(this.dir(), `${id}.err`) };
      redirect = `>${shellQuote(files.outFile!)} 2>${shellQuote(files.errFile!)}`;
    }
    const session = (this.session ??= new ShellSession(this.shellPath, () => {
      if (this.session === session) this.session = undefined;
    }));
    return new Promise((resolve, reject) => {
      session.send(id, { ...files, resolve, reject }, `{ ${words} </dev/null ${redirect}${extraFds}; echo "r ${id} $?"; } & echo "p ${id} $!"\n`);
    });
  }

  /** Let the shell go (it exits once it read what was sent) and remove the output folder. */
  close(): void {
    this.session?.child.stdin.end();
    this.session = undefined;
    if (this.outputDir) rmSync(this.outputDir, { recursive: true, force: true });
    this.outputDir = undefined;
  }

  /**
   * Captured output lives in a private temp folder (mode 0700), one file per
   * stream and job, named after this process: removed when it exits, and
   * swept by the next launcher if it was killed.
   */
  private dir(): string {
    if (!this.outputDir) {
      sweepDeadOutputDirs();
      const dir = mkdtempSync(path.join(tmpdir(), `${OUTPUT_PREFIX}${process.pid}-`));
      this.outputDir = dir;
      process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    }
    return this.outputDir;
  }
}

const OUTPUT_PREFIX = 'dsec-launch-';

/** Remove the output folders of launchers whose process is gone (killed before it could clean up). */
function sweepDeadOutputDirs(): void {
  let names: string[] = [];
  try {
    names = readdirSync(tmpdir());
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(new RegExp(`^${OUTPUT_PREFIX}(\\d+)-`).exec(name)?.[1]);
    if (!Number.isInteger(pid) || pid === process.pid || isAlive(pid)) continue;
    rmSync(path.join(tmpdir(), name), { recursive: true, force: true });
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let shared: Launcher | undefined;

/** The process-wide launcher (one shell per agent). */
export function launcher(): Launcher {
  shared ??= new Launcher();
  return shared;
}
