/**
 * Looking after published layers (`dsec layers gc|inspect`, and the path
 * listings `dsec validate` compares): garbage collection that never removes
 * a layer a sandbox or the config still uses, and the listing of one layer's
 * tree, read through the storage hooks like a sandbox would (resolve, read,
 * release), so it works for trees and mounted images alike.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { DsecError } from '../errors.js';
import type { Hooks, NodeContext, SandboxContext } from '../hooks.js';
import { walkTree, type TreeEntry } from '../layers/index.js';
import type { LayerRecord, SandboxSpec } from '../live.js';
import { removeTree } from './files.js';

export interface GcRequest {
  /** `name@version` of every layer the config declares: kept even when no sandbox uses them. */
  readonly keep: readonly string[];
  /** Say what would go, remove nothing. */
  readonly dryRun: boolean;
}

export interface GcResult {
  readonly dryRun: boolean;
  /** Removed (or, in a dry run, to be removed). */
  readonly removed: readonly LayerRecord[];
  readonly kept: readonly { readonly ref: string; readonly reason: string }[];
}

/** One entry of a layer's listing as the API serves it: the tree entry without its host stat. */
export type LayerListingEntry = Omit<TreeEntry, 'stat'>;

export interface LayerListing {
  readonly ref: string;
  readonly digest: string;
  readonly entries: readonly LayerListingEntry[];
}

export function checkGcRequest(input: unknown): GcRequest {
  const body = (typeof input === 'object' && input !== null ? input : {}) as Record<string, unknown>;
  const keep = body.keep ?? [];
  if (!Array.isArray(keep) || keep.some((ref) => typeof ref !== 'string')) {
    throw new DsecError('DSEC_AGENT_REQUEST', { message: 'keep must be a list of name@version' });
  }
  if (body.dryRun !== undefined && typeof body.dryRun !== 'boolean') throw new DsecError('DSEC_AGENT_REQUEST', { message: 'dryRun must be true or false' });
  return { keep: keep as string[], dryRun: body.dryRun === true };
}

/** Sandbox ids per layer ref, over every sandbox the node has a record of (failed and stopped ones too). */
export function layerUsers(specs: readonly SandboxSpec[]): Map<string, string[]> {
  const users = new Map<string, string[]>();
  for (const spec of specs) {
    for (const layer of spec.layers) {
      const ref = `${layer.name}@${layer.version}`;
      users.set(ref, [...(users.get(ref) ?? []), spec.id]);
    }
  }
  return users;
}

export interface GcDeps {
  listLayers(): Promise<LayerRecord[]>;
  sandboxes(): readonly SandboxSpec[];
  unpublish(name: string, version: string): Promise<void>;
}

export async function collectLayers(request: GcRequest, deps: GcDeps): Promise<GcResult> {
  const keep = new Set(request.keep);
  const removed: LayerRecord[] = [];
  const kept: { ref: string; reason: string }[] = [];
  for (const record of await deps.listLayers()) {
    const ref = `${record.name}@${record.version}`;
    // Asked again per layer: a sandbox created meanwhile counts (and unpublish refuses in-use layers anyway).
    const users = layerUsers(deps.sandboxes()).get(ref) ?? [];
    if (users.length > 0) kept.push({ ref, reason: `used by ${users.length} sandbox(es)` });
    else if (keep.has(ref)) kept.push({ ref, reason: 'declared in the config' });
    else {
      if (!request.dryRun) await deps.unpublish(record.name, record.version);
      removed.push(record);
    }
  }
  return { dryRun: request.dryRun, removed, kept };
}

/** Where listings keep their short-lived reader folders, and snapshots their copies. */
const inspectDir = (node: NodeContext): string => path.join(node.root, 'inspect');
export const snapshotsDir = (node: NodeContext): string => path.join(node.root, 'snapshots');

export interface ListingDeps {
  readonly hooks: Hooks;
  readonly node: NodeContext;
  listLayers(): Promise<LayerRecord[]>;
}

/**
 * Every entry of a published layer. The layer is resolved for a short-lived
 * reader (the storage plugin mounts it if it must, and counts the use), read,
 * and released through the destroy hook; no backend is involved.
 */
export async function listLayer(name: string, version: string, deps: ListingDeps): Promise<LayerListing> {
  const ref = `${name}@${version}`;
  const record = (await deps.listLayers()).find((layer) => layer.name === name && layer.version === version);
  if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
  const id = `inspect-${randomBytes(6).toString('hex')}`;
  const dir = path.join(inspectDir(deps.node), id);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const ctx = readerContext(id, dir, deps.node, [{ name, version, digest: record.digest }]);
  try {
    await deps.hooks.resolveLayers.promise(ctx);
    const tree = ctx.lowerDirs[0];
    if (!tree) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'resolveLayers' });
    const entries = (await walkTree(tree, ref)).map(({ path: entryPath, type, mode, uid, gid, size, target, opaque }) => ({
      path: entryPath,
      type,
      mode,
      uid,
      gid,
      size,
      ...(target !== undefined ? { target } : {}),
      ...(opaque ? { opaque } : {}),
    }));
    return { ref, digest: record.digest, entries };
  } finally {
    await deps.hooks.destroy.promise(ctx).catch((error: Error) => deps.node.log.warn(`releasing ${ref} after listing it failed: ${error.message}`));
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * After a crash: release what listings interrupted half-way still hold (the
 * storage plugin counts them as users of their layers) and drop snapshot
 * copies nobody will publish. Run by the agent at start.
 */
export async function cleanInterrupted(hooks: Hooks, node: NodeContext): Promise<string[]> {
  const released: string[] = [];
  for (const id of await readdir(inspectDir(node)).catch(() => [] as string[])) {
    const dir = path.join(inspectDir(node), id);
    await hooks.destroy.promise(readerContext(id, dir, node, []));
    await rm(dir, { recursive: true, force: true });
    released.push(id);
  }
  await removeTree(snapshotsDir(node));
  return released;
}

/** A sandbox context for a reader that is no sandbox: no backend provisions `none`, so backends leave it alone in destroy. */
function readerContext(id: string, dir: string, node: NodeContext, layers: SandboxSpec['layers']): SandboxContext {
  return {
    spec: {
      id,
      backend: 'none',
      layers,
      env: {},
      workdir: '/',
      user: 'root',
      resources: { cpu: 1, memoryMiB: 16, pids: 1 },
      network: 'none',
      qos: 'best-effort',
      labels: {},
    },
    node,
    dir,
    status: 'creating',
    lowerDirs: [],
    density: {},
    traits: {},
    storage: {},
    backend: {},
    createdAt: new Date().toISOString(),
  };
}
