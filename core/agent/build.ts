/**
 * Layers the node agent makes itself, because making them takes a sandbox
 * rather than a storage plugin reading a source:
 *
 * - `build`: a throwaway container sandbox stacked on the parent layers
 *   (through the ordinary lifecycle hooks: admit, resolve layers, provision),
 *   each step run through exec with `/bin/sh -c`, then the sandbox's
 *   writable layer snapshotted (the backend's `snapshot` hook) and published
 *   as the layer. The sandbox is always destroyed.
 * - `published`: nothing to make; the layer must already be in the store.
 *
 * A build is cached by its identity, sha256 over the parents' digests, the
 * steps, env and workdir: `<root>/builds/<identity>.json` says which
 * `name@version` and digest it gave. A digest is known without building only
 * from that cache, and only while the store still holds that layer; else it
 * is pending (`pending:<identity>`), which the plan shows as known after apply.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { DsecError } from '../errors.js';
import type { NodeContext } from '../hooks.js';
import { isPendingDigest, pendingDigest, type ExecRequest, type ExecResult, type LayerRecord, type LayerRef, type SandboxInfo, type SandboxSpec } from '../live.js';
import type { BuildSource, LayerKind, LayerModel } from '../model.js';
import { canonicalJson } from '../util/canonical-json.js';
import { readJson, writeJsonAtomic } from './files.js';

/** The label of build sandboxes; a build never outlives its agent, so a restarted agent destroys them. */
export const LABEL_BUILD = 'dsec.io/build';

/** Bumped when what a build turns into changes for the same inputs, so cached builds are not reused. */
const BUILD_RECIPE = 'dsec-build 1';
/** Builds run on the container backend, small and without network. */
const BUILD_BACKEND = 'container';
const BUILD_RESOURCES = Object.freeze({ cpu: 1, memoryMiB: 512, pids: 512 });
const STEP_TIMEOUT_MS = 30 * 60 * 1000;
const STEP_OUTPUT_BYTES = 256 * 1024;
const STDERR_TAIL_LINES = 20;
const STDERR_TAIL_CHARS = 2000;

/** What the builder needs of the agent. */
export interface BuildHost {
  readonly node: NodeContext;
  listLayers(): Promise<LayerRecord[]>;
  createSandbox(spec: SandboxSpec): Promise<SandboxInfo>;
  exec(id: string, request: ExecRequest): Promise<ExecResult>;
  snapshotSandbox(id: string, request: { as: string; kind: LayerKind; exclude: readonly string[] }): Promise<LayerRecord>;
  destroySandbox(id: string): Promise<unknown>;
}

interface CachedBuild {
  readonly identity: string;
  readonly ref: string;
  readonly digest: string;
  readonly builtAt: string;
}

/** sha256 (hex) of what a build is made from. */
export function buildIdentity(parents: readonly string[], source: Pick<BuildSource, 'steps' | 'env' | 'workdir'>): string {
  const inputs = canonicalJson({ recipe: BUILD_RECIPE, parents, steps: source.steps, env: source.env, workdir: source.workdir });
  return createHash('sha256').update(inputs).digest('hex');
}

/** A sandbox a layer build made (a restarted agent destroys it). */
export function isBuildSandbox(spec: Pick<SandboxSpec, 'labels'>): boolean {
  return spec.labels[LABEL_BUILD] !== undefined;
}

/** True for the sources the agent makes itself rather than handing to the storage plugin. */
export function isAgentMadeLayer(layer: LayerModel): boolean {
  return layer.source.type === 'build' || layer.source.type === 'published';
}

export class LayerBuilder {
  private readonly cacheDir: string;
  /** One build per `name@version` at a time: a second publish waits for the first and finds it done. */
  private readonly inFlight = new Map<string, Promise<LayerRecord>>();

  constructor(private readonly host: BuildHost) {
    this.cacheDir = path.join(host.node.root, 'builds');
  }

  async digest(layer: LayerModel): Promise<string> {
    const source = layer.source;
    if (source.type === 'published') return (await this.published(layer)).digest;
    if (source.type !== 'build') throw new Error(`${layer.ref} is not made by the agent`);
    const records = await this.host.listLayers();
    // The engine passes the parents' digests (pending ones included); a bare call looks them up.
    const parents = source.parents?.map((parent) => parent.digest) ?? source.from.map((ref) => recordOf(records, ref)?.digest ?? pendingDigest('unpublished'));
    if (parents.some(isPendingDigest)) {
      // Some parent is not built yet, so neither is this: pending on everything it is made from.
      return pendingDigest(createHash('sha256').update(canonicalJson({ from: source.from, parents, steps: source.steps, env: source.env, workdir: source.workdir })).digest('hex'));
    }
    const identity = buildIdentity(parents, source);
    const cached = await this.cached(identity);
    if (cached && cached.ref === layer.ref && recordOf(records, layer.ref)?.digest === cached.digest) return cached.digest;
    return pendingDigest(identity);
  }

  async publish(layer: LayerModel): Promise<LayerRecord> {
    if (layer.source.type === 'published') return this.published(layer);
    // A second publish of a build in progress shares its outcome, failure included.
    const running = this.inFlight.get(layer.ref);
    if (running) return running;
    const work = this.publishBuild(layer).finally(() => this.inFlight.delete(layer.ref));
    this.inFlight.set(layer.ref, work);
    return work;
  }

  private async published(layer: LayerModel): Promise<LayerRecord> {
    const record = recordOf(await this.host.listLayers(), layer.ref);
    if (!record) throw new DsecError('DSEC_LAYER_NOT_PUBLISHED', { ref: layer.ref });
    return record;
  }

