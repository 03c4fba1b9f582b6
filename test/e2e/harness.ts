/**
 * Runs the real `dsec` binary (the compiled CLI: `npm run build` first) in a
 * temp copy of a project, and tears everything it started down afterwards:
 * sandboxes (through `dsec destroy`, then runc directly for anything left),
 * the project's agent, and the folder.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const DSEC_BIN = path.join(REPO, 'bin/dsec.js');

export interface RunResult {
  code: number;
  /** The signal that ended it, if one did. */
  signal?: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunningCommand {
  child: ChildProcess;
  result: Promise<RunResult>;
}

export class Project {
  readonly dir: string;

  private constructor(dir: string) {
    this.dir = dir;
  }

  /** A temp copy of `examples/<name>` (or an empty folder), placed outside the repo on purpose. */
  static copy(example?: string): Project {
    const dir = mkdtempSync(path.join(tmpdir(), 'dsec-e2e-'));
    // Never the example's own .dsec (someone may have applied it in place: its
    // state, agent pid and sockets belong to that copy) nor its node_modules.
    const source = example && path.join(REPO, 'examples', example);
    try {
      if (source) {
        cpSync(source, dir, {
          recursive: true,
          filter: (from) => !['.dsec', 'node_modules'].includes(path.relative(source, from).split(path.sep)[0]),
        });
      }
      // As if the project had run `npm install dsec`: plugins and dsec.ts import it.
      mkdirSync(path.join(dir, 'node_modules'));
      symlinkSync(REPO, path.join(dir, 'node_modules', 'dsec'));
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    return new Project(dir);
  }

  file(name: string): string {
    return path.join(this.dir, name);
  }

  write(name: string, content: string): void {
    writeFileSync(this.file(name), content);
  }

  read(name: string): string {
    return readFileSync(this.file(name), 'utf8');
  }

  /** Edit dsec.yaml with a plain string replacement; fails loudly when the text is not there. */
  edit(from: string, to: string, name = 'dsec.yaml'): void {
    const text = this.read(name);
    if (!text.includes(from)) throw new Error(`edit: '${from}' not in ${name}`);
    this.write(name, text.replace(from, to));
  }

  run(args: readonly string[], options: { input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
    return this.start(args, options).result;
  }

  /** Start `dsec` without waiting: for tests that kill it part-way. `result` settles once it exited. */
  start(args: readonly string[], options: { input?: string; env?: NodeJS.ProcessEnv } = {}): RunningCommand {
    const child = spawn(process.execPath, [DSEC_BIN, ...args], {
      cwd: this.dir,
      env: { ...process.env, NO_COLOR: '1', ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const result = new Promise<RunResult>((resolve, reject) => {
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('error', reject);
      child.on('close', (code, signal) => resolve({ code: code ?? -1, signal, stdout, stderr }));
    });
    child.stdin.end(options.input ?? '');
    return { child, result };
  }

  async json<T = unknown>(args: readonly string[]): Promise<T> {
    const result = await this.run([...args, '--json']);
    if (result.code !== 0) throw new Error(`dsec ${args.join(' ')} exited ${result.code}: ${result.stderr}${result.stdout}`);
    return JSON.parse(result.stdout) as T;
  }

  /** Destroy what the project made and stop its agent; then make sure nothing of it is left. */
  async cleanup(): Promise<void> {
    const stateDir = path.join(this.dir, '.dsec');
    if (existsSync(path.join(stateDir, 'agent'))) {
      await this.run(['destroy', '--auto-approve']).catch(() => undefined);
      await this.run(['agent', 'stop']).catch(() => undefined);
    }
    killLeftovers(path.join(stateDir, 'agent'));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Remove every runc container and mount under an agent root that a failed test left behind. */
export function killLeftovers(agentRoot: string): void {
  // Every agent of the root, not only the pid file's: a test may have started more.
  for (const pid of agentProcesses(agentRoot)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  let containers: RuncContainer[] = [];
  try {
    containers = runcList();
  } catch {
    containers = [];
  }
  for (const container of containers) {
    if (!container.bundle.startsWith(agentRoot)) continue;
    try {
      execFileSync('runc', ['delete', '--force', container.id], { stdio: 'ignore' });
    } catch {
      // best effort: the umount below still runs
    }
  }
  const mounts = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1])
    .filter((mountPoint) => mountPoint?.startsWith(agentRoot))
    .sort()
    .reverse();
  for (const mountPoint of mounts) {
    try {
      execFileSync('umount', ['-l', mountPoint], { stdio: 'ignore' });
    } catch {
      // best effort
    }
  }
}

export interface FleetDecl {
  replicas: number;
  backend?: string;
}

/**
 * A small project: one busybox base layer, one environment, and these
 * fleets with 64Mi of memory each (the e2e suites keep sandboxes tiny).
 */
export function busyboxConfig(fleets: Record<string, FleetDecl>): string {
  const lines = [
    'version: 1',
    'layers:',
    '  base:',
    '    kind: base',
    '    version: 1.0.0',
    '    source: { busybox: {} }',
    'environments:',
    '  shell:',
    '    layers: [base]',
    'fleets:',
  ];
  for (const [name, fleet] of Object.entries(fleets)) {
    lines.push(`  ${name}:`, '    environment: shell', `    backend: ${fleet.backend ?? 'container'}`, `    replicas: ${fleet.replicas}`);
    lines.push('    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }');
  }
  return `${lines.join('\n')}\n`;
}

export interface SandboxJson {
  id: string;
  status: string;
  labels: Record<string, string>;
  resources: { memoryMiB: number };
  handle?: string;
}

export interface RuncContainer {
  id: string;
  pid: number;
  status: string;
  bundle: string;
}

/**
 * Every runc container on the machine. `runc list` fails now and then when a
 * container is deleted while it reads the states (other suites run beside
 * this one), so it is asked again; its warnings on stderr are not ours to print.
 */
export function runcList(attempts = 5): RuncContainer[] {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const listed = execFileSync('runc', ['list', '--format', 'json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      return (JSON.parse(listed || '[]') as RuncContainer[] | null) ?? [];
    } catch (error) {
      if (attempt >= attempts) throw error;
    }
  }
}

/** The runc containers whose bundle lies under this project (id, pid, status). */
export function runcContainers(project: Project): RuncContainer[] {
  return runcList().filter((c) => c.bundle.startsWith(`${project.dir}/`));
}

/** Poll `check` until it returns a value (not undefined/false), or fail after `timeoutMs`. */
export async function waitFor<T>(what: string, check: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 20_000, everyMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** How many sandboxes the state file records for a fleet right now (0 before the first write). */
export function recordedSandboxes(project: Project, fleet: string): string[] {
  try {
    const state = JSON.parse(project.read('.dsec/state.json')) as { resources: Record<string, { sandboxes?: Record<string, unknown> }> };
    return Object.keys(state.resources[`fleet.${fleet}`]?.sandboxes ?? {});
  } catch {
    return [];
  }
}

/** The agent of a project: its root, its pid file's pid, and every process running as an agent of that root. */
export function agentOf(project: Project): { root: string; pidFile: () => number | null; processes: () => number[] } {
  const root = path.join(project.dir, '.dsec', 'agent');
  return {
    root,
    pidFile: () => {
      try {
        return Number.parseInt(readFileSync(path.join(root, 'agent.pid'), 'utf8'), 10);
      } catch {
        return null;
      }
    },
    processes: () => agentProcesses(root),
  };
}

/** Every live process that is an agent of this root (by its command line). */
export function agentProcesses(root: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        return argv.some((arg) => arg.endsWith('agent/main.js')) && argv[argv.indexOf('--root') + 1] === root && isRunning(Number(pid));
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** True while a process exists and is not a zombie. */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}
