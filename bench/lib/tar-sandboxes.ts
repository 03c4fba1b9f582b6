/**
 * The conventional way to start a container of an image, for the
 * layers-start benchmark: extract the image's tar.gz into the sandbox's own
 * folder, then run the container on it. Per sandbox:
 *
 *   tar -xzf <archive> -C <sandbox>/lower          the image, a private copy
 *   mount -t overlay (base layer : lower, upper)   as the backend mounts it
 *   runc run --detach                              the config.json the container backend generated
 *   runc exec <id> true                            ready
 *
 * Everything but the extraction is the bare OCI runtime, without the dsec
 * agent's API, records or hooks: this side is favoured, so a ratio against
 * it understates what dsec gains. The base (busybox) layer is the agent's
 * shared read-only mount of it, in both ways, and is not part of the archive.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { removeCgroupDirs } from '../../plugins/backend-container/cgroups.js';
import { mountOverlay, unmountAll } from '../../plugins/backend-container/rootfs.js';
import { runRuntime, startDetached, type Runtime } from '../../plugins/backend-container/runtime.js';

const execFileAsync = promisify(execFile);

/** The parts of a backend-generated config.json rewritten per sandbox. */
export interface OciConfigTemplate {
  root: { path: string };
  hostname?: string;
  linux: { cgroupsPath: string };
  [key: string]: unknown;
}

export function readConfigTemplate(file: string): OciConfigTemplate {
  return JSON.parse(readFileSync(file, 'utf8')) as OciConfigTemplate;
}

interface Bundle {
  readonly dir: string;
  readonly containerId: string;
  readonly cgroupsPath: string;
}

export class TarSandboxes {
  /** Bundles whose container, mount or files may exist: what `cleanup` must undo. */
  private readonly live = new Map<string, Bundle>();

  constructor(
    private readonly runtime: Runtime,
    private readonly work: string,
    private readonly template: OciConfigTemplate,
    /** Shared read-only layers under the image (bottom to top). */
    private readonly baseLowerDirs: readonly string[],
    private readonly archive: string,
  ) {}

  /** Container ids of this process start with it (for sweeping leftovers with `runc list`). */
  get prefix(): string {
    return `dsecbench-tar-${process.pid}-`;
  }

  /** Extract, mount, run, exec `true`. */
  async startReady(name: string): Promise<void> {
    const containerId = `${this.prefix}${name}`;
    const bundle: Bundle = { dir: path.join(this.work, name), containerId, cgroupsPath: `/dsec/${containerId}` };
    this.live.set(name, bundle);
    const lower = path.join(bundle.dir, 'lower');
    await Promise.all(['lower', 'upper', 'work', 'rootfs'].map((sub) => mkdir(path.join(bundle.dir, sub), { recursive: true })));
    await execFileAsync('tar', ['-xzf', this.archive, '-C', lower], { maxBuffer: 16 * 1024 * 1024 });
    const config = {
      ...this.template,
      root: { ...this.template.root, path: path.join(bundle.dir, 'rootfs') },
      hostname: name,
      linux: { ...this.template.linux, cgroupsPath: bundle.cgroupsPath },
    };
    await writeFile(path.join(bundle.dir, 'config.json'), JSON.stringify(config), { mode: 0o600 });
    await mountOverlay({
      lowerDirs: [...this.baseLowerDirs, lower],
      upperDir: path.join(bundle.dir, 'upper'),
      workDir: path.join(bundle.dir, 'work'),
      target: path.join(bundle.dir, 'rootfs'),
    });
    await startDetached(
      this.runtime,
      ['run', '--detach', '--pid-file', path.join(bundle.dir, 'init.pid'), '--bundle', bundle.dir, containerId],
      path.join(bundle.dir, 'init.log'),
    );
    const exec = await runRuntime(this.runtime, ['exec', containerId, 'true']);
    if (exec.code !== 0) throw new Error(`runc exec ${containerId} true exited ${exec.code ?? exec.signal}: ${exec.stderr.trim()}`);
  }

  /** Undo everything: containers, cgroups, mounts, extracted trees. Never throws; returns what could not be undone. */
  async cleanup(): Promise<string[]> {
    const problems: string[] = [];
    const listed = await runRuntime(this.runtime, ['list', '--quiet']).catch(() => undefined);
    const ids = new Set((listed?.stdout ?? '').split('\n').filter((id) => id.startsWith(this.prefix)));
    for (const bundle of this.live.values()) ids.add(bundle.containerId);
    await Promise.all(
      [...ids].map(async (id) => {
        const deleted = await runRuntime(this.runtime, ['delete', '--force', id]).catch((error: Error) => ({ code: 1, stderr: error.message }));
        if (deleted.code !== 0 && !/does not exist/.test(deleted.stderr)) problems.push(`runc delete ${id}: ${deleted.stderr.trim()}`);
        await removeCgroupDirs(`/dsec/${id}`).catch((error: Error) => problems.push(error.message));
      }),
    );
    for (const bundle of this.live.values()) {
      try {
        await unmountAll(path.join(bundle.dir, 'rootfs'));
      } catch (error) {
        problems.push((error as Error).message);
      }
    }
    // Removing 32 extracted images is a lot of unlinks: in parallel, after every mount is gone.
    await Promise.all(
      [...this.live.values()].map((bundle) => rm(bundle.dir, { recursive: true, force: true }).catch((error: Error) => problems.push(error.message))),
    );
    this.live.clear();
    return problems;
  }
}