  private async publishBuild(layer: LayerModel): Promise<LayerRecord> {
    const source = layer.source as BuildSource;
    const records = await this.host.listLayers();
    const parents: LayerRef[] = source.from.map((ref) => {
      const record = recordOf(records, ref);
      if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref: `${ref} (a parent of ${layer.ref}, to be published before it)` });
      return { name: record.name, version: record.version, digest: record.digest };
    });
    // A parent the plan knew must still be what it planned on.
    for (const [index, planned] of (source.parents ?? []).entries()) {
      const actual = parents[index];
      if (actual && !isPendingDigest(planned.digest) && planned.digest !== actual.digest) {
        throw new DsecError('DSEC_LAYER_CHANGED', { ref: `${actual.name}@${actual.version}`, planned: planned.digest, digest: actual.digest });
      }
    }
    const identity = buildIdentity(
      parents.map((parent) => parent.digest),
      source,
    );
    const cached = await this.cached(identity);
    const existing = recordOf(records, layer.ref);
    if (existing) {
      if (cached?.ref === layer.ref && cached.digest === existing.digest) return existing;
      // Never rebuild into a published name@version: its content would change.
      throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref: layer.ref, existing: existing.digest, digest: 'that of a build from other inputs' });
    }
    const record = await this.build(layer, source, parents, identity);
    await mkdir(this.cacheDir, { recursive: true, mode: 0o700 });
    const entry: CachedBuild = { identity, ref: layer.ref, digest: record.digest, builtAt: new Date().toISOString() };
    await writeJsonAtomic(path.join(this.cacheDir, `${identity}.json`), entry);
    return record;
  }

  private async build(layer: LayerModel, source: BuildSource, parents: readonly LayerRef[], identity: string): Promise<LayerRecord> {
    const log = this.host.node.log;
    const id = `build-${identity.slice(0, 12)}-${randomBytes(3).toString('hex')}`;
    const spec: SandboxSpec = {
      id,
      backend: BUILD_BACKEND,
      layers: parents,
      env: { ...source.env },
      workdir: '/',
      user: 'root',
      resources: BUILD_RESOURCES,
      network: 'none',
      qos: 'best-effort',
      labels: { [LABEL_BUILD]: layer.ref },
    };
    const started = performance.now();
    log.info(`layer ${layer.ref}: building in sandbox ${id} on ${parents.map((parent) => `${parent.name}@${parent.version}`).join(', ')}`);
    try {
      await this.host.createSandbox(spec);
      if (source.workdir !== '/') await this.run(layer, id, 0, `mkdir -p -- '${source.workdir.replace(/'/g, `'\\''`)}'`, source, '/');
      for (const [index, step] of source.steps.entries()) {
        log.info(`layer ${layer.ref}: step ${index + 1}/${source.steps.length}: ${step}`);
        await this.run(layer, id, index + 1, step, source, source.workdir);
      }
      const record = await this.host.snapshotSandbox(id, { as: layer.ref, kind: layer.kind, exclude: [] });
      log.info(`layer ${layer.ref}: built as ${record.digest} in ${Math.round(performance.now() - started)} ms`);
      return record;
    } finally {
      await this.host.destroySandbox(id).catch((error: Error) => log.warn(`layer ${layer.ref}: destroying build sandbox ${id} failed: ${error.message}`));
    }
  }

  /** Run one step; anything but exit 0 fails the build with the step, its status and its stderr tail. */
  private async run(layer: LayerModel, id: string, step: number, command: string, source: BuildSource, workdir: string): Promise<void> {
    const result = await this.host.exec(id, {
      cmd: ['/bin/sh', '-c', command],
      env: { ...source.env },
      workdir,
      timeoutMs: STEP_TIMEOUT_MS,
      maxOutputBytes: STEP_OUTPUT_BYTES,
    });
    if (result.exitCode === 0 && !result.timedOut) return;
    const status = result.timedOut
      ? `timed out after ${Math.round(STEP_TIMEOUT_MS / 1000)} s`
      : result.exitCode !== null
        ? `exit code ${result.exitCode}`
        : `killed by ${result.signal ?? 'a signal'}`;
    const tail = stderrTail(result.stderr);
    throw new DsecError('DSEC_LAYER_BUILD', {
      ref: layer.ref,
      step: step === 0 ? '0 (mkdir workdir)' : `${step}/${source.steps.length}`,
      status,
      command,
      exitCode: result.exitCode,
      stderr: tail ? `\n${tail}` : ' (no stderr)',
    });
  }

  private async cached(identity: string): Promise<CachedBuild | undefined> {
    try {
      const entry = await readJson<CachedBuild>(path.join(this.cacheDir, `${identity}.json`));
      return entry.identity === identity ? entry : undefined;
    } catch {
      // Missing or damaged: only a cache, the build runs again.
      return undefined;
    }
  }
}

function recordOf(records: readonly LayerRecord[], ref: string): LayerRecord | undefined {
  return records.find((record) => `${record.name}@${record.version}` === ref);
}

/** The last lines of a step's stderr, for the error. */
export function stderrTail(stderr: string): string {
  const lines = stderr.trimEnd().split('\n');
  const tail = lines.slice(-STDERR_TAIL_LINES).join('\n');
  return tail.length > STDERR_TAIL_CHARS ? `...${tail.slice(-STDERR_TAIL_CHARS)}` : tail;
}
