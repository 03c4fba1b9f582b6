/**
 * The conformance suite every storage plugin runs (Terraform's
 * statemgr/testing.go, for layer stores): call `describeStorageConformance`
 * from a test file with a factory of the plugin. It drives a real `Dsec`
 * with only that plugin applied, through the lifecycle hooks the node agent
 * calls, against a temporary node root; every test cleans up after itself.
 *
 * What a storage plugin promises:
 * - digestLayer answers the digest publishLayer will record;
 * - publishing is idempotent for the same content and refused
 *   (DSEC_LAYER_IMMUTABLE) for other content under the same name@version;
 * - listLayers reports what is published;
 * - resolveLayers sets `sandbox.lowerDirs` to existing trees holding the
 *   layers' files, bottom to top, and keeps only JSON in `sandbox.storage`;
 * - a layer a sandbox uses cannot be unpublished (DSEC_LAYER_IN_USE) until
 *   `destroy`, which is idempotent;
 * - a failed publish leaves nothing published, and no scratch files remain;
 * - once every sandbox is destroyed, no mount and no loop device of the
 *   plugin's is left (an image mounted for sandboxes is unmounted with its
 *   last user).
 */
import { promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Dsec } from '../../core/dsec.js';
import { nodeContext, sandboxContext, sandboxSpec } from '../helpers/contexts.js';
import { leftovers, sweepMounts } from '../helpers/mounts.js';
import type {
  DsecPlugin,
  ErrorCode,
  LayerModel,
  LayerRecord,
  NodeContext,
  SandboxContext,
} from '../../core/plugin-api.js';

export interface StorageConformanceOptions {
  /**
   * Folders the plugin keeps work in progress in; they must be empty (or
   * absent) once every operation has finished.
   * @default [`<node root>/<plugin name>/staging`]
   */
  readonly scratchDirs?: (nodeRoot: string, plugin: DsecPlugin) => string[];
  /**
   * Folders under which the plugin may mount things or attach files to loop
   * devices; nothing may be left there once every sandbox is destroyed.
   * @default [the node root]
   */
  readonly mountDirs?: (nodeRoot: string, plugin: DsecPlugin) => string[];
}

/** Resolves to the error a promise rejects with; fails the test if it resolves. */
async function rejectionOf(promise: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await promise;
  } catch (error) {
    return error as Error & { code?: string };
  }
  throw new Error('expected the operation to fail, but it succeeded');
}

async function expectCode(promise: Promise<unknown>, ...codes: ErrorCode[]): Promise<Error> {
  const error = await rejectionOf(promise);
  expect(codes, `unexpected error: ${error.message}`).toContain(error.code);
  return error;
}

async function writeTree(dir: string, files: Record<string, string>): Promise<string> {
  for (const [path, content] of Object.entries(files)) {
    await fs.mkdir(join(dir, path, '..'), { recursive: true });
    await fs.writeFile(join(dir, path), content);
  }
  return dir;
}

