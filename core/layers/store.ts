/**
 * The node's content-addressed layer store, on disk:
 *
 *   <dir>/layers/<hex>/            a published tree, shared by every ref with that digest
 *   <dir>/refs/<name>@<version>.json   the LayerRecord that makes a tree visible
 *   <dir>/inuse/<sandbox id>.json  the layers a sandbox resolved (so they are not removed under it)
 *   <dir>/staging/<pid>-<random>/  work in progress, never read by anyone else
 *   <dir>/cache/source-digests.json
 *
 * Publication is ordered so a crash never leaves a half-published layer:
 * the tree is built in staging, flushed to disk, renamed into layers/ (atomic),
 * and only then the ref is created (temp file, fsync, link: atomic and
 * exclusive). A tree without a ref is invisible garbage, collected later; a
 * ref always points at a complete tree.
 *
 * Mutations of one store are serialised within the process (the node agent
 * owns its store); other processes only use staging dirs of their own.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError } from '../errors.js';
import type { Logger } from '../hooks.js';
import type { LayerRecord, LayerRef } from '../live.js';
import type { LayerModel } from '../model.js';
import { DigestCache } from './digest-cache.js';
import { digestHex, type TreeDigest } from './digest.js';
import {
  KeyedMutex,
  createFileExclusive,
  fsyncDir,
  isErrno,
  isTempName,
  pathExists,
  removeTree,
  syncFilesystem,
  writeFileAtomic,
} from './fsutil.js';

/** A layer a sandbox resolved: where its tree is. */
export interface ResolvedLayer {
  readonly ref: string;
  readonly digest: string;
  readonly path: string;
}

interface InUseRecord {
  readonly sandbox: string;
  readonly layers: ReadonlyArray<{ readonly ref: string; readonly digest: string }>;
  readonly since: string;
}

/** A staging dir: build the layer in `tree`, then publish or remove it. */
export interface Staging {
  readonly tree: string;
  remove(): Promise<void>;
}

/** Names and versions become file names: no separators, no dot-files, bounded. */
const SAFE_PART = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;
/** Sandbox ids as SandboxSpec defines them. */
const SAFE_SANDBOX_ID = /^[a-z0-9-]{1,63}$/;
/** Unreferenced trees younger than this are left alone: another process may be about to write their ref. */
const ORPHAN_GRACE_MS = 10 * 60 * 1000;

const storeLocks = new KeyedMutex();

export function isSafeRefPart(part: string): boolean {
  return SAFE_PART.test(part);
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return isErrno(error, 'EPERM');
  }
}

export class LayerStore {
  readonly layersDir: string;
  readonly refsDir: string;
  readonly inUseDir: string;
  readonly stagingDir: string;
  readonly digests: DigestCache;
  private swept = false;

  constructor(
    readonly dir: string,
    readonly log: Logger,
    /** Who owns the store (the plugin's name), for log lines and messages. */
    readonly name = 'layer store',
  ) {
    this.layersDir = join(dir, 'layers');
    this.refsDir = join(dir, 'refs');
    this.inUseDir = join(dir, 'inuse');
    this.stagingDir = join(dir, 'staging');
    this.digests = new DigestCache(join(dir, 'cache', 'source-digests.json'));
  }

  treePath(digest: string): string {
    return join(this.layersDir, digestHex(digest));
  }

  private refPath(name: string, version: string): string {
    return join(this.refsDir, `${name}@${version}.json`);
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    return storeLocks.run(this.dir, fn);
  }

  /** Create the store's folders (cheap when they exist) and, once per process, drop staging left by dead processes. */
  private async prepare(): Promise<void> {
    await Promise.all(
      [this.layersDir, this.refsDir, this.inUseDir, this.stagingDir].map((dir) => fs.mkdir(dir, { recursive: true })),
    );
    if (this.swept) return;
    this.swept = true;
    for (const name of await fs.readdir(this.stagingDir)) {
      const pid = Number(/^(\d+)-/.exec(name)?.[1]);
      if (Number.isInteger(pid) && pid !== process.pid && !processAlive(pid)) {
        this.log.debug(`${this.name}: removing staging left by process ${pid}: ${name}`);
        await removeTree(join(this.stagingDir, name));
      }
    }
  }

