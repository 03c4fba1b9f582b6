/**
 * Layer builds and snapshots through a real node agent (dist/, `npm run
 * build` first): storage-local and the container backend, runc sandboxes.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPendingDigest, type LayerRecord, type LayerRef, type SandboxSpec } from '../../../core/live.js';
import type { LayerModel } from '../../../core/model.js';
import { REPO, runcContainers, TestAgent } from '../../helpers/agent-fixture.js';
import { leftovers } from '../../helpers/mounts.js';

let agent: TestAgent;

beforeAll(async () => {
  agent = await TestAgent.start({ storage: 'storage-local', plugins: [{ name: path.join(REPO, 'test/helpers/inert-backend-plugin.mjs'), options: {} }] });
});

afterAll(async () => {
  const tmp = agent?.tmp;
  await agent?.dispose();
  if (tmp) expect(leftovers(tmp)).toEqual({ mounts: [], loops: [] });
});

const refOf = (layer: LayerRef): LayerRef => ({ name: layer.name, version: layer.version, digest: layer.digest });

const spec = (id: string, layers: LayerRef[], backend = 'container'): SandboxSpec =>
  agent.spec(id, { backend, layers, resources: { cpu: 1, memoryMiB: 128, pids: 64 } });

function buildLayer(ref: string, steps: string[], options: { env?: Record<string, string>; workdir?: string } = {}): LayerModel {
  const [name, version] = ref.split('@');
  return {
    ref,
    name,
    version,
    kind: 'toolkit',
    source: {
      type: 'build',
      from: ['busybox@1.0.0'],
      steps,
      env: options.env ?? {},
      workdir: options.workdir ?? '/',
      parents: [refOf(agent.baseLayer)],
    },
  };
}

const sh = async (id: string, command: string) => agent.client.exec(id, { cmd: ['/bin/sh', '-c', command] });
const buildsStarted = (): number => agent.logText().split('\n').filter((line) => line.includes(': building in sandbox build-')).length;
const containersOfAgent = (): string[] => runcContainers().filter((name) => name.startsWith(agent.containerId('')));

describe('a build layer', () => {
  let built: LayerRecord;
  const tools = () =>
    buildLayer('tools@1.0.0', ['mkdir -p /opt/tools && echo "hello from $GREETING" > /opt/tools/hi', 'rm /etc/group'], {
      env: { GREETING: 'a build' },
    });

  it('has a pending digest before it is built', async () => {
    expect(isPendingDigest(await agent.client.digestLayer(tools()))).toBe(true);
  });

  it('runs its steps in a throwaway sandbox and publishes the writable layer, whiteouts included', async () => {
    built = await agent.client.publishLayer(tools());
    expect(built).toMatchObject({ name: 'tools', version: '1.0.0', kind: 'toolkit' });
    const listing = await agent.client.layerListing('tools', '1.0.0');
    const byPath = new Map(listing.entries.map((entry) => [entry.path, entry.type]));
    expect(byPath.get('opt/tools/hi')).toBe('file');
    expect(byPath.get('etc/group')).toBe('whiteout');
    // Only what the steps wrote: the base's files are not copied into the layer.
    expect(byPath.has('bin/busybox')).toBe(false);
    // The throwaway sandbox is gone.
    expect(await agent.client.listSandboxes()).toEqual([]);
    expect(containersOfAgent()).toEqual([]);
  });

  it('hides the base file in a sandbox stacked on both, and shows what the steps wrote', async () => {
    await agent.client.createSandbox(spec('on-build', [refOf(agent.baseLayer), refOf(built)]));
    try {
      expect((await sh('on-build', 'cat /opt/tools/hi')).stdout).toBe('hello from a build\n');
      expect((await sh('on-build', 'test -e /etc/group')).exitCode).toBe(1);
      expect((await sh('on-build', 'test -e /etc/passwd')).exitCode).toBe(0);
    } finally {
      await agent.client.destroySandbox('on-build');
    }
  });

  it('does nothing when built again unchanged: same record, no sandbox, and its digest is known from the cache', async () => {
    const before = buildsStarted();
    const again = await agent.client.publishLayer(tools());
    expect(again).toEqual(built);
    expect(buildsStarted()).toBe(before);
    expect(await agent.client.digestLayer(tools())).toBe(built.digest);
  });

  it('refuses to build other steps into the published version', async () => {
    const changed = buildLayer('tools@1.0.0', ['echo other > /other']);
    expect(isPendingDigest(await agent.client.digestLayer(changed))).toBe(true);
    const error = await agent.client.publishLayer(changed).catch((thrown: Error & { code?: string }) => thrown);
    expect((error as { code?: string }).code).toBe('DSEC_LAYER_IMMUTABLE');
  });

  it('fails on a failing step with its exit code and stderr, publishes nothing and leaves no sandbox', async () => {
    const failing = buildLayer('broken@1.0.0', ['echo fine', 'echo "no such package: frobnicate" >&2; exit 3', 'echo never > /never']);
    const error = (await agent.client.publishLayer(failing).catch((thrown: unknown) => thrown)) as Error & { code?: string; params?: Record<string, unknown> };
    expect(error.code).toBe('DSEC_LAYER_BUILD');
    expect(error.message).toBe(
      'layer broken@1.0.0: build step 2/3 failed (exit code 3): echo "no such package: frobnicate" >&2; exit 3\nno such package: frobnicate',
    );
    expect(error.params?.exitCode).toBe(3);
    expect((await agent.client.listLayers()).some((layer) => layer.name === 'broken')).toBe(false);
    expect(await agent.client.listSandboxes()).toEqual([]);
    expect(containersOfAgent()).toEqual([]);
  });

  it('runs its steps in its workdir, which it creates', async () => {
    const record = await agent.client.publishLayer(buildLayer('workdir@1.0.0', ['pwd > where'], { workdir: '/src/app' }));
    const listing = await agent.client.layerListing(record.name, record.version);
    expect(listing.entries.map((entry) => entry.path)).toContain('src/app/where');
  });
});

describe('a snapshot', () => {
  it('publishes what a sandbox wrote, without the excluded secret and residue, and leaves the sandbox running', async () => {
    await agent.client.createSandbox(spec('snap-source', [refOf(agent.baseLayer)]));
    try {
      await sh('snap-source', 'mkdir -p /work /root && echo solved > /work/result.txt && echo hunter2 > /root/.token && mkdir -p /tmp/cache && echo x > /tmp/cache/blob && rm /etc/group');
      const record = await agent.client.snapshotSandbox('snap-source', { as: 'solved@1.0.0', exclude: ['/root/.token', '/tmp/cache'] });
      expect(record).toMatchObject({ name: 'solved', version: '1.0.0', kind: 'workspace' });
      const paths = new Map((await agent.client.layerListing('solved', '1.0.0')).entries.map((entry) => [entry.path, entry.type]));
      expect(paths.get('work/result.txt')).toBe('file');
      expect(paths.get('etc/group')).toBe('whiteout');
      expect(paths.has('root/.token')).toBe(false);
      expect(paths.has('tmp/cache')).toBe(false);
      // Thawed after the copy.
      expect((await sh('snap-source', 'cat /work/result.txt')).stdout).toBe('solved\n');
      expect((await agent.client.getSandbox('snap-source')).status).toBe('running');

      await agent.client.createSandbox(spec('from-snap', [refOf(agent.baseLayer), refOf(record)]));
      expect((await sh('from-snap', 'cat /work/result.txt')).stdout).toBe('solved\n');
      expect((await sh('from-snap', 'test -e /root/.token')).exitCode).toBe(1);
      expect((await sh('from-snap', 'test -e /etc/group')).exitCode).toBe(1);
    } finally {
      await agent.client.destroySandbox('from-snap');
      await agent.client.destroySandbox('snap-source');
    }
  });

  it('refuses a version already published with other content, and a bad request with every problem', async () => {
    await agent.client.createSandbox(spec('snap-again', [refOf(agent.baseLayer)]));
    try {
      await sh('snap-again', 'echo different > /different');
      const immutable = (await agent.client.snapshotSandbox('snap-again', { as: 'solved@1.0.0' }).catch((thrown: unknown) => thrown)) as { code?: string };
      expect(immutable.code).toBe('DSEC_LAYER_IMMUTABLE');
      const bad = (await agent.client
        .snapshotSandbox('snap-again', { as: 'Solved', exclude: ['relative', '/a/../b'] })
        .catch((thrown: unknown) => thrown)) as Error & { code?: string };
      expect(bad.code).toBe('DSEC_AGENT_REQUEST');
      expect(bad.message).toContain('as must be name@version');
      expect(bad.message).toContain('exclude path "relative" must be an absolute path');
      expect(bad.message).toContain('exclude path "/a/../b"');
    } finally {
      await agent.client.destroySandbox('snap-again');
    }
  });

  it('is refused with DSEC_BACKEND_UNSUPPORTED on a backend without the snapshot hook', async () => {
    await agent.client.createSandbox(spec('inert-one', [refOf(agent.baseLayer)], 'inert'));
    try {
      const error = (await agent.client.snapshotSandbox('inert-one', { as: 'inert@1.0.0' }).catch((thrown: unknown) => thrown)) as Error & { code?: string };
      expect(error.code).toBe('DSEC_BACKEND_UNSUPPORTED');
      expect(error.message).toBe('backend inert does not support snapshot');
    } finally {
      await agent.client.destroySandbox('inert-one');
    }
  });
});

describe('a published layer', () => {
  it('answers its digest from the store, and is a clear error when it is not there', async () => {
    const published = (ref: string): LayerModel => {
      const [name, version] = ref.split('@');
      return { ref, name, version, kind: 'workspace', source: { type: 'published' } };
    };
    const solved = (await agent.client.listLayers()).find((layer) => layer.name === 'solved')!;
    expect(await agent.client.digestLayer(published('solved@1.0.0'))).toBe(solved.digest);
    const error = (await agent.client.digestLayer(published('missing@1.0.0')).catch((thrown: unknown) => thrown)) as Error & { code?: string };
    expect(error.code).toBe('DSEC_LAYER_NOT_PUBLISHED');
    expect(error.message).toContain('layer missing@1.0.0 is declared as published but is not in the store');
  });
});

describe('layer garbage collection', () => {
  it('removes a layer nobody uses, keeps the config\'s and the ones a sandbox uses', async () => {
    await agent.client.createSandbox(spec('holds-tools', [refOf(agent.baseLayer), refOf((await agent.client.listLayers()).find((layer) => layer.name === 'tools')!)]));
    try {
      const dry = await agent.client.gcLayers({ keep: ['busybox@1.0.0'], dryRun: true });
      expect(dry.removed.map((layer) => layer.name).sort()).toEqual(['solved', 'workdir']);
      expect((await agent.client.listLayers()).length).toBe(4);
      const result = await agent.client.gcLayers({ keep: ['busybox@1.0.0'] });
      expect(result.removed.map((layer) => layer.name).sort()).toEqual(['solved', 'workdir']);
      expect(result.kept).toEqual([
        { ref: 'busybox@1.0.0', reason: 'used by 1 sandbox(es)' },
        { ref: 'tools@1.0.0', reason: 'used by 1 sandbox(es)' },
      ]);
      expect((await agent.client.listLayers()).map((layer) => layer.name).sort()).toEqual(['busybox', 'tools']);
    } finally {
      await agent.client.destroySandbox('holds-tools');
    }
  });
});

describe('an agent restarted after a crash', () => {
  it('destroys an interrupted build sandbox and drops leftover snapshot copies and listing readers', async () => {
    await agent.client.createSandbox({ ...spec('build-interrupted', [refOf(agent.baseLayer)]), labels: { 'dsec.io/build': 'tools@9.9.9' } });
    await agent.client.createSandbox(spec('survivor', [refOf(agent.baseLayer)]));
    const leftoverCopy = path.join(agent.root, 'snapshots', 'survivor-dead');
    const leftoverReader = path.join(agent.root, 'inspect', 'inspect-0123456789ab');
    mkdirSync(leftoverCopy, { recursive: true });
    writeFileSync(path.join(leftoverCopy, 'half-copied'), 'x');
    mkdirSync(leftoverReader, { recursive: true });
    try {
      await agent.kill();
      await agent.startDaemon();
      expect((await agent.client.listSandboxes()).map((sandbox) => sandbox.id)).toEqual(['survivor']);
      expect(containersOfAgent()).toEqual([agent.containerId('survivor')]);
      expect(existsSync(leftoverCopy)).toBe(false);
      expect(existsSync(leftoverReader)).toBe(false);
    } finally {
      await agent.client.destroySandbox('survivor');
      await agent.client.destroySandbox('build-interrupted');
    }
  });
});
