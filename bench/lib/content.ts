/**
 * A realistic environment image, generated deterministically for the layer
 * benchmarks: a tree shaped like a Python + Node installation with shared
 * libraries and model files.
 *
 *   ~30,000 small files (1-16 KiB): Python modules, their bytecode, Node
 *            packages' sources, package.json files, docs
 *   ~600 medium files (100 KiB-2 MiB): extension modules, shared libraries,
 *            the interpreter, native addons, data files
 *   a few large files (20-100 MiB): big shared libraries and model weights,
 *            sized so the whole tree reaches the asked total (>= 1 GiB)
 *
 * Data is "incompressible-ish" like a real image: source files are text
 * (compressible 3-4x), bytecode half text half pseudo-random, binaries
 * mostly pseudo-random with stretches of text (symbol tables), model files
 * pseudo-random. Pseudo-random bytes come from AES-128-CTR under a fixed key
 * with one IV per file, so every file is unique (no chunk of the image
 * dedupes against another) and the same seed always gives the same bytes.
 *
 * The tree is written to `<dir>/tree` and described in `<dir>/content.json`
 * (every file with its size and class), which the read-fraction benchmark
 * picks its workload from. A `dir` that already holds the same generation
 * is reused as it is.
 */
import { createCipheriv } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';

/** Bump when the generated content changes, so a reused dir is regenerated. */
const GENERATOR_VERSION = 1;
const KiB = 1024;
const MiB = 1024 * KiB;

export type FileClass = 'source' | 'bytecode' | 'medium' | 'large';

export interface ContentFile {
  /** Relative to the tree, `/`-separated. */
  readonly path: string;
  readonly bytes: number;
  readonly class: FileClass;
}

export interface ContentOptions {
  /** Bytes of file data in the whole tree. @default 1.05 GiB */
  readonly totalBytes?: number;
  /** Small files. @default 30000 */
  readonly smallFiles?: number;
  /** Medium files. @default 600 */
  readonly mediumFiles?: number;
  /** @default 1 */
  readonly seed?: number;
}

export interface Content {
  readonly tree: string;
  /** True when an earlier generation in the same folder was reused (not stored). */
  readonly reused?: boolean;
  readonly files: readonly ContentFile[];
  readonly totalBytes: number;
  readonly options: Required<ContentOptions>;
  readonly generatorVersion: number;
}

const DEFAULTS: Required<ContentOptions> = { totalBytes: Math.round(1.05 * 1024 * MiB), smallFiles: 30_000, mediumFiles: 600, seed: 1 };

/** mulberry32: a small, fast, deterministic PRNG for the tree's shape. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A size between lo and hi, log-uniform (many small, a few big, like real file sizes). */
const logUniform = (random: () => number, lo: number, hi: number): number => Math.round(Math.exp(Math.log(lo) + random() * (Math.log(hi) - Math.log(lo))));
const pick = <T>(random: () => number, items: readonly T[]): T => items[Math.floor(random() * items.length)];

const WORDS = (
  'request response session client server config settings parse format encode decode buffer stream reader writer ' +
  'handler callback event loop task future result error value key item index offset length size count total ' +
  'array tensor matrix vector shape dtype device module package loader import export path file dir name ' +
  'cache store table record row column field schema model layer weight bias grad optim step epoch batch ' +
  'token text string bytes number float int bool list dict tuple set queue stack node tree graph edge ' +
  'http json yaml xml csv sql socket thread process signal timer clock logger level message header body'
).split(' ');

/**
 * ~1 MiB of source-like text (Python and JavaScript lines over a small
 * vocabulary), from which text files take slices: realistic to compress.
 */
function sourceCorpus(random: () => number): Buffer {
  const id = () => `${pick(random, WORDS)}_${pick(random, WORDS)}`;
  const lines: string[] = [];
  let bytes = 0;
  while (bytes < MiB) {
    const kind = random();
    let line: string;
    if (kind < 0.1) line = `def ${id()}(self, ${id()}, ${id()}=None):`;
    else if (kind < 0.18) line = `class ${pick(random, WORDS)[0].toUpperCase()}${id().slice(1)}(${pick(random, WORDS)}.Base):`;
    else if (kind < 0.26) line = `from ${pick(random, WORDS)}.${pick(random, WORDS)} import ${id()}, ${id()}`;
    else if (kind < 0.36) line = `    # ${Array.from({ length: 6 + Math.floor(random() * 8) }, () => pick(random, WORDS)).join(' ')}`;
    else if (kind < 0.5) line = `function ${id()}(${id()}, ${id()}) { return ${id()}.${pick(random, WORDS)}(${Math.floor(random() * 1000)}); }`;
    else if (kind < 0.62) line = `        if ${id()} is None or len(${id()}) > ${Math.floor(random() * 4096)}:`;
    else if (kind < 0.8) line = `        ${id()} = self.${id()}(${id()}, ${JSON.stringify(pick(random, WORDS))})`;
    else line = `    return ${id()}[${Math.floor(random() * 64)}] + ${random().toFixed(6)}`;
    lines.push(line);
    bytes += line.length + 1;
  }
  return Buffer.from(lines.join('\n') + '\n');
}

