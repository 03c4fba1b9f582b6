/** The oci, build and published layer sources, in dsec.yaml and dsec.ts alike. */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig, synthConfig } from '../../../core/config/index.js';
import { DEFINITIONS, loadErrors, summary, TempProject, where } from './fixtures.js';

const YAML = `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
  image: { kind: base, version: 2.0.0, source: { oci: { path: ./images/app.tar, image: "app:1" } } }
  tools:
    kind: toolkit
    version: 0.1.0
    source:
      build:
        from: [base@1.0.0]
        steps: ["mkdir -p /opt/tools", "rm /etc/group"]
        env: { B: two, A: one }
  work:
    kind: workspace
    version: 3.0.0
    source: { published: {} }
environments:
  shell: { layers: [base, work, tools] }
  app: { layers: [image] }
`;

const TS = `import { App, Environment, Layer } from ${JSON.stringify(DEFINITIONS)};

const app = new App();
const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const image = new Layer(app, 'image', { kind: 'base', version: '2.0.0', source: Layer.oci('./images/app.tar', 'app:1') });
const tools = new Layer(app, 'tools', {
  kind: 'toolkit',
  version: '0.1.0',
  source: Layer.build({ from: [base], steps: ['mkdir -p /opt/tools', 'rm /etc/group'], env: { B: 'two', A: 'one' } }),
});
const work = new Layer(app, 'work', { kind: 'workspace', version: '3.0.0', source: Layer.published() });
new Environment(app, 'shell', { layers: [base, work, tools] });
new Environment(app, 'app', { layers: [image] });
export default app;
`;

describe('the oci, build and published layer sources', () => {
  let project: TempProject;
  afterEach(() => project?.remove());

  it('become model sources: paths absolute, parents as name@version, build defaults filled', async () => {
    project = new TempProject();
    const { model, warnings } = await loadConfig(project.write('dsec.yaml', YAML));
    expect(model.layers.image.source).toEqual({ type: 'oci', path: path.join(project.dir, 'images/app.tar'), image: 'app:1' });
    expect(model.layers.tools.source).toEqual({
      type: 'build',
      from: ['base@1.0.0'],
      steps: ['mkdir -p /opt/tools', 'rm /etc/group'],
      env: { A: 'one', B: 'two' },
      workdir: '/',
    });
    expect(model.layers.work.source).toEqual({ type: 'published' });
    // A layer used only as a build parent is still used.
    expect(warnings.filter((warning) => warning.code === 'DSEC_CONFIG_UNUSED_LAYER')).toEqual([]);
  });

  it('synthesise byte-identically from dsec.ts with Layer.oci(), Layer.build() and Layer.published()', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const fromYaml = await loadConfig(project.write('dsec.yaml', YAML));
    const fromTs = await loadConfig(project.write('dsec.ts', TS));
    expect(synthConfig(fromTs.model)).toBe(synthConfig(fromYaml.model));
    expect(JSON.parse(synthConfig(fromTs.model)).layers.image.source).toEqual({ type: 'oci', path: './images/app.tar', image: 'app:1' });
  });

  it('counts a layer that is only a build parent as used, and still warns about an unused build', async () => {
    project = new TempProject();
    const text = YAML.replace('  shell: { layers: [base, work, tools] }\n', '  shell: { layers: [base, work] }\n');
    const { warnings } = await loadConfig(project.write('dsec.yaml', text));
    expect(warnings.map(summary)).toEqual([`DSEC_CONFIG_UNUSED_LAYER /layers/tools dsec.yaml:${where(text, 'tools:', 'tools')}`]);
  });

  it('locates a build cycle through two layers at each build', async () => {
    project = new TempProject();
    const text = `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
  a: { kind: toolkit, version: 1.0.0, source: { build: { from: [base, b], steps: ["true"] } } }
  b: { kind: toolkit, version: 1.0.0, source: { build: { from: [a], steps: ["true"] } } }
environments:
  shell: { layers: [base, a, b] }
`;
    const diagnostics = await loadErrors(project.write('dsec.yaml', text));
    expect(diagnostics.map(summary)).toEqual([
      `DSEC_CONFIG_CYCLE /layers/a/source/build/from dsec.yaml:${where(text, 'from: [base, b]', '[base, b]')}`,
      `DSEC_CONFIG_CYCLE /layers/b/source/build/from dsec.yaml:${where(text, 'from: [a]', '[a]')}`,
    ]);
    expect(diagnostics[0].message).toBe("layer 'a' is built on top of itself: a -> b -> a");
  });

  it('reports a build parent from another App at the dsec.ts line of the layer', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const text = `import { App, Environment, Layer } from ${JSON.stringify(DEFINITIONS)};

const app = new App();
const other = new App();
const stray = new Layer(other, 'stray', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const tools = new Layer(app, 'tools', { kind: 'toolkit', version: '1.0.0', source: Layer.build({ from: [stray], steps: ['true'] }) });
new Environment(app, 'shell', { layers: [base, tools] });
export default app;
`;
    const diagnostics = await loadErrors(project.write('dsec.ts', text));
    const found = diagnostics.find((diagnostic) => diagnostic.message.includes("parent layer 'stray' belongs to another App"));
    expect(found && summary(found)).toBe(`DSEC_CONFIG_UNKNOWN_LAYER /layers/tools/source/build/from/0 dsec.ts:${where(text, "new Layer(app, 'tools'")}`);
  });
});
