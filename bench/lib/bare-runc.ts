/**
 * The bare OCI runtime doing what a dsec sandbox create does, and nothing
 * else: mount the same overlay (the same read-only layer trees, a fresh upper
 * dir) and `runc run --detach` the same config.json the container backend
 * generated, with only the per-sandbox fields (rootfs path, hostname, cgroup
 * path) changed. Processes are started the way the backend starts them (its
 * launcher), or, for the strictest baseline, by `xargs -P N sh -c`.
 *
 * Bundle folders and config files are written before the clock starts (they
 * are "the same bundles"); the mount and the run are timed. Teardown is
 * kill(2) of the init, `runc delete --force`, umount, rm -rf.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { removeCgroupDirs } from '../../plugins/backend-container/cgroups.js';
import { launcher } from '../../plugins/backend-container/launcher.js';
import { mountOverlay, unmountAll } from '../../plugins/backend-container/rootfs.js';
import { runRuntime, startDetached, type Runtime } from '../../plugins/backend-container/runtime.js';

/** The parts of a backend-generated config.json this file rewrites per sandbox. */
export interface OciConfigTemplate {
  root: { path: string };
  hostname?: string;
  linux: { cgroupsPath: string };
  [key: string]: unknown;
}

export interface BareBundle {
  readonly dir: string;
  readonly containerId: string;
  readonly cgroupsPath: string;
}

/** SIGKILL a container's init and wait (up to ~100 ms) until it is gone or a zombie: runc then sees it stopped. */
async function killAndWait(pid: number): Promise<void> {
  const alive = () => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return !/^\S+ \(.*\) [ZX]/s.test(stat);
    } catch {
      return false;
    }
  };
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return; // already gone
  }
  for (let waited = 0; waited < 100 && alive(); waited += 2) await new Promise((resolve) => setTimeout(resolve, 2));
}

export class BareRuntime {
  /** Bundles whose container or mount may exist: what cleanup() must undo. */
  private readonly live = new Map<string, BareBundle>();

  constructor(
    private readonly runtime: Runtime,
    private readonly work: string,
    private readonly template: OciConfigTemplate,
    private readonly lowerDirs: readonly string[],
  ) {}

  /** The container id prefix, for sweeping leftovers with `runc list`. */
  get prefix(): string {
    return `dsecbench-${process.pid}-`;
  }

  /** Untimed: the bundle folders and their config.json. */
  async prepare(round: string, count: number): Promise<BareBundle[]> {
    return Promise.all(
      Array.from({ length: count }, async (_, index) => {
        const name = `bare-${round}-${index}`;
        const containerId = `${this.prefix}${round}-${index}`;
        const bundle: BareBundle = { dir: path.join(this.work, name), containerId, cgroupsPath: `/dsec/${containerId}` };
        await Promise.all(['upper', 'work', 'rootfs'].map((sub) => mkdir(path.join(bundle.dir, sub), { recursive: true })));
        const config = {
          ...this.template,
          root: { ...this.template.root, path: path.join(bundle.dir, 'rootfs') },
          hostname: name,
          linux: { ...this.template.linux, cgroupsPath: bundle.cgroupsPath },
        };
        await writeFile(path.join(bundle.dir, 'config.json'), JSON.stringify(config, null, 2), { mode: 0o600 });
        this.live.set(containerId, bundle);
        return bundle;
      }),
    );
  }

  /** Timed: overlay mount + `runc run --detach`, as the backend runs it. */
  async start(bundle: BareBundle): Promise<void> {
    const { dir, containerId } = bundle;
    await mountOverlay({
      lowerDirs: this.lowerDirs,
      upperDir: path.join(dir, 'upper'),
      workDir: path.join(dir, 'work'),
      target: path.join(dir, 'rootfs'),
    });
    await startDetached(
      this.runtime,
      ['run', '--detach', '--pid-file', path.join(dir, 'init.pid'), '--bundle', dir, containerId],
      path.join(dir, 'init.log'),
    );
  }

