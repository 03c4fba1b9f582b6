/**
 * Process traits and pause/resume through a real node agent: a plugin's
 * `prepare` tap sets the traits, the container backend applies them to the
 * init and to every exec; pause and resume over the API freeze and thaw the
 * sandbox's cgroup; node usage counts what the backend reads.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sandboxCgroups } from '../../../plugins/backend-container/cgroups.js';
import { cgroupsPathOf } from '../../../plugins/backend-container/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

const TRAITS_PLUGIN = path.join(path.dirname(new URL(import.meta.url).pathname), 'traits-plugin.mjs');
let agent: TestAgent;

async function cgroupsOf(id: string) {
  return sandboxCgroups(cgroupsPathOf(agent.containerId(id)));
}

const initPidOf = async (id: string) => Number(readFileSync(path.join(agent.root, 'sandboxes', id, 'init.pid'), 'utf8'));

beforeAll(async () => {
  agent = await TestAgent.start({ plugins: [{ name: TRAITS_PLUGIN, options: {} }] });
});

afterAll(async () => {
  await agent?.dispose();
});

describe('process traits through the agent', () => {
  it('gives a sandbox whose prepare tap set memoryMerge and idleCpu both, in its init and in its execs', async () => {
    await agent.client.createSandbox(agent.spec('traited', { labels: { 'trait-memory-merge': 'yes', 'trait-idle-cpu': 'yes' } }));
    const initPid = await initPidOf('traited');
    expect(readFileSync(`/proc/${initPid}/ksm_stat`, 'utf8')).toContain('ksm_merge_any: yes');
    expect(readFileSync(`/proc/${initPid}/sched`, 'utf8')).toMatch(/^policy\s+:\s+5$/m);
    const inside = await agent.client.exec('traited', { cmd: ['sh', '-c', 'cat /proc/self/ksm_stat /proc/self/sched'] });
    expect(inside.stdout).toContain('ksm_merge_any: yes');
    expect(inside.stdout).toMatch(/^policy\s+:\s+5$/m);
    expect(readFileSync(path.join((await cgroupsOf('traited')).cpu!, 'cpu.idle'), 'utf8').trim()).toBe('1');
  });

  it('leaves a sandbox without traits as it was', async () => {
    await agent.client.createSandbox(agent.spec('untraited'));
    const initPid = await initPidOf('untraited');
    expect(readFileSync(`/proc/${initPid}/ksm_stat`, 'utf8')).toContain('ksm_merge_any: no');
    expect(readFileSync(`/proc/${initPid}/sched`, 'utf8')).toMatch(/^policy\s+:\s+0$/m);
  });

  it('freezes a sandbox on pause and thaws it on resume, over the API', async () => {
    await agent.client.createSandbox(agent.spec('frozen', { labels: { 'trait-memory-merge': 'yes' } }));
    const freezer = (await cgroupsOf('frozen')).freezer!;
    expect((await agent.client.pauseSandbox('frozen')).status).toBe('paused');
    expect(readFileSync(path.join(freezer, 'freezer.state'), 'utf8').trim()).toBe('FROZEN');
    expect((await agent.client.resumeSandbox('frozen')).status).toBe('running');
    expect(readFileSync(path.join(freezer, 'freezer.state'), 'utf8').trim()).toBe('THAWED');
    expect(await agent.client.exec('frozen', { cmd: ['echo', 'awake'] })).toMatchObject({ exitCode: 0, stdout: 'awake\n' });
  });

  it('reports what the sandboxes use in the node usage, read from their cgroups by the backend', async () => {
    const usage = await agent.client.nodeUsage();
    expect(usage.sandboxes.container?.running).toBeGreaterThanOrEqual(3);
    expect(usage.used.memoryMiB).toBeGreaterThan(0);
    expect(usage.used.memoryMiB).toBeLessThan(3 * 64);
  });
});
