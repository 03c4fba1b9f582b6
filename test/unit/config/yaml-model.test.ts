/** A good dsec.yaml becomes the model: defaults filled, paths absolute, quantities converted. */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { isDsecError, type Diagnostic } from '../../../core/errors.js';
import { findConfigFile, loadConfig } from '../../../core/config/index.js';
import { summary, TempProject, where } from './fixtures.js';

const MINIMAL = `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
environments:
  shell:
    layers: [base]
fleets:
  workers:
    environment: shell
    replicas: 2
`;

const FULL = `version: 1
provider:
  local: { stateDir: state }
plugins:
  - ./policy.js
  - name: ./budget.js
    options: { maxReplicas: 10 }
  - some-package
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: { path: ./bin/busybox } }
  repo:
    kind: workspace
    version: 2.1.0-rc.1+build.5
    source: { tar: ./repo.tar.gz }
  hello:
    kind: toolkit
    version: 0.1.0
    source: { dir: ./toolkit }
environments:
  shell:
    layers: [base, repo@2.1.0-rc.1+build.5, hello]
    env: { GREETING: hi, A: b }
    workdir: /workspace
    user: "1000:1000"
fleets:
  workers:
    environment: shell
    backend: microvm
    replicas: 3
    resources: { cpu: 500m, memory: 1.5Gi, pids: 128 }
    network: none
    qos: latency-sensitive
    ttl: { maxLifetime: 2h, idleStop: 90 }
    density: { memorySharing: true }
    labels: { team: rl }
    update: { maxUnavailable: 2 }
`;

describe('loading a good dsec.yaml', () => {
  let project: TempProject;
  afterEach(() => project?.remove());

  it('fills in every default of a minimal config', async () => {
    project = new TempProject();
    const file = project.write('dsec.yaml', MINIMAL);
    const { model, warnings } = await loadConfig(file);
    expect(warnings).toEqual([]);
    expect(model.file).toBe(file);
    expect(model.dir).toBe(project.dir);
    expect(model.provider).toEqual({ type: 'local', stateDir: path.join(project.dir, '.dsec') });
    expect(model.plugins).toEqual([]);
    expect(model.layers.base).toEqual({
      ref: 'base@1.0.0',
      name: 'base',
      version: '1.0.0',
      kind: 'base',
      source: { type: 'busybox', path: '/bin/busybox' },
    });
    expect(model.environments.shell).toEqual({ name: 'shell', layers: ['base@1.0.0'], env: {}, workdir: '/', user: 'root' });
    expect(model.fleets.workers).toEqual({
      name: 'workers',
      environment: 'shell',
      backend: 'container',
      replicas: 2,
      resources: { cpu: 1, memoryMiB: 256, pids: 256 },
      network: 'none',
      qos: 'best-effort',
      ttl: {},
      density: { memorySharing: false, reclaimOnPause: true },
      labels: {},
      update: { maxUnavailable: 1 },
    });
  });

  it('makes paths absolute against the config folder and converts memory, cpu and durations', async () => {
    project = new TempProject();
    const { model } = await loadConfig(project.write('dsec.yaml', FULL));
    const at = (relative: string) => path.join(project.dir, relative);
    expect(model.provider).toEqual({ type: 'local', stateDir: at('state') });
    expect(model.plugins).toEqual([
      { name: at('policy.js'), options: {} },
      { name: at('budget.js'), options: { maxReplicas: 10 } },
      { name: 'some-package', options: {} },
    ]);
    expect(model.layers.base.source).toEqual({ type: 'busybox', path: at('bin/busybox') });
    expect(model.layers.repo.source).toEqual({ type: 'tar', path: at('repo.tar.gz') });
    expect(model.layers.hello.source).toEqual({ type: 'dir', path: at('toolkit') });
    expect(model.environments.shell).toEqual({
      name: 'shell',
      layers: ['base@1.0.0', 'repo@2.1.0-rc.1+build.5', 'hello@0.1.0'],
      env: { A: 'b', GREETING: 'hi' },
      workdir: '/workspace',
      user: '1000:1000',
    });
    expect(model.fleets.workers).toMatchObject({
      backend: 'microvm',
      resources: { cpu: 0.5, memoryMiB: 1536, pids: 128 },
      qos: 'latency-sensitive',
      ttl: { maxLifetimeSeconds: 7200, idleStopSeconds: 90 },
      density: { memorySharing: true, reclaimOnPause: true },
      labels: { team: 'rl' },
      update: { maxUnavailable: 2 },
    });
  });

  it('keeps maps in sorted order whatever the file order', async () => {
    project = new TempProject();
    const text = MINIMAL.replace('fleets:\n', 'fleets:\n  zeta:\n    environment: shell\n    replicas: 1\n') + '  alpha:\n    environment: shell\n    replicas: 1\n';
    const { model } = await loadConfig(project.write('dsec.yaml', text));
    expect(Object.keys(model.fleets)).toEqual(['alpha', 'workers', 'zeta']);
  });

  it('returns warnings, located, for an unused layer and a fleet of 0 replicas', async () => {
    project = new TempProject();
    const text = MINIMAL.replace('replicas: 2', 'replicas: 0').replace(
      'environments:',
      '  spare:\n    kind: toolkit\n    version: 1.0.0\n    source: { dir: ./spare }\nenvironments:',
    );
    const { warnings } = await loadConfig(project.write('dsec.yml', text));
    expect(warnings.map(summary)).toEqual([
      `DSEC_CONFIG_UNUSED_LAYER /layers/spare dsec.yml:${where(text, '  spare:', 'spare')}`,
      `DSEC_CONFIG_EMPTY_FLEET /fleets/workers/replicas dsec.yml:${where(text, 'replicas: 0', '0')}`,
    ]);
    expect(warnings.every((w) => w.severity === 'warning')).toBe(true);
  });
});

