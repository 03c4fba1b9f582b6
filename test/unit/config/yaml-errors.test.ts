/**
 * Every kind of bad dsec.yaml: each test checks the error code, the document
 * path and the file:line:col of the offending node.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isDsecError } from '../../../core/errors.js';
import { loadConfig } from '../../../core/config/index.js';
import { loadErrors, summary, TempProject, where } from './fixtures.js';

const GOOD = `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
  hello:
    kind: toolkit
    version: 0.1.0
    source: { dir: ./toolkit }
environments:
  shell:
    layers: [base, hello]
    env: { GREETING: hi }
fleets:
  workers:
    environment: shell
    replicas: 3
    resources: { cpu: 0.5, memory: 128Mi, pids: 128 }
`;

interface Case {
  readonly from: string;
  readonly to: string;
  readonly code: string;
  readonly path: string;
  /** [unique text around the offending node, the node's text inside it] */
  readonly at: readonly [string, string?];
  readonly message?: RegExp;
  /** A second replacement the case needs. */
  readonly also?: readonly [string, string];
}

const CASES: Record<string, Case> = {
  'an unknown layer reference': {
    from: 'layers: [base, hello]',
    to: 'layers: [base, pyton]',
    code: 'DSEC_CONFIG_UNKNOWN_LAYER',
    path: '/environments/shell/layers/1',
    at: ['layers: [base, pyton]', 'pyton'],
    message: /^unknown layer 'pyton' \(declared: base, hello\)$/,
  },
  'an unknown environment, with a suggestion': {
    from: 'environment: shell',
    to: 'environment: shel',
    code: 'DSEC_CONFIG_UNKNOWN_ENVIRONMENT',
    path: '/fleets/workers/environment',
    at: ['environment: shel', 'shel'],
    message: /unknown environment 'shel', did you mean 'shell'\? \(declared: shell\)/,
  },
  'a duplicate fleet name (a duplicate YAML key)': {
    from: '    resources: { cpu: 0.5, memory: 128Mi, pids: 128 }\n',
    to: '    resources: { cpu: 0.5, memory: 128Mi, pids: 128 }\n  workers:\n    environment: shell\n    replicas: 1\n',
    code: 'DSEC_CONFIG_DUPLICATE',
    path: '/fleets/workers',
    at: ['  workers:\n    environment: shell\n    replicas: 1', 'workers'],
    message: /duplicate fleet 'workers'/,
  },
  'a duplicate layer name': {
    from: '  hello:\n',
    to: '  base:\n    kind: base\n    version: 1.0.0\n    source: { busybox: {} }\n  hello:\n',
    code: 'DSEC_CONFIG_DUPLICATE',
    path: '/layers/base',
    at: ['  base:\n    kind: base\n    version: 1.0.0\n    source: { busybox: {} }\n  hello:', 'base'],
    message: /duplicate layer 'base'/,
  },
  'a name that is ..': {
    from: '  workers:',
    to: "  '..':",
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: '/fleets/..',
    at: ["'..':", "'..'"],
    message: /invalid fleet name '\.\.': expected a fleet name of 1 to 40 characters/,
  },
  'a name with a slash': {
    from: '  workers:',
    to: '  a/b:',
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: '/fleets/a~1b',
    at: ['  a/b:', 'a/b'],
    message: /invalid fleet name 'a\/b'/,
  },
  'an empty name': {
    from: '  workers:',
    to: "  '':",
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: '/fleets/',
    at: ["  '':", "''"],
    message: /invalid fleet name '':/,
  },
  'a fleet name over 40 characters': {
    from: '  workers:',
    to: `  ${'w'.repeat(41)}:`,
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: `/fleets/${'w'.repeat(41)}`,
    at: [`  ${'w'.repeat(41)}:`, 'w'],
    message: /\(41 characters\): expected a fleet name of 1 to 40 characters/,
  },
  'an environment name of 64 characters': {
    from: '  shell:',
    to: `  ${'s'.repeat(64)}:`,
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: `/environments/${'s'.repeat(64)}`,
    at: [`  ${'s'.repeat(64)}:`, 's'],
    message: /expected a name of 1 to 63 characters/,
  },
  'an upper-case name': {
    from: '  workers:',
    to: '  Workers:',
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: '/fleets/Workers',
    at: ['  Workers:', 'Workers'],
    message: /lower-case letters/,
  },
  'negative replicas': {
    from: 'replicas: 3',
    to: 'replicas: -3',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/replicas',
    at: ['replicas: -3', '-3'],
    message: /^expected an integer between 0 and 100000, got -3$/,
  },
  'absurd replicas': {
    from: 'replicas: 3',
    to: 'replicas: 10000000',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/replicas',
    at: ['replicas: 10000000', '10000000'],
    message: /^expected an integer between 0 and 100000, got 10000000$/,
  },
  'a version that is not MAJOR.MINOR.PATCH (1.0)': {
    from: 'version: 1.0.0',
    to: 'version: 1.0',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/base/version',
    at: ['version: 1.0\n', '1.0'],
    message: /expected a semantic version MAJOR\.MINOR\.PATCH like 1\.2\.3.*, got 1\.0$/,
  },
  'a version that is a word (latest)': {
    from: 'version: 1.0.0',
    to: 'version: latest',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/base/version',
    at: ['version: latest', 'latest'],
    message: /got 'latest'$/,
  },
  'a memory size with a wrong unit': {
    from: 'memory: 128Mi',
    to: 'memory: 2GB',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/resources/memory',
    at: ['memory: 2GB', '2GB'],
    message: /expected a memory size like "512Mi", "2Gi" or "1Ti" \(units Mi, Gi, Ti\), got '2GB'/,
  },
  'a memory size below 16Mi': {
    from: 'memory: 128Mi',
    to: 'memory: 8Mi',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/resources/memory',
    at: ['memory: 8Mi', '8Mi'],
    message: /expected a memory size from 16Mi to 1Ti, got '8Mi'/,
  },
  'a memory number below 16 MiB': {
    from: 'memory: 128Mi',
    to: 'memory: 4',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/resources/memory',
    at: ['memory: 4', '4'],
    message: /expected a number of MiB from 16 to 1048576 \(1Ti\), got 4/,
  },
  'too many CPU millicores': {
    from: 'cpu: 0.5',
    to: 'cpu: 300000m',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/resources/cpu',
    at: ['cpu: 300000m', '300000m'],
    message: /expected at most 256 CPU cores/,
  },
  'an unknown property, with a suggestion': {
    from: 'replicas: 3\n',
    to: 'replicas: 3\n    replica: 3\n',
    code: 'DSEC_CONFIG_UNKNOWN_PROPERTY',
    path: '/fleets/workers/replica',
    at: ['    replica: 3', 'replica'],
    message: /^unknown property 'replica' \(did you mean 'replicas'\?\)$/,
  },
  'a toolkit before the base': {
    from: 'layers: [base, hello]',
    to: 'layers: [hello, base]',
    code: 'DSEC_CONFIG_LAYER_ORDER',
    path: '/environments/shell/layers/0',
    at: ['layers: [hello, base]', 'hello'],
    message: /expected the base layer first, got toolkit layer 'hello'/,
  },
  'two base layers': {
    from: 'layers: [base, hello]',
    to: 'layers: [base, other, hello]',
    also: ['  hello:\n', '  other:\n    kind: base\n    version: 2.0.0\n    source: { dir: ./other }\n  hello:\n'],
    code: 'DSEC_CONFIG_LAYER_ORDER',
    path: '/environments/shell/layers/1',
    at: ['layers: [base, other, hello]', 'other'],
    message: /a second base layer 'other'/,
  },
  'an environment without a base layer': {
    from: 'layers: [base, hello]',
    to: 'layers: [hello]',
    code: 'DSEC_CONFIG_LAYER_ORDER',
    path: '/environments/shell/layers',
    at: ['layers: [hello]', '[hello]'],
    message: /got no base layer among: hello \(toolkit\)/,
  },
  'a layer version that differs from the declared one': {
    from: 'layers: [base, hello]',
    to: 'layers: [base@2.0.0, hello]',
    code: 'DSEC_CONFIG_VERSION_MISMATCH',
    path: '/environments/shell/layers/0',
    at: ['layers: [base@2.0.0, hello]', 'base@2.0.0'],
    message: /layer 'base' is declared at version 1\.0\.0, not 2\.0\.0/,
  },
  'a missing version field': {
    from: '    kind: base\n    version: 1.0.0\n',
    to: '    kind: base\n',
    code: 'DSEC_CONFIG_MISSING_PROPERTY',
    path: '/layers/base',
    at: ['    kind: base\n', 'kind'],
    message: /^missing required property 'version': expected a semantic version/,
  },
  'a source that is none of busybox, dir, tar': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { git: ./toolkit }',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/hello/source',
    at: ['source: { git: ./toolkit }', '{ git'],
    message:
      /^expected exactly one source: \{ busybox: \{\} \}, \{ dir: \.\/path \}, \{ tar: \.\/file\.tar\.gz \}, \{ oci: \{ path: \.\/image \} \}, \{ build: \{ from: \[\.\.\.\], steps: \[\.\.\.\] \} \} or \{ published: \{\} \}, got a mapping with git$/,
  },
  'an oci source without a path': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { oci: { image: "app:1" } }',
    code: 'DSEC_CONFIG_MISSING_PROPERTY',
    path: '/layers/hello/source/oci',
    at: ['source: { oci: { image', '{ image'],
    message: /^missing required property 'path': expected the path of an OCI image layout directory or a docker-archive tarball$/,
  },
  'a build on an undeclared parent': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { build: { from: [bsae], steps: ["touch /x"] } }',
    code: 'DSEC_CONFIG_UNKNOWN_LAYER',
    path: '/layers/hello/source/build/from/0',
    at: ['from: [bsae]', 'bsae'],
    message: /^unknown layer 'bsae'.* \(declared: base, hello\)$/,
  },
  'a build without steps': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { build: { from: [base], steps: [] } }',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/hello/source/build/steps',
    at: ['steps: []', '[]'],
    message: /^expected a list of shell commands, got a list of 0 item\(s\)$/,
  },
  'a build parent at another version than declared': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { build: { from: [base@2.0.0], steps: ["true"] } }',
    code: 'DSEC_CONFIG_VERSION_MISMATCH',
    path: '/layers/hello/source/build/from/0',
    at: ['from: [base@2.0.0]', 'base@2.0.0'],
    message: /^layer 'base' is declared at version 1\.0\.0, not 2\.0\.0/,
  },
  'a build on top of itself': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { build: { from: [base, hello], steps: ["true"] } }',
    code: 'DSEC_CONFIG_CYCLE',
    path: '/layers/hello/source/build/from',
    at: ['from: [base, hello]', '[base'],
    message: /^layer 'hello' is built on top of itself: hello -> hello$/,
  },
  'a relative build workdir': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { build: { from: [base], steps: ["true"], workdir: src } }',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/hello/source/build/workdir',
    at: ['workdir: src', 'src'],
    message: /^expected an absolute path like \/workspace, got/,
  },
  'a published source with options': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { published: { from: x } }',
    code: 'DSEC_CONFIG_UNKNOWN_PROPERTY',
    path: '/layers/hello/source/published/from',
    at: ['published: { from', 'from'],
  },
  'a source with two kinds at once': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { dir: ./toolkit, tar: ./t.tar }',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/hello/source',
    at: ['source: { dir: ./toolkit, tar', '{ dir'],
    message: /^expected exactly one source: .*, got a mapping with dir, tar$/,
  },
  'a dir source that is not a path': {
    from: 'source: { dir: ./toolkit }',
    to: 'source: { dir: 5 }',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/hello/source/dir',
    at: ['source: { dir: 5 }', '5'],
    message: /^expected a directory path, got 5/,
  },
  'a reserved label key': {
    from: 'replicas: 3\n',
    to: 'replicas: 3\n    labels: { dsec.io/owner: me }\n',
    code: 'DSEC_CONFIG_INVALID_NAME',
    path: '/fleets/workers/labels/dsec.io~1owner',
    at: ['{ dsec.io/owner', 'dsec.io/owner'],
    message: /invalid label key 'dsec\.io\/owner': .*not starting with dsec\.io\//,
  },
  'a relative workdir': {
    from: 'env: { GREETING: hi }',
    to: 'env: { GREETING: hi }\n    workdir: ./work',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/environments/shell/workdir',
    at: ['workdir: ./work', './work'],
    message: /expected an absolute path like \/workspace, got '\.\/work'/,
  },
  'a bad duration': {
    from: 'replicas: 3\n',
    to: 'replicas: 3\n    ttl: { idleStop: 30x }\n',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/ttl/idleStop',
    at: ['idleStop: 30x', '30x'],
    message: /expected a duration like "90s", "30m", "2h" or "1d", got '30x'/,
  },
  'a density switch that is not a boolean': {
    from: 'replicas: 3\n',
    to: 'replicas: 3\n    density: { memorySharing: yes please }\n',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/fleets/workers/density/memorySharing',
    at: ['memorySharing: yes please', 'yes please'],
    message: /expected true or false, got 'yes please'/,
  },
  'a kind that does not exist': {
    from: 'kind: toolkit',
    to: 'kind: tools',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/layers/hello/kind',
    at: ['kind: tools', 'tools'],
    message: /^expected one of 'base', 'workspace', 'toolkit', got 'tools'$/,
  },
  'an environment with nothing under its name, at the name': {
    from: '  shell:\n    layers: [base, hello]\n    env: { GREETING: hi }\n',
    to: '  shell:\n',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/environments/shell',
    at: ['  shell:\n', 'shell'],
    message: /^expected a mapping, got an empty value$/,
  },
  'an empty layer list': {
    from: 'layers: [base, hello]',
    to: 'layers: []',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/environments/shell/layers',
    at: ['layers: []', '[]'],
    message: /^expected a list of layer names, bottom to top, starting with the base layer, got a list of 0 item\(s\)$/,
  },
  'a config format version other than 1': {
    from: 'version: 1\n',
    to: 'version: 2\n',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/version',
    at: ['version: 2', '2'],
    message: /expected version: 1/,
  },
  'an env value that YAML reads as a number': {
    from: 'GREETING: hi',
    to: 'GREETING: 42',
    code: 'DSEC_CONFIG_INVALID_VALUE',
    path: '/environments/shell/env/GREETING',
    at: ['GREETING: 42', '42'],
    message: /expected a string \(quote numbers and booleans\), got 42/,
  },
};

