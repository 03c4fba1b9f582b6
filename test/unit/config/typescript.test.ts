/**
 * dsec.ts goes through the same checks as dsec.yaml: the example loads and
 * synthesises byte-identically to its YAML twin, and a construct's problem
 * points at the dsec.ts line that made it.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isDsecError, type Diagnostic } from '../../../core/errors.js';
import { loadConfig, synthConfig } from '../../../core/config/index.js';
import { DEFINITIONS, loadErrors, REPO, summary, TempProject, where } from './fixtures.js';

const EXAMPLE = path.join(REPO, 'examples/typescript/dsec.ts');

/** The example's declaration, in YAML. */
const EXAMPLE_AS_YAML = `version: 1
provider: { local: {} }
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
  hello: { kind: toolkit, version: 0.1.0, source: { dir: ./toolkit } }
environments:
  shell:
    layers: [base, hello]
    env: { GREETING: hello from a dsec sandbox }
fleets:
  workers:
    environment: shell
    replicas: 2
    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }
    density: { memorySharing: true, reclaimOnPause: true }
    labels: { example: typescript }
`;

const program = (body: string) => `import { App, Environment, Fleet, Layer, Stack } from ${JSON.stringify(DEFINITIONS)};

const app = new App();
${body}
export default app;
`;

const BASE_AND_SHELL = `const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const shell = new Environment(app, 'shell', { layers: [base] });
`;

describe('loading dsec.ts', () => {
  let project: TempProject | undefined;
  afterEach(() => {
    project?.remove();
    project = undefined;
  });

  it('loads the TypeScript example, which synthesises byte-identically to the same declaration in YAML', async () => {
    const built = path.join(REPO, 'dist/core/definitions/index.js');
    expect(existsSync(built), 'the example imports dsec/definitions from dist/: run `npm run build` first').toBe(true);
    const fromTs = await loadConfig(EXAMPLE);
    expect(fromTs.warnings).toEqual([]);
    expect(fromTs.model.layers.hello.source).toEqual({ type: 'dir', path: path.join(REPO, 'examples/typescript/toolkit') });
    expect(fromTs.model.fleets.workers.resources).toEqual({ cpu: 0.25, memoryMiB: 64, pids: 64 });
    project = new TempProject();
    const fromYaml = await loadConfig(project.write('dsec.yaml', EXAMPLE_AS_YAML));
    expect(synthConfig(fromTs.model)).toBe(synthConfig(fromYaml.model));
  });

  it('synthesises lifetimes, QoS and density switches byte-identically to the same fleet in YAML, defaults included', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const fromTs = await loadConfig(
      project.write(
        'dsec.ts',
        program(`${BASE_AND_SHELL}new Fleet(app, 'swe', {
  environment: shell,
  replicas: 3,
  qos: 'latency-sensitive',
  ttl: { maxLifetime: '2h', idleStop: 600 },
  density: { reclaimOnPause: false },
});
new Fleet(app, 'plain', { environment: shell, replicas: 1 });
`),
      ),
    );
    const yaml = `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
fleets:
  plain: { environment: shell, replicas: 1 }
  swe:
    environment: shell
    replicas: 3
    qos: latency-sensitive
    ttl: { maxLifetime: 2h, idleStop: 600 }
    density: { reclaimOnPause: false }
`;
    const fromYaml = await loadConfig(project.write('dsec.yaml', yaml));
    expect(fromTs.model.fleets.swe.density).toEqual({ memorySharing: false, reclaimOnPause: false });
    expect(fromTs.model.fleets.swe.ttl).toEqual({ maxLifetimeSeconds: 7200, idleStopSeconds: 600 });
    expect(fromTs.model.fleets.plain.density).toEqual({ memorySharing: false, reclaimOnPause: true });
    expect(synthConfig(fromTs.model)).toBe(synthConfig(fromYaml.model));
  });

  for (const mode of ['an ESM package', 'a CommonJS folder (no "type": "module")']) {
    it(`points a construct's error at the dsec.ts line that made it, in ${mode}`, async () => {
      project = new TempProject();
      if (mode === 'an ESM package') project.write('package.json', '{ "type": "module" }\n');
      const text = program(`${BASE_AND_SHELL}const options = { environment: shell, replicas: -3 };
new Fleet(app, 'workers', options);
new Environment(app, 'other', { layers: [base, 'pyton'] });
`);
      const diagnostics = await loadErrors(project.write('dsec.ts', text));
      expect(diagnostics.map(summary)).toEqual([
        `DSEC_CONFIG_INVALID_VALUE /fleets/workers/replicas dsec.ts:${where(text, "new Fleet(app, 'workers'")}`,
        `DSEC_CONFIG_UNKNOWN_LAYER /environments/other/layers/1 dsec.ts:${where(text, "new Environment(app, 'other'")}`,
      ]);
      expect(diagnostics[0].message).toBe('[workers] expected an integer between 0 and 100000, got -3');
      expect(diagnostics[1].message).toBe("[other] unknown layer 'pyton' (declared: base)");
    });
  }

  it('resolves relative source paths against the dsec.ts folder, not the working folder', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const file = project.write('nested/dsec.ts', program(`${BASE_AND_SHELL}new Layer(app, 'tools', { kind: 'toolkit', version: '1.0.0', source: Layer.tar('../tools.tar.gz') });
new Environment(app, 'full', { layers: [base, 'tools@1.0.0'] });
new Fleet(app, 'workers', { environment: shell, replicas: 1 });
`));
    const { model } = await loadConfig(file);
    expect(model.layers.tools.source).toEqual({ type: 'tar', path: project.file('tools.tar.gz') });
    expect(model.environments.full.layers).toEqual(['base@1.0.0', 'tools@1.0.0']);
    expect(model.dir).toBe(project.file('nested'));
  });

  it('reports a name declared in two stacks as a duplicate at the second declaration', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const text = program(`${BASE_AND_SHELL}const tools = new Stack(app, 'tools');
new Fleet(app, 'workers', { environment: shell, replicas: 1 });
new Fleet(tools, 'workers', { environment: 'shell', replicas: 2 });
`);
    const diagnostics = await loadErrors(project.write('dsec.ts', text));
    expect(diagnostics.map(summary)).toEqual([
      `DSEC_CONFIG_DUPLICATE /fleets/workers dsec.ts:${where(text, "new Fleet(tools, 'workers'")}`,
    ]);
    expect(diagnostics[0].message).toBe("[tools/workers] duplicate fleet 'workers': also declared at workers");
  });

  it('reports a layer from another App at the environment that uses it', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const text = program(`${BASE_AND_SHELL}const otherApp = new App();
const stray = new Layer(otherApp, 'stray', { kind: 'toolkit', version: '1.0.0', source: Layer.dir('./x') });
new Environment(app, 'mixed', { layers: [base, stray] });
`);
    const diagnostics = await loadErrors(project.write('dsec.ts', text));
    const codes = diagnostics.map(summary);
    expect(codes).toContain(`DSEC_CONFIG_UNKNOWN_LAYER /environments/mixed/layers/1 dsec.ts:${where(text, "new Environment(app, 'mixed'")}`);
    expect(diagnostics.find((d) => d.message.includes('belongs to another App'))).toBeDefined();
  });

  it('accepts a plain object in the dsec.yaml shape as the default export', async () => {
    project = new TempProject();
    const file = project.write('dsec.ts', `export default {
  version: 1,
  layers: { base: { kind: 'base', version: '1.0.0', source: { dir: './rootfs' } } },
  environments: { shell: { layers: ['base'] } },
  fleets: { workers: { environment: 'shell', replicas: 1 } },
};
`);
    const { model } = await loadConfig(file);
    expect(model.layers.base.source).toEqual({ type: 'dir', path: project.file('rootfs') });
  });

  it('locates problems of a plain-object export at the top of the file', async () => {
    project = new TempProject();
    const file = project.write('dsec.ts', 'export default { version: 1, fleets: { w: { environment: "none", replicas: 1 } } };\n');
    const diagnostics = await loadErrors(file);
    expect(diagnostics.map(summary)).toEqual(['DSEC_CONFIG_UNKNOWN_ENVIRONMENT /fleets/w/environment dsec.ts:1:1']);
  });
});

