/**
 * Narrowing and forcing a plan through the real CLI (`--target`,
 * `--replace`, `--refresh=false`), and the commands that only read the
 * config (`graph`, `synth`).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { Project, runcContainers, type SandboxJson } from './harness.js';

/** Two fleets on two environments; only fleet.b uses the `extra` layer. */
const CONFIG = `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
  extra:
    kind: toolkit
    version: 0.1.0
    source: { dir: ./extra }
environments:
  shell:
    layers: [base]
  tooled:
    layers: [base, extra]
    env: { MODE: tooled }
fleets:
  a:
    environment: shell
    replicas: 2
    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }
  b:
    environment: tooled
    replicas: 1
    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }
    labels: { team: b }
`;

/** The same declaration in TypeScript. */
const CONFIG_TS = `import { App, Environment, Fleet, Layer } from 'dsec/definitions';

const app = new App();
const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const extra = new Layer(app, 'extra', { kind: 'toolkit', version: '0.1.0', source: Layer.dir('./extra') });
const shell = new Environment(app, 'shell', { layers: [base] });
const tooled = new Environment(app, 'tooled', { layers: [base, extra], env: { MODE: 'tooled' } });
new Fleet(app, 'a', { environment: shell, replicas: 2, resources: { cpu: 0.25, memory: '64Mi', pids: 64 } });
new Fleet(app, 'b', { environment: tooled, replicas: 1, resources: { cpu: 0.25, memory: '64Mi', pids: 64 }, labels: { team: 'b' } });
export default app;
`;

interface PlanJson {
  resource_changes: { address: string; action_reason?: string; change: { actions: string[] } }[];
}

