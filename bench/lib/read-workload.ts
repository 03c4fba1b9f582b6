/**
 * A realistic subset of the generated image to read, in the order a job
 * reads it, for the read-fraction benchmark:
 *
 *   start a program    the interpreter (usr/bin/python3.11) and three extension
 *                      modules / shared libraries it loads, read whole (a real
 *                      exec maps them and touches part: this is the upper bound)
 *   import modules     the first 25 small files (sources and their bytecode) of
 *                      each of a dozen packages spread over the tree, `modules`
 *                      files in all: an import pulls a package's top modules
 *   read a few files   five medium data files, read whole
 *   load a model       the smallest model file (20-100 MiB), read whole: beyond
 *                      the workload, a job that loads weights
 *
 * Chosen deterministically from the content's listing, so every run reads
 * the same files.
 */
import type { Content, ContentFile } from './content.js';

export interface WorkloadPhase {
  readonly name: string;
  readonly files: readonly ContentFile[];
}

export interface WorkloadOptions {
  /** Small files to import. @default 300 */
  readonly modules?: number;
  /** Extension modules loaded at start. @default 3 */
  readonly libraries?: number;
  /** Medium files read. @default 5 */
  readonly dataFiles?: number;
}

/** Every `step`-th item from `offset`: a spread-out, repeatable pick. */
function spread<T>(items: readonly T[], count: number, offset: number): T[] {
  if (items.length === 0) return [];
  const step = Math.max(1, Math.floor(items.length / count));
  const picked: T[] = [];
  for (let i = 0; i < count && i < items.length; i++) picked.push(items[(offset + i * step) % items.length]);
  return picked;
}

export function chooseWorkload(content: Content, options: WorkloadOptions = {}): WorkloadPhase[] {
  const modules = options.modules ?? 300;
  const interpreter = content.files.find((file) => file.path === 'usr/bin/python3.11');
  if (!interpreter) throw new Error('the content has no usr/bin/python3.11');
  const medium = content.files.filter((file) => file.class === 'medium' && file !== interpreter);
  const libraries = spread(
    medium.filter((file) => file.path.endsWith('.so') || /\.so\.\d+$/.test(file.path)),
    options.libraries ?? 3,
    1,
  );

  // Python packages (a top-level folder under python3.11 or site-packages), each with its small files.
  const packages = new Map<string, ContentFile[]>();
  for (const file of content.files) {
    if (file.class !== 'source' && file.class !== 'bytecode') continue;
    const match = /^(usr\/lib\/python3\.11\/(?:site-packages\/)?[^/]+)\//.exec(file.path);
    if (!match || match[1].endsWith('site-packages')) continue;
    const list = packages.get(match[1]) ?? [];
    list.push(file);
    packages.set(match[1], list);
  }
  const imported: ContentFile[] = [];
  const perPackage = 25;
  for (const name of spread([...packages.keys()], Math.ceil(modules / perPackage) * 2, 7)) {
    if (imported.length >= modules) break;
    imported.push(...packages.get(name)!.slice(0, Math.min(perPackage, modules - imported.length)));
  }

  const data = spread(
    medium.filter((file) => !libraries.includes(file)),
    options.dataFiles ?? 5,
    3,
  );
  const models = content.files.filter((file) => file.path.endsWith('.safetensors')).sort((a, b) => a.bytes - b.bytes);
  return [
    { name: 'start a program', files: [interpreter, ...libraries] },
    { name: `import ${imported.length} modules`, files: imported },
    { name: `read ${data.length} files`, files: data },
    ...(models.length > 0 ? [{ name: 'load a model', files: [models[0]] }] : []),
  ];
}