export function describeStorageConformance(
  name: string,
  makePlugin: () => DsecPlugin,
  options: StorageConformanceOptions = {},
): void {
  describe(`storage plugin conformance: ${name}`, () => {
    let root: string;
    let node: NodeContext;
    let plugin: DsecPlugin;
    let dsec: Dsec;
    let sandboxes = 0;

    beforeEach(async () => {
      root = await fs.mkdtemp(join(tmpdir(), 'dsec-storage-conformance-'));
      node = nodeContext('conformance-node', join(root, 'node'));
      await fs.mkdir(node.root);
      plugin = makePlugin();
      dsec = new Dsec().use(plugin);
    });

    afterEach(async () => {
      // A failed test may have left mounts: sweep them, or the folder cannot be removed.
      for (const dir of [root, ...(options.mountDirs?.(node.root, plugin) ?? [])]) sweepMounts(dir);
      await fs.rm(root, { recursive: true, force: true });
    });

    function expectNothingMounted(): void {
      for (const dir of options.mountDirs?.(node.root, plugin) ?? [node.root]) {
        expect(leftovers(dir), `left under ${dir}`).toEqual({ mounts: [], loops: [] });
      }
    }

    async function dirLayer(layerName: string, version: string, files: Record<string, string>): Promise<LayerModel> {
      const path = await writeTree(join(root, 'sources', `${layerName}-${version}-${Object.keys(files).length}-${Math.random()}`), files);
      return { ref: `${layerName}@${version}`, name: layerName, version, kind: 'base', source: { type: 'dir', path } };
    }

    const publish = (layer: LayerModel) => dsec.hooks.publishLayer.promise({ layer, node }) as Promise<LayerRecord>;
    const list = () => dsec.hooks.listLayers.promise(node) as Promise<LayerRecord[]>;
    const unpublish = (record: LayerRecord) => dsec.hooks.unpublishLayer.promise(node, record.name, record.version);

    async function sandboxUsing(...records: LayerRecord[]): Promise<SandboxContext> {
      const id = `conformance-${++sandboxes}`;
      const dir = join(root, 'sandboxes', id);
      await fs.mkdir(dir, { recursive: true });
      return sandboxContext(sandboxSpec(id, records), node, dir);
    }

    it('publishes a directory layer with the digest digestLayer announced', async () => {
      const layer = await dirLayer('app', '1.0.0', { 'etc/app.conf': 'a=1\n', 'bin/run': '#!/bin/sh\necho run\n' });
      const digest = await dsec.hooks.digestLayer.promise({ layer, node });
      expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
      const record = await publish(layer);
      expect(record).toMatchObject({ name: 'app', version: '1.0.0', kind: 'base', digest });
      expect(record.files).toBeGreaterThan(0);
      expect(record.sizeBytes).toBeGreaterThan(0);
    });

    it('treats publishing the same name@version with the same content again as a no-op', async () => {
      const first = await publish(await dirLayer('app', '1.0.0', { 'a.txt': 'same\n' }));
      const again = await publish(await dirLayer('app', '1.0.0', { 'a.txt': 'same\n' }));
      expect(again).toEqual(first);
      expect(await list()).toEqual([first]);
    });

    it('refuses to publish other content under a published name@version with DSEC_LAYER_IMMUTABLE', async () => {
      const first = await publish(await dirLayer('app', '1.0.0', { 'a.txt': 'one\n' }));
      const error = await expectCode(publish(await dirLayer('app', '1.0.0', { 'a.txt': 'two\n' })), 'DSEC_LAYER_IMMUTABLE');
      expect(error.message).toContain('app@1.0.0');
      expect(error.message).toContain(first.digest);
      expect(await list()).toEqual([first]);
    });

    it('lists every published layer', async () => {
      const base = await publish(await dirLayer('base', '1.0.0', { 'etc/os-release': 'ID=test\n' }));
      const tool = await publish(await dirLayer('tool', '2.1.0', { 'opt/tool': 'tool\n' }));
      const listed = await list();
      expect(listed).toHaveLength(2);
      expect(listed).toEqual(expect.arrayContaining([base, tool]));
    });

    it('resolves a sandbox into existing trees that hold the layer files, bottom to top', async () => {
      const base = await publish(await dirLayer('base', '1.0.0', { 'etc/os-release': 'ID=test\n', 'shared.txt': 'from base\n' }));
      const tool = await publish(await dirLayer('tool', '1.0.0', { 'opt/tool.sh': 'echo tool\n', 'shared.txt': 'from tool\n' }));
      const sandbox = await sandboxUsing(base, tool);
      await dsec.hooks.resolveLayers.promise(sandbox);
      expect(sandbox.lowerDirs).toHaveLength(2);
      const [bottom, top] = sandbox.lowerDirs;
      expect(await fs.readFile(join(bottom, 'etc/os-release'), 'utf8')).toBe('ID=test\n');
      expect(await fs.readFile(join(bottom, 'shared.txt'), 'utf8')).toBe('from base\n');
      expect(await fs.readFile(join(top, 'opt/tool.sh'), 'utf8')).toBe('echo tool\n');
      expect(await fs.readFile(join(top, 'shared.txt'), 'utf8')).toBe('from tool\n');
      // The agent persists the sandbox as JSON after every step.
      expect(JSON.parse(JSON.stringify(sandbox.storage))).toEqual(sandbox.storage);
      await dsec.hooks.destroy.promise(sandbox);
      expectNothingMounted();
    });

    it('shares the lower dirs of a layer between sandboxes, and keeps them until the last one is destroyed', async () => {
      const base = await publish(await dirLayer('base', '1.0.0', { 'etc/os-release': 'ID=shared\n' }));
      const first = await sandboxUsing(base);
      const second = await sandboxUsing(base);
      await dsec.hooks.resolveLayers.promise(first);
      await dsec.hooks.resolveLayers.promise(second);
      expect(second.lowerDirs).toEqual(first.lowerDirs);
      await dsec.hooks.destroy.promise(first);
      expect(await fs.readFile(join(second.lowerDirs[0], 'etc/os-release'), 'utf8')).toBe('ID=shared\n');
      await dsec.hooks.destroy.promise(second);
      expectNothingMounted();
    });

    it('refuses to resolve a layer that is not published with DSEC_LAYER_NOT_FOUND', async () => {
      const record = await publish(await dirLayer('base', '1.0.0', { 'a.txt': 'a\n' }));
      const sandbox = await sandboxUsing({ ...record, version: '9.9.9' });
      const error = await expectCode(dsec.hooks.resolveLayers.promise(sandbox), 'DSEC_LAYER_NOT_FOUND');
      expect(error.message).toContain('base@9.9.9');
      await dsec.hooks.destroy.promise(sandbox);
    });

    it('refuses to resolve a layer published with another digest than the sandbox asks for', async () => {
      const record = await publish(await dirLayer('base', '1.0.0', { 'a.txt': 'a\n' }));
      const sandbox = await sandboxUsing({ ...record, digest: `sha256:${'0'.repeat(64)}` });
      const error = await expectCode(
        dsec.hooks.resolveLayers.promise(sandbox),
        'DSEC_LAYER_DIGEST_MISMATCH',
        'DSEC_LAYER_NOT_FOUND',
      );
      expect(error.message).toContain('base@1.0.0');
      await dsec.hooks.destroy.promise(sandbox);
    });

    it('refuses to unpublish a layer a sandbox uses, and unpublishes it once the sandbox is destroyed', async () => {
      const record = await publish(await dirLayer('base', '1.0.0', { 'a.txt': 'a\n' }));
      const sandbox = await sandboxUsing(record);
      await dsec.hooks.resolveLayers.promise(sandbox);
      const error = await expectCode(unpublish(record), 'DSEC_LAYER_IN_USE');
      expect(error.message).toContain(sandbox.spec.id);
      expect(await list()).toEqual([record]);
      await dsec.hooks.destroy.promise(sandbox);
      expect(await unpublish(record)).toBe(true);
      expect(await list()).toEqual([]);
    });

    it('accepts destroy again, and destroy of a sandbox that never resolved', async () => {
      const record = await publish(await dirLayer('base', '1.0.0', { 'a.txt': 'a\n' }));
      const sandbox = await sandboxUsing(record);
      await dsec.hooks.resolveLayers.promise(sandbox);
      await dsec.hooks.destroy.promise(sandbox);
      await dsec.hooks.destroy.promise(sandbox);
      await dsec.hooks.destroy.promise(await sandboxUsing(record));
      expect(await unpublish(record)).toBe(true);
    });

    it('refuses to unpublish a layer that is not published with DSEC_LAYER_NOT_FOUND', async () => {
      await expectCode(dsec.hooks.unpublishLayer.promise(node, 'nothing', '1.0.0'), 'DSEC_LAYER_NOT_FOUND');
    });

    it('publishes nothing when the source cannot be read', async () => {
      const layer: LayerModel = {
        ref: 'ghost@1.0.0',
        name: 'ghost',
        version: '1.0.0',
        kind: 'base',
        source: { type: 'dir', path: join(root, 'does-not-exist') },
      };
      const error = await expectCode(publish(layer), 'DSEC_LAYER_SOURCE');
      expect(error.message).toContain('ghost@1.0.0');
      expect(await list()).toEqual([]);
    });

    it('leaves nothing in its scratch space once every operation has finished', async () => {
      const layer = await dirLayer('base', '1.0.0', { 'a.txt': 'a\n' });
      await dsec.hooks.digestLayer.promise({ layer, node });
      const record = await publish(layer);
      await publish(layer);
      await expectCode(publish(await dirLayer('base', '1.0.0', { 'a.txt': 'b\n' })), 'DSEC_LAYER_IMMUTABLE');
      const sandbox = await sandboxUsing(record);
      await dsec.hooks.resolveLayers.promise(sandbox);
      await dsec.hooks.destroy.promise(sandbox);
      await unpublish(record);
      const scratch = options.scratchDirs?.(node.root, plugin) ?? [join(node.root, plugin.name, 'staging')];
      for (const dir of scratch) {
        const left = await fs.readdir(dir).catch(() => []);
        expect(left, `left in ${dir}`).toEqual([]);
      }
      expectNothingMounted();
    });
  });
}