describe('a dsec.ts that cannot be loaded', () => {
  let project: TempProject | undefined;
  afterEach(() => {
    project?.remove();
    project = undefined;
  });

  async function loadError(text: string): Promise<{ message: string; diagnostic: Diagnostic; text: string }> {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const file = project.write('dsec.ts', text);
    const error = await loadConfig(file).catch((e: unknown) => e);
    if (!isDsecError(error, 'DSEC_CONFIG_TS_LOAD')) throw new Error(`expected DSEC_CONFIG_TS_LOAD, got ${String(error)}`);
    expect(error.diagnostics).toHaveLength(1);
    return { message: error.message, diagnostic: error.diagnostics[0], text };
  }

  it('reports a throw while running as DSEC_CONFIG_TS_LOAD with its message and line', async () => {
    const { message, diagnostic, text } = await loadError(program(`${BASE_AND_SHELL}throw new Error('no such thing');
`));
    expect(message).toMatch(/^could not load .*dsec\.ts: no such thing$/);
    expect(summary(diagnostic)).toBe(`DSEC_CONFIG_TS_LOAD  dsec.ts:${where(text, "throw new Error('no such thing')", "new Error")}`);
  });

  it('reports a syntax error as DSEC_CONFIG_TS_LOAD at its line', async () => {
    const { diagnostic } = await loadError('const a = ;\nexport default a;\n');
    expect(diagnostic.location?.line).toBe(1);
    expect(diagnostic.code).toBe('DSEC_CONFIG_TS_LOAD');
  });

  it('reports a missing default export', async () => {
    const { message } = await loadError('export const app = 1;\n');
    expect(message).toMatch(/it has no default export/);
  });

  it('explains a layer and an environment given the same id in one scope', async () => {
    const { message } = await loadError(program(`${BASE_AND_SHELL}new Fleet(app, 'base', { environment: shell, replicas: 1 });
`));
    expect(message).toMatch(/'base' is already used by a Layer in the App: ids are unique within a scope, across kinds/);
  });
});