  /** A fresh staging dir named after this process, so a crash leftover can be told from live work. */
  async stage(): Promise<Staging> {
    await this.prepare();
    const dir = join(this.stagingDir, `${process.pid}-${randomBytes(8).toString('hex')}`);
    const tree = join(dir, 'tree');
    await fs.mkdir(tree, { recursive: true });
    return { tree, remove: () => removeTree(dir) };
  }

  /** The record of `name@version`, or undefined when it is not published. */
  async readRef(name: string, version: string): Promise<LayerRecord | undefined> {
    if (!isSafeRefPart(name) || !isSafeRefPart(version)) return undefined;
    const file = this.refPath(name, version);
    let text: string;
    try {
      text = await fs.readFile(file, 'utf8');
    } catch (error) {
      if (isErrno(error, 'ENOENT')) return undefined;
      throw error;
    }
    try {
      const record = JSON.parse(text) as LayerRecord;
      digestHex(record.digest);
      return record;
    } catch (error) {
      throw new DsecError('DSEC_LAYER_STORE_CORRUPT', {
        path: file,
        message: `unreadable ref record (${(error as Error).message}); unpublish and publish the layer again`,
      });
    }
  }

  /**
   * Make the tree in `staged` the content of `layer`, whose digest is
   * `tree.digest`. Returns the existing record when the same content is
   * already published; throws DSEC_LAYER_IMMUTABLE when other content is.
   */
  async commit(layer: LayerModel, tree: TreeDigest, staged: string): Promise<LayerRecord> {
    const ref = `${layer.name}@${layer.version}`;
    // Durable before visible; outside the lock, it can take a while.
    await syncFilesystem(staged);
    return this.locked(async () => {
      await this.prepare();
      const existing = await this.readRef(layer.name, layer.version);
      if (existing && existing.digest !== tree.digest) {
        throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref, existing: existing.digest, digest: tree.digest });
      }
      const treePath = this.treePath(tree.digest);
      let created = false;
      if (!(await pathExists(treePath))) {
        // Content-addressed: another ref with this digest may already have put the tree here.
        await fs.rename(staged, treePath);
        await fsyncDir(this.layersDir);
        created = true;
      }
      // Same content already published: a no-op (which also repairs a missing tree).
      if (existing) return existing;
      const record: LayerRecord = {
        name: layer.name,
        version: layer.version,
        kind: layer.kind,
        digest: tree.digest,
        sizeBytes: tree.sizeBytes,
        files: tree.entries,
        publishedAt: new Date().toISOString(),
      };
      try {
        await createFileExclusive(this.refPath(layer.name, layer.version), JSON.stringify(record, null, 2) + '\n');
        return record;
      } catch (error) {
        // EEXIST: another process published this ref between our read and our write.
        const raced = isErrno(error, 'EEXIST') ? await this.readRef(layer.name, layer.version) : undefined;
        if (raced?.digest === tree.digest) return raced;
        if (created) await this.dropTree(tree.digest);
        if (raced) throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref, existing: raced.digest, digest: tree.digest });
        throw error;
      }
    });
  }

  /** Every published layer, sorted by ref. A damaged ref file is reported in the log and skipped. */
  async list(): Promise<LayerRecord[]> {
    await this.prepare();
    const records: LayerRecord[] = [];
    for (const name of (await fs.readdir(this.refsDir)).sort()) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      const ref = name.slice(0, -'.json'.length);
      const at = ref.lastIndexOf('@');
      try {
        const record = await this.readRef(ref.slice(0, at), ref.slice(at + 1));
        if (record) records.push(record);
      } catch (error) {
        this.log.warn(`${this.name}: skipping ${name}: ${(error as Error).message}`);
      }
    }
    return records;
  }

  /** Remove `name@version`, and its tree when nothing else uses it. Refused while a sandbox uses the layer. */
  async remove(name: string, version: string): Promise<void> {
    const ref = `${name}@${version}`;
    await this.locked(async () => {
      await this.prepare();
      const record = await this.readRef(name, version);
      if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
      const users = await this.inUseRecords();
      const user = users.find((inUse) => inUse.layers.some((layer) => layer.ref === ref));
      if (user) throw new DsecError('DSEC_LAYER_IN_USE', { ref, id: user.sandbox });
      await fs.unlink(this.refPath(name, version));
      await fsyncDir(this.refsDir);
      await this.collectTrees(users, record.digest);
    });
  }

  /**
   * Check that every ref is published with the digest the sandbox asks for
   * and that its tree is there, then record that the sandbox uses them.
   * Returns the trees bottom to top, in the order of `layers`.
   */
  async resolve(sandboxId: string, layers: readonly LayerRef[]): Promise<ResolvedLayer[]> {
    const file = this.inUsePath(sandboxId);
    return this.locked(async () => {
      await this.prepare();
      const resolved: ResolvedLayer[] = [];
      for (const layer of layers) {
        const ref = `${layer.name}@${layer.version}`;
        const record = await this.readRef(layer.name, layer.version);
        if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
        if (record.digest !== layer.digest) {
          throw new DsecError('DSEC_LAYER_DIGEST_MISMATCH', { ref, published: record.digest, digest: layer.digest });
        }
        const path = this.treePath(record.digest);
        const stat = await fs.stat(path).catch(() => undefined);
        if (!stat?.isDirectory()) {
          throw new DsecError('DSEC_LAYER_STORE_CORRUPT', {
            path,
            message: `the tree of ${ref} is missing; unpublish and publish the layer again`,
          });
        }
        resolved.push({ ref, digest: record.digest, path });
      }
      const inUse: InUseRecord = {
        sandbox: sandboxId,
        layers: resolved.map(({ ref, digest }) => ({ ref, digest })),
        since: new Date().toISOString(),
      };
      await writeFileAtomic(file, JSON.stringify(inUse, null, 2) + '\n');
      return resolved;
    });
  }

  /** Forget that a sandbox uses its layers. Idempotent; an id `resolve` would refuse never has a record. */
  async release(sandboxId: string): Promise<void> {
    if (!SAFE_SANDBOX_ID.test(sandboxId)) return;
    const file = this.inUsePath(sandboxId);
    await this.locked(async () => {
      await fs.rm(file, { force: true });
    });
  }

  private inUsePath(sandboxId: string): string {
    if (!SAFE_SANDBOX_ID.test(sandboxId)) {
      throw new DsecError('DSEC_USAGE', {
        message: `${this.name}: sandbox id ${JSON.stringify(sandboxId)} is not valid ([a-z0-9-], at most 63 characters)`,
      });
    }
    return join(this.inUseDir, `${sandboxId}.json`);
  }

  private async inUseRecords(): Promise<InUseRecord[]> {
    const records: InUseRecord[] = [];
    for (const name of await fs.readdir(this.inUseDir)) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      try {
        records.push(JSON.parse(await fs.readFile(join(this.inUseDir, name), 'utf8')) as InUseRecord);
      } catch (error) {
        if (!isErrno(error, 'ENOENT')) this.log.warn(`${this.name}: skipping in-use record ${name}: ${(error as Error).message}`);
      }
    }
    return records;
  }

  /**
   * Remove trees no ref and no sandbox uses: the one `unpublished` just left,
   * and orphans a crash left between a rename and its ref (old enough that no
   * publish can still be on its way). Nothing is collected if a ref file
   * cannot be read: it might be the one that uses a tree.
   */
  private async collectTrees(users: readonly InUseRecord[], unpublished: string): Promise<void> {
    const used = new Set(users.flatMap((inUse) => inUse.layers.map((layer) => layer.digest)));
    for (const name of await fs.readdir(this.refsDir)) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      try {
        used.add((JSON.parse(await fs.readFile(join(this.refsDir, name), 'utf8')) as LayerRecord).digest);
      } catch (error) {
        this.log.warn(`${this.name}: not collecting unused layer trees: ${name} is unreadable (${(error as Error).message})`);
        return;
      }
    }
    const unpublishedHex = digestHex(unpublished);
    for (const hex of await fs.readdir(this.layersDir)) {
      if (!/^[0-9a-f]{64}$/.test(hex) || used.has(`sha256:${hex}`)) continue;
      if (hex !== unpublishedHex) {
        const stat = await fs.stat(join(this.layersDir, hex)).catch(() => undefined);
        if (!stat || Date.now() - stat.ctimeMs < ORPHAN_GRACE_MS) continue;
      }
      await this.dropTree(`sha256:${hex}`);
    }
  }

  /** Take a tree out of layers/ atomically (rename into staging), then delete it. */
  private async dropTree(digest: string): Promise<void> {
    const trash = join(this.stagingDir, `${process.pid}-trash-${randomBytes(8).toString('hex')}`);
    try {
      await fs.rename(this.treePath(digest), trash);
    } catch (error) {
      if (isErrno(error, 'ENOENT')) return;
      throw error;
    }
    await fsyncDir(this.layersDir);
    await removeTree(trash);
  }
}
