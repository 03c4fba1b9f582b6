/** The construct classes on their own: synthesis, tree validation, recorded locations. */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { isDsecError } from '../../../core/errors.js';
import { App, Environment, Fleet, Layer, Stack } from '../../../core/definitions/index.js';

const THIS_FILE = fileURLToPath(import.meta.url);

function quickstart(): App {
  const app = new App({ provider: { local: {} }, plugins: ['./policy.js'] });
  const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
  const hello = new Layer(app, 'hello', { kind: 'toolkit', version: '0.1.0', source: Layer.dir('./toolkit') });
  const shell = new Environment(app, 'shell', { layers: [base, hello], env: { GREETING: 'hi' } });
  new Fleet(app, 'workers', { environment: shell, replicas: 3, resources: { cpu: 0.5, memory: '128Mi' } });
  return app;
}

describe('App.synth', () => {
  it('returns the plain document in the dsec.yaml shape, with only what was set', () => {
    expect(quickstart().synth()).toEqual({
      version: 1,
      provider: { local: {} },
      plugins: ['./policy.js'],
      layers: {
        base: { kind: 'base', version: '1.0.0', source: { busybox: {} } },
        hello: { kind: 'toolkit', version: '0.1.0', source: { dir: './toolkit' } },
      },
      environments: { shell: { layers: ['base', 'hello'], env: { GREETING: 'hi' } } },
      fleets: { workers: { environment: 'shell', replicas: 3, resources: { cpu: 0.5, memory: '128Mi' } } },
    });
  });

  it('gives the same JSON every time for the same program', () => {
    expect(JSON.stringify(quickstart().synth())).toBe(JSON.stringify(quickstart().synth()));
  });

  it('names constructs inside a Stack by their own id, without a prefix', () => {
    const app = new App();
    const tools = new Stack(app, 'tools');
    new Layer(tools, 'hello', { kind: 'toolkit', version: '1.0.0', source: Layer.tar('./hello.tar.gz') });
    expect(Object.keys(app.synth().layers ?? {})).toEqual(['hello']);
    expect(app.synth().layers?.hello.source).toEqual({ tar: './hello.tar.gz' });
  });

  it('accepts layer and environment names (and name@version) instead of constructs', () => {
    const app = new App();
    new Environment(app, 'shell', { layers: ['base@1.0.0', 'hello'], workdir: '/work', user: 'agent' });
    new Fleet(app, 'workers', { environment: 'shell', replicas: 0, labels: { team: 'rl' } });
    const document = app.synth();
    expect(document.environments?.shell).toEqual({ layers: ['base@1.0.0', 'hello'], workdir: '/work', user: 'agent' });
    expect(document.fleets?.workers).toEqual({ environment: 'shell', replicas: 0, labels: { team: 'rl' } });
  });

  it('makes busybox sources with and without a binary path', () => {
    expect(Layer.busybox()).toEqual({ busybox: {} });
    expect(Layer.busybox('/opt/busybox')).toEqual({ busybox: { path: '/opt/busybox' } });
    const app = new App();
    expect(new Layer(app, 'python', { kind: 'base', version: '3.11.9', source: Layer.busybox() }).ref).toBe('python@3.11.9');
  });
});

describe('App.validate', () => {
  it('collects every problem of the tree, each prefixed with its construct path and located at its construction', () => {
    const app = new App();
    const other = new App();
    const stray = new Layer(other, 'stray', { kind: 'toolkit', version: '1.0.0', source: Layer.dir('./x') });
    const strayEnvironment = new Environment(other, 'elsewhere', { layers: ['stray'] });
    const first = new Stack(app, 'first');
    const second = new Stack(app, 'second');
    new Environment(first, 'shell', { layers: [stray] }); const line = lineOf('new Environment(first');
    new Fleet(first, 'web', { environment: strayEnvironment, replicas: 1 });
    new Fleet(second, 'web', { environment: 'shell', replicas: 1 });
    const diagnostics = app.validate();
    expect(diagnostics.map((d) => [d.code, d.path, d.message])).toEqual([
      ['DSEC_CONFIG_UNKNOWN_LAYER', '/environments/shell/layers/0', "[first/shell] layer 'stray' belongs to another App (stray); create it in this App or pass its name"],
      ['DSEC_CONFIG_UNKNOWN_ENVIRONMENT', '/fleets/web/environment', "[first/web] environment 'elsewhere' belongs to another App (elsewhere); create it in this App or pass its name"],
      ['DSEC_CONFIG_DUPLICATE', '/fleets/web', "[second/web] duplicate fleet 'web': also declared at first/web"],
    ]);
    expect(diagnostics[0].location).toEqual({ file: THIS_FILE, line, col: 5 });
  });

  it('reports validations added with node.addValidation', () => {
    const app = new App();
    const fleet = new Fleet(app, 'web', { environment: 'shell', replicas: 1 });
    fleet.node.addValidation({ validate: () => ['web needs a budget label'] });
    expect(app.validate().map((d) => [d.code, d.message])).toEqual([['DSEC_CONFIG_INVALID_VALUE', '[web] web needs a budget label']]);
  });

  it('makes synth throw DSEC_CONFIG_INVALID with the problems, unless told to skip validation', () => {
    const app = new App();
    new Fleet(new Stack(app, 'x'), 'web', { environment: 'shell', replicas: 1 });
    new Fleet(new Stack(app, 'y'), 'web', { environment: 'shell', replicas: 2 });
    let thrown: unknown;
    try {
      app.synth();
    } catch (error) {
      thrown = error;
    }
    expect(isDsecError(thrown, 'DSEC_CONFIG_INVALID')).toBe(true);
    expect((thrown as { diagnostics: unknown[] }).diagnostics).toHaveLength(1);
    expect(app.synth({ skipValidation: true }).fleets?.web.replicas).toBe(1);
  });

  it('refuses two constructs of any kinds with one id in one scope, saying why', () => {
    const app = new App();
    new Layer(app, 'python', { kind: 'base', version: '3.11.9', source: Layer.busybox() });
    expect(() => new Environment(app, 'python', { layers: ['python'] })).toThrow(
      /'python' is already used by a Layer in the App: ids are unique within a scope, across kinds/,
    );
  });
});

describe('construct sources', () => {
  it('record the document path, the construct path and the line of each construction', () => {
    const app = new App(); const appLine = lineOf('const app = new App(); const appLine');
    const tools = new Stack(app, 'tools');
    new Layer(tools, 'a/b', { kind: 'toolkit', version: '1.0.0', source: Layer.dir('.') }); const layerLine = lineOf("new Layer(tools, 'a/b'");
    const sources = app.constructSources();
    expect(sources.map((s) => [s.kind, s.path, s.constructPath, s.location?.line, s.exact])).toEqual([
      ['App', '', '', appLine, true],
      ['Layer', '/layers/a~1b', 'tools/a--b', layerLine, true],
    ]);
    expect(sources[1].location?.file).toBe(THIS_FILE);
  });
});

/** The 1-based line of this file holding `text` (its first occurrence). */
function lineOf(text: string): number {
  return readFileSync(THIS_FILE, 'utf8').split('\n').findIndex((line) => line.includes(text)) + 1;
}
