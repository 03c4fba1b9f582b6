/**
 * Bad input through the real CLI: every kind gets a located error, exit 1,
 * and touches nothing (no state written, running sandboxes left alone).
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { Project } from './harness.js';

const GOOD = `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
environments:
  shell:
    layers: [base]
fleets:
  web:
    environment: shell
    replicas: 1
`;

const BAD: Record<string, { from: string; to: string; code: string; where: RegExp }> = {
  'an unknown layer reference': { from: 'layers: [base]', to: 'layers: [bsae]', code: 'DSEC_CONFIG_UNKNOWN_LAYER', where: /dsec\.yaml:9:\d+/ },
  'an unknown environment': { from: 'environment: shell', to: 'environment: shel', code: 'DSEC_CONFIG_UNKNOWN_ENVIRONMENT', where: /dsec\.yaml:12:\d+/ },
  'a duplicate fleet name': { from: '    replicas: 1\n', to: '    replicas: 1\n  web:\n    environment: shell\n', code: 'DSEC_CONFIG', where: /dsec\.yaml:14:\d+/ },
  'a name with a slash': { from: '  web:', to: '  we/b:', code: 'DSEC_CONFIG', where: /dsec\.yaml:1[12]:\d+/ },
  'a name with ..': { from: '  web:', to: "  '..':", code: 'DSEC_CONFIG', where: /dsec\.yaml:11:\d+/ },
  'an over-long name': { from: '  web:', to: `  ${'w'.repeat(64)}:`, code: 'DSEC_CONFIG', where: /dsec\.yaml:11:\d+/ },
  'negative replicas': { from: 'replicas: 1', to: 'replicas: -2', code: 'DSEC_CONFIG', where: /dsec\.yaml:13:15/ },
  'absurd replicas': { from: 'replicas: 1', to: 'replicas: 10000000', code: 'DSEC_CONFIG', where: /dsec\.yaml:13:15/ },
  'a bad version': { from: 'version: 1.0.0', to: 'version: latest', code: 'DSEC_CONFIG', where: /dsec\.yaml:5:14/ },
  'an overcommit ratio below 1': {
    from: '    replicas: 1\n',
    to: '    replicas: 1\nplugins:\n  - name: density-admission\n    options:\n      overcommit: { memory: 0.5 }\n',
    code: 'DSEC_PLUGIN_OPTIONS',
    where: /dsec\.yaml:17:\d+/,
  },
  'a plugin that does not exist': {
    from: '    replicas: 1\n',
    to: '    replicas: 1\nplugins:\n  - name: ./no-such-plugin.js\n',
    code: 'DSEC_PLUGIN_LOAD',
    where: /dsec\.yaml:15:\d+/,
  },
  'a memory limit below what the container backend needs': {
    from: '    replicas: 1\n',
    to: '    replicas: 1\n    resources: { memory: 16Mi }\n',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    where: /dsec\.yaml:14:\d+/,
  },
};

describe('bad input', () => {
  const projects: Project[] = [];
  afterAll(async () => {
    for (const project of projects) await project.cleanup();
  });

  for (const [what, bad] of Object.entries(BAD)) {
    it(`rejects ${what} with its location, exit 1, and writes nothing`, async () => {
      const project = Project.copy();
      projects.push(project);
      project.write('dsec.yaml', GOOD.replace(bad.from, bad.to));
      for (const command of [['validate'], ['plan'], ['apply', '--auto-approve']]) {
        const result = await project.run(command);
        expect(result.code, `${command}: ${result.stdout}${result.stderr}`).toBe(1);
        expect(result.stderr).toContain(bad.code);
        expect(result.stderr).toMatch(bad.where);
      }
      expect(existsSync(project.file('.dsec'))).toBe(false);
    });
  }

  it('reports every error of a config at once', async () => {
    const project = Project.copy();
    projects.push(project);
    project.write('dsec.yaml', GOOD.replace('layers: [base]', 'layers: [nope]').replace('replicas: 1', 'replicas: -1'));
    const result = await project.run(['validate']);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/dsec\.yaml:9:\d+/);
    expect(result.stderr).toMatch(/dsec\.yaml:13:\d+/);
  });

  it('says where to look when there is no config', async () => {
    const project = Project.copy();
    projects.push(project);
    const result = await project.run(['plan']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('DSEC_CONFIG_NOT_FOUND');
  });

  it('leaves running sandboxes untouched when a later config is broken', async () => {
    const project = Project.copy();
    projects.push(project);
    project.write('dsec.yaml', GOOD);
    expect((await project.run(['apply', '--auto-approve'])).code).toBe(0);
    const before = await project.json<{ id: string }[]>(['sandbox', 'ls']);
    const stateBefore = project.read('.dsec/state.json');
    project.write('dsec.yaml', GOOD.replace('replicas: 1', 'replicas: -1'));
    expect((await project.run(['apply', '--auto-approve'])).code).toBe(1);
    project.write('dsec.yaml', GOOD);
    const after = await project.json<{ id: string; status: string }[]>(['sandbox', 'ls']);
    expect(after.map((s) => s.id)).toEqual(before.map((s) => s.id));
    expect(after[0].status).toBe('running');
    expect(project.read('.dsec/state.json')).toBe(stateBefore);
  });
});
