/**
 * An apply killed with SIGKILL part-way through (the real CLI, the real
 * agent, real containers): the lock it left is reported as stale with the
 * command that removes it, and the next apply converges to exactly the
 * declared sandboxes, adopting those the killed apply created but never
 * recorded (they carry the state's lineage label).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, recordedSandboxes, runcContainers, waitFor, type SandboxJson } from './harness.js';

const REPLICAS = 16;

interface PlanJson {
  resource_changes: { address: string; change: { actions: string[] }; fleet_summary?: { create: number; adopted: number; live: number } }[];
}

describe('an apply killed with SIGKILL', () => {
  const project = Project.copy();
  project.write('dsec.yaml', busyboxConfig({ pool: { replicas: REPLICAS } }));
  afterAll(() => project.cleanup());

  let recordedAtKill = 0;
  let liveAfterKill = 0;

  it('dies part-way, leaving some sandboxes live and its lock behind', async () => {
    const apply = project.start(['apply', '--auto-approve', '--parallelism', '2']);
    try {
      // Best: kill while a sandbox exists that the state does not know yet.
      await waitFor(
        'a few sandboxes',
        () => {
          const live = runcContainers(project).length;
          return (live >= 3 && live > recordedSandboxes(project, 'pool').length) || live >= 8;
        },
        30_000,
        10,
      );
    } finally {
      apply.child.kill('SIGKILL');
    }
    const killed = await apply.result;
    expect(killed.signal).toBe('SIGKILL');
    recordedAtKill = recordedSandboxes(project, 'pool').length;
    // The agent finishes the creates it had in flight: wait until none is left creating.
    const live = await waitFor('the agent to settle', async () => {
      const list = await project.json<SandboxJson[]>(['sandbox', 'ls']);
      return list.every((s) => s.status === 'running') && list;
    });
    liveAfterKill = live.length;
    expect(liveAfterKill).toBeGreaterThanOrEqual(3);
    expect(liveAfterKill).toBeLessThan(REPLICAS);
    // The creates in flight when it died finished in the agent, unrecorded: what lineage adoption is for.
    expect(recordedAtKill).toBeLessThan(liveAfterKill);
    expect(project.read('.dsec/state.lock')).toContain('dsec apply');
  });

  it('makes the next apply fail with DSEC_STATE_STALE_LOCK, naming the force-unlock command', async () => {
    const lockId = (JSON.parse(project.read('.dsec/state.lock')) as { id: string }).id;
    const result = await project.run(['apply', '--auto-approve']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('DSEC_STATE_STALE_LOCK');
    expect(result.stderr).toContain(`dsec force-unlock ${lockId}`);
    // It touched nothing.
    expect(runcContainers(project)).toHaveLength(liveAfterKill);

    const unlock = await project.run(['force-unlock', lockId]);
    expect(unlock.code, unlock.stderr).toBe(0);
    expect(unlock.stdout).toContain('unlocked');
  });

  it('plans to adopt the unrecorded sandboxes and create only the missing ones', async () => {
    const plan = await project.json<PlanJson>(['plan']);
    const pool = plan.resource_changes.find((c) => c.address === 'fleet.pool');
    expect(pool?.fleet_summary).toMatchObject({ live: liveAfterKill, create: REPLICAS - liveAfterKill, adopted: liveAfterKill - recordedAtKill });
  });

  it('converges on the next apply: exactly the declared sandboxes, no duplicates, then no changes', async () => {
    const before = new Set((await project.json<SandboxJson[]>(['sandbox', 'ls'])).map((s) => s.id));
    const apply = await project.run(['apply', '--auto-approve', '--parallelism', '4']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);

    const live = await project.json<SandboxJson[]>(['sandbox', 'ls', '--fleet', 'pool']);
    expect(live).toHaveLength(REPLICAS);
    expect(live.every((s) => s.status === 'running')).toBe(true);
    // Every sandbox the killed apply made was kept, none was made twice.
    for (const id of before) expect(live.map((s) => s.id)).toContain(id);
    expect(runcContainers(project)).toHaveLength(REPLICAS);
    expect(recordedSandboxes(project, 'pool').sort()).toEqual(live.map((s) => s.id).sort());

    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code, plan.stdout).toBe(0);
    expect(plan.stdout).toContain('No changes.');
  });
});