describe('plugins during loading', () => {
  let project: TempProject;
  afterEach(() => project?.remove());

  it('runs configLoaded as a waterfall and fails the load on errors a validate tap pushes', async () => {
    project = new TempProject();
    const text = MINIMAL;
    const file = project.write('dsec.yaml', text);
    const dsec = new Dsec().use({
      name: 'budget',
      apply(d) {
        d.hooks.configLoaded.tap('budget', (model) => ({ ...model, plugins: [{ name: 'added', options: {} }] }));
        d.hooks.validate.tap('budget', (model, diagnostics: Diagnostic[]) => {
          expect(model.plugins[0].name).toBe('added');
          diagnostics.push({ code: 'DSEC_PLAN_VETOED', severity: 'error', message: 'too many', path: '/fleets/workers/replicas' });
        });
      },
    });
    const error = await loadConfig(file, { dsec }).catch((e: unknown) => e);
    expect(isDsecError(error, 'DSEC_CONFIG_INVALID')).toBe(true);
    const diagnostics = (error as { diagnostics: Diagnostic[] }).diagnostics;
    expect(diagnostics.map(summary)).toEqual([`DSEC_PLAN_VETOED /fleets/workers/replicas dsec.yaml:${where(text, 'replicas: 2', '2')}`]);
  });

  it('returns the warnings a validate tap pushes and the model configLoaded returned', async () => {
    project = new TempProject();
    const dsec = new Dsec().use({
      name: 'advisor',
      apply(d) {
        d.hooks.configLoaded.tap('advisor', (model) => ({ ...model, fleets: {} }));
        d.hooks.validate.tap('advisor', (_model, diagnostics) => {
          diagnostics.push({ code: 'DSEC_CONFIG_EMPTY_FLEET', severity: 'warning', message: 'note', path: '/fleets' });
        });
      },
    });
    const { model, warnings } = await loadConfig(project.write('dsec.yaml', MINIMAL), { dsec });
    expect(model.fleets).toEqual({});
    expect(warnings.map((w) => w.message)).toEqual(['note']);
  });
});

describe('finding the config file', () => {
  let project: TempProject;
  afterEach(() => project?.remove());

  it('finds dsec.yaml, dsec.yml or dsec.ts in a folder', () => {
    for (const name of ['dsec.yaml', 'dsec.yml', 'dsec.ts']) {
      project = new TempProject();
      const file = project.write(name, 'version: 1\n');
      expect(findConfigFile(project.dir)).toBe(file);
      project.remove();
    }
  });

  it('throws DSEC_CONFIG_NOT_FOUND naming the folder when there is none', () => {
    project = new TempProject();
    expect(() => findConfigFile(project.dir)).toThrow(expect.objectContaining({ code: 'DSEC_CONFIG_NOT_FOUND', message: `no dsec.yaml or dsec.ts in ${project.dir}` }));
  });

  it('throws DSEC_CONFIG_AMBIGUOUS when both a dsec.ts and a dsec.yaml are there', () => {
    project = new TempProject();
    project.write('dsec.ts', 'export default {};\n');
    project.write('dsec.yaml', 'version: 1\n');
    expect(() => findConfigFile(project.dir)).toThrow(expect.objectContaining({ code: 'DSEC_CONFIG_AMBIGUOUS' }));
  });

  it('throws DSEC_CONFIG_NOT_FOUND when loading a dsec.yaml or dsec.ts that does not exist', async () => {
    project = new TempProject();
    await expect(loadConfig(project.file('dsec.yaml'))).rejects.toMatchObject({ code: 'DSEC_CONFIG_NOT_FOUND' });
    await expect(loadConfig(project.file('dsec.ts'))).rejects.toMatchObject({ code: 'DSEC_CONFIG_NOT_FOUND' });
  });
});
