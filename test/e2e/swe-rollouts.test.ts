/**
 * examples/swe-rollouts through the real CLI: a dense pool of best-effort
 * rollouts with memory sharing and TTLs beside latency-sensitive graders,
 * under an overcommit policy; an agent fixes the task in one rollout, the
 * trainer is preempted (every rollout of the job paused in one call), and an
 * exec brings a paused rollout back with its files.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Project, type SandboxJson } from './harness.js';

interface NodeJson {
  capacity: { cpu: number; memoryMiB: number };
  allocatable: { cpu: number; memoryMiB: number };
  requested: { cpu: number; memoryMiB: number };
  sandboxes: Record<string, Record<string, number>>;
}

describe('examples/swe-rollouts', () => {
  const project = Project.copy('swe-rollouts');
  afterAll(async () => {
    await project.run(['destroy', '--auto-approve']);
    await project.cleanup();
  });

  let rollouts: string[] = [];
  let graders: string[] = [];

  it('applies: 8 rollouts and 2 graders run, within the policy the node reports', async () => {
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    const listed = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    rollouts = listed.filter((s) => s.labels['dsec.io/fleet'] === 'rollouts' && s.status === 'running').map((s) => s.id);
    graders = listed.filter((s) => s.labels['dsec.io/fleet'] === 'graders' && s.status === 'running').map((s) => s.id);
    expect(rollouts).toHaveLength(8);
    expect(graders).toHaveLength(2);
    const [node] = await project.json<NodeJson[]>(['nodes']);
    expect(node.allocatable.cpu).toBeCloseTo((node.capacity.cpu - 0.5) * 20, 5);
    expect(node.allocatable.memoryMiB).toBeCloseTo((node.capacity.memoryMiB - 1024) * 2, 0);
    expect(node.requested).toEqual({ cpu: 10, memoryMiB: 8 * 256 + 2 * 128 });
    expect(node.sandboxes.container?.running).toBe(10);
  });

  it("fails the grader's test until a rollout fixes the task", async () => {
    const [rollout] = rollouts;
    const before = await project.run(['sandbox', 'exec', rollout, '--', 'sh', 'test.sh']);
    expect(before.code).toBe(1);
    expect(before.stdout).toContain('FAIL');
    const fix = await project.run(['sandbox', 'exec', rollout, '--', 'sed', '-i', 's/\\$1 - \\$2/$1 + $2/', 'calc.sh']);
    expect(fix.code, fix.stderr).toBe(0);
    const after = await project.run(['sandbox', 'exec', rollout, '--', 'sh', 'test.sh']);
    expect(after.code, after.stderr + after.stdout).toBe(0);
    expect(after.stdout).toContain('PASS');
  });

  it('pauses every rollout of the job in one call, leaves the graders running, and an exec resumes one with its files', async () => {
    const pause = await project.run(['sandbox', 'pause', '--label', 'job=job-42']);
    expect(pause.code, pause.stderr + pause.stdout).toBe(0);
    const listed = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    const status = new Map(listed.map((s) => [s.id, s.status]));
    expect(rollouts.map((id) => status.get(id))).toEqual(rollouts.map(() => 'paused'));
    expect(graders.map((id) => status.get(id))).toEqual(['running', 'running']);
    const [rollout] = rollouts;
    const again = await project.run(['sandbox', 'exec', rollout, '--', 'sh', 'test.sh']);
    expect(again.code, again.stderr + again.stdout).toBe(0);
    expect(again.stdout).toContain('PASS');
    const after = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    expect(after.find((s) => s.id === rollout)?.status).toBe('running');
    const resume = await project.run(['sandbox', 'resume', '--label', 'job=job-42']);
    expect(resume.code, resume.stderr + resume.stdout).toBe(0);
  });
});