  /**
   * Timed: the same mount + run for every bundle, driven by a shell instead
   * of Node (`xargs -P <parallel> sh -c 'mount ... && exec runc run ...'`):
   * the strictest baseline, without the cost of forking a Node process.
   */
  async startAllWithShell(bundles: readonly BareBundle[], parallel: number): Promise<void> {
    const lower = [...this.lowerDirs].reverse().join(':');
    const paths = [...this.lowerDirs, this.runtime.path, ...bundles.map((bundle) => bundle.dir)];
    if (paths.some((dir) => /[,:'"\s$`\\]/.test(dir))) throw new Error(`paths unfit for the shell baseline: ${paths.join(' ')}`);
    const script =
      `mount -t overlay overlay -o "lowerdir=${lower},upperdir=$1/upper,workdir=$1/work" "$1/rootfs" && ` +
      `exec '${this.runtime.path}' run --detach --pid-file "$1/init.pid" --bundle "$1" "$2" >"$1/init.log" 2>&1 </dev/null`;
    const input = bundles.map((bundle) => `${bundle.dir} ${bundle.containerId}\n`).join('');
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn('xargs', ['-P', String(parallel), '-L', '1', 'sh', '-c', script, 'sh'], { stdio: ['pipe', 'ignore', 'pipe'] });
      const chunks: Buffer[] = [];
      child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
      child.on('error', reject);
      child.on('close', (exitCode) => resolve({ code: exitCode, stderr: Buffer.concat(chunks).toString('utf8') }));
      child.stdin.end(input);
    });
    if (code !== 0) throw new Error(`the shell-driven bare runtime exited ${code}: ${stderr.trim().slice(-2000)}`);
  }

  /**
   * Timed: the least a caller of the bare runtime must do to tear one down.
   * The init is killed first (kill(2), as the backend does), because `runc
   * delete --force` on a live container polls every 100 ms until it died.
   */
  async stop(bundle: BareBundle): Promise<void> {
    await killAndWait(Number.parseInt(await readFile(path.join(bundle.dir, 'init.pid'), 'utf8'), 10));
    const deleted = await runRuntime(this.runtime, ['delete', '--force', bundle.containerId]);
    if (deleted.code !== 0) throw new Error(`runc delete ${bundle.containerId}: ${deleted.stderr.trim()}`);
    const unmounted = await launcher().run('umount', [path.join(bundle.dir, 'rootfs')]);
    if (unmounted.code !== 0) throw new Error(`umount ${bundle.dir}/rootfs: ${unmounted.stderr.trim()}`);
    await rm(bundle.dir, { recursive: true, force: true });
    this.live.delete(bundle.containerId);
  }

  /** Undo whatever is left (after a failure): containers, mounts, cgroups, folders. Never throws. */
  async cleanup(): Promise<string[]> {
    const problems: string[] = [];
    const listed = await runRuntime(this.runtime, ['list', '--quiet']).catch(() => undefined);
    const ids = new Set(
      (listed?.stdout ?? '')
        .split('\n')
        .filter((id) => id.startsWith(this.prefix)),
    );
    for (const bundle of this.live.values()) ids.add(bundle.containerId);
    for (const id of ids) {
      const deleted = await runRuntime(this.runtime, ['delete', '--force', id]).catch((error: Error) => ({ code: 1, stderr: error.message }));
      if (deleted.code !== 0 && !/does not exist/.test(deleted.stderr)) problems.push(`runc delete ${id}: ${deleted.stderr.trim()}`);
      await removeCgroupDirs(`/dsec/${id}`).catch((error: Error) => problems.push(error.message));
    }
    for (const bundle of this.live.values()) {
      try {
        await unmountAll(path.join(bundle.dir, 'rootfs'));
        await rm(bundle.dir, { recursive: true, force: true });
      } catch (error) {
        problems.push((error as Error).message);
      }
    }
    this.live.clear();
    return problems;
  }
}
