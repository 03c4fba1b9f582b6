/**
 * The local provider and the SDK, as the engine and a harness use them: the
 * agent (with its built-in plugins) starts on first use, refresh reports the
 * live view, and an unreachable agent is an error, never an empty view.
 */
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentStatus, stopAgent } from '../../../core/agent/daemon.js';
import { connect } from '../../../core/sdk/index.js';
import type { LayerRecord } from '../../../core/live.js';
import { createLocalProvider, type LocalProvider } from '../../../providers/local/index.js';
import { sweep } from '../../helpers/agent-fixture.js';

let project: string;
let stateDir: string;
let provider: LocalProvider;
let base: LayerRecord;

beforeAll(() => {
  project = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-provider-')));
  stateDir = path.join(project, '.dsec');
  provider = createLocalProvider({ stateDir, baseDir: project });
});

afterAll(async () => {
  try {
    if ((await agentStatus(provider.root)).running) {
      for (const sandbox of await provider.listSandboxes()) await provider.destroySandbox(sandbox.id);
    }
    await provider.close();
    await stopAgent(provider.root);
  } finally {
    await sweep(provider.root, project);
    rmSync(project, { recursive: true, force: true });
  }
});

describe('local provider', () => {
  it('starts the agent with the built-in plugins on first use', async () => {
    expect((await agentStatus(provider.root)).running).toBe(false);
    const [node] = await provider.nodes();
    expect(node.backends).toEqual(expect.arrayContaining(['container', 'fncall']));
    expect(provider.root).toBe(path.join(stateDir, 'agent'));
    expect((await agentStatus(provider.root)).running).toBe(true);
  });

  it('publishes a layer, creates a sandbox and reports both in refresh', async () => {
    base = await provider.publishLayer({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } });
    expect(await provider.digestLayer({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } })).toBe(base.digest);
    const created = await provider.createSandbox({
      id: 'prov-1',
      backend: 'container',
      layers: [base],
      env: { GREETING: 'hello' },
      workdir: '/tmp',
      user: 'root',
      resources: { cpu: 0.5, memoryMiB: 64, pids: 64 },
      network: 'none',
      qos: 'latency-sensitive',
      labels: { 'dsec.io/fleet': 'web' },
    });
    expect(created).toMatchObject({ id: 'prov-1', status: 'running', handle: expect.stringMatching(/^dsec-[0-9a-f]{8}-prov-1$/) });
    const view = await provider.refresh();
    expect(view.nodes).toHaveLength(1);
    expect(view.layers.map((layer) => `${layer.name}@${layer.version}`)).toEqual(['busybox@1.0.0']);
    expect(view.sandboxes.map((sandbox) => sandbox.id)).toEqual(['prov-1']);
    const result = await provider.exec('prov-1', { cmd: ['/bin/sh', '-c', 'echo $GREETING from $(pwd)'] });
    expect(result.stdout).toBe('hello from /tmp\n');
  });

  it('serves the SDK on the same agent', async () => {
    const dsec = await connect({ dir: project });
    try {
      expect((await dsec.list({ 'dsec.io/fleet': 'web' })).map((sandbox) => sandbox.id)).toEqual(['prov-1']);
      const box = await dsec.create({ id: 'sdk-1', backend: 'container', layers: [base], labels: { via: 'sdk' } });
      expect(box).toMatchObject({ status: 'running', resources: { cpu: 1, memoryMiB: 256, pids: 256 } });
      expect((await dsec.exec('sdk-1', 'echo $((6 * 7))')).stdout).toBe('42\n');
      expect((await dsec.exec('sdk-1', ['printf', '%s', 'argv'])).stdout).toBe('argv');
      await dsec.destroy('sdk-1');
      await expect(dsec.get('sdk-1')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
    } finally {
      await dsec.close();
    }
  });

  it('throws on refresh when the agent is gone and may not be started, instead of reporting nothing', async () => {
    await stopAgent(provider.root);
    const offline = createLocalProvider({ stateDir, baseDir: project, autoStart: false });
    await expect(offline.refresh()).rejects.toMatchObject({ code: 'DSEC_AGENT_UNREACHABLE' });
    await expect(connect({ dir: project, autoStart: false })).rejects.toMatchObject({ code: 'DSEC_AGENT_UNREACHABLE' });
    await offline.close();
  });

  it('starts the agent again on the next use, which re-adopts the sandbox', async () => {
    const view = await provider.refresh();
    expect(view.sandboxes).toEqual([expect.objectContaining({ id: 'prov-1', status: 'running' })]);
    expect((await provider.exec('prov-1', { cmd: ['echo', 'again'] })).stdout).toBe('again\n');
  });
});
