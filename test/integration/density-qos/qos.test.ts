/**
 * density-qos in a real agent with the container backend: a best-effort
 * sandbox's processes run SCHED_IDLE in a cpu cgroup marked idle, a
 * latency-sensitive one's run SCHED_NORMAL, and the node says what it can do
 * (no core scheduling on a machine without SMT, said once in the log).
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeNativeSupport } from '../../../core/native.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

const SCHED_NORMAL = 0;
const SCHED_IDLE = 5;

let agent: TestAgent;

function policyIn(schedText: string): number {
  const match = /^policy\s*:\s*(\d+)/m.exec(schedText);
  if (!match) throw new Error(`no policy line in:\n${schedText}`);
  return Number(match[1]);
}

/** The sandbox's cpu cgroup (cgroup v1: the backend runs containers under /dsec/<container id>). */
function cpuCgroup(id: string): string {
  return `/sys/fs/cgroup/cpu/dsec/${agent.containerId(id)}`;
}

function initPid(id: string): number {
  const pids = readFileSync(`${cpuCgroup(id)}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number);
  return Math.min(...pids);
}

async function execPolicy(id: string): Promise<number> {
  const result = await agent.client.exec(id, { cmd: ['cat', '/proc/self/sched'] });
  expect(result.exitCode).toBe(0);
  return policyIn(result.stdout);
}

beforeAll(async () => {
  agent = await TestAgent.start({ plugins: [{ name: 'density-qos', options: {} }] });
});

afterAll(async () => {
  await agent?.dispose();
});

describe('density-qos in an agent', () => {
  it('runs a best-effort sandbox under SCHED_IDLE, its init and its execs, in a cpu cgroup marked idle', async () => {
    await agent.client.createSandbox(agent.spec('idle', { qos: 'best-effort' }));
    expect(policyIn(readFileSync(`/proc/${initPid('idle')}/sched`, 'utf8'))).toBe(SCHED_IDLE);
    expect(await execPolicy('idle')).toBe(SCHED_IDLE);
    expect(readFileSync(`${cpuCgroup('idle')}/cpu.idle`, 'utf8').trim()).toBe('1');
  });

  it('runs a latency-sensitive sandbox under SCHED_NORMAL in an ordinary cpu cgroup', async () => {
    await agent.client.createSandbox(agent.spec('urgent', { qos: 'latency-sensitive' }));
    expect(policyIn(readFileSync(`/proc/${initPid('urgent')}/sched`, 'utf8'))).toBe(SCHED_NORMAL);
    expect(await execPolicy('urgent')).toBe(SCHED_NORMAL);
    expect(readFileSync(`${cpuCgroup('urgent')}/cpu.idle`, 'utf8').trim()).toBe('0');
  });

  it('reports what the node can do, and says once why a latency-sensitive sandbox runs without core scheduling', async () => {
    const support = await probeNativeSupport();
    const usage = await agent.client.nodeUsage();
    expect(usage.qos).toEqual({
      coreScheduling: support.coreScheduling.ok ? 'available' : `unavailable: ${support.coreScheduling.reason}`,
      idleCpu: 'available',
    });
    if (!support.coreScheduling.ok) {
      await agent.client.createSandbox(agent.spec('urgent-2', { qos: 'latency-sensitive' }));
      const said = agent.logText().split('\n').filter((line) => line.includes('run without coreScheduling'));
      expect(said).toHaveLength(1);
      expect(said[0]).toContain(support.coreScheduling.reason);
    }
  });
});
