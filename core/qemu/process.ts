/**
 * One qemu process: started detached from the agent (a VM outlives an
 * agent restart, like a container does), with a QMP socket, a pidfile, its
 * serial console written to a file and its own stderr to a log; waited for
 * until QMP answers; killed and waited for; and adopted again by a
 * restarted agent from the pidfile, checked against /proc/<pid>/cmdline so a
 * recycled pid is never taken for the VM.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { QmpClient } from './qmp.js';

/** The files of one qemu process, all in one folder. */
export interface QemuPaths {
  readonly dir: string;
  /** The QMP unix socket. */
  readonly qmp: string;
  readonly pidFile: string;
  /** The guest's serial console (kernel messages, the init's output). */
  readonly console: string;
  /** qemu's own stderr. */
  readonly log: string;
}

/**
 * The paths under `dir`. Unix socket paths are limited to 107 bytes: callers
 * keep `dir` short (a sandbox folder is).
 */
export function qemuPaths(dir: string, prefix = 'qemu'): QemuPaths {
  return {
    dir,
    qmp: path.join(dir, `${prefix}.qmp`),
    pidFile: path.join(dir, `${prefix}.pid`),
    console: path.join(dir, `${prefix}-console.log`),
    log: path.join(dir, `${prefix}.log`),
  };
}

export interface QemuLaunch {
  /** The qemu binary. */
  readonly qemu: string;
  /** The machine: -M, -m, -kernel, devices... (the QMP socket, pidfile and console are added). */
  readonly args: readonly string[];
  readonly paths: QemuPaths;
  /** Route the first serial port to `paths.console`. @default true */
  readonly serialConsole?: boolean;
  /** Words before the qemu binary (the native helper's `spawn` prefix for process traits). */
  readonly prefix?: readonly string[];
  /** How long qemu may take to answer on QMP. @default 10000 */
  readonly readyTimeoutMs?: number;
}

/** The chardev id of the serial console QemuProcess adds (`-serial chardev:dsec-console`). */
export const CONSOLE_CHARDEV = 'dsec-console';

/** The whole argv after the binary: `launch.args` plus the control and console plumbing. */
export function qemuArgv(launch: Pick<QemuLaunch, 'args' | 'paths' | 'serialConsole'>): string[] {
  const { paths } = launch;
  return [
    ...launch.args,
    '-qmp', `unix:${paths.qmp},server=on,wait=off`,
    '-pidfile', paths.pidFile,
    ...(launch.serialConsole === false
      ? []
      : ['-chardev', `file,id=${CONSOLE_CHARDEV},path=${paths.console},append=on`, '-serial', `chardev:${CONSOLE_CHARDEV}`]),
  ];
}

/** A qemu the agent started (this process) or adopted (a previous agent's). */
export class QemuProcess {
  private client: QmpClient | undefined;
  private exited = false;

  private constructor(
    readonly pid: number,
    readonly paths: QemuPaths,
    private readonly child?: ChildProcess,
  ) {
    child?.once('exit', () => (this.exited = true));
  }

  /**
   * Start qemu and wait until QMP answers (connected: `qmp()` returns it).
   * A qemu that exits first, or does not answer in time, is killed and the
   * error carries the end of its log (qemu says there why it refused).
   */
  static async start(launch: QemuLaunch): Promise<QemuProcess> {
    const { paths } = launch;
    await Promise.all([rm(paths.qmp, { force: true }), rm(paths.pidFile, { force: true })]);
    const argv = qemuArgv(launch);
    const [command, ...rest] = [...(launch.prefix ?? []), launch.qemu, ...argv];
    const logFd = openSync(paths.log, 'a');
    let child: ChildProcess;
    try {
      child = spawn(command!, rest, { detached: true, stdio: ['ignore', logFd, logFd] });
    } finally {
      closeSync(logFd);
    }
    const spawned = await new Promise<number>((resolve, reject) => {
      child.once('spawn', () => resolve(child.pid!));
      child.once('error', reject);
    });
    child.unref();
    const vm = new QemuProcess(spawned, paths, child);
    try {
      vm.client = await vm.connectWhenReady(launch.readyTimeoutMs ?? 10_000);
      return vm;
    } catch (error) {
      await vm.kill();
      const log = await tailOf(paths.log, 10);
      throw new Error(`${(error as Error).message}${log ? `; qemu said: ${log}` : ''}`, { cause: error });
    }
  }

  /**
   * The qemu whose pid `paths.pidFile` holds, if that process is alive and
   * is the one with this QMP socket; else undefined. For an agent that
   * restarted under running VMs.
   */
  static async adopt(paths: QemuPaths): Promise<QemuProcess | undefined> {
    const pid = Number.parseInt(await readFile(paths.pidFile, 'utf8').catch(() => ''), 10);
    if (!Number.isInteger(pid) || pid <= 0) return undefined;
    return (await isQemuOf(pid, paths)) ? new QemuProcess(pid, paths) : undefined;
  }

