/**
 * examples/typescript through the real CLI: a dsec.ts, loaded like a
 * dsec.yaml (through `dsec/definitions` from the project's node_modules),
 * applied into running sandboxes, then destroyed.
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { Project, runcContainers, type SandboxJson } from './harness.js';

describe('the TypeScript example', () => {
  const project = Project.copy('typescript');
  afterAll(() => project.cleanup());

  const sandboxes = () => project.json<SandboxJson[]>(['sandbox', 'ls']);

  it('validates, found as dsec.ts without -f', async () => {
    const result = await project.run(['validate', '--json']);
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ valid: true, file: project.file('dsec.ts') });
  });

  it('applies into two running sandboxes with the declared labels and limits', async () => {
    const result = await project.run(['apply', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    expect(result.stdout).toContain('Apply complete! Resources: 3 added, 0 changed, 0 destroyed.');
    const live = await sandboxes();
    expect(live).toHaveLength(2);
    for (const sandbox of live) {
      expect(sandbox.status).toBe('running');
      expect(sandbox.labels).toMatchObject({ example: 'typescript', 'dsec.io/fleet': 'workers' });
      expect(sandbox.resources.memoryMiB).toBe(64);
    }
    expect(runcContainers(project)).toHaveLength(2);
  });

  it('runs the toolkit layer\'s hello with the environment\'s variables', async () => {
    const [first] = await sandboxes();
    const result = await project.run(['sandbox', 'exec', first.id, '--', 'hello']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(`hello from a dsec sandbox, from ${first.id}\n`);
  });

  it('plans no changes after apply', async () => {
    const result = await project.run(['plan', '--detailed-exitcode']);
    expect(result.code, result.stdout).toBe(0);
    expect(result.stdout).toContain('No changes.');
  });

  it('destroys everything', async () => {
    const result = await project.run(['destroy', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    expect(result.stdout).toContain('Destroy complete! Resources: 3 destroyed.');
    expect(await sandboxes()).toEqual([]);
    expect(runcContainers(project)).toEqual([]);
    expect(await project.json<string[]>(['state', 'list'])).toEqual([]);
  });
});

describe('a mistake in a dsec.ts', () => {
  const project = Project.copy('typescript');
  afterAll(() => project.cleanup());

  it('is reported at the line of the construct, with its path, and nothing is started or written', async () => {
    project.edit("new Fleet(app, 'workers', {\n  environment: shell,", "new Fleet(app, 'workers', {\n  environment: 'shel',", 'dsec.ts');
    for (const command of [['validate'], ['plan'], ['apply', '--auto-approve']]) {
      const result = await project.run(command);
      expect(result.code, result.stdout).toBe(1);
      expect(result.stderr).toMatch(/dsec\.ts:25:1: error DSEC_CONFIG_UNKNOWN_ENVIRONMENT at \/fleets\/workers\/environment: .*did you mean 'shell'/);
    }
    expect(runcContainers(project)).toEqual([]);
    expect(existsSync(project.file('.dsec'))).toBe(false);
  });
});
