/**
 * An apply that fails part-way through the real CLI: one fleet on a backend
 * no plugin provides, one that is fine. What succeeded must be reported,
 * recorded in the state and running; once the config is fixed, the next
 * apply converges to exactly the declared sandboxes.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, runcContainers, type SandboxJson } from './harness.js';

describe('an apply where one of two fleets fails', () => {
  const project = Project.copy();
  project.write('dsec.yaml', busyboxConfig({ good: { replicas: 2 }, bad: { replicas: 2, backend: 'nosuch' } }));
  afterAll(() => project.cleanup());

  const sandboxes = () => project.json<SandboxJson[]>(['sandbox', 'ls']);
  const byFleet = (list: SandboxJson[], fleet: string) => list.filter((s) => s.labels['dsec.io/fleet'] === fleet);

  it('exits 1 and reports the good fleet as done and the bad one as failed with the reason', async () => {
    const result = await project.run(['apply', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(1);
    expect(result.stdout).toContain('Apply failed part-way.');
    expect(result.stdout).toMatch(/^ {2}ok +layer\.base@1\.0\.0$/m);
    expect(result.stdout).toMatch(/^ {2}ok +fleet\.good$/m);
    expect(result.stdout).toMatch(
      /^ {2}failed fleet\.bad: 2 of 2 sandbox operation\(s\) failed; first: no plugin provides backend nosuch \(have: container, fncall, microvm, vm\) \[DSEC_BACKEND_UNKNOWN\]$/m,
    );
    expect(result.stdout).not.toMatch(/failed fleet\.good/);
    expect(result.stdout).toContain('sandboxes: 2 done, 2 failed');
    // The per-resource progress lines on stderr say the same.
    expect(result.stderr).toMatch(/fleet\.good: create done/);
    expect(result.stderr).toMatch(/^fleet\.bad: create failed: 2 of 2 .*\[DSEC_BACKEND_UNKNOWN\]$/m);
  });

  it("gives the agent's error code in the --json outcome", async () => {
    const result = await project.run(['apply', '--auto-approve', '--json']);
    expect(result.code).toBe(1);
    const outcome = JSON.parse(result.stdout) as { succeeded: string[]; failed: { address: string; error: string; codes: string[] }[] };
    // The good fleet and the layer are done: this apply has only the bad fleet left to do.
    expect(outcome.succeeded).toEqual([]);
    expect(outcome.failed.map((f) => f.address)).toEqual(['fleet.bad']);
    expect(outcome.failed[0].error).toContain('nosuch');
    expect(outcome.failed[0].codes).toEqual(['DSEC_APPLY_FLEET', 'DSEC_BACKEND_UNKNOWN']);
  });

  it('has recorded the good fleet and its layer, and only them, in the state', async () => {
    expect(await project.json<string[]>(['state', 'list'])).toEqual(['fleet.good', 'layer.base@1.0.0']);
    const good = await project.json<{ sandboxes: Record<string, unknown> }>(['state', 'show', 'fleet.good']);
    expect(Object.keys(good.sandboxes)).toHaveLength(2);
  });

  it("runs the good fleet's sandboxes, and nothing of the bad one", async () => {
    const live = await sandboxes();
    expect(byFleet(live, 'good')).toHaveLength(2);
    expect(byFleet(live, 'good').every((s) => s.status === 'running')).toBe(true);
    expect(byFleet(live, 'bad')).toHaveLength(0);
    expect(runcContainers(project).filter((c) => c.status === 'running')).toHaveLength(2);
    const exec = await project.run(['sandbox', 'exec', byFleet(live, 'good')[0].id, '--', 'echo', 'up']);
    expect(exec.stdout).toBe('up\n');
  });

  it('converges once the config is fixed: exact replica counts, the good fleet untouched, then no changes', async () => {
    const goodBefore = byFleet(await sandboxes(), 'good').map((s) => s.id).sort();
    project.edit('backend: nosuch', 'backend: container');
    const plan = await project.json<{ resource_changes: { address: string; change: { actions: string[] } }[] }>(['plan']);
    const actions = Object.fromEntries(plan.resource_changes.map((c) => [c.address, c.change.actions]));
    expect(actions['fleet.bad']).toEqual(['create']);
    expect(actions['fleet.good']).toEqual(['no-op']);

    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    expect(apply.stdout).toContain('Apply complete! Resources: 1 added, 0 changed, 0 destroyed.');

    const live = await sandboxes();
    expect(live).toHaveLength(4);
    expect(new Set(live.map((s) => s.id)).size).toBe(4);
    expect(byFleet(live, 'good').map((s) => s.id).sort()).toEqual(goodBefore);
    expect(byFleet(live, 'bad')).toHaveLength(2);
    expect(live.every((s) => s.status === 'running')).toBe(true);
    expect(runcContainers(project)).toHaveLength(4);
    expect(await project.json<string[]>(['state', 'list'])).toEqual(['fleet.bad', 'fleet.good', 'layer.base@1.0.0']);

    const again = await project.run(['plan', '--detailed-exitcode']);
    expect(again.code, again.stdout).toBe(0);
    expect(again.stdout).toContain('No changes.');
  });
});
