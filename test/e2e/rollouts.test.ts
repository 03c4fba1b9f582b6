/**
 * The rollout path through the real `dsec` binary, agent and runc: acquire a
 * sandbox from a fleet's warm pool, find it again by holder, see the pool
 * refill beside it, roll a new environment out without touching it (the plan
 * says ~1 replace when released), recycle it on release, and refuse to
 * destroy a fleet whose sandboxes rollouts hold unless --replace-claimed.
 * One project for the file: each step builds on the last.
 */
import { mkdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Project, type SandboxJson } from './harness.js';

interface Sandbox extends SandboxJson {
  claim?: { holder: string; expiresAt?: string; labels?: Record<string, string> };
  kept?: { holder: string };
}

const CONFIG = (toolkit: string) => `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
  tool: { kind: toolkit, version: ${toolkit}, source: { dir: ./tool } }
environments:
  shell: { layers: [base, tool] }
fleets:
  swe:
    environment: shell
    replicas: 2
    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }
    pool: { maxClaimed: 2 }
`;

describe('rollouts on a warm pool through the CLI', () => {
  let project: Project;
  let held: string;

  beforeAll(async () => {
    project = Project.copy();
    project.write('dsec.yaml', CONFIG('1.0.0'));
    mkdirSync(project.file('tool'), { recursive: true });
    project.write('tool/VERSION', 'v1\n');
    const applied = await project.run(['apply', '--auto-approve']);
    if (applied.code !== 0) throw new Error(`apply failed: ${applied.stderr}${applied.stdout}`);
  });
  afterAll(async () => {
    await project.cleanup();
  });

  const sandboxes = () => project.json<Sandbox[]>(['sandbox', 'ls']);
  async function until(what: string, done: (list: Sandbox[]) => boolean): Promise<Sandbox[]> {
    for (let attempt = 0; ; attempt++) {
      const list = await sandboxes();
      if (done(list)) return list;
      if (attempt > 150) throw new Error(`${what}: never happened: ${JSON.stringify(list.map((s) => [s.id, s.status, s.claim?.holder]))}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  const ready = (list: Sandbox[]) => list.filter((s) => !s.claim && !s.kept && s.status === 'running');

  it('acquires a ready sandbox for a holder, prints its id, and refills the pool beside it with no apply', async () => {
    const acquired = await project.run(['sandbox', 'acquire', 'swe', '--holder', 'trainer-1/r0', '--ttl', '1h', '--label', 'job=j0']);
    expect(acquired.code, acquired.stderr).toBe(0);
    held = acquired.stdout.trim();
    expect(held).toMatch(/^swe-[a-z0-9]{8}$/);
    const mine = await project.json<Sandbox[]>(['sandbox', 'ls', '--holder', 'trainer-1/r0']);
    expect(mine.map((s) => s.id)).toEqual([held]);
    expect(mine[0].claim).toMatchObject({ holder: 'trainer-1/r0', labels: { job: 'j0' } });
    expect((await project.json<Sandbox[]>(['sandbox', 'ls', '--label', 'job=j0'])).map((s) => s.id)).toEqual([held]);
    const list = await until('two ready beside the claimed one', (all) => ready(all).length === 2);
    expect(list).toHaveLength(3);
    const exec = await project.run(['sandbox', 'exec', held, '--', 'cat', '/VERSION']);
    expect(exec.stdout).toBe('v1\n');
  });

  it('plans no change for a claimed sandbox: the pool is full and the claim comes on top', async () => {
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code, plan.stdout).toBe(0);
  });

  it('fails an acquire past pool.maxClaimed after its wait, naming the counts', async () => {
    const second = await project.run(['sandbox', 'acquire', 'swe', '--holder', 'trainer-1/r1']);
    expect(second.code, second.stderr).toBe(0);
    const refused = await project.run(['sandbox', 'acquire', 'swe', '--holder', 'trainer-1/r2', '--wait', '1s']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('[DSEC_POOL_EXHAUSTED]');
    expect(refused.stderr).toMatch(/2 claimed \(at most 2\)/);
    const released = await project.run(['sandbox', 'release', second.stdout.trim(), '--holder', 'trainer-1/r1']);
    expect(released.code, released.stderr).toBe(0);
    expect(released.stdout).toContain('was recycled');
  });

  it('rolls a new environment out without touching the claimed sandbox: ~1 replace when released', async () => {
    project.write('dsec.yaml', CONFIG('2.0.0'));
    project.write('tool/VERSION', 'v2\n');
    const plan = await project.run(['plan']);
    expect(plan.code, plan.stderr).toBe(0);
    expect(plan.stdout).toContain('~1 replace when released');
    expect(plan.stdout).toMatch(/pool: \d ready, 1 claimed/);
    const applied = await project.run(['apply', '--auto-approve']);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    const list = await until('two fresh v2 sandboxes', (all) => ready(all).length === 2);
    expect(list.find((s) => s.id === held)?.claim?.holder).toBe('trainer-1/r0');
    // The rollout's sandbox still runs the environment it started with.
    expect((await project.run(['sandbox', 'exec', held, '--', 'cat', '/VERSION'])).stdout).toBe('v1\n');
    for (const fresh of ready(list)) expect((await project.run(['sandbox', 'exec', fresh.id, '--', 'cat', '/VERSION'])).stdout).toBe('v2\n');
    // Nothing left to do now, but the plan still says what waits for the release.
    const again = await project.run(['plan', '--detailed-exitcode']);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('fleet.swe: 1 claimed sandbox(es) run an earlier spec');
  });

  it('scales down past the claimed sandbox: only ready ones go, the rollout keeps its own', async () => {
    project.write('dsec.yaml', CONFIG('2.0.0').replace('replicas: 2', 'replicas: 1'));
    const applied = await project.run(['apply', '--auto-approve']);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    expect(applied.stdout).toMatch(/-1 destroy/);
    const list = await until('one ready beside the claimed one', (all) => ready(all).length === 1 && all.length === 2);
    expect(list.find((s) => s.id === held)).toMatchObject({ status: 'running', claim: { holder: 'trainer-1/r0' } });
    expect((await project.run(['sandbox', 'exec', held, '--', 'cat', '/VERSION'])).stdout).toBe('v1\n');
  });

  it('refuses to destroy while a rollout holds a sandbox, naming the holder, and destroys with --replace-claimed', async () => {
    const refused = await project.run(['destroy', '--auto-approve']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('[DSEC_PLAN_CLAIMED]');
    expect(refused.stderr).toContain('trainer-1/r0');
    expect((await sandboxes()).some((s) => s.id === held)).toBe(true);
    const forced = await project.run(['destroy', '--auto-approve', '--replace-claimed']);
    expect(forced.code, forced.stderr + forced.stdout).toBe(0);
    expect(await sandboxes()).toEqual([]);
  });
});
