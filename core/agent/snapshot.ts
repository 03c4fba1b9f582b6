/**
 * Snapshots: a sandbox's writable layer becomes a published layer
 * (`dsec sandbox snapshot ID --as name@version`, the SDK's `snapshot`, and
 * every layer build). The backend's `snapshot` hook copies the writable layer
 * (frozen while it copies) into a temporary folder, without the excluded
 * paths; the storage hooks publish that folder as `name@version`
 * (immutable, as every layer); the folder is then removed.
 */
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { DsecError } from '../errors.js';
import type { Hooks, SandboxContext } from '../hooks.js';
import type { LayerRecord } from '../live.js';
import type { LayerKind, LayerModel } from '../model.js';
import { removeTree } from './files.js';

/** What a snapshot request holds once checked. */
export interface SnapshotInput {
  readonly name: string;
  readonly version: string;
  readonly kind: LayerKind;
  /** Absolute paths inside the sandbox, normalised. */
  readonly exclude: readonly string[];
}

/** The config's layer name rule and semantic versions: a snapshot is a layer like any other. */
const NAME = /^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$/;
const VERSION = /^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$/;
const KINDS: readonly LayerKind[] = ['base', 'workspace', 'toolkit'];
const MAX_EXCLUDES = 1000;

/** Check `{as, kind?, exclude?}` from a caller; every problem at once (DSEC_AGENT_REQUEST). */
export function checkSnapshotInput(input: unknown): SnapshotInput {
  const problems: string[] = [];
  const body = (typeof input === 'object' && input !== null && !Array.isArray(input) ? input : {}) as Record<string, unknown>;
  const as = body.as;
  let name = '';
  let version = '';
  if (typeof as !== 'string' || as.indexOf('@') < 1) {
    problems.push(`as must be name@version, got ${JSON.stringify(as)}`);
  } else {
    name = as.slice(0, as.indexOf('@'));
    version = as.slice(as.indexOf('@') + 1);
    if (name.length > 63 || !NAME.test(name)) problems.push(`layer name ${JSON.stringify(name)} must be 1 to 63 lower-case letters, digits, '.', '_' and '-', starting and ending with a letter or digit`);
    if (!VERSION.test(version)) problems.push(`version ${JSON.stringify(version)} must be a semantic version like 1.2.3`);
  }
  const kind = body.kind ?? 'workspace';
  if (!KINDS.includes(kind as LayerKind)) problems.push(`kind must be one of ${KINDS.join(', ')}, got ${JSON.stringify(kind)}`);
  const exclude: string[] = [];
  if (body.exclude !== undefined && !Array.isArray(body.exclude)) problems.push('exclude must be a list of absolute paths');
  else if (Array.isArray(body.exclude)) {
    if (body.exclude.length > MAX_EXCLUDES) problems.push(`exclude has ${body.exclude.length} paths, more than ${MAX_EXCLUDES}`);
    for (const entry of body.exclude) {
      const parts = typeof entry === 'string' ? entry.split('/').filter((part) => part !== '' && part !== '.') : [];
      if (typeof entry !== 'string' || !entry.startsWith('/') || entry.includes('\0') || parts.length === 0 || parts.includes('..')) {
        problems.push(`exclude path ${JSON.stringify(entry)} must be an absolute path inside the sandbox, without '..', and not / itself`);
      } else exclude.push(`/${parts.join('/')}`);
    }
  }
  if (problems.length > 0) throw new DsecError('DSEC_AGENT_REQUEST', { message: problems.join('; ') });
  return { name, version, kind: kind as LayerKind, exclude: [...new Set(exclude)].sort() };
}

export interface SnapshotDeps {
  readonly hooks: Hooks;
  /** Where temporary copies go (removed afterwards). */
  readonly tempRoot: string;
  /** Publish through the storage hooks. */
  publish(layer: LayerModel): Promise<LayerRecord>;
  readonly log: { info(message: string): void; warn(message: string): void };
}

/** Copy the sandbox's writable layer through its backend's snapshot hook and publish it. */
export async function snapshotToLayer(ctx: SandboxContext, input: SnapshotInput, deps: SnapshotDeps): Promise<LayerRecord> {
  const backend = ctx.spec.backend;
  const hook = deps.hooks.snapshot.get(backend);
  if (!hook || !hook.isUsed()) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: 'snapshot' });
  const ref = `${input.name}@${input.version}`;
  await mkdir(deps.tempRoot, { recursive: true, mode: 0o700 });
  const dir = path.join(deps.tempRoot, `${ctx.spec.id}-${randomBytes(4).toString('hex')}`);
  await mkdir(dir, { mode: 0o700 });
  try {
    const copied = await hook.promise(ctx, { into: dir, exclude: input.exclude });
    if (copied === undefined) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: 'snapshot' });
    if (copied.skipped.length > 0) {
      deps.log.warn(`sandbox ${ctx.spec.id}: snapshot ${ref} leaves out ${copied.skipped.length} entr(ies) a layer cannot hold: ${copied.skipped.slice(0, 10).join(', ')}`);
    }
    const record = await deps.publish({
      ref,
      name: input.name,
      version: input.version,
      kind: input.kind,
      source: { type: 'dir', path: copied.dir },
    });
    deps.log.info(`sandbox ${ctx.spec.id}: snapshot published as ${ref} (${record.digest}, ${record.files} entries)`);
    return record;
  } finally {
    // The copy holds whatever the sandbox wrote (paths past PATH_MAX too).
    await removeTree(dir);
  }
}
