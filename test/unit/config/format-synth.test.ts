/** formatDiagnostics' one-line form, and synthConfig's deterministic, portable JSON. */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Diagnostic } from '../../../core/errors.js';
import { formatDiagnostics, loadConfig, synthConfig } from '../../../core/config/index.js';
import { TempProject } from './fixtures.js';

const CONFIG = `version: 1
fleets:
  workers:
    replicas: 3
    environment: shell
environments:
  shell:
    env: { Z: z, A: a }
    layers: [base, hello]
layers:
  hello: { kind: toolkit, version: 0.1.0, source: { dir: ./toolkit } }
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
`;

describe('formatDiagnostics', () => {
  const diagnostic: Diagnostic = {
    code: 'DSEC_CONFIG_UNKNOWN_LAYER',
    severity: 'error',
    message: "unknown layer 'pyton' (declared: base, hello)",
    path: '/environments/shell/layers/1',
    location: { file: path.join(process.cwd(), 'dsec.yaml'), line: 12, col: 15 },
  };

  it('prints one line per diagnostic: file:line:col, severity, code, path and message', () => {
    const warning: Diagnostic = { code: 'DSEC_CONFIG_EMPTY_FLEET', severity: 'warning', message: 'empty', path: '/fleets/a/replicas' };
    expect(formatDiagnostics([diagnostic, warning])).toBe(
      "dsec.yaml:12:15: error DSEC_CONFIG_UNKNOWN_LAYER at /environments/shell/layers/1: unknown layer 'pyton' (declared: base, hello)\n" +
        'warning DSEC_CONFIG_EMPTY_FLEET at /fleets/a/replicas: empty',
    );
  });

  it('shows files outside the working folder with their absolute path', () => {
    const outside = { ...diagnostic, location: { file: '/elsewhere/dsec.yaml', line: 1, col: 2 } };
    expect(formatDiagnostics([outside])).toMatch(/^\/elsewhere\/dsec\.yaml:1:2: error /);
  });

  it('colours severity and code only when asked', () => {
    expect(formatDiagnostics([diagnostic], { color: true })).toContain('\u001b[');
    expect(formatDiagnostics([diagnostic], { color: false })).not.toContain('\u001b[');
  });
});

describe('synthConfig', () => {
  let projects: TempProject[] = [];
  afterEach(() => {
    for (const project of projects) project.remove();
    projects = [];
  });

  it('writes sorted keys, 2-space indent and a trailing newline, without file and dir', async () => {
    const project = new TempProject();
    projects.push(project);
    const { model } = await loadConfig(project.write('dsec.yaml', CONFIG));
    const json = synthConfig(model);
    expect(json.endsWith('}\n')).toBe(true);
    expect(json).toContain('\n  "environments": {\n');
    const parsed = JSON.parse(json) as Record<string, unknown>;
    expect(Object.keys(parsed)).toEqual(['environments', 'fleets', 'layers', 'plugins', 'provider', 'version']);
    expect(parsed).not.toHaveProperty('file');
    expect(parsed).not.toHaveProperty('dir');
    expect(json.indexOf('"A": "a"')).toBeLessThan(json.indexOf('"Z": "z"'));
  });

  it('shows source and state paths relative to the config folder, so two checkouts synthesise the same bytes', async () => {
    const first = new TempProject();
    const second = new TempProject();
    projects.push(first, second);
    const a = synthConfig((await loadConfig(first.write('dsec.yaml', CONFIG))).model);
    const b = synthConfig((await loadConfig(second.write('sub/dsec.yaml', CONFIG))).model);
    expect(a).toBe(b);
    const parsed = JSON.parse(a) as { layers: Record<string, { source: unknown }>; provider: unknown };
    expect(parsed.layers.hello.source).toEqual({ type: 'dir', path: './toolkit' });
    expect(parsed.layers.base.source).toEqual({ type: 'busybox', path: '/bin/busybox' });
    expect(parsed.provider).toEqual({ type: 'local', stateDir: './.dsec' });
  });

  it('gives byte-identical output for the same declaration written in another key order', async () => {
    const project = new TempProject();
    projects.push(project);
    const reordered = CONFIG.replace('env: { Z: z, A: a }', 'env: { A: a, Z: z }').replace(
      '    replicas: 3\n    environment: shell\n',
      '    environment: shell\n    replicas: 3\n',
    );
    const a = synthConfig((await loadConfig(project.write('a/dsec.yaml', CONFIG))).model);
    const b = synthConfig((await loadConfig(project.write('b/dsec.yaml', reordered))).model);
    expect(a).toBe(b);
  });
});
