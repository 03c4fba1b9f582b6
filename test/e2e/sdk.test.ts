/**
 * The SDK as a program in a project uses it: `import { connect } from 'dsec'`
 * resolved through the project's node_modules, talking to the agent a real
 * `dsec apply` started. Each script prints one JSON document.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, REPO, runcContainers, type RunResult, type SandboxJson } from './harness.js';

/** Lists, execs, creates a sandbox of its own (on the fleet's layers) and leaves it running. */
const CREATE_SCRIPT = `import { connect } from 'dsec';

const dsec = await connect({ dir: process.cwd() });
try {
  const listed = await dsec.list({ 'dsec.io/fleet': 'web' });
  const [first] = listed;
  const hi = await dsec.exec(first.id, ['echo', 'hi']);
  const three = await dsec.exec(first.id, ['sh', '-c', 'exit 3']);
  const shell = await dsec.exec(first.id, 'echo "$((6 * 7))" >&2');
  const extra = await dsec.create({
    id: 'sdk-extra',
    backend: 'container',
    layers: first.layers,
    resources: { cpu: 0.25, memoryMiB: 64, pids: 64 },
    labels: { owner: 'sdk-test' },
  });
  const inExtra = await dsec.exec(extra.id, 'cat /proc/1/cmdline | tr "\\\\0" " "; hostname');
  console.log(JSON.stringify({
    listed: listed.map((s) => ({ id: s.id, status: s.status })),
    hi: { stdout: hi.stdout, exitCode: hi.exitCode },
    three: { exitCode: three.exitCode, signal: three.signal },
    shell: { stderr: shell.stderr, exitCode: shell.exitCode },
    extra: { id: extra.id, status: extra.status, labels: extra.labels, memoryMiB: extra.resources.memoryMiB },
    inExtra: { stdout: inExtra.stdout, exitCode: inExtra.exitCode },
  }));
} finally {
  await dsec.close();
}
`;

/** Destroys the sandbox it made, then shows what a missing id gives. */
const DESTROY_SCRIPT = `import { connect, DsecError, isDsecError } from 'dsec';

const dsec = await connect({ dir: process.cwd() });
try {
  await dsec.destroy('sdk-extra');
  await dsec.destroy('sdk-extra'); // idempotent
  const after = (await dsec.list()).map((s) => s.id);
  let missing = null;
  try {
    await dsec.exec('sdk-extra', ['true']);
  } catch (error) {
    missing = { isDsecError: isDsecError(error, 'DSEC_SANDBOX_NOT_FOUND'), instance: error instanceof DsecError, code: error.code, message: error.message };
  }
  console.log(JSON.stringify({ after, missing }));
} finally {
  await dsec.close();
}
`;

/** The same calls, typed: compiled against the package's .d.ts, with the mistakes the types must catch. */
const TYPED_SCRIPT = `import { connect, type DsecClient, type ExecResult, type SandboxInfo } from 'dsec';

const dsec: DsecClient = await connect({ dir: '.' });
const listed: SandboxInfo[] = await dsec.list({ 'dsec.io/fleet': 'web' });
const result: ExecResult = await dsec.exec(listed[0].id, ['echo', 'hi']);
const code: number | null = result.exitCode;
await dsec.create({ backend: 'container', layers: listed[0].layers, resources: { memoryMiB: 64 } });
// @ts-expect-error: a sandbox needs a backend
await dsec.create({ layers: listed[0].layers });
// @ts-expect-error: ids are strings
await dsec.exec(42, 'true');
// @ts-expect-error: the status is a closed set
const status: 'gone' = listed[0].status;
console.log(code, status);
`;

const TSCONFIG = JSON.stringify({
  compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, skipLibCheck: true, types: [] },
  files: ['typed.ts'],
});

function run(project: Project, args: string[]): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: project.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

function node(project: Project, script: string): Promise<RunResult> {
  project.write('script.mjs', script);
  return run(project, ['script.mjs']);
}

describe('the SDK in a project', () => {
  const project = Project.copy();
  project.write('dsec.yaml', busyboxConfig({ web: { replicas: 2 } }));
  beforeAll(async () => {
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
  });
  afterAll(() => project.cleanup());

  it('lists, execs with exit codes passed through, and creates a sandbox of its own', async () => {
    const result = await node(project, CREATE_SCRIPT);
    expect(result.code, result.stderr).toBe(0);
    const out = JSON.parse(result.stdout);
    const fleet = await project.json<SandboxJson[]>(['sandbox', 'ls', '--fleet', 'web']);
    expect(out.listed).toEqual(fleet.map((s) => ({ id: s.id, status: 'running' })));
    expect(out.hi).toEqual({ stdout: 'hi\n', exitCode: 0 });
    expect(out.three).toEqual({ exitCode: 3, signal: null });
    expect(out.shell).toEqual({ stderr: '42\n', exitCode: 0 });
    expect(out.extra).toEqual({ id: 'sdk-extra', status: 'running', labels: { owner: 'sdk-test' }, memoryMiB: 64 });
    expect(out.inExtra.exitCode).toBe(0);
    expect(out.inExtra.stdout).toContain('sdk-extra');
    expect(runcContainers(project)).toHaveLength(3);
  });

  it('leaves a sandbox the SDK made out of the plan: dsec never touches what it did not create', async () => {
    const all = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    expect(all.map((s) => s.id)).toContain('sdk-extra');
    const plan = await project.run(['plan', '--detailed-exitcode']);
    expect(plan.code, plan.stdout).toBe(0);
    expect(plan.stdout).not.toContain('sdk-extra');
  });

  it('destroys its sandbox, and reports an exec into a missing id as DSEC_SANDBOX_NOT_FOUND', async () => {
    const result = await node(project, DESTROY_SCRIPT);
    expect(result.code, result.stderr).toBe(0);
    const out = JSON.parse(result.stdout);
    expect(out.after).not.toContain('sdk-extra');
    expect(out.after).toHaveLength(2);
    expect(out.missing).toMatchObject({ isDsecError: true, instance: true, code: 'DSEC_SANDBOX_NOT_FOUND' });
    expect(out.missing.message).toContain('sdk-extra');
    expect(runcContainers(project)).toHaveLength(2);
  });

  it('is typed: a program using it compiles against the package types, and misuse does not', async () => {
    project.write('typed.ts', TYPED_SCRIPT);
    project.write('tsconfig.json', TSCONFIG);
    project.write('package.json', JSON.stringify({ type: 'module' }));
    const result = await run(project, [path.join(REPO, 'node_modules/typescript/bin/tsc'), '-p', '.']);
    expect(result.code, result.stdout + result.stderr).toBe(0);
  });
});
