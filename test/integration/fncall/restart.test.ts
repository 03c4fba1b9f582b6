/**
 * FnCall workers outlive their agent like any sandbox, but not its trust: a
 * restarted agent holds no guest connection to them (their socket is gone
 * after the first reset), so it re-creates each before its first task, and
 * destroying them still removes their containers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET } from '../../../core/live.js';
import { mountPointsUnder, runcContainers, type TestAgent } from '../../helpers/agent-fixture.js';
import { createFleet, eventually, invoke, startFncallAgent } from './helpers.js';

describe('FnCall workers across an agent restart', () => {
  let agent: TestAgent;

  beforeAll(async () => {
    agent = await startFncallAgent();
  });
  afterAll(async () => {
    await agent?.dispose();
  });

  it('re-creates the workers a restarted agent adopted before they take tasks, and destroys them cleanly', async () => {
    const created = await createFleet(agent, 'fn', 2);
    expect((await invoke(agent, 'fn', { runtime: 'sh', code: 'echo before' })).stdout).toBe('before\n');

    await agent.stop();
    await agent.startDaemon();
    const adopted = await agent.client.listSandboxes({ [LABEL_FLEET]: 'fn' });
    expect(adopted.map((worker) => [worker.id, worker.status, worker.createdAt])).toEqual(created.map((worker) => [worker.id, 'running', worker.createdAt]));

    const results = await Promise.all([0, 1, 2].map((index) => invoke(agent, 'fn', { runtime: 'sh', code: `echo after-${index}` })));
    expect(results.map((result) => result.stdout)).toEqual(['after-0\n', 'after-1\n', 'after-2\n']);
    // The first task had every adopted worker replaced; one may still be on its way back while the
    // other served all three tasks, so wait for both to run again, each created anew.
    const renewedAll = async () => {
      const renewed = await agent.client.listSandboxes({ [LABEL_FLEET]: 'fn' });
      return renewed.length === created.length && renewed.every((worker, index) => worker.status === 'running' && worker.createdAt !== created[index].createdAt);
    };
    await eventually('both adopted workers to be re-created and running', renewedAll);

    await agent.stop();
    await agent.startDaemon();
    for (const worker of created) await agent.client.destroySandbox(worker.id);
    const left = runcContainers().filter((id) => created.some((worker) => id === agent.containerId(worker.id)));
    expect(left).toEqual([]);
    expect(mountPointsUnder(`${agent.root}/sandboxes`)).toEqual([]);
  });
});
