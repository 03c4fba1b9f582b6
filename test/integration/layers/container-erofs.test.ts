/**
 * The real thing: a node agent (dist/, `npm run build` first) with
 * storage-local on EROFS and the container backend, running sandboxes whose
 * lower dirs are mounted EROFS images, whiteouts honoured by the overlay.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LayerRecord, LayerRef, SandboxSpec } from '../../../core/live.js';
import { makeWhiteouts } from '../../../core/layers/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { leftovers } from '../../helpers/mounts.js';

let agent: TestAgent;
let tool: LayerRecord;

beforeAll(async () => {
  agent = await TestAgent.start({ storage: 'storage-local' });
  const source = path.join(agent.tmp, 'tool-source');
  await fs.mkdir(path.join(source, 'opt/tool'), { recursive: true });
  await fs.mkdir(path.join(source, 'etc'));
  await fs.writeFile(path.join(source, 'opt/tool/hello.sh'), 'echo hello from an erofs layer\n');
  // Hides the base layer's /etc/group.
  await makeWhiteouts([path.join(source, 'etc/group')]);
  tool = await agent.client.publishLayer({ ref: 'tool@1.0.0', name: 'tool', version: '1.0.0', kind: 'toolkit', source: { type: 'dir', path: source } });
});

afterAll(async () => {
  await agent?.dispose();
});

const refOf = (layer: LayerRef): LayerRef => ({ name: layer.name, version: layer.version, digest: layer.digest });

const spec = (id: string, layers: LayerRef[]): SandboxSpec => agent.spec(id, { layers, resources: { cpu: 1, memoryMiB: 128, pids: 64 } });

describe('sandboxes on EROFS layers', () => {
  it('publishes layers as EROFS images and says so in the layer list and the node info', async () => {
    expect((await agent.client.listLayers()).map((layer) => [layer.name, layer.format])).toEqual([
      ['busybox', 'erofs'],
      ['tool', 'erofs'],
    ]);
    expect((await agent.client.node()).storage).toEqual({ plugin: 'storage-local', format: 'erofs' });
    expect(agent.logText()).toContain('storage-local: format erofs');
  });

  it('runs a sandbox on mounted images, reads a file from a layer, and honours a whiteout', async () => {
    await agent.client.createSandbox(spec('on-erofs', [refOf(agent.baseLayer), refOf(tool)]));
    const run = await agent.client.exec('on-erofs', { cmd: ['sh', '/opt/tool/hello.sh'] });
    expect(run).toMatchObject({ exitCode: 0, stdout: 'hello from an erofs layer\n' });
    const group = await agent.client.exec('on-erofs', { cmd: ['cat', '/etc/group'] });
    expect(group.exitCode).not.toBe(0);
    expect((await agent.client.exec('on-erofs', { cmd: ['cat', '/etc/passwd'] })).stdout).toContain('root:x:0:0');
    const stats = await agent.client.storageStats();
    expect(stats).toMatchObject({ plugin: 'storage-local', format: 'erofs' });
    expect(stats.mounts.map((mount) => [mount.digest, mount.users])).toEqual(
      expect.arrayContaining([
        [agent.baseLayer.digest, 1],
        [tool.digest, 1],
      ]),
    );
    expect(stats.mounts.every((mount) => (mount.bytesRead ?? 0) > 0)).toBe(true);
  });

  it('runs a second sandbox on the same mounts, and a squashed one on one merged image', async () => {
    const squash = await agent.client.squashLayers([refOf(agent.baseLayer), refOf(tool)]);
    expect(squash).toMatchObject({ bottom: true, format: 'erofs' });
    await agent.client.createSandbox(spec('squashed', [refOf(agent.baseLayer), refOf(tool)]));
    expect((await agent.client.exec('squashed', { cmd: ['sh', '/opt/tool/hello.sh'] })).stdout).toBe('hello from an erofs layer\n');
    expect((await agent.client.exec('squashed', { cmd: ['cat', '/etc/group'] })).exitCode).not.toBe(0);
    const users = Object.fromEntries((await agent.client.storageStats()).mounts.map((mount) => [mount.digest, mount.users]));
    expect(users[squash.digest]).toBe(1);
    expect(users[tool.digest]).toBe(1);
  });

  it('unmounts every image and frees every loop device once the sandboxes are destroyed', async () => {
    for (const sandbox of await agent.client.listSandboxes()) await agent.client.destroySandbox(sandbox.id);
    expect((await agent.client.storageStats()).mounts).toEqual([]);
    expect(leftovers(agent.tmp)).toEqual({ mounts: [], loops: [] });
  });
});
