/**
 * Build layers, snapshots and layer administration through the real CLI,
 * agent and runc containers: a project with a build layer is planned
 * ("known after apply") and applied; a sandbox is snapshotted and a second
 * environment uses the snapshot as `published: {}`; `dsec layers
 * ls|inspect|gc|squash` and `dsec validate`'s clash warning. One project,
 * each step building on the last.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Project, type SandboxJson } from './harness.js';

const execFileAsync = promisify(execFile);

/** A program using the SDK from the project: snapshots the sandbox named on its command line. */
const SDK_SNAPSHOT = `import { connect } from 'dsec';

const dsec = await connect({ dir: process.cwd() });
try {
  const record = await dsec.snapshot(process.argv[2], { as: 'sdk-snap@1.0.0', kind: 'toolkit', exclude: ['/root/.token', '/work'] });
  console.log(JSON.stringify(record));
} finally {
  await dsec.close();
}
`;

const CONFIG = `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
  tools:
    kind: toolkit
    version: 1.0.0
    source:
      build:
        from: [base]
        steps:
          - mkdir -p /opt/tools && echo 'echo tools at work' > /opt/tools/run && chmod +x /opt/tools/run
          - rm /etc/group
environments:
  dev:
    layers: [base, tools]
fleets:
  dev:
    environment: dev
    replicas: 1
    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }
`;

const REPLAY = `  solved:
    kind: workspace
    version: 1.0.0
    source: { published: {} }
environments:
  replay:
    layers: [base, solved, tools]
`;

const REPLAY_FLEET = `  replay:
    environment: replay
    replicas: 1
    resources: { cpu: 0.25, memory: 64Mi, pids: 64 }
`;

interface LayerRow {
  name: string;
  version: string;
  kind: string;
  digest: string;
  format: string;
  sandboxes: number;
}

