/**
 * The agent's API: who may reach it, how it refuses bad requests (and keeps
 * serving), and how it reports refused and failed creates.
 */
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient } from '../../../core/agent/client.js';
import { startAgentDaemon, stopAgent } from '../../../core/agent/daemon.js';
import { mountPointsUnder, REPO, runcContainers, TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;

/** A raw request on the socket, for what the typed client would never send. */
function raw(method: string, urlPath: string, body?: string | Buffer): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: agent.socket, method, path: urlPath, headers: { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

beforeAll(async () => {
  agent = await TestAgent.start({ plugins: [{ name: path.join(REPO, 'test/helpers/refuse-plugin.mjs'), options: {} }] });
});

afterAll(async () => {
  await agent?.dispose();
});

describe('agent API', () => {
  it('listens on a Unix socket only root can use, in a private folder', () => {
    expect(statSync(agent.socket).isSocket()).toBe(true);
    expect(statSync(agent.socket).mode & 0o777).toBe(0o600);
    expect(statSync(agent.root).mode & 0o777).toBe(0o700);
  });

  it('answers malformed requests with 400 and a clear message, and keeps serving', async () => {
    const bad = await raw('POST', '/v1/sandboxes', '{"spec": ');
    expect(bad.status).toBe(400);
    expect(bad.json.error.code).toBe('DSEC_AGENT_REQUEST');
    expect(bad.json.error.message).toMatch(/not valid JSON/);
    const notObject = await raw('POST', '/v1/sandboxes', '[1,2]');
    expect(notObject.status).toBe(400);
    const badSpec = await raw('POST', '/v1/sandboxes', JSON.stringify({ spec: { id: 'Bad_Id', backend: 'container', layers: [] } }));
    expect(badSpec).toMatchObject({ status: 400, json: { error: { code: 'DSEC_AGENT_REQUEST' } } });
    expect(badSpec.json.error.message).toMatch(/sandbox id "Bad_Id" must match/);
    const incomplete = await raw('POST', '/v1/sandboxes', JSON.stringify({ spec: { id: 'ok-id', backend: 'container', layers: 'x', resources: { cpu: -1 } } }));
    expect(incomplete.json.error.message).toMatch(/layers must be an array.*resources.cpu must be a number > 0/);
    const badExec = await raw('POST', '/v1/sandboxes/nope/exec', JSON.stringify({ cmd: [] }));
    expect(badExec.json.error.message).toMatch(/cmd must be a non-empty array/);
    expect((await raw('GET', '/v1/nothing-here')).status).toBe(404);
    expect((await raw('PUT', '/v1/sandboxes')).status).toBe(405);
    expect((await raw('GET', '/v1/sandboxes/%E0%A4%A')).status).toBe(400);
    await expect(agent.client.health()).resolves.toMatchObject({ ok: true });
  });

  it('refuses request bodies over 8 MiB with 413', async () => {
    const huge = await raw('POST', '/v1/sandboxes', Buffer.alloc(9 * 1024 * 1024, 0x20)).catch((error: Error) => ({ status: -1, json: error.message }));
    // The agent answers 413 and hangs up; depending on timing the client sees the answer or the reset.
    expect([413, -1]).toContain(huge.status);
    await expect(agent.client.health()).resolves.toMatchObject({ ok: true });
  });

  it('names the known backends when a spec asks for an unknown one', async () => {
    const error = await agent.client.createSandbox(agent.spec('unknown-backend', { backend: 'teleporter' })).catch((e) => e);
    expect(error).toMatchObject({ code: 'DSEC_BACKEND_UNKNOWN', message: 'no plugin provides backend teleporter (have: container)' });
    await expect(agent.client.getSandbox('unknown-backend')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
  });

  it('reports which plugin refused a sandbox at admission, and leaves nothing of it', async () => {
    const error = await agent.client.createSandbox(agent.spec('refused', { labels: { refuse: 'node is full' } })).catch((e) => e);
    expect(error).toMatchObject({ code: 'DSEC_ADMISSION_REFUSED', message: 'sandbox refused was refused by test-refuse: node is full' });
    expect(runcContainers()).not.toContain(agent.containerId('refused'));
    const listed = await agent.client.getSandbox('refused');
    expect(listed).toMatchObject({ status: 'failed', error: expect.stringContaining('node is full') });
    await agent.client.destroySandbox('refused');
  });

  it('keeps a failed create as failed with its error, cleaned up, until it is destroyed or created again', async () => {
    // A layer may not hold /.dsec, where the backend binds the host's busybox: provision fails.
    const squatter = path.join(agent.tmp, 'squatter');
    mkdirSync(squatter, { recursive: true });
    writeFileSync(path.join(squatter, '.dsec'), 'not a directory\n');
    const bad = await agent.client.publishLayer({ ref: 'squatter@1.0.0', name: 'squatter', version: '1.0.0', kind: 'toolkit', source: { type: 'dir', path: squatter } });
    const error = await agent.client.createSandbox(agent.spec('broken', { layers: [agent.baseLayer, bad] })).catch((e) => e);
    expect(error).toMatchObject({ code: 'DSEC_BACKEND_FAILED' });
    expect(error.message).toMatch(/failed to provision sandbox broken: the layers hold \/\.dsec, which is reserved for dsec/);
    const failed = await agent.client.getSandbox('broken');
    expect(failed).toMatchObject({ status: 'failed', error: expect.stringContaining('/.dsec') });
    expect(mountPointsUnder(path.join(agent.root, 'sandboxes/broken'))).toEqual([]);
    expect(runcContainers()).not.toContain(agent.containerId('broken'));

    const fixed = await agent.client.createSandbox(agent.spec('broken'));
    expect(fixed.status).toBe('running');
    await agent.client.destroySandbox('broken');
    await agent.client.unpublishLayer('squatter', '1.0.0');
  });

  it('refuses to unpublish a layer a sandbox uses', async () => {
    await agent.client.createSandbox(agent.spec('layer-user'));
    const error = await agent.client.unpublishLayer(agent.baseLayer.name, agent.baseLayer.version).catch((e) => e);
    expect(error).toMatchObject({ code: 'DSEC_LAYER_IN_USE', message: `layer ${agent.baseLayer.name}@${agent.baseLayer.version} is used by sandbox layer-user` });
    await agent.client.destroySandbox('layer-user');
  });

  it('answers exec and update on a missing sandbox with DSEC_SANDBOX_NOT_FOUND', async () => {
    await expect(agent.client.exec('ghost', { cmd: ['true'] })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND', message: 'no sandbox ghost' });
    await expect(agent.client.updateSandbox('ghost', { memoryMiB: 100 })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
    expect(await agent.client.destroySandbox('ghost')).toEqual({ id: 'ghost', existed: false });
  });

  it('filters sandboxes by labels', async () => {
    await agent.client.createSandbox(agent.spec('lab-1', { labels: { fleet: 'a', tier: 'x' } }));
    await agent.client.createSandbox(agent.spec('lab-2', { labels: { fleet: 'b', tier: 'x' } }));
    try {
      expect((await agent.client.listSandboxes({ tier: 'x' })).map((s) => s.id)).toEqual(['lab-1', 'lab-2']);
      expect((await agent.client.listSandboxes({ fleet: 'b', tier: 'x' })).map((s) => s.id)).toEqual(['lab-2']);
      expect(await agent.client.listSandboxes({ fleet: 'c' })).toEqual([]);
    } finally {
      await agent.client.destroySandbox('lab-1');
      await agent.client.destroySandbox('lab-2');
    }
  });

  it('creates a sandbox once when the same id is asked for concurrently', async () => {
    const results = await Promise.all([1, 2, 3, 4].map(() => agent.client.createSandbox(agent.spec('same-id'))));
    expect(new Set(results.map((result) => result.createdAt)).size).toBe(1);
    expect(runcContainers().filter((id) => id === agent.containerId('same-id'))).toHaveLength(1);
    await agent.client.destroySandbox('same-id');
  });

  it('serves on a socket whose path is longer than a Unix socket address allows', async () => {
    const deepRoot = path.join(agent.tmp, 'd'.repeat(60), 'e'.repeat(60), 'agent');
    expect(Buffer.byteLength(path.join(deepRoot, 'agent.sock'))).toBeGreaterThan(108);
    await startAgentDaemon({ root: deepRoot, builtins: false, plugins: [{ name: 'backend-container', options: {} }] });
    const client = new AgentClient(path.join(deepRoot, 'agent.sock'));
    try {
      expect((await client.node()).backends).toEqual(['container']);
      expect(statSync(path.join(deepRoot, 'agent.sock')).mode & 0o777).toBe(0o600);
    } finally {
      client.close();
      await stopAgent(deepRoot);
    }
  });

  it('reports an agent that cannot start with the tail of its log', async () => {
    const root = path.join(agent.tmp, 'broken-agent');
    const error = await startAgentDaemon({ root, builtins: false, plugins: [{ name: './no-such-plugin.mjs', options: {} }], baseDir: agent.tmp }).catch((e) => e);
    expect(error).toMatchObject({ code: 'DSEC_AGENT_START' });
    expect(error.message).toMatch(/it exited with code 1; last lines of .*agent\.log:/);
    expect(error.message).toContain('could not load plugin ./no-such-plugin.mjs: no file');
  });

  it('does not start a second agent on a root that already has one', async () => {
    const before = await agent.pid();
    const again = await startAgentDaemon({ root: agent.root, builtins: false });
    expect(again.pid).toBe(before);
  });

  it('describes the node', async () => {
    const node = await agent.client.node();
    expect(node).toMatchObject({ backends: ['container'], agentVersion: expect.any(String), pid: await agent.pid() });
    expect(node.capacity.cpu).toBeGreaterThan(0);
    expect(node.capacity.memoryMiB).toBeGreaterThan(0);
  });
});