describe('targeted, forced and state-only plans', () => {
  const project = Project.copy();
  project.write('dsec.yaml', CONFIG);
  mkdirSync(project.file('extra/bin'), { recursive: true });
  project.write('extra/bin/extra', '#!/bin/sh\necho extra\n');
  afterAll(() => project.cleanup());

  const sandboxes = (fleet: string) => project.json<SandboxJson[]>(['sandbox', 'ls', '--fleet', fleet]);
  const ids = async (fleet: string) => (await sandboxes(fleet)).map((s) => s.id).sort();

  it('plans only fleet.a and its layer with --target fleet.a', async () => {
    const result = await project.run(['plan', '--target', 'fleet.a']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/\+ layer\.base@1\.0\.0/);
    expect(result.stdout).toMatch(/\+ fleet\.a\b/);
    expect(result.stdout).not.toContain('fleet.b');
    expect(result.stdout).not.toContain('layer.extra');
    expect(result.stdout).toContain('Plan: 2 to add, 0 to change, 0 to destroy.');
    const json = await project.json<PlanJson>(['plan', '--target', 'fleet.a']);
    expect(json.resource_changes.map((c) => c.address).sort()).toEqual(['fleet.a', 'layer.base@1.0.0']);
  });

  it("creates only fleet.a's sandboxes with apply --target fleet.a", async () => {
    const result = await project.run(['apply', '--target', 'fleet.a', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    expect(result.stdout).toContain('Apply complete! Resources: 2 added, 0 changed, 0 destroyed.');
    expect(await ids('a')).toHaveLength(2);
    expect(await sandboxes('b')).toHaveLength(0);
    expect(runcContainers(project)).toHaveLength(2);
    expect(await project.json<string[]>(['state', 'list'])).toEqual(['fleet.a', 'layer.base@1.0.0']);
    // The rest is still to do.
    const rest = await project.json<PlanJson>(['plan']);
    const pending = rest.resource_changes.filter((c) => c.change.actions[0] !== 'no-op').map((c) => c.address);
    expect(pending.sort()).toEqual(['fleet.b', 'layer.extra@0.1.0']);
    const all = await project.run(['apply', '--auto-approve']);
    expect(all.code, all.stderr + all.stdout).toBe(0);
    expect(await ids('b')).toHaveLength(1);
  });

  it('plans -/+ fleet.a with --replace fleet.a, replace_by_request in --json, and nothing for fleet.b', async () => {
    const result = await project.run(['plan', '--replace', 'fleet.a', '--detailed-exitcode']);
    expect(result.code).toBe(2);
    expect(result.stdout).toMatch(/^-\/\+ fleet\.a\b/m);
    expect(result.stdout).not.toMatch(/[-+~] fleet\.b/);
    expect(result.stdout).toContain('Plan: 1 to add, 0 to change, 1 to destroy.');
    const json = await project.json<PlanJson>(['plan', '--replace', 'fleet.a']);
    const a = json.resource_changes.find((c) => c.address === 'fleet.a');
    expect(a?.change.actions).toEqual(['delete', 'create']);
    expect(a?.action_reason).toBe('replace_by_request');
    expect(json.resource_changes.find((c) => c.address === 'fleet.b')?.change.actions).toEqual(['no-op']);
  });

  it("gives fleet.a all-new sandboxes with apply --replace fleet.a, and leaves fleet.b's alone", async () => {
    const aBefore = await ids('a');
    const bBefore = await ids('b');
    const result = await project.run(['apply', '--replace', 'fleet.a', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const aAfter = await ids('a');
    expect(aAfter).toHaveLength(2);
    expect(aAfter.filter((id) => aBefore.includes(id))).toEqual([]);
    expect(await ids('b')).toEqual(bBefore);
    expect(runcContainers(project)).toHaveLength(3);
    expect((await project.run(['plan', '--detailed-exitcode'])).code).toBe(0);
  });

  it('plans from the state alone with --refresh=false: drift on the cluster goes unseen', async () => {
    const [victim] = await sandboxes('b');
    const container = runcContainers(project).find((c) => c.id.endsWith(`-${victim.id}`));
    expect(container).toBeDefined();
    execFileSync('runc', ['kill', container!.id, 'KILL']);
    // A refreshing plan sees it...
    const refreshed = await project.run(['plan', '--detailed-exitcode']);
    expect(refreshed.code, refreshed.stdout).toBe(2);
    expect(refreshed.stdout).toMatch(/-\/\+ fleet\.b\b/);
    // ...a plan from the state does not, and still knows what the state holds.
    const fromState = await project.run(['plan', '--refresh=false', '--detailed-exitcode']);
    expect(fromState.code, fromState.stderr + fromState.stdout).toBe(0);
    expect(fromState.stdout).toContain('No changes.');
    project.edit('replicas: 2', 'replicas: 3');
    const scaled = await project.json<PlanJson>(['plan', '--refresh=false']);
    const actions = Object.fromEntries(scaled.resource_changes.map((c) => [c.address, c.change.actions]));
    expect(actions).toEqual({ 'layer.base@1.0.0': ['no-op'], 'layer.extra@0.1.0': ['no-op'], 'fleet.a': ['update'], 'fleet.b': ['no-op'] });
    project.edit('replicas: 3', 'replicas: 2');
    // Apply heals the drift.
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    expect((await sandboxes('b')).map((s) => s.status)).toEqual(['running']);
  });

  it('prints the dependency graph as a DOT digraph naming every layer, environment and fleet', async () => {
    const result = await project.run(['graph']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^digraph dsec \{\n/);
    expect(result.stdout.trimEnd().endsWith('}')).toBe(true);
    for (const node of ['layer.base@1.0.0', 'layer.extra@0.1.0', 'environment.shell', 'environment.tooled', 'fleet.a', 'fleet.b']) {
      expect(result.stdout).toContain(`"${node}" [`);
    }
    expect(result.stdout).toContain('"layer.extra@0.1.0" -> "environment.tooled";');
    expect(result.stdout).toContain('"environment.tooled" -> "fleet.b";');
    expect(result.stdout).not.toContain('"layer.extra@0.1.0" -> "environment.shell"');
  });

  it('synthesises the same bytes from the YAML and from the same declaration in TypeScript', async () => {
    const fromYaml = await project.run(['synth']);
    expect(fromYaml.code, fromYaml.stderr).toBe(0);
    project.write('same.ts', CONFIG_TS);
    const fromTs = await project.run(['synth', '-f', 'same.ts']);
    expect(fromTs.code, fromTs.stderr).toBe(0);
    expect(fromTs.stdout).toBe(fromYaml.stdout);
    expect(JSON.parse(fromTs.stdout)).toMatchObject({ fleets: { a: { replicas: 2 }, b: { labels: { team: 'b' } } } });
  });
});

describe('synth of the examples', () => {
  const projects = [Project.copy('quickstart'), Project.copy('typescript')];
  afterAll(async () => {
    for (const project of projects) await project.cleanup();
  });

  it('gives byte-identical output on every run, for YAML and TypeScript alike', async () => {
    const [quickstart, typescript] = projects;
    const runs = await Promise.all([quickstart, quickstart, typescript, typescript].map((p) => p.run(['synth'])));
    for (const run of runs) expect(run.code, run.stderr).toBe(0);
    expect(runs[0].stdout).toBe(runs[1].stdout);
    expect(runs[2].stdout).toBe(runs[3].stdout);
    // The two examples declare the same stack on purpose, with different sizes.
    const yaml = JSON.parse(runs[0].stdout);
    const ts = JSON.parse(runs[2].stdout);
    expect(Object.keys(ts.layers)).toEqual(Object.keys(yaml.layers));
    expect(ts.environments.shell.layers).toEqual(yaml.environments.shell.layers);
    expect([yaml.fleets.workers.replicas, ts.fleets.workers.replicas]).toEqual([3, 2]);
    // Nothing in it depends on where the project lives.
    expect(runs[0].stdout).not.toContain(quickstart.dir);
    expect(runs[2].stdout).not.toContain(typescript.dir);
  });
});
