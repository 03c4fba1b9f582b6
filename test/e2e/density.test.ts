/**
 * Density through the real CLI, agent and runc containers: pause and resume
 * a fleet by label, claim and release, `dsec nodes --json`, a ttl change
 * planned and applied as an in-place update, and the plan's capacity warning
 * under a tight admission policy. One project for the file: each step builds
 * on the last.
 */
import { totalmem } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, type SandboxJson } from './harness.js';

interface Sandbox extends SandboxJson {
  claim?: { holder: string; expiresAt?: string };
  ttl?: { maxLifetimeSeconds?: number; idleStopSeconds?: number };
}

interface Outcome {
  id: string;
  ok: boolean;
  info?: { status: string };
  error?: { code: string };
}

describe('density commands on a live project', () => {
  let project: Project;

  beforeAll(async () => {
    project = Project.copy();
    project.write('dsec.yaml', busyboxConfig({ swe: { replicas: 2 }, other: { replicas: 1 } }));
    const applied = await project.run(['apply', '--auto-approve']);
    if (applied.code !== 0) throw new Error(`apply failed: ${applied.stderr}${applied.stdout}`);
  });
  afterAll(async () => {
    await project.cleanup();
  });

  const sandboxes = () => project.json<Sandbox[]>(['sandbox', 'ls']);
  const fleetOf = (sandbox: Sandbox) => sandbox.labels['dsec.io/fleet'];

  it('pauses every sandbox of one fleet by label, one line each, and leaves the other fleet running', async () => {
    const result = await project.run(['sandbox', 'pause', '--label', 'dsec.io/fleet=swe']);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines).toHaveLength(2);
    for (const line of lines) expect(line).toMatch(/^swe-[a-z0-9]{8}\s+paused\b/);
    const live = await sandboxes();
    expect(live.filter((s) => fleetOf(s) === 'swe').map((s) => s.status)).toEqual(['paused', 'paused']);
    expect(live.filter((s) => fleetOf(s) === 'other').map((s) => s.status)).toEqual(['running']);
    const listing = await project.run(['sandbox', 'ls']);
    expect(listing.stdout).toMatch(/swe-[a-z0-9]{8}\s+swe\s+paused/);
  });

  it('resumes them by label, with one JSON outcome per sandbox', async () => {
    const outcomes = await project.json<Outcome[]>(['sandbox', 'resume', '--label', 'dsec.io/fleet=swe']);
    expect(outcomes).toHaveLength(2);
    expect(outcomes.every((outcome) => outcome.ok && outcome.info?.status === 'running')).toBe(true);
    expect((await sandboxes()).every((s) => s.status === 'running')).toBe(true);
  });

  it('refuses pause with neither ids nor labels as a usage error', async () => {
    const result = await project.run(['sandbox', 'pause']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('name the sandboxes: one or more ids, or --label key=value');
    expect(result.stderr).toContain('[DSEC_USAGE]');
  });

  it('reports a sandbox it could not pause and exits 1, pausing the rest', async () => {
    const [first] = (await sandboxes()).filter((s) => fleetOf(s) === 'swe');
    const result = await project.run(['sandbox', 'pause', first.id, 'no-such-sandbox']);
    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(new RegExp(`^${first.id}\\s+paused`, 'm'));
    expect(result.stdout).toMatch(/^no-such-sandbox\s+failed\s+.*\[DSEC_SANDBOX_NOT_FOUND\]/m);
    expect((await project.run(['sandbox', 'resume', first.id])).code).toBe(0);
  });

  it('claims a sandbox for a holder, shows it in sandbox ls, refills the pool beside it, and recycles it on release', async () => {
    const [first] = (await sandboxes()).filter((s) => fleetOf(s) === 'swe');
    const claimed = await project.run(['sandbox', 'claim', first.id, '--holder', 'rollout-17', '--ttl', '30m']);
    expect(claimed.code, claimed.stderr).toBe(0);
    expect(claimed.stdout).toMatch(new RegExp(`^Sandbox ${first.id} is claimed by rollout-17 until \\d{4}-`));
    const listed = (await sandboxes()).find((s) => s.id === first.id)!;
    expect(listed.claim?.holder).toBe('rollout-17');
    expect((await project.run(['sandbox', 'ls'])).stdout).toContain('rollout-17 until');
    const held = await project.json<Sandbox[]>(['sandbox', 'ls', '--holder', 'rollout-17']);
    expect(held.map((s) => s.id)).toEqual([first.id]);
    // replicas (2) counts the unclaimed pool: a fresh one is made beside the claimed one, with no apply.
    await waitForSwe((swe) => swe.filter((s) => !s.claim && s.status === 'running').length === 2);
    const released = await project.run(['sandbox', 'release', first.id]);
    expect(released.code, released.stderr).toBe(0);
    expect(released.stdout).toBe(`Sandbox ${first.id} was recycled (destroyed; its pool made a fresh one in its place when it was acquired).\n`);
    const swe = await waitForSwe((list) => list.length === 2);
    expect(swe.map((s) => s.id)).not.toContain(first.id);
    expect(swe.every((s) => s.status === 'running' && !s.claim)).toBe(true);
  });

  /** Poll the swe fleet's sandboxes until `done`. */
  async function waitForSwe(done: (swe: Sandbox[]) => boolean): Promise<Sandbox[]> {
    for (let attempt = 0; ; attempt++) {
      const swe = (await sandboxes()).filter((s) => fleetOf(s) === 'swe');
      if (done(swe)) return swe;
      if (attempt > 100) throw new Error(`the swe fleet never got there: ${JSON.stringify(swe.map((s) => [s.id, s.status, s.claim?.holder]))}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  it('prints the node usage as JSON: counts by backend and state, requests and the fleets', async () => {
    const nodes = await project.json<
      { node: string; sandboxes: Record<string, Record<string, number>>; requested: { cpu: number; memoryMiB: number }; fleets: { fleet: string; sandboxes: number }[] }[]
    >(['nodes']);
    expect(nodes).toHaveLength(1);
    expect(nodes[0].sandboxes.container.running).toBe(3);
    expect(nodes[0].requested).toEqual({ cpu: 0.75, memoryMiB: 192 });
    expect(nodes[0].fleets.map((fleet) => [fleet.fleet, fleet.sandboxes]).sort()).toEqual([
      ['other', 1],
      ['swe', 2],
    ]);
    const text = await project.run(['nodes']);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^Node /);
    expect(text.stdout).toContain('sandboxes  container: 3 running');
  });

  it('plans a ttl change as an in-place update of the fleet, applies it without replacing a sandbox', async () => {
    const before = (await sandboxes()).filter((s) => fleetOf(s) === 'swe').map((s) => s.id).sort();
    project.edit('  swe:\n    environment: shell\n', '  swe:\n    environment: shell\n    ttl: { maxLifetime: 2h }\n');
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code, plan.stderr).toBe(2);
    expect(plan.stdout).toContain('~ fleet.swe  # will be updated in-place (ttl changed');
    expect(plan.stdout).toMatch(/\+ ttl\.maxLifetimeSeconds: +7200/);
    expect(plan.stdout).toContain('sandboxes: +0 create, ~2 update, -/+ 0 replace');
    expect(plan.stdout).not.toContain('fleet.other');
    expect(plan.stdout).toContain('Plan: 0 to add, 1 to change, 0 to destroy.');

    const applied = await project.run(['apply', '--auto-approve']);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    const after = (await sandboxes()).filter((s) => fleetOf(s) === 'swe');
    expect(after.map((s) => s.id).sort()).toEqual(before);
    expect(after.every((s) => s.ttl?.maxLifetimeSeconds === 7200)).toBe(true);
    expect((await project.run(['plan', '--detailed-exitcode'])).code).toBe(0);
  });

  it('warns before apply when a fleet does not fit under the node policy, and says by how much', async () => {
    // Leave 100 MiB admissible; the swe fleet already holds 128 and asks for 2 more of 64.
    const totalMiB = Math.floor(totalmem() / 1024 / 1024);
    const text = project.read('dsec.yaml');
    project.write(
      'dsec.yaml',
      text.replace(
        'version: 1\n',
        `version: 1\nplugins:\n  - name: density-admission\n    options: { overcommit: { cpu: 20, memory: 1 }, reserve: { cpu: 0, memoryMiB: ${totalMiB - 300} } }\n`,
      ),
    );
    // A new policy is read when the agent starts.
    await project.run(['agent', 'stop']);
    project.edit('    replicas: 2\n', '    replicas: 4\n');
    const plan = await project.run(['plan', '--json']);
    expect(plan.code, plan.stderr).toBe(0);
    const warnings = (JSON.parse(plan.stdout) as { warnings: string[] }).warnings;
    const warning = warnings.find((item) => item.startsWith('fleet "swe"'));
    expect(warning).toMatch(
      /^fleet "swe": 2 new sandboxes request 128 MiB of memory; node ".+" has \d+ MiB left under its policy \(memory 1x, \d+ MiB reserved\): \d+ MiB \(\d sandbox(es)?\) short$/,
    );
    const human = await project.run(['plan']);
    expect(human.stdout).toContain('Warning: fleet "swe": 2 new sandboxes request 128 MiB of memory');
  });
});