/** Pseudo-random bytes: AES-128-CTR keystream, one IV per file (its index), so no two files share a block. */
class RandomBytes {
  private static readonly zeros = Buffer.alloc(4 * MiB);
  private readonly cipher;
  constructor(seed: number, fileIndex: number) {
    const key = Buffer.alloc(16);
    key.writeUInt32BE(seed >>> 0, 0);
    key.write('dsec-bench-layer', 4, 'latin1');
    const iv = Buffer.alloc(16);
    iv.writeUInt32BE(fileIndex >>> 0, 0);
    this.cipher = createCipheriv('aes-128-ctr', key, iv);
  }
  take(bytes: number): Buffer {
    const parts: Buffer[] = [];
    for (let left = bytes; left > 0; left -= RandomBytes.zeros.length) {
      parts.push(this.cipher.update(RandomBytes.zeros.subarray(0, Math.min(left, RandomBytes.zeros.length))));
    }
    return parts.length === 1 ? parts[0] : Buffer.concat(parts);
  }
}

/** The tree's files (paths, sizes, classes) for the options; no I/O. */
export function planContent(options: Required<ContentOptions>): ContentFile[] {
  const random = prng(options.seed);
  const files: ContentFile[] = [];
  const seen = new Set<string>();
  const add = (file: string, bytes: number, fileClass: FileClass) => {
    if (seen.has(file)) return false;
    seen.add(file);
    files.push({ path: file, bytes, class: fileClass });
    return true;
  };
  const smallSize = () => logUniform(random, KiB, 16 * KiB);

  // Small files: Python packages (stdlib + site-packages, each module with its bytecode) and Node packages.
  const python = 'usr/lib/python3.11';
  let small = 0;
  for (let pkg = 0; small < options.smallFiles; pkg++) {
    const node = pkg % 3 === 2;
    const name = `${pick(random, WORDS)}${pkg}`;
    const root = node ? `usr/lib/node_modules/${name}` : pkg % 3 === 0 ? `${python}/${name}` : `${python}/site-packages/${name}`;
    const subpackages = 1 + Math.floor(random() * 4);
    if (node && add(`${root}/package.json`, logUniform(random, KiB, 3 * KiB), 'source')) small++;
    for (let sub = 0; sub < subpackages && small < options.smallFiles; sub++) {
      const dir = sub === 0 ? root : `${root}/${pick(random, WORDS)}${sub}`;
      const modules = 5 + Math.floor(random() * 25);
      for (let m = 0; m < modules && small < options.smallFiles; m++) {
        const module = m === 0 ? (node ? 'index' : '__init__') : `${pick(random, WORDS)}_${m}`;
        if (node) {
          if (add(`${dir}/lib/${module}.js`, smallSize(), 'source')) small++;
        } else if (add(`${dir}/${module}.py`, smallSize(), 'source')) {
          small++;
          if (small < options.smallFiles && add(`${dir}/__pycache__/${module}.cpython-311.pyc`, smallSize(), 'bytecode')) small++;
        }
      }
    }
  }

  // Medium files: the interpreter first (the read-fraction workload starts it), then libraries and data.
  add('usr/bin/python3.11', 1536 * KiB, 'medium');
  add('usr/bin/node', 2 * MiB, 'medium');
  const packages = [...new Set(files.filter((file) => file.class !== 'medium').map((file) => file.path.split('/').slice(0, -1).join('/')))];
  for (let m = files.filter((file) => file.class === 'medium').length; m < options.mediumFiles; ) {
    const size = logUniform(random, 100 * KiB, 2 * MiB);
    const where = random();
    const name = `${pick(random, WORDS)}${m}`;
    const file =
      where < 0.4
        ? `${pick(random, packages.filter((dir) => dir.startsWith(python)))}/_${name}.cpython-311-x86_64-linux-gnu.so`
        : where < 0.7
          ? `usr/lib/x86_64-linux-gnu/lib${name}.so.${1 + Math.floor(random() * 9)}`
          : where < 0.85
            ? `${pick(random, packages.filter((dir) => dir.startsWith('usr/lib/node_modules')))}/build/Release/${name}.node`
            : `usr/share/${pick(random, WORDS)}/${name}.dat`;
    if (add(file, size, 'medium')) m++;
  }

  // Large files fill the rest, 20-100 MiB each.
  const large = [
    'usr/lib/x86_64-linux-gnu/libLLVM-15.so.1',
    `${python}/site-packages/torch/lib/libtorch_cpu.so`,
    `${python}/site-packages/torch/lib/libcudnn_stub.so`,
    'opt/models/tokenizer-embeddings.safetensors',
    'opt/models/reward-model.safetensors',
    'usr/lib/x86_64-linux-gnu/libicudata.so.72',
    `${python}/site-packages/scipy/linalg/_flapack.so`,
    'opt/models/policy-head.safetensors',
    'usr/lib/node_modules/typescript/lib/typescript.bundle.js',
    'opt/models/value-model.safetensors',
    'opt/models/draft-model.safetensors',
    'opt/models/critic.safetensors',
  ];
  let left = options.totalBytes - files.reduce((sum, file) => sum + file.bytes, 0);
  for (let n = 0; left > 0; n++) {
    if (left < 20 * MiB) throw new Error(`content: ${left} bytes left for large files (< 20 MiB): ask for fewer small/medium files or a larger total`);
    // Never leave a remainder too small for one more large file.
    const bytes = left <= 100 * MiB ? left : Math.min(left - 20 * MiB, logUniform(random, 20 * MiB, 100 * MiB));
    const name = large[n % large.length];
    add(n < large.length ? name : name.replace(/(\.[a-z]+(\.\d+)?)$/, `-${Math.floor(n / large.length)}$1`), bytes, 'large');
    left -= bytes;
  }
  return files;
}