  /** The QMP connection, opened again when the previous one dropped (after an adopt, say). */
  async qmp(timeoutMs = 5000): Promise<QmpClient> {
    if (this.client && !this.client.isClosed) return this.client;
    this.client = await QmpClient.connect(this.paths.qmp, { timeoutMs });
    return this.client;
  }

  /**
   * Drop the QMP connection until `qmp()` is next called. qemu's QMP socket
   * serves one client at a time: a backend that needs it only to pause lets
   * go of it, so an operator (or a test) can connect meanwhile.
   */
  releaseQmp(): void {
    this.client?.close();
    this.client = undefined;
  }

  /**
   * Stop writing the serial console to `paths.console`: from now on it goes
   * to an in-memory ring of `ringBytes` (QMP `ringbuf-read` with device
   * dsec-console reads it). Called once a guest booted, so what code inside
   * writes to /dev/console cannot fill the host's disk; the boot's own
   * output stays in the file for error messages.
   */
  async stopConsoleLog(ringBytes = 64 * 1024): Promise<void> {
    const client = await this.qmp();
    await client.execute('chardev-change', { id: CONSOLE_CHARDEV, backend: { type: 'ringbuf', data: { size: ringBytes } } });
  }

  /**
   * Whether the process still runs (a zombie does not). For a qemu this
   * process started, its exit event is the truth: its command line is
   * briefly empty while the native helper execs into qemu (execve has
   * swapped the memory but not yet laid out the arguments), which read as
   * "gone" made a start under load fail with "exited before it answered".
   * So our own child is alive while its pid runs, neither exiting nor a
   * zombie (its pid cannot be reused before this process reaps it).
   */
  async isAlive(): Promise<boolean> {
    if (this.exited) return false;
    if (this.child) return isRunning(this.pid);
    return isQemuOf(this.pid, this.paths);
  }

  /** SIGKILL it and wait until it is gone. Harmless when it already is. */
  async kill(timeoutMs = 5000): Promise<void> {
    this.client?.close();
    if (await this.isAlive()) {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    if (!(await this.waitForExit(timeoutMs))) throw new Error(`qemu (pid ${this.pid}) survived SIGKILL for ${timeoutMs} ms`);
  }

  /** Wait until it exits; false if it still runs after `timeoutMs`. */
  async waitForExit(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (await this.isAlive()) {
      if (Date.now() > deadline) return false;
      await sleep(20);
    }
    this.client?.close();
    return true;
  }

  /** Ask qemu to quit over QMP (no guest shutdown), then wait; SIGKILL if it lingers. */
  async quit(timeoutMs = 5000): Promise<void> {
    try {
      const client = await this.qmp();
      await client.execute('quit', undefined, { timeoutMs }).catch(() => undefined); // the answer may be lost as it exits
    } catch {
      // no QMP: kill below
    }
    if (!(await this.waitForExit(timeoutMs))) await this.kill();
  }

  private async connectWhenReady(timeoutMs: number): Promise<QmpClient> {
    const deadline = Date.now() + timeoutMs;
    let last: Error | undefined;
    while (Date.now() < deadline) {
      if (this.exited || !(await this.isAlive())) {
        const code = this.child?.exitCode ?? this.child?.signalCode;
        throw new Error(`qemu exited before it answered on QMP${code !== null && code !== undefined ? ` (${code})` : ''}`);
      }
      try {
        return await QmpClient.connect(this.paths.qmp, { timeoutMs: Math.max(500, deadline - Date.now()) });
      } catch (error) {
        last = error as Error;
        await sleep(25);
      }
    }
    throw new Error(`qemu did not answer on QMP within ${timeoutMs} ms${last ? ` (${last.message})` : ''}`);
  }
}

/** Whether `pid` is a live (not zombie) process whose command line names this QMP socket. */
/** PF_EXITING (include/linux/sched.h): set as a process begins to exit, before it is a zombie. */
const PF_EXITING = 0x4;

/** Whether `pid` exists and is neither exiting nor a zombie (a SIGKILLed qemu takes a while to tear down its guest memory). */
async function isRunning(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  if (stat === '') return false;
  // After the command name (which may hold spaces): state, ppid, pgrp, session, tty, tpgid, flags.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [state, flags] = [fields[0], Number(fields[6])];
  return state !== 'Z' && state !== 'X' && (flags & PF_EXITING) === 0;
}

export async function isQemuOf(pid: number, paths: QemuPaths): Promise<boolean> {
  const [stat, cmdline] = await Promise.all([
    readFile(`/proc/${pid}/stat`, 'utf8').catch(() => ''),
    readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => ''),
  ]);
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  if (!stat || state === 'Z' || state === 'X') return false;
  return cmdline.split('\0').some((arg) => arg.includes(paths.qmp));
}

/** The last `lines` non-empty lines of a text file, joined with ' | ' (empty when there is none). */
export async function tailOf(file: string, lines: number, maxBytes = 64 * 1024): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const tail = text.length > maxBytes ? text.slice(-maxBytes) : text;
  return tail
    .split('\n')
    .map((line) => line.replace(/\r$/, '').replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '').trimEnd())
    .filter(Boolean)
    .slice(-lines)
    .join(' | ');
}