describe('a project with a build layer, a snapshot and a published layer', () => {
  let project: Project;
  let devId: string;

  beforeAll(() => {
    project = Project.copy();
    project.write('dsec.yaml', CONFIG);
  });
  afterAll(async () => {
    await project?.cleanup();
  });

  const sandboxes = () => project.json<SandboxJson[]>(['sandbox', 'ls']);
  const sh = (id: string, command: string) => project.run(['sandbox', 'exec', id, '--', 'sh', '-c', command]);
  const layerRows = async () => (await project.json<{ layers: LayerRow[] }>(['layers', 'ls'])).layers;

  it('plans the build with its digest known after apply', async () => {
    const result = await project.run(['plan', '--detailed-exitcode']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stdout).toMatch(/\+ layer\.tools@1\.0\.0/);
    expect(result.stdout).toContain('digest:  "(known after apply)"');
    expect(result.stdout).toContain('source:  "build:from base@1.0.0, 2 step(s)"');
    expect(result.stdout).toContain(
      'layer.tools@1.0.0 is built during apply, so its digest is known after apply; the sandboxes of fleet.dev are created on it',
    );
    expect(result.stdout).toContain('Plan: 3 to add, 0 to change, 0 to destroy.');
  });

  it('applies: the parent first, then the build, then a sandbox stacked on both', async () => {
    const result = await project.run(['apply', '--auto-approve']);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const live = await sandboxes();
    expect(live).toHaveLength(1);
    devId = live[0].id;
    expect((await sh(devId, '/opt/tools/run')).stdout).toBe('tools at work\n');
    expect((await sh(devId, 'test -e /etc/group')).code).toBe(1);
  });

  it('plans no change afterwards: the build is cached', async () => {
    const result = await project.run(['plan', '--detailed-exitcode']);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain('No changes.');
  });

  it('snapshots the sandbox without the excluded secret', async () => {
    expect((await sh(devId, 'mkdir -p /work /root && echo solved > /work/result.txt && echo s3cret > /root/.token && echo patched > /opt/tools/run')).code).toBe(0);
    const record = await project.json<{ name: string; version: string; kind: string; digest: string }>([
      'sandbox',
      'snapshot',
      devId,
      '--as',
      'solved@1.0.0',
      '--exclude',
      '/root/.token',
    ]);
    expect(record).toMatchObject({ name: 'solved', version: '1.0.0', kind: 'workspace' });
    expect(record.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('plans and applies a second environment on the snapshot as `published: {}`, without publishing it', async () => {
    project.edit('environments:\n', `${REPLAY.split('environments:\n')[0]}environments:\n${REPLAY.split('environments:\n')[1]}`);
    project.edit('fleets:\n', `fleets:\n${REPLAY_FLEET}`);
    const plan = await project.run(['plan']);
    expect(plan.code, plan.stderr).toBe(0);
    expect(plan.stdout).toMatch(/\+ fleet\.replay/);
    expect(plan.stdout).not.toMatch(/layer\.solved/);
    expect(plan.stdout).toContain('Plan: 1 to add, 0 to change, 0 to destroy.');
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    const replay = (await sandboxes()).find((sandbox) => sandbox.labels['dsec.io/fleet'] === 'replay')!;
    expect((await sh(replay.id, 'cat /work/result.txt')).stdout).toBe('solved\n');
    expect((await sh(replay.id, 'test -e /root/.token')).code).toBe(1);
    // The toolkit sits above the workspace: its file wins over the snapshot's change.
    expect((await sh(replay.id, '/opt/tools/run')).stdout).toBe('tools at work\n');
  });

  it('warns in validate that the snapshot and the toolkit both hold a path, the toolkit winning', async () => {
    const result = await project.json<{ warnings: { code: string; path: string; message: string }[] }>(['validate']);
    const clash = result.warnings.find((warning) => warning.code === 'DSEC_CONFIG_LAYER_CLASH');
    expect(clash).toMatchObject({ path: '/environments/replay/layers/2' });
    expect(clash?.message).toBe(
      'environment replay: layers solved@1.0.0 and tools@1.0.0 both hold 1 path(s); tools@1.0.0 wins by stack order: /opt/tools/run',
    );
    const human = await project.run(['validate']);
    expect(human.code).toBe(0);
    expect(human.stderr).toMatch(/dsec\.yaml:\d+:\d+.*DSEC_CONFIG_LAYER_CLASH|DSEC_CONFIG_LAYER_CLASH[\s\S]*dsec\.yaml:\d+:\d+/);
  });

  it('lists the layers with the sandboxes using each, and inspects one', async () => {
    const rows = await layerRows();
    const byName = Object.fromEntries(rows.map((row) => [row.name, row]));
    expect(Object.keys(byName).sort()).toEqual(['base', 'solved', 'tools']);
    expect(byName.tools).toMatchObject({ kind: 'toolkit', sandboxes: 2 });
    expect(byName.solved).toMatchObject({ kind: 'workspace', sandboxes: 1 });
    expect(['erofs', 'tree']).toContain(byName.tools.format);
    const human = await project.run(['layers', 'ls']);
    expect(human.stdout).toMatch(/tools\s+1\.0\.0\s+toolkit\s+[0-9a-f]{12}\s/);

    const inspect = await project.json<{ record: { digest: string }; sandboxes: string[]; summary: { whiteouts: number; whiteoutPaths: string[]; files: number } }>([
      'layers',
      'inspect',
      'tools@1.0.0',
    ]);
    expect(inspect.record.digest).toBe(byName.tools.digest);
    expect(inspect.sandboxes).toHaveLength(2);
    expect(inspect.summary).toMatchObject({ whiteouts: 1, whiteoutPaths: ['etc/group'], files: 1 });
    const missing = await project.run(['layers', 'inspect', 'nope@1.0.0']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('DSEC_LAYER_NOT_FOUND');
  });

  it('snapshots through the SDK, the excluded paths absent from the layer', async () => {
    project.write('snap.mjs', SDK_SNAPSHOT);
    const { stdout } = await execFileAsync(process.execPath, ['snap.mjs', devId], { cwd: project.dir });
    expect(JSON.parse(stdout)).toMatchObject({ name: 'sdk-snap', version: '1.0.0', kind: 'toolkit' });
    const inspect = await project.json<{ entries: { path: string }[] }>(['layers', 'inspect', 'sdk-snap@1.0.0', '--files']);
    const paths = inspect.entries.map((entry) => entry.path);
    expect(paths).toContain('opt/tools/run');
    expect(paths.filter((path) => path.startsWith('root/.token') || path.startsWith('work'))).toEqual([]);
  });

  it('garbage-collects orphan layers and keeps those in use or in the config', async () => {
    const orphan = await project.run(['sandbox', 'snapshot', devId, '--as', 'orphan@1.0.0', '--kind', 'toolkit']);
    expect(orphan.code, orphan.stderr).toBe(0);
    expect(orphan.stdout).toContain('Published orphan@1.0.0 (toolkit)');
    const dry = await project.json<{ dryRun: boolean; removed: { name: string }[] }>(['layers', 'gc', '--dry-run']);
    expect(dry).toMatchObject({ dryRun: true, removed: [{ name: 'orphan' }, { name: 'sdk-snap' }] });
    expect((await layerRows()).map((row) => row.name)).toContain('orphan');
    const gc = await project.run(['layers', 'gc']);
    expect(gc.code, gc.stderr).toBe(0);
    expect(gc.stdout).toContain('- orphan@1.0.0');
    expect(gc.stdout).toContain('- sdk-snap@1.0.0');
    expect(gc.stdout).toContain('gc removed 2 layer(s)');
    expect((await layerRows()).map((row) => row.name).sort()).toEqual(['base', 'solved', 'tools']);
  });

  it('squashes an environment\'s layers into one image without changing the plan', async () => {
    const squash = await project.run(['layers', 'squash', 'replay', '--json']);
    expect(squash.code, squash.stderr + squash.stdout).toBe(0);
    expect(JSON.parse(squash.stdout)).toMatchObject({ layers: [{ name: 'base' }, { name: 'solved' }, { name: 'tools' }] });
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code, plan.stdout).toBe(0);
    const unknown = await project.run(['layers', 'squash', 'nope']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('DSEC_CONFIG_UNKNOWN_ENVIRONMENT');
  });
});
