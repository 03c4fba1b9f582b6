/**
 * density-admission in a real agent: a node whose policy leaves room for two
 * sandboxes admits two, refuses the third with the reason and leaves nothing
 * of it, and says what it allocates and what is requested.
 */
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mountPointsUnder, runcContainers, TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;
const cpus = os.cpus().length;

/** No container, mount or cgroup of the sandbox is left; only its `failed` record says why. */
function expectNothingLeftOf(id: string): void {
  expect(runcContainers()).not.toContain(agent.containerId(id));
  expect(mountPointsUnder(path.join(agent.root, 'sandboxes', id))).toEqual([]);
  for (const controller of ['memory', 'cpu', 'pids', 'freezer']) {
    expect(existsSync(`/sys/fs/cgroup/${controller}/dsec/${agent.containerId(id)}`)).toBe(false);
  }
}

beforeAll(async () => {
  // One CPU allocatable (all but one reserved, no overcommit): two sandboxes of 0.5 CPU fill it.
  agent = await TestAgent.start({
    plugins: [{ name: 'density-admission', options: { overcommit: { cpu: 1 }, reserve: { cpu: cpus - 1 } } }],
  });
});

afterAll(async () => {
  await agent?.dispose();
});

describe('density-admission in an agent', () => {
  it('admits two sandboxes, refuses the third with DSEC_ADMISSION_REFUSED and its reason, and leaves nothing of it', async () => {
    await agent.client.createSandbox(agent.spec('one'));
    await agent.client.createSandbox(agent.spec('two'));
    const error = await agent.client.createSandbox(agent.spec('three')).catch((caught: unknown) => caught);
    expect(error).toMatchObject({
      code: 'DSEC_ADMISSION_REFUSED',
      message: `sandbox three was refused by density-admission: cpu: 0.5 CPU requested, 0 CPU left of 1 CPU allocatable (cpu 1x, ${cpus - 1} CPU reserved)`,
    });
    expect(await agent.client.getSandbox('three')).toMatchObject({ status: 'failed', error: expect.stringContaining('0 CPU left of 1 CPU allocatable') });
    expectNothingLeftOf('three');
  });

  it('reports what the node allocates, what its sandboxes request and the policy in the node info', async () => {
    const info = await agent.client.node();
    expect(info).toMatchObject({
      allocatable: { cpu: 1, memoryMiB: (info.capacity.memoryMiB - 512) * 1 },
      requested: { cpu: 1, memoryMiB: 128 },
      policy: { overcommit: { cpu: 1, memory: 1 }, reserve: { cpu: cpus - 1, memoryMiB: 512 } },
    });
  });

  it('admits again once a sandbox is destroyed, re-creating the refused one in its place', async () => {
    await agent.client.destroySandbox('one');
    await expect(agent.client.createSandbox(agent.spec('three'))).resolves.toMatchObject({ status: 'running' });
    await agent.client.destroySandbox('two');
    await agent.client.destroySandbox('three');
  });

  it('admits exactly as many of several racing creates as fit', async () => {
    const ids = ['race-a', 'race-b', 'race-c', 'race-d'];
    const outcomes = await Promise.allSettled(ids.map((id) => agent.client.createSandbox(agent.spec(id))));
    const admitted = outcomes.filter((outcome) => outcome.status === 'fulfilled');
    const refused = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason as { code: string }] : []));
    expect(admitted).toHaveLength(2);
    expect(refused.map((error) => error.code)).toEqual(['DSEC_ADMISSION_REFUSED', 'DSEC_ADMISSION_REFUSED']);
    for (const id of ids) await agent.client.destroySandbox(id);
  });
});