/** The bytes of one file: text, half-and-half, or mostly random with text stretches. */
function contentOf(file: ContentFile, index: number, corpus: Buffer, seed: number): Buffer {
  const random = prng(seed * 7919 + index);
  const header = Buffer.from(`# ${file.path}\n`);
  const text = (bytes: number): Buffer => {
    const out = Buffer.alloc(bytes);
    let at = 0;
    while (at < bytes) at += corpus.copy(out, at, Math.floor(random() * (corpus.length - 1)), corpus.length);
    return out;
  };
  if (file.class === 'source') return Buffer.concat([header, text(file.bytes)]).subarray(0, file.bytes);
  const bytes = new RandomBytes(seed, index);
  if (file.class === 'bytecode') {
    const half = Math.floor(file.bytes / 2);
    return Buffer.concat([bytes.take(half), text(file.bytes - half)]);
  }
  // Binaries: 64 KiB blocks, some of them text (symbol and string tables); model weights are all but incompressible.
  const textShare = file.path.endsWith('.safetensors') ? 0.02 : 0.35;
  const parts: Buffer[] = [];
  for (let at = 0; at < file.bytes; at += 64 * KiB) {
    const size = Math.min(64 * KiB, file.bytes - at);
    parts.push(random() < textShare ? text(size) : bytes.take(size));
  }
  return Buffer.concat(parts);
}

async function writeLarge(target: string, file: ContentFile, index: number, corpus: Buffer, seed: number): Promise<void> {
  // In 8 MiB pieces, so a 100 MiB file never sits in memory whole.
  const handle = await fs.open(target, 'w', 0o644);
  try {
    const piece = 8 * MiB;
    for (let at = 0; at < file.bytes; at += piece) {
      const part = contentOf({ ...file, bytes: Math.min(piece, file.bytes - at) }, index * 1000 + at / piece, corpus, seed);
      await handle.write(part);
    }
  } finally {
    await handle.close();
  }
}

/**
 * Generate the content into `<dir>/tree` (or reuse it when `<dir>/content.json`
 * says it is this very generation). Resolves to its description.
 */
export async function generateContent(dir: string, options: ContentOptions = {}): Promise<Content> {
  const settings: Required<ContentOptions> = { ...DEFAULTS, ...options };
  const tree = path.join(dir, 'tree');
  const described = path.join(dir, 'content.json');
  const existing = await fs
    .readFile(described, 'utf8')
    .then((text) => JSON.parse(text) as Content)
    .catch(() => undefined);
  if (existing && existing.generatorVersion === GENERATOR_VERSION && JSON.stringify(existing.options) === JSON.stringify(settings)) {
    return { ...existing, tree, reused: true };
  }
  await fs.rm(described, { force: true });
  await fs.rm(tree, { recursive: true, force: true });
  const files = planContent(settings);
  const corpus = sourceCorpus(prng(settings.seed ^ 0x5eed));
  const dirs = [...new Set(files.map((file) => path.posix.dirname(file.path)))];
  for (const sub of dirs) await fs.mkdir(path.join(tree, sub), { recursive: true });
  let next = 0;
  const worker = async () => {
    while (next < files.length) {
      const index = next++;
      const file = files[index];
      const target = path.join(tree, file.path);
      if (file.class === 'large') await writeLarge(target, file, index, corpus, settings.seed);
      else await fs.writeFile(target, contentOf(file, index, corpus, settings.seed), { mode: 0o644 });
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  const content: Content = { tree, files, totalBytes: files.reduce((sum, file) => sum + file.bytes, 0), options: settings, generatorVersion: GENERATOR_VERSION };
  await fs.writeFile(described, JSON.stringify(content));
  return content;
}

/** One line about the content: files by class and total size. */
export function describeContent(content: Content): string {
  const byClass = new Map<FileClass, { files: number; bytes: number }>();
  for (const file of content.files) {
    const entry = byClass.get(file.class) ?? { files: 0, bytes: 0 };
    entry.files += 1;
    entry.bytes += file.bytes;
    byClass.set(file.class, entry);
  }
  const parts = [...byClass].map(([name, entry]) => `${entry.files} ${name} (${(entry.bytes / MiB).toFixed(0)} MiB)`);
  return `${content.files.length} files, ${(content.totalBytes / 1024 ** 3).toFixed(2)} GiB: ${parts.join(', ')}`;
}
