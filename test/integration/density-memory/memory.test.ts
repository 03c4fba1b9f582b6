/**
 * density-memory in a real agent with the container backend: a fleet with
 * memory sharing runs every process under PR_SET_MEMORY_MERGE, KSM merges
 * its identical pages, the usage report shows them, and KSM is tuned to the
 * count of mergeable sandboxes and handed back as found when the last goes.
 * KSM is machine-wide: the test puts its knobs back whatever happens.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET, type SandboxSpec } from '../../../core/live.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

const KSM = '/sys/kernel/mm/ksm';
const KNOBS = ['run', 'pages_to_scan', 'sleep_millisecs'] as const;
const knob = (name: string) => Number(readFileSync(path.join(KSM, name), 'utf8'));
let foundKnobs: Record<string, number> = {};
let agent: TestAgent;

const spec = (id: string, memorySharing: boolean): SandboxSpec =>
  agent.spec(id, {
    resources: { cpu: 0.5, memoryMiB: 128, pids: 64 },
    labels: { [LABEL_FLEET]: memorySharing ? 'shared' : 'plain' },
    density: { memorySharing, reclaimOnPause: true },
  });

function memoryCgroup(id: string): string {
  return `/sys/fs/cgroup/memory/dsec/${agent.containerId(id)}`;
}

function pidsOf(id: string): number[] {
  return readFileSync(`${memoryCgroup(id)}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number);
}

function ksmField(pid: number, field: string): string | undefined {
  return new RegExp(`^${field}:?\\s+(\\S+)`, 'm').exec(readFileSync(`/proc/${pid}/ksm_stat`, 'utf8'))?.[1];
}

/** 8 MiB of one repeated 16-byte pattern (not zeros: KSM treats zero pages apart), held by a process that sleeps. */
const HOLDER = `awk 'BEGIN { s = "0123456789abcdef"; while (length(s) < 8388608) s = s s; while (1) system("sleep 3600") }' > /dev/null 2>&1 &`;

beforeAll(async () => {
  for (const name of KNOBS) foundKnobs[name] = knob(name);
  agent = await TestAgent.start({ plugins: [{ name: 'density-memory', options: { sleepMillisecs: 10 } }] });
});

afterAll(async () => {
  try {
    await agent?.dispose();
  } finally {
    // The rate first, then run: as the plugin does.
    for (const name of ['pages_to_scan', 'sleep_millisecs', 'run'] as const) {
      if (foundKnobs[name] !== undefined && knob(name) !== foundKnobs[name]) writeFileSync(path.join(KSM, name), String(foundKnobs[name]));
    }
  }
});

describe('density-memory in an agent', () => {
  it('runs a sharing sandbox\'s init and execs with KSM merge-any, starts KSM for it, and leaves a plain sandbox alone', async () => {
    await agent.client.createSandbox(spec('plain', false));
    expect(existsSync(path.join(agent.root, 'density-memory/ksm.json'))).toBe(false);
    await agent.client.createSandbox(spec('merged', true));
    expect(knob('run')).toBe(1);
    expect(knob('pages_to_scan')).toBe(100);
    expect(knob('sleep_millisecs')).toBe(10);
    const hold = JSON.parse(readFileSync(path.join(agent.root, 'density-memory/ksm.json'), 'utf8'));
    expect(hold).toMatchObject({ found: { run: foundKnobs.run, pagesToScan: foundKnobs.pages_to_scan }, startedByDsec: foundKnobs.run !== 1 });

    for (const pid of pidsOf('merged')) expect(ksmField(pid, 'ksm_merge_any')).toBe('yes');
    for (const pid of pidsOf('plain')) expect(ksmField(pid, 'ksm_merge_any')).toBe('no');
    const viaExec = await agent.client.exec('merged', { cmd: ['sh', '-c', 'grep ksm_merge_any /proc/self/ksm_stat'] });
    expect(viaExec.stdout).toBe('ksm_merge_any: yes\n');
  });

  it('merges the identical pages of two processes, and reports them node-wide and for the fleet', async () => {
    for (let i = 0; i < 2; i++) {
      const started = await agent.client.exec('merged', { cmd: ['sh', '-c', HOLDER] });
      expect(started.exitCode).toBe(0);
    }
    const merging = () => pidsOf('merged').reduce((sum, pid) => sum + Number(readFileSync(`/proc/${pid}/ksm_merging_pages`, 'utf8')), 0);
    const waitStarted = Date.now();
    // 2 x 8 MiB = 4096 identical pages; KSM needs two passes over them.
    while (merging() < 3000 && Date.now() - waitStarted < 45_000) await new Promise((resolve) => setTimeout(resolve, 250));
    const pages = merging();
    console.log(`KSM: ${pages} merging pages in the sandbox after ${Date.now() - waitStarted} ms`);
    expect(pages).toBeGreaterThan(3000);

    const usage = await agent.client.nodeUsage();
    expect(usage.memory.ksm).toEqual({ running: true, pagesToScan: 100, sleepMillisecs: 10, mergeableSandboxes: 1 });
    expect(usage.memory.sharedMiB).toBeGreaterThan(10);
    const shared = usage.fleets.find((fleet) => fleet.fleet === 'shared');
    expect(shared?.sharedMiB).toBeGreaterThan(12);
    expect(usage.fleets.find((fleet) => fleet.fleet === 'plain')?.sharedMiB).toBeUndefined();
  });

  it('scales the scan rate with the mergeable sandboxes, counts a paused one, and hands KSM back when the last is destroyed', async () => {
    await agent.client.createSandbox(spec('merged-2', true));
    expect(knob('pages_to_scan')).toBe(200);
    await agent.client.pauseSandbox('merged-2');
    expect((await agent.client.nodeUsage()).memory.ksm?.mergeableSandboxes).toBe(2);

    await agent.client.destroySandbox('merged-2');
    expect(knob('pages_to_scan')).toBe(100);
    await agent.client.destroySandbox('merged');
    expect(knob('run')).toBe(foundKnobs.run === 1 ? 1 : 0);
    expect(knob('pages_to_scan')).toBe(foundKnobs.pages_to_scan);
    expect(knob('sleep_millisecs')).toBe(foundKnobs.sleep_millisecs);
    expect(existsSync(path.join(agent.root, 'density-memory/ksm.json'))).toBe(false);
    expect(agent.logText()).toMatch(/no mergeable sandbox left: KSM (stopped \(run=0\)|left running as found)/);
  });

  it('hands KSM back when several sharing sandboxes are destroyed at once', async () => {
    const ids = ['burst-1', 'burst-2', 'burst-3', 'burst-4'];
    await Promise.all(ids.map((id) => agent.client.createSandbox(spec(id, true))));
    expect(knob('run')).toBe(1);
    await Promise.all(ids.map((id) => agent.client.destroySandbox(id)));
    expect(knob('run')).toBe(foundKnobs.run === 1 ? 1 : 0);
    expect(knob('pages_to_scan')).toBe(foundKnobs.pages_to_scan);
    expect(existsSync(path.join(agent.root, 'density-memory/ksm.json'))).toBe(false);
  });
});
