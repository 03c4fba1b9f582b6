/**
 * The whole user journey through the real CLI, real agent and real runc
 * containers: plan, apply, scale, change resources, change the environment,
 * drift, destroy. One project for the file, since each step builds on the last.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Project, runcList } from './harness.js';

interface SandboxJson {
  id: string;
  status: string;
  labels: Record<string, string>;
  resources: { memoryMiB: number };
}

describe('a quickstart copy placed outside the repo', () => {
  let project: Project;

  beforeAll(() => {
    project = Project.copy('quickstart');
    project.edit('replicas: 3', 'replicas: 2');
  });
  afterAll(async () => {
    await project.cleanup();
  });

  const sandboxes = () => project.json<SandboxJson[]>(['sandbox', 'ls']);

  it('plans three creations and says so through --detailed-exitcode', async () => {
    const result = await project.run(['plan', '--detailed-exitcode']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(2);
    expect(result.stdout).toMatch(/\+ layer\.base@1\.0\.0/);
    expect(result.stdout).toMatch(/\+ layer\.hello@0\.1\.0/);
    expect(result.stdout).toMatch(/\+ fleet\.workers/);
    expect(result.stdout).toMatch(/Plan: 3 to add, 0 to change, 0 to destroy\./);
  });

  it('refuses to apply without confirmation when stdin is not a terminal', async () => {
    const result = await project.run(['apply']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('--auto-approve');
    expect(existsSync(project.file('.dsec/state.json'))).toBe(false);
  });

  it('applies the quickstart into running sandboxes that answer exec', async () => {
    const result = await project.run(['apply', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    expect(result.stdout).toContain('Apply complete! Resources: 3 added, 0 changed, 0 destroyed.');
    const live = await sandboxes();
    expect(live).toHaveLength(2);
    expect(live.every((s) => s.status === 'running')).toBe(true);
    const exec = await project.run(['sandbox', 'exec', live[0].id, '--', 'hello']);
    expect(exec.code).toBe(0);
    expect(exec.stdout).toContain('hello from a dsec sandbox');
    expect(exec.stdout).toContain(live[0].id);
  });

  it('passes the command exit code through sandbox exec', async () => {
    const [first] = await sandboxes();
    const result = await project.run(['sandbox', 'exec', first.id, '--', 'sh', '-c', 'exit 7']);
    expect(result.code).toBe(7);
  });

  it('plans no changes right after apply', async () => {
    const result = await project.run(['plan', '--detailed-exitcode']);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('No changes.');
  });

  it('plans a replica change as one in-place update of the fleet, with +2 sandboxes', async () => {
    project.edit('replicas: 2', 'replicas: 4');
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code).toBe(2);
    expect(plan.stdout).toMatch(/~ fleet\.workers/);
    expect(plan.stdout).toMatch(/\+2 create/);
    expect(plan.stdout.match(/fleet\.workers/g)).toHaveLength(1);
    expect(plan.stdout).toMatch(/Plan: 0 to add, 1 to change, 0 to destroy\./);
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr).toBe(0);
    expect(await sandboxes()).toHaveLength(4);
  });

  it('updates memory limits in place, keeping the same sandboxes', async () => {
    const before = (await sandboxes()).map((s) => s.id).sort();
    project.edit('memory: 128Mi', 'memory: 160Mi');
    const plan = await project.json<{ resource_changes: { address: string; change: { actions: string[] } }[] }>(['plan']);
    const fleet = plan.resource_changes.find((c) => c.address === 'fleet.workers');
    expect(fleet?.change.actions).toEqual(['update']);
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr).toBe(0);
    const after = await sandboxes();
    expect(after.map((s) => s.id).sort()).toEqual(before);
    expect(after.every((s) => s.resources.memoryMiB === 160)).toBe(true);
  });

  it('changes labels in place: the live sandboxes carry them, label selectors find them, and the next plan is empty', async () => {
    const before = (await sandboxes()).map((s) => s.id).sort();
    project.edit('team: quickstart', 'team: rl\n      job: swe-17');
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code).toBe(2);
    expect(plan.stdout).toMatch(/~ fleet\.workers/);
    expect(plan.stdout).toContain('labels changed');
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr).toBe(0);
    // Read back from the agent, not from the plan: the labels are on the sandboxes themselves.
    const labelled = await project.json<SandboxJson[]>(['sandbox', 'ls', '--label', 'job=swe-17']);
    expect(labelled.map((s) => s.id).sort()).toEqual(before);
    expect(labelled.every((s) => s.labels.team === 'rl' && s.labels['dsec.io/fleet'] === 'workers')).toBe(true);
    expect(await project.json<SandboxJson[]>(['sandbox', 'ls', '--label', 'team=quickstart'])).toEqual([]);
    const paused = await project.run(['sandbox', 'pause', '--label', 'job=swe-17']);
    expect(paused.code, paused.stderr + paused.stdout).toBe(0);
    expect((await sandboxes()).every((s) => s.status === 'paused')).toBe(true);
    expect((await project.run(['sandbox', 'resume', '--label', 'job=swe-17'])).code).toBe(0);
    const again = await project.run(['plan', '--detailed-exitcode']);
    expect(again.code, again.stdout).toBe(0);
  });

  it('replaces every sandbox, in batches, when the environment gets a new toolkit version', async () => {
    const before = new Set((await sandboxes()).map((s) => s.id));
    project.edit('version: 0.1.0', 'version: 0.2.0');
    project.write('toolkit/opt/hello/bin/hello', '#!/bin/sh\necho "hello v2"\n');
    const plan = await project.run(['plan']);
    expect(plan.stdout).toMatch(/\+ layer\.hello@0\.2\.0/);
    expect(plan.stdout).toMatch(/-\/\+ fleet\.workers/);
    expect(plan.stdout).toMatch(/forces replacement/);
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    const after = await sandboxes();
    expect(after).toHaveLength(4);
    expect(after.some((s) => before.has(s.id))).toBe(false);
    const exec = await project.run(['sandbox', 'exec', after[0].id, '--', 'hello']);
    expect(exec.stdout.trim()).toBe('hello v2');
  });

  it('sees a sandbox killed from outside as drift and replaces it on the next apply', async () => {
    const [victim] = await sandboxes();
    const container = runcList().find((c) => c.id.endsWith(`-${victim.id}`));
    expect(container).toBeDefined();
    execFileSync('runc', ['kill', container!.id, 'KILL']);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code).toBe(2);
    expect(plan.stdout).toMatch(/fleet\.workers/);
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    const after = await sandboxes();
    expect(after).toHaveLength(4);
    expect(after.every((s) => s.status === 'running')).toBe(true);
    expect(after.map((s) => s.id)).not.toContain(victim.id);
  });

  it('destroys everything and leaves no container behind', async () => {
    const result = await project.run(['destroy', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    expect(await sandboxes()).toHaveLength(0);
    const state = await project.json<{ resources: Record<string, unknown> }>(['show']);
    expect(Object.keys(state.resources)).toEqual([]);
    const plan = await project.run(['plan', '--destroy', '--detailed-exitcode']);
    expect(plan.code).toBe(0);
  });
});
