/**
 * Sandbox lifetimes through the agent's API with the real container backend:
 * claims, TTL updates, and the reaper (short TTLs, a 200 ms round) reaping
 * idle and old sandboxes, replacing a fleet's with the same id and spec,
 * sparing a claimed one until its claim runs out, and catching up after the
 * agent was down past a TTL.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET, type SandboxInfo, type SandboxSpec } from '../../../core/live.js';
import { runcContainers, TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;

const spec = (id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec =>
  agent.spec(id, { resources: { cpu: 0.25, memoryMiB: 48, pids: 64 }, ...extra });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Poll `read` until `done` says yes, or fail after `timeoutMs`. */
async function waitFor<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await read();
  while (!done(value)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: last ${JSON.stringify(value)}`);
    await sleep(100);
    value = await read();
  }
  return value;
}

async function find(id: string): Promise<SandboxInfo | undefined> {
  return (await agent.client.listSandboxes()).find((info) => info.id === id);
}

beforeAll(async () => {
  agent = await TestAgent.start({ reapIntervalMs: 200 });
});

afterAll(async () => {
  await agent?.dispose();
});

describe('claims', () => {
  it('claims a sandbox for one holder, refuses another, refreshes for the same one, and releases it (persisted)', async () => {
    await agent.client.createSandbox(spec('lt-claim'));
    const claimed = await agent.client.claimSandbox('lt-claim', 'rollout-1', 600);
    expect(claimed.claim).toMatchObject({ holder: 'rollout-1' });
    expect(Date.parse(claimed.claim!.expiresAt!) - Date.now()).toBeGreaterThan(590_000);
    await expect(agent.client.claimSandbox('lt-claim', 'rollout-2')).rejects.toMatchObject({
      code: 'DSEC_SANDBOX_CLAIMED',
      message: 'sandbox lt-claim is claimed by rollout-1',
    });
    const again = await agent.client.claimSandbox('lt-claim', 'rollout-1');
    expect(again.claim).toEqual({ holder: 'rollout-1', claimedAt: claimed.claim!.claimedAt });

    await agent.stop();
    await agent.startDaemon();
    expect((await agent.client.getSandbox('lt-claim')).claim?.holder).toBe('rollout-1');

    const released = await agent.client.releaseSandbox('lt-claim');
    expect(released.claim).toBeUndefined();
    expect((await agent.client.releaseSandbox('lt-claim')).claim).toBeUndefined();
    expect((await agent.client.claimSandbox('lt-claim', 'rollout-2')).claim?.holder).toBe('rollout-2');
    await agent.client.destroySandbox('lt-claim');
  });

  it('refuses a bad claim with DSEC_AGENT_REQUEST and a claim of an unknown sandbox with DSEC_SANDBOX_NOT_FOUND', async () => {
    await agent.client.createSandbox(spec('lt-badclaim'));
    await expect(agent.client.claimSandbox('lt-badclaim', '')).rejects.toMatchObject({ code: 'DSEC_AGENT_REQUEST', message: expect.stringMatching(/holder must be a string of 1 to 128/) });
    await expect(agent.client.claimSandbox('lt-badclaim', 'x'.repeat(129))).rejects.toMatchObject({ code: 'DSEC_AGENT_REQUEST' });
    await expect(agent.client.claimSandbox('lt-badclaim', 'job', -1)).rejects.toMatchObject({ code: 'DSEC_AGENT_REQUEST', message: expect.stringMatching(/ttlSeconds must be a number of seconds > 0/) });
    await expect(agent.client.request('POST', '/v1/sandboxes/lt-badclaim/claim', { holder: 'job', until: 'never' })).rejects.toMatchObject({
      code: 'DSEC_AGENT_REQUEST',
      message: expect.stringMatching(/unknown field\(s\) until/),
    });
    await expect(agent.client.claimSandbox('lt-nobody', 'job')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
    await agent.client.destroySandbox('lt-badclaim');
  });
});

describe('updates', () => {
  it('records a new ttl and density settings in place, and refuses what a live sandbox cannot change', async () => {
    await agent.client.createSandbox(spec('lt-update', { ttl: { maxLifetimeSeconds: 3600 } }));
    expect((await agent.client.getSandbox('lt-update')).ttl).toEqual({ maxLifetimeSeconds: 3600 });
    const updated = await agent.client.updateSandbox('lt-update', { ttl: { idleStopSeconds: 1800 }, density: { memorySharing: false, reclaimOnPause: false } });
    expect(updated.ttl).toEqual({ idleStopSeconds: 1800 });
    expect(updated.resources).toEqual({ cpu: 0.25, memoryMiB: 48, pids: 64 });
    expect((await agent.client.updateSandbox('lt-update', { ttl: {} })).ttl).toBeUndefined();
    // The older form: bare resources.
    expect((await agent.client.updateSandbox('lt-update', { memoryMiB: 64 })).resources.memoryMiB).toBe(64);

    await expect(agent.client.updateSandbox('lt-update', { density: { memorySharing: true, reclaimOnPause: true } })).rejects.toMatchObject({
      code: 'DSEC_AGENT_REQUEST',
      message: expect.stringMatching(/density.memorySharing cannot change on a live sandbox .*it forces a replace/),
    });
    await expect(agent.client.updateSandbox('lt-update', { ttl: { idleStopSeconds: 0 } })).rejects.toMatchObject({
      code: 'DSEC_AGENT_REQUEST',
      message: expect.stringMatching(/ttl.idleStopSeconds must be a number of seconds > 0/),
    });
    await expect(agent.client.updateSandbox('lt-update', { ttl: { idle: 5 } as never })).rejects.toMatchObject({ message: expect.stringMatching(/ttl: unknown field\(s\) idle/) });
    await expect(agent.client.request('PATCH', '/v1/sandboxes/lt-update', { replicas: 3 })).rejects.toMatchObject({
      code: 'DSEC_AGENT_REQUEST',
      message: expect.stringMatching(/unknown field\(s\) replicas: an update takes resources, ttl, density and labels/),
    });
    await agent.client.destroySandbox('lt-update');
  });
});

describe('the reaper', () => {
  it('reaps an idle fleet sandbox and re-creates it with the same id and spec, and destroys an old one outside a fleet', async () => {
    const fleetLabels = { [LABEL_FLEET]: 'pool', app: 'reaper-test' };
    const first = await agent.client.createSandbox(spec('lt-idle', { labels: fleetLabels, ttl: { idleStopSeconds: 2 } }));
    await agent.client.createSandbox(spec('lt-old', { ttl: { maxLifetimeSeconds: 2 } }));
    await agent.client.exec('lt-idle', { cmd: ['sh', '-c', 'echo dirty > /tmp/mark'] });

    const replaced = await waitFor('lt-idle to be replaced', () => find('lt-idle'), (info) => info !== undefined && info.createdAt !== first.createdAt && info.status === 'running');
    expect(replaced).toMatchObject({ labels: fleetLabels, ttl: { idleStopSeconds: 2 }, resources: first.resources, layers: first.layers });
    expect(replaced!.lastActivityAt).toBeUndefined();
    // A fresh sandbox: what the previous one wrote is gone.
    expect((await agent.client.exec('lt-idle', { cmd: ['cat', '/tmp/mark'] })).exitCode).not.toBe(0);

    await waitFor('lt-old to be destroyed', () => find('lt-old'), (info) => info === undefined);
    expect(runcContainers()).not.toContain(agent.containerId('lt-old'));
    expect(agent.logText()).toMatch(/sandbox lt-idle: reaped because it was idle for 2 s .*; re-created for fleet pool/);
    expect(agent.logText()).toMatch(/sandbox lt-old: reaped because it reached its max lifetime of 2 s/);
    await agent.client.updateSandbox('lt-idle', { ttl: {} });
  });

  it('keeps an exec-active sandbox past its idle TTL, and a claimed one until its claim runs out', async () => {
    const labels = { [LABEL_FLEET]: 'claimed-pool' };
    const busy = await agent.client.createSandbox(spec('lt-busy', { ttl: { idleStopSeconds: 1 } }));
    const claimed = await agent.client.createSandbox(spec('lt-claimed', { labels, ttl: { maxLifetimeSeconds: 1 } }));
    await agent.client.claimSandbox('lt-claimed', 'rollout-7', 3);
    // An exec longer than the idle TTL, then activity right before the check.
    await agent.client.exec('lt-busy', { cmd: ['sleep', '1.5'] });
    expect((await agent.client.getSandbox('lt-busy')).createdAt).toBe(busy.createdAt);
    await sleep(600);
    // Past its max lifetime, but claimed: still the same sandbox.
    expect((await agent.client.getSandbox('lt-claimed')).createdAt).toBe(claimed.createdAt);

    const replaced = await waitFor('lt-claimed to be replaced after its claim expired', () => find('lt-claimed'), (info) => info !== undefined && info.createdAt !== claimed.createdAt);
    expect(replaced).toBeDefined();
    expect(replaced!.claim).toBeUndefined();
    expect(agent.logText()).toMatch(/sandbox lt-claimed: reaped because the claim of rollout-7 expired at/);
    await waitFor('lt-busy to be reaped once idle', () => find('lt-busy'), (info) => info === undefined);
    await agent.client.updateSandbox('lt-claimed', { ttl: {} });
  });

  it('reaps a paused sandbox past its TTL like a running one', async () => {
    await agent.client.createSandbox(spec('lt-paused', { ttl: { maxLifetimeSeconds: 1 } }));
    await agent.client.pauseSandbox('lt-paused');
    await waitFor('lt-paused to be reaped', () => find('lt-paused'), (info) => info === undefined);
  });

  it('reaps and replaces, after a restart, a sandbox whose TTL ran out while the agent was down', async () => {
    const labels = { [LABEL_FLEET]: 'restart-pool' };
    const before = await agent.client.createSandbox(spec('lt-restart', { labels, ttl: { maxLifetimeSeconds: 3 } }));
    await agent.stop();
    try {
      await sleep(3_500);
      // Stopped agent: nothing reaps; the sandbox keeps running.
      expect(runcContainers()).toContain(agent.containerId('lt-restart'));
    } finally {
      await agent.startDaemon();
    }
    const after = await waitFor('lt-restart to be replaced', () => find('lt-restart'), (info) => info !== undefined && info.createdAt !== before.createdAt && info.status === 'running');
    expect(after).toBeDefined();
    expect(after!.labels).toEqual(labels);
    await agent.client.updateSandbox('lt-restart', { ttl: {} });
  });
});

describe('node usage', () => {
  it('reports counts, requested and used resources, the host memory and per-fleet figures', async () => {
    const labels = { [LABEL_FLEET]: 'usage-pool' };
    await agent.client.createSandbox(spec('lt-use-1', { labels }));
    await agent.client.createSandbox(spec('lt-use-2', { labels }));
    await agent.client.createSandbox(spec('lt-use-3'));
    await agent.client.exec('lt-use-1', { cmd: ['sh', '-c', 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'] });
    await agent.client.pauseSandbox('lt-use-3');
    const usage = await agent.client.nodeUsage();
    const node = await agent.client.node();
    expect(usage.node).toBe(node.name);
    expect(usage.capacity).toEqual(node.capacity);
    const all = await agent.client.listSandboxes();
    const count = (status: string) => all.filter((info) => info.status === status).length;
    expect(usage.sandboxes.container?.running).toBe(count('running'));
    expect(usage.sandboxes.container?.paused).toBe(count('paused'));
    const up = all.filter((info) => ['creating', 'running', 'paused'].includes(info.status));
    expect(usage.requested.memoryMiB).toBe(up.reduce((sum, info) => sum + info.resources.memoryMiB, 0));
    expect(usage.host.memoryMiB).toBeGreaterThan(0);
    expect(usage.host.availableMiB).toBeGreaterThan(0);
    expect(usage.host.availableMiB).toBeLessThanOrEqual(usage.host.memoryMiB);
    expect(usage.used.memoryMiB).toBeGreaterThan(0);
    expect(usage.used.memoryMiB).toBeLessThan(usage.requested.memoryMiB);
    expect(usage.used.cpu).toBeGreaterThanOrEqual(0);
    expect(usage.used.cpu).toBeLessThanOrEqual(node.capacity.cpu);
    const pool = usage.fleets.find((fleet) => fleet.fleet === 'usage-pool');
    expect(pool).toMatchObject({ sandboxes: 2, requested: { cpu: 0.5, memoryMiB: 96 } });
    expect(pool!.used.memoryMiB).toBeGreaterThan(0);
    expect(usage.fleets.find((fleet) => fleet.fleet === '-')?.sandboxes).toBeGreaterThanOrEqual(1);
    expect(usage).toHaveProperty('memory');
    expect(usage).toHaveProperty('qos');

    // The second report's CPU is a rate since the first: an idle node uses next to nothing.
    await sleep(300);
    const again = await agent.client.nodeUsage();
    expect(again.used.cpu).toBeLessThan(0.5);
  });
});
