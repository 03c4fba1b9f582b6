/**
 * The cluster settings: the cluster provider (etcd endpoints, the agents'
 * token file, the key prefix), the remote state and fleets' placement, in
 * YAML and in dsec.ts alike.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig, synthConfig } from '../../../core/config/index.js';
import { sandboxSpecFor } from '../../../core/engine/spec.js';
import { DEFINITIONS, loadErrors, summary, TempProject, where } from './fixtures.js';

const YAML = `version: 1
provider:
  cluster:
    etcd: [http://127.0.0.1:23790, http://127.0.0.1:23791]
    tokenFile: secrets/agent.token
state: { backend: etcd }
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
fleets:
  gpu:
    environment: shell
    replicas: 2
    placement: { strategy: pack, nodeSelector: { gpu: "true" } }
  plain: { environment: shell, replicas: 1 }
  spread:
    environment: shell
    replicas: 1
    placement: { nodeSelector: { zone: a } }
`;

const TS = `import { App, Environment, Fleet, Layer } from ${JSON.stringify(DEFINITIONS)};

const app = new App({
  provider: { cluster: { etcd: ['http://127.0.0.1:23790', 'http://127.0.0.1:23791'], tokenFile: 'secrets/agent.token' } },
  state: { backend: 'etcd' },
});
const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const shell = new Environment(app, 'shell', { layers: [base] });
new Fleet(app, 'gpu', { environment: shell, replicas: 2, placement: { strategy: 'pack', nodeSelector: { gpu: 'true' } } });
new Fleet(app, 'plain', { environment: shell, replicas: 1 });
new Fleet(app, 'spread', { environment: shell, replicas: 1, placement: { nodeSelector: { zone: 'a' } } });
export default app;
`;

describe('cluster settings in the config', () => {
  let project: TempProject | undefined;
  afterEach(() => {
    project?.remove();
    project = undefined;
  });

  it('resolves the token file against the config folder, defaults the prefix, and gives the etcd state the provider endpoints and the folder name as key', async () => {
    project = new TempProject();
    const { model } = await loadConfig(project.write('proj/dsec.yaml', YAML));
    expect(model.provider).toEqual({
      type: 'cluster',
      etcd: ['http://127.0.0.1:23790', 'http://127.0.0.1:23791'],
      tokenFile: project.file('proj/secrets/agent.token'),
      prefix: '/dsec',
    });
    expect(model.state).toEqual({ backend: 'etcd', key: 'proj', etcd: ['http://127.0.0.1:23790', 'http://127.0.0.1:23791'], prefix: '/dsec' });
  });

  it('keeps a fleet placement in the model (strategy defaulting to spread) and in the sandbox spec, and leaves fleets without one untouched', async () => {
    project = new TempProject();
    const { model } = await loadConfig(project.write('dsec.yaml', YAML));
    expect(model.fleets.gpu.placement).toEqual({ strategy: 'pack', nodeSelector: { gpu: 'true' } });
    expect(model.fleets.spread.placement).toEqual({ strategy: 'spread', nodeSelector: { zone: 'a' } });
    expect(model.fleets.plain.placement).toBeUndefined();
    const environment = model.environments.shell;
    const withPlacement = sandboxSpecFor(model.fleets.gpu, environment, [], 'lineage', 'gpu-1');
    const without = sandboxSpecFor(model.fleets.plain, environment, [], 'lineage', 'plain-1');
    expect(withPlacement.placement).toEqual({ strategy: 'pack', nodeSelector: { gpu: 'true' } });
    expect('placement' in without).toBe(false);
    // Placement is not part of what the sandbox is: the spec hash ignores it.
    const unplaced = sandboxSpecFor({ ...model.fleets.gpu, placement: undefined }, environment, [], 'lineage', 'gpu-1');
    expect(withPlacement.labels['dsec.io/spec']).toBe(unplaced.labels['dsec.io/spec']);
  });

  it('synthesises the cluster provider, the remote state and placements byte-identically from dsec.ts and dsec.yaml', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const fromTs = await loadConfig(project.write('dsec.ts', TS));
    const fromYaml = await loadConfig(project.write('dsec.yaml', YAML));
    const synthesised = synthConfig(fromTs.model);
    expect(synthesised).toBe(synthConfig(fromYaml.model));
    expect(JSON.parse(synthesised).provider.tokenFile).toBe('./secrets/agent.token');
  });

  it('reports an etcd state with neither its own endpoints nor a cluster provider at state.backend', async () => {
    project = new TempProject();
    const text = `version: 1
state:
  backend: etcd
  key: team
`;
    const diagnostics = await loadErrors(project.write('dsec.yaml', text));
    expect(diagnostics.map(summary)).toEqual([`DSEC_CONFIG_MISSING_PROPERTY /state/backend dsec.yaml:${where(text, 'backend: etcd', 'etcd')}`]);
    expect(diagnostics[0].message).toContain('state.etcd');
  });

  it('accepts an etcd state with its own endpoints beside the local provider', async () => {
    project = new TempProject();
    const { model } = await loadConfig(
      project.write('dsec.yaml', 'version: 1\nstate: { backend: etcd, key: team, etcd: [http://10.0.0.1:2379] }\n'),
    );
    expect(model.state).toEqual({ backend: 'etcd', key: 'team', etcd: ['http://10.0.0.1:2379'], prefix: '/dsec' });
  });

  it('reports a cluster provider without tokenFile, an unknown strategy and a bad prefix, each where it is', async () => {
    project = new TempProject();
    const text = `version: 1
provider:
  cluster: { etcd: [http://127.0.0.1:23790], prefix: dsec }
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
fleets:
  web: { environment: shell, replicas: 1, placement: { strategy: random } }
`;
    const diagnostics = await loadErrors(project.write('dsec.yaml', text));
    const codes = diagnostics.map((diagnostic) => `${diagnostic.code} ${diagnostic.path}`);
    expect(codes).toContain('DSEC_CONFIG_INVALID_VALUE /fleets/web/placement/strategy');
    expect(diagnostics.some((diagnostic) => diagnostic.path.startsWith('/provider'))).toBe(true);
    expect(diagnostics.map((diagnostic) => diagnostic.message).join('\n')).toMatch(/spread|pack/);
  });
});
