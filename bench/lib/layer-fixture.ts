/**
 * What both layer benchmarks start from: the generated environment content
 * (bench/lib/content.ts), a folder standing in for the 3FS mount, a real
 * agent with storage-3fs on it and the container backend, and two published
 * layers: a busybox base and the generated tree as a toolkit on top. The
 * environment is the two, bottom to top.
 *
 * The caller owns the work folder and calls `dispose` in a finally block;
 * a signal handler turns ^C into "stop after the step in flight, then clean
 * up" (^C again leaves things behind).
 */
import { mkdir, mkdtemp, readdir, realpath, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { LayerRecord, LayerRef, StorageStats } from '../../core/live.js';
import { describeContent, generateContent, type Content, type ContentOptions } from './content.js';
import { LayerAgent, refOf, storage3fsRef, sweepMounts } from './layer-agent.js';

export const CONTENT_LAYER = { name: 'pyenv', version: '1.0.0' } as const;

export interface LayerFixture {
  readonly work: string;
  /** The folder standing in for the 3FS mount (the shared store). */
  readonly store: string;
  readonly content: Content;
  readonly contentDir: string;
  readonly agent: LayerAgent;
  readonly base: LayerRecord;
  readonly layer: LayerRecord;
  /** The environment: base, then the content layer. */
  readonly layers: readonly LayerRef[];
  /** Seconds the content layer took to publish (digest, copy, split EROFS image onto the store). */
  readonly publishSeconds: number;
  /** The store's files of the content layer (metadata image, blob) and their sizes. */
  readonly stored: { readonly meta: string; readonly metaBytes: number; readonly blob: string; readonly blobBytes: number };
}

export interface FixtureOptions {
  readonly name: string;
  /** A folder to generate the content into and reuse across runs (kept); default: inside the temp work folder. */
  readonly contentDir?: string;
  readonly content?: ContentOptions;
  /** storage-3fs options beside `mount`. */
  readonly storeOptions?: Record<string, unknown>;
  readonly log: (line: string) => void;
}

let aborted = false;
export const checkAborted = (): void => {
  if (aborted) throw new Error('interrupted');
};

/** ^C once: finish the step in flight, then clean up. Returns the function that removes the handler. */
export function onInterrupt(name: string): () => void {
  const handler = () => {
    if (aborted) process.exit(130);
    aborted = true;
    process.stderr.write(`${name}: interrupted; finishing the step in flight, then cleaning up (^C again to leave things behind)\n`);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

export async function makeWork(name: string): Promise<string> {
  // realpath: /tmp may be a symlink, and mount points are reported resolved.
  return realpath(await mkdtemp(path.join(tmpdir(), `dsec-${name}-`)));
}

/** Generate (or reuse) the content, start the agent, publish the two layers. On failure, what was started is left for `disposeFixture`. */
export async function setUpFixture(work: string, options: FixtureOptions, started: { agent?: LayerAgent }): Promise<LayerFixture> {
  const contentDir = options.contentDir ?? path.join(work, 'content');
  const generating = performance.now();
  const content = await generateContent(contentDir, options.content);
  const how = content.reused ? 'generated earlier' : `generated in ${((performance.now() - generating) / 1000).toFixed(1)} s`;
  options.log(`content: ${describeContent(content)} (${how}, in ${contentDir})`);

  const store = path.join(work, '3fs');
  await mkdir(store);
  const agent = await LayerAgent.start(work, [storage3fsRef({ mount: store, ...options.storeOptions }), { name: 'backend-container', options: {} }]);
  started.agent = agent;
  const stats = await agent.storage();
  options.log(`store: ${stats.plugin}, format ${stats.format}${stats.reason ? ` (${stats.reason})` : ''}: ${stats.description}`);
  if (stats.format !== 'erofs') throw new Error(`storage-3fs fell back to ${stats.format} (${stats.reason ?? 'no reason given'}): the benchmark needs split EROFS images`);

  const base = await agent.publish({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } });
  const publishing = performance.now();
  const layer = await agent.publish({
    ref: `${CONTENT_LAYER.name}@${CONTENT_LAYER.version}`,
    ...CONTENT_LAYER,
    kind: 'toolkit',
    source: { type: 'dir', path: content.tree },
  });
  const publishSeconds = (performance.now() - publishing) / 1000;
  const stored = await storedFiles(store, layer.digest);
  options.log(
    `published ${layer.name}@${layer.version} in ${publishSeconds.toFixed(1)} s: ${layer.files} entries, metadata image ${mib(stored.metaBytes)}, blob ${mib(stored.blobBytes)}`,
  );
  return { work, store, content, contentDir, agent, base, layer, layers: [refOf(base), refOf(layer)], publishSeconds, stored };
}

/** The split image's files on the store (`<hex>.meta.erofs`, `<hex>.blob`), found by the digest's hex. */
async function storedFiles(store: string, digest: string): Promise<LayerFixture['stored']> {
  const hex = digest.replace(/^sha256:/, '');
  const layersDir = path.join(store, 'layers');
  const names = await readdir(layersDir);
  const meta = names.find((name) => name.startsWith(hex) && name.endsWith('.meta.erofs'));
  const blob = names.find((name) => name.startsWith(hex) && name.endsWith('.blob'));
  if (!meta || !blob) throw new Error(`no split image of ${digest} in ${layersDir} (found: ${names.join(', ')})`);
  return {
    meta: path.join(layersDir, meta),
    metaBytes: (await stat(path.join(layersDir, meta))).size,
    blob: path.join(layersDir, blob),
    blobBytes: (await stat(path.join(layersDir, blob))).size,
  };
}

/** The mount of `digest` on the node now, as the storage plugin reports it. */
export function mountOf(stats: StorageStats, digest: string) {
  return stats.mounts.find((mount) => mount.digest === digest);
}

/** After the last sandbox went the store unmounts the image; wait for it, so the next round mounts afresh. */
export async function waitUnmounted(agent: LayerAgent, digest: string, log: (line: string) => void): Promise<void> {
  for (let waited = 0; waited < 10_000; waited += 100) {
    if (!mountOf(await agent.storage(), digest)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  log(`the image ${digest} is still mounted 10 s after its last sandbox went; the next round reuses the mount`);
}

/** Stop and sweep everything; remove the work folder (the content dir too unless the user gave it). Returns the problems. */
export async function disposeFixture(work: string, started: { agent?: LayerAgent }): Promise<string[]> {
  const problems = started.agent ? await started.agent.dispose() : [];
  try {
    await sweepMounts(work);
    await rm(work, { recursive: true, force: true });
  } catch (error) {
    problems.push(`removing ${work}: ${(error as Error).message}`);
  }
  return problems;
}

export const mib = (bytes: number): string => `${(bytes / 1024 ** 2).toFixed(bytes < 10 * 1024 ** 2 ? 1 : 0)} MiB`;
