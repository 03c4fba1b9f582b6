/**
 * Starting, stopping and looking at the agent daemon of a root.
 *
 * The daemon is spawned detached with its stdio on the log file, NOT on
 * pipes: runc hands its own stdio down to container inits, and a pipe held
 * by a container would keep our reader waiting for as long as it runs.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { DsecError, isDsecError } from '../errors.js';
import type { PluginRef } from '../model.js';
import { AgentClient } from './client.js';
import { agentPaths, EXIT_ALREADY_RUNNING } from './layout.js';
import { agentMainPath } from './package-root.js';
import { isAgentProcess, isAlive } from './process.js';

export interface StartAgentOptions {
  readonly root: string;
  /** Plugins on top of the built-ins (a built-in's name replaces it). */
  readonly plugins?: readonly PluginRef[];
  /** Where relative plugin paths and package names resolve from. @default root */
  readonly baseDir?: string;
  /** Load the built-in plugins (storage-local, backend-container). @default true */
  readonly builtins?: boolean;
  /** @default os.hostname() */
  readonly name?: string;
  /** How long to wait for the API to answer. @default 15000 */
  readonly timeoutMs?: number;
  /** Log each request at debug level. @default false */
  readonly debug?: boolean;
  /** How often the reaper looks for sandboxes past their TTLs (0: never); short in tests. @default 5000 */
  readonly reapIntervalMs?: number;
  /** More daemon flags, checked by the caller: the cluster ones (see startClusterAgent). */
  readonly extraArgs?: readonly string[];
}

export interface AgentStatus {
  readonly running: boolean;
  readonly pid: number | null;
  readonly socket: string;
  readonly sandboxes: number;
}

/** Start the agent of `root` in the background and wait until it answers; a running one is left as it is. */
export async function startAgentDaemon(options: StartAgentOptions): Promise<{ pid: number }> {
  const paths = agentPaths(options.root);
  const client = new AgentClient(paths.socket);
  try {
    const already = await client.health({ timeoutMs: 2000 }).catch(() => undefined);
    if (already) return { pid: already.pid };

    const main = agentMainPath();
    if (!existsSync(main)) throw new DsecError('DSEC_AGENT_START', { message: `${main} is missing; run npm run build` });
    mkdirSync(paths.root, { recursive: true, mode: 0o700 });
    const args = [main, '--root', paths.root, '--base-dir', options.baseDir ?? paths.root];
    if (options.plugins?.length) args.push('--plugins', JSON.stringify(options.plugins));
    if (options.builtins === false) args.push('--no-builtins');
    if (options.name) args.push('--name', options.name);
    if (options.debug) args.push('--debug');
    if (options.reapIntervalMs !== undefined) args.push('--reap-interval-ms', String(options.reapIntervalMs));
    if (options.extraArgs) args.push(...options.extraArgs);

    const logFd = openSync(paths.logFile, 'a', 0o600);
    let exitCode: number | null | undefined;
    try {
      const child = spawn(process.execPath, args, { cwd: paths.root, detached: true, stdio: ['ignore', logFd, logFd] });
      child.on('exit', (code) => (exitCode = code));
      child.unref();
    } finally {
      closeSync(logFd);
    }

    const deadline = Date.now() + (options.timeoutMs ?? 15_000);
    while (Date.now() < deadline) {
      const health = await client.health({ timeoutMs: 1000 }).catch(() => undefined);
      if (health) return { pid: health.pid };
      // Exited: a failure, or another agent won the race to start (then it answers soon).
      if (exitCode !== undefined && exitCode !== EXIT_ALREADY_RUNNING) break;
      await sleep(50);
    }
    const why = exitCode === undefined ? `no answer on ${paths.socket} in time` : `it exited with code ${exitCode}`;
    throw new DsecError('DSEC_AGENT_START', { message: `${why}; last lines of ${paths.logFile}:\n${logTail(paths.logFile)}` });
  } finally {
    client.close();
  }
}

/** Ask the agent to stop (sandboxes keep running) and wait for its process to end; SIGTERM, then SIGKILL, if it will not. */
export async function stopAgent(root: string, options: { timeoutMs?: number } = {}): Promise<void> {
  const paths = agentPaths(root);
  const timeoutMs = options.timeoutMs ?? 10_000;
  const client = new AgentClient(paths.socket);
  let pid = readPid(paths.pidFile);
  try {
    const health = await client.health({ timeoutMs: 2000 });
    pid = health.pid;
    await client.shutdown();
  } catch (error) {
    if (!isDsecError(error, 'DSEC_AGENT_UNREACHABLE')) throw error;
  } finally {
    client.close();
  }
  if (pid === null || !isAgentProcess(pid, paths.root)) return;
  if (await waitForExit(pid, timeoutMs)) return;
  signal(pid, 'SIGTERM');
  if (await waitForExit(pid, timeoutMs)) return;
  signal(pid, 'SIGKILL');
  if (!(await waitForExit(pid, 5_000))) {
    throw new DsecError('DSEC_AGENT_START', { message: `agent pid ${pid} did not exit after SIGKILL` });
  }
}

export async function agentStatus(root: string): Promise<AgentStatus> {
  const paths = agentPaths(root);
  const client = new AgentClient(paths.socket, { timeoutMs: 5_000 });
  try {
    const node = await client.node();
    return { running: true, pid: node.pid, socket: paths.socket, sandboxes: node.sandboxes };
  } catch {
    const pid = readPid(paths.pidFile);
    return { running: false, pid: pid !== null && isAgentProcess(pid, paths.root) ? pid : null, socket: paths.socket, sandboxes: 0 };
  } finally {
    client.close();
  }
}

function readPid(file: string): number | null {
  try {
    const pid = Number.parseInt(readFileSync(file, 'utf8'), 10);
    return Number.isInteger(pid) && pid > 1 ? pid : null;
  } catch {
    return null;
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid) || isZombie(pid)) return true;
    await sleep(25);
  }
  return false;
}

/** A child of ours that exited stays a zombie until reaped; it is gone all the same. */
function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

function logTail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
