/**
 * A real Debian root filesystem for benchmarks that need one (rollouts:
 * python3 and pytest), made once with Debian's `debootstrap` and kept in a
 * cache folder named after a hash of what went into it, so later runs (and
 * other benchmarks asking for the same options) reuse it:
 *
 *   /var/cache/dsec-bench/debian-pytest-<sha256 of suite, variant, packages, mirror, arch>
 *
 * The mirror is the machine's own Debian mirror (the first `deb` source of
 * the suite in /etc/apt/sources.list or sources.list.d, one-line or deb822),
 * else deb.debian.org. The tree is built beside its final name and renamed
 * into place when complete, so a run interrupted half-way leaves nothing a
 * later run would take for a finished tree. Device nodes under /dev are
 * removed (a layer holds no devices: the runtime mounts its own /dev), and
 * so are the downloaded packages and apt lists (not needed at run time).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import { arch } from 'node:os';
import path from 'node:path';

export interface DebianBaseOptions {
  /** @default 'bookworm' (Debian 12) */
  readonly suite?: string;
  /** @default ['python3', 'python3-pytest'] */
  readonly include?: readonly string[];
  /** @default '/var/cache/dsec-bench' */
  readonly cacheRoot?: string;
  /** @default 'debian-pytest' */
  readonly name?: string;
  /** Told what is happening (the build takes minutes). */
  readonly progress?: (line: string) => void;
}

export interface DebianBase {
  readonly path: string;
  /** Built by this call (else found in the cache). */
  readonly built: boolean;
  readonly seconds: number;
  readonly mirror: string;
  readonly suite: string;
  readonly include: readonly string[];
}

const DEBIAN_ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64' };

/** The machine's Debian mirror for `suite`: the first matching `deb` source (not -security/-updates), else deb.debian.org. */
export function debianMirror(suite: string): string {
  const files = ['/etc/apt/sources.list'];
  const dir = '/etc/apt/sources.list.d';
  if (existsSync(dir)) files.push(...readdirSync(dir).filter((name) => /\.(list|sources)$/.test(name)).map((name) => path.join(dir, name)));
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    if (file.endsWith('.sources')) {
      for (const stanza of text.split(/\n\s*\n/)) {
        const field = (name: string) => new RegExp(`^${name}:\\s*(.+)$`, 'mi').exec(stanza)?.[1].trim().split(/\s+/) ?? [];
        if (!field('Types').includes('deb') || !field('Suites').includes(suite)) continue;
        const uri = field('URIs').find((candidate) => /^https?:\/\//.test(candidate));
        if (uri) return uri;
      }
    } else {
      for (const line of text.split('\n')) {
        const match = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(https?:\/\/\S+)\s+(\S+)/.exec(line);
        if (match && match[2] === suite) return match[1];
      }
    }
  }
  return 'http://deb.debian.org/debian';
}

/** The cached tree for these options, built first if it is not there (needs root, debootstrap and the network to the mirror). */
export async function debianBase(options: DebianBaseOptions = {}): Promise<DebianBase> {
  const suite = options.suite ?? 'bookworm';
  const include = [...(options.include ?? ['python3', 'python3-pytest'])].sort();
  const mirror = debianMirror(suite);
  const debArch = DEBIAN_ARCH[arch()] ?? arch();
  const identity = JSON.stringify({ suite, variant: 'minbase', include, mirror, arch: debArch });
  const hash = createHash('sha256').update(identity).digest('hex').slice(0, 16);
  const cacheRoot = options.cacheRoot ?? '/var/cache/dsec-bench';
  const target = path.join(cacheRoot, `${options.name ?? 'debian-pytest'}-${hash}`);
  const described = { mirror, suite, include };
  if (existsSync(path.join(target, 'usr/bin/python3'))) return { path: target, built: false, seconds: 0, ...described };

  const debootstrap = ['/usr/sbin/debootstrap', '/usr/bin/debootstrap'].find((candidate) => existsSync(candidate));
  if (!debootstrap) throw new Error('debootstrap is not installed: run bash scripts/setup.sh (or apt-get install debootstrap)');
  await mkdir(cacheRoot, { recursive: true });
  // Leftovers of builds that never finished (a killed run): never reused, removed.
  for (const name of await readdir(cacheRoot)) {
    if (name.startsWith(`${path.basename(target)}.partial-`)) await rm(path.join(cacheRoot, name), { recursive: true, force: true });
  }
  const partial = `${target}.partial-${process.pid}`;
  const log = `${target}.log`;
  const args = ['--variant=minbase', `--include=${include.join(',')}`, `--arch=${debArch}`, suite, partial, mirror];
  options.progress?.(`building the Debian base once: debootstrap ${args.join(' ')} (log: ${log}); later runs reuse ${target}`);
  const started = performance.now();
  try {
    await run(debootstrap, args, log);
    // No devices in a layer (the runtime mounts /dev); no package downloads or lists at run time.
    for (const dir of ['dev', 'var/cache/apt/archives', 'var/lib/apt/lists']) {
      const full = path.join(partial, dir);
      for (const name of await readdir(full).catch(() => [] as string[])) {
        if (name === 'partial' || name === 'lock') continue;
        await rm(path.join(full, name), { recursive: true, force: true });
      }
    }
    if (!existsSync(path.join(partial, 'usr/bin/python3'))) throw new Error(`debootstrap finished but ${partial} has no usr/bin/python3`);
    await rename(partial, target);
  } catch (error) {
    await rm(partial, { recursive: true, force: true });
    throw error;
  }
  return { path: target, built: true, seconds: (performance.now() - started) / 1000, ...described };
}

/** Run to completion with stdout and stderr appended to `log`; rejects with its tail. */
async function run(file: string, args: readonly string[], log: string): Promise<void> {
  const handle = await open(log, 'a');
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(file, args, { stdio: ['ignore', handle.fd, handle.fd] });
      child.on('error', reject);
      child.on('close', resolve);
    });
    if (code !== 0) {
      const tail = readFileSync(log, 'utf8').trimEnd().split('\n').slice(-15).join('\n');
      throw new Error(`${path.basename(file)} ${args.join(' ')} exited ${code}:\n${tail}`);
    }
  } finally {
    await handle.close();
  }
}