describe('loading a bad dsec.yaml', () => {
  let project: TempProject;
  afterEach(() => project?.remove());

  for (const [what, bad] of Object.entries(CASES)) {
    it(`reports ${what} with its code, path and file:line:col`, async () => {
      project = new TempProject();
      const replaced = GOOD.replace(bad.from, bad.to);
      const text = bad.also ? replaced.replace(bad.also[0], bad.also[1]) : replaced;
      expect(text, 'the replacement applies').not.toBe(GOOD);
      const file = project.write('dsec.yaml', text);
      const diagnostics = await loadErrors(file);
      const found = diagnostics.find((d) => d.code === bad.code && d.path === bad.path);
      expect(found, diagnostics.map(summary).join('\n')).toBeDefined();
      expect(summary(found!)).toBe(`${bad.code} ${bad.path} dsec.yaml:${where(text, bad.at[0], bad.at[1])}`);
      expect(found!.severity).toBe('error');
      if (bad.message) expect(found!.message).toMatch(bad.message);
    });
  }

  it('reports several errors at once, all of them, in file order', async () => {
    project = new TempProject();
    const text = GOOD.replace('version: 1.0.0', 'version: latest')
      .replace('layers: [base, hello]', 'layers: [base, pyton]')
      .replace('replicas: 3', 'replicas: -1')
      .replace('environment: shell', 'environment: nope');
    const diagnostics = await loadErrors(project.write('dsec.yaml', text));
    expect(diagnostics.map(summary)).toEqual([
      `DSEC_CONFIG_INVALID_VALUE /layers/base/version dsec.yaml:${where(text, 'version: latest', 'latest')}`,
      `DSEC_CONFIG_UNKNOWN_LAYER /environments/shell/layers/1 dsec.yaml:${where(text, 'pyton')}`,
      `DSEC_CONFIG_UNKNOWN_ENVIRONMENT /fleets/workers/environment dsec.yaml:${where(text, 'environment: nope', 'nope')}`,
      `DSEC_CONFIG_INVALID_VALUE /fleets/workers/replicas dsec.yaml:${where(text, 'replicas: -1', '-1')}`,
    ]);
  });

  it('reports a YAML syntax error as DSEC_CONFIG_PARSE at its line and column', async () => {
    project = new TempProject();
    const text = GOOD.replace('layers: [base, hello]', 'layers: [base, hello');
    const diagnostics = await loadErrors(project.write('dsec.yaml', text));
    expect(diagnostics.length).toBeGreaterThan(0);
    expect(diagnostics.every((d) => d.code === 'DSEC_CONFIG_PARSE')).toBe(true);
    expect(diagnostics[0].location?.line).toBeGreaterThanOrEqual(13);
    expect(diagnostics[0].message).toMatch(/^invalid YAML: /);
  });

  it('reports an empty file as a missing version at 1:1', async () => {
    project = new TempProject();
    const diagnostics = await loadErrors(project.write('dsec.yaml', '# nothing yet\n'));
    expect(diagnostics.map(summary)).toEqual(['DSEC_CONFIG_INVALID_VALUE  dsec.yaml:1:1']);
    expect(diagnostics[0].message).toBe('expected a mapping, got an empty value');
  });

  it('throws DSEC_CONFIG_INVALID whose message counts the errors', async () => {
    project = new TempProject();
    const file = project.write('dsec.yaml', GOOD.replace('replicas: 3', 'replicas: -3').replace('version: 1.0.0', 'version: x'));
    const error = await loadConfig(file).catch((e: unknown) => e);
    expect(isDsecError(error, 'DSEC_CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toBe('the configuration has 2 error(s)');
  });
});
