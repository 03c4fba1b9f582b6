/**
 * The guest kernel VM backends boot (`-kernel`), and its modules. The
 * project's setup unpacks Debian's cloud kernel into
 * /var/lib/dsec/guest-kernel: `vmlinuz`, `config`, `version` and `modules/`
 * (a lib/modules/<version> tree). Every virtio driver there is a module, so
 * an initramfs must carry and load them, dependencies first: from
 * modules.dep when the tree has one, else from each module's own
 * `depends=` (its ELF .modinfo section), which is what depmod reads too.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { DsecError } from '../errors.js';

export const DEFAULT_GUEST_KERNEL_DIR = '/var/lib/dsec/guest-kernel';

export interface GuestKernel {
  readonly dir: string;
  /** The bzImage to pass as `-kernel`. */
  readonly vmlinuz: string;
  /** lib/modules/<version> of that kernel. */
  readonly modulesDir: string;
  /** `uname -r` of the guest: `6.1.0-57-cloud-amd64`. */
  readonly version: string;
}

/** The guest kernel in `dir`; DSEC_VMM_UNAVAILABLE naming what is missing. */
export async function findGuestKernel(dir = DEFAULT_GUEST_KERNEL_DIR): Promise<GuestKernel> {
  const vmlinuz = path.join(dir, 'vmlinuz');
  const modulesDir = path.join(dir, 'modules');
  const missing = async (file: string) => !(await stat(file).catch(() => undefined));
  for (const file of [vmlinuz, modulesDir]) {
    if (await missing(file)) {
      throw new DsecError('DSEC_VMM_UNAVAILABLE', {
        vmm: 'qemu',
        message: `the guest kernel is missing: no ${file} (scripts/setup.sh unpacks Debian's cloud kernel into ${DEFAULT_GUEST_KERNEL_DIR})`,
      });
    }
  }
  const version = (await readFile(path.join(dir, 'version'), 'utf8').catch(() => '')).trim() || 'unknown';
  return { dir, vmlinuz, modulesDir, version };
}

/** One module to load, in load order. */
export interface KernelModule {
  /** `virtio_mmio` (dashes as underscores, as the kernel names modules). */
  readonly name: string;
  /** Absolute path of its .ko. */
  readonly path: string;
}

/**
 * The modules `names` need, dependencies first, each once; modules built
 * into the kernel (modules.builtin) are left out, since they need no
 * loading. Throws when one is neither a module of the tree nor built in.
 */
export async function resolveKernelModules(modulesDir: string, names: readonly string[]): Promise<KernelModule[]> {
  const builtin = await builtinModules(modulesDir);
  const index = await moduleIndex(modulesDir);
  const ordered: KernelModule[] = [];
  const done = new Set<string>();
  const visiting = new Set<string>();
  const visit = async (wanted: string, chain: readonly string[]) => {
    const name = normalise(wanted);
    if (done.has(name) || builtin.has(name)) return;
    if (visiting.has(name)) throw new Error(`kernel modules depend on each other in a cycle: ${[...chain, name].join(' -> ')}`);
    const file = index.files.get(name);
    if (!file) throw new Error(`kernel module ${name} is neither in ${modulesDir} nor built into the kernel`);
    visiting.add(name);
    for (const dependency of await index.depends(name, file)) await visit(dependency, [...chain, name]);
    visiting.delete(name);
    done.add(name);
    ordered.push({ name, path: file });
  };
  for (const name of names) await visit(name, []);
  return ordered;
}

function normalise(name: string): string {
  return name.replaceAll('-', '_');
}

async function builtinModules(modulesDir: string): Promise<Set<string>> {
  const text = await readFile(path.join(modulesDir, 'modules.builtin'), 'utf8').catch(() => '');
  return new Set(text.split('\n').filter(Boolean).map((line) => normalise(path.basename(line).replace(/\.ko$/, ''))));
}

interface ModuleIndex {
  readonly files: Map<string, string>;
  depends(name: string, file: string): Promise<string[]>;
}

/** modules.dep when there is one; else every .ko under the tree, with depends= read from each. */
async function moduleIndex(modulesDir: string): Promise<ModuleIndex> {
  const dep = await readFile(path.join(modulesDir, 'modules.dep'), 'utf8').catch(() => undefined);
  const files = new Map<string, string>();
  if (dep !== undefined) {
    const deps = new Map<string, string[]>();
    for (const line of dep.split('\n')) {
      const [module, rest] = line.split(':');
      if (!module || rest === undefined) continue;
      const name = moduleName(module);
      files.set(name, path.join(modulesDir, module));
      deps.set(name, rest.trim().split(/\s+/).filter(Boolean).map(moduleName));
    }
    // modules.dep lists every dependency, direct or not; visiting each is harmless.
    return { files, depends: async (name) => deps.get(name) ?? [] };
  }
  for (const file of await listModules(modulesDir)) files.set(moduleName(file), file);
  return { files, depends: async (_name, file) => dependsOf(await readFile(file)) };
}

function moduleName(file: string): string {
  return normalise(path.basename(file).replace(/\.ko(\.(xz|zst|gz))?$/, ''));
}

async function listModules(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...(await listModules(full)));
    else if (entry.name.endsWith('.ko')) found.push(full);
  }
  return found;
}

/** The `depends=` list of a module, from its ELF64 .modinfo section. */
export function dependsOf(elf: Buffer): string[] {
  const modinfo = elfSection(elf, '.modinfo');
  if (!modinfo) throw new Error('not a kernel module: no .modinfo section (compressed modules are not supported)');
  for (const field of modinfo.toString('latin1').split('\0')) {
    if (field.startsWith('depends=')) return field.slice('depends='.length).split(',').filter(Boolean).map(normalise);
  }
  return [];
}

/** The bytes of the named section of a little-endian ELF64 file, or undefined. */
function elfSection(elf: Buffer, wanted: string): Buffer | undefined {
  const isElf64Le = elf.length >= 64 && elf.readUInt32BE(0) === 0x7f454c46 && elf[4] === 2 && elf[5] === 1;
  if (!isElf64Le) return undefined;
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const shstrndx = elf.readUInt16LE(0x3e);
  if (shentsize < 64 || shoff + shnum * shentsize > elf.length || shstrndx >= shnum) return undefined;
  const section = (index: number) => {
    const at = shoff + index * shentsize;
    return { name: elf.readUInt32LE(at), offset: Number(elf.readBigUInt64LE(at + 0x18)), size: Number(elf.readBigUInt64LE(at + 0x20)) };
  };
  const names = section(shstrndx);
  for (let index = 0; index < shnum; index++) {
    const { name, offset, size } = section(index);
    const start = names.offset + name;
    const end = elf.indexOf(0, start);
    if (end < 0 || elf.toString('latin1', start, end) !== wanted) continue;
    if (offset + size > elf.length) return undefined;
    return elf.subarray(offset, offset + size);
  }
  return undefined;
}
