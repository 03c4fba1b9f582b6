/**
 * The file and function commands through the real `dsec` binary, and the
 * same calls through the SDK in a project: `dsec sandbox write/read` move
 * bytes unchanged (from a file, from stdin, to stdout, to a file), `dsec fn
 * invoke` hands a task to the fleet's backend and exits with its exit code
 * (124 on a timeout), errors say what and where, and `dsec nodes` shows what
 * each backend can do. The function backend here is a test stand-in
 * (test/helpers/echo-function-plugin.mjs) that echoes the task it got.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, REPO, type RunResult, type SandboxJson } from './harness.js';

const project = Project.copy();
let box: string;

function node(script: string): Promise<RunResult> {
  project.write('script.mjs', script);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['script.mjs'], { cwd: project.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/** Run dsec with raw bytes on stdin and raw bytes from stdout. */
function runBytes(args: string[], input?: Buffer): Promise<{ code: number; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(REPO, 'bin/dsec.js'), ...args], { cwd: project.dir, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(out), stderr }));
    child.stdin.end(input ?? Buffer.alloc(0));
  });
}

beforeAll(async () => {
  copyFileSync(path.join(REPO, 'test/helpers/echo-function-plugin.mjs'), project.file('echo-function-plugin.mjs'));
  project.write('dsec.yaml', `${busyboxConfig({ web: { replicas: 1 }, graders: { replicas: 2, backend: 'fnecho' } })}plugins:\n  - ./echo-function-plugin.mjs\n`);
  const apply = await project.run(['apply', '--auto-approve']);
  expect(apply.code, apply.stderr + apply.stdout).toBe(0);
  const [web] = await project.json<SandboxJson[]>(['sandbox', 'ls', '--fleet', 'web']);
  box = web.id;
}, 120_000);

afterAll(() => project.cleanup());

describe('dsec sandbox write and read', () => {
  it('copies a binary file in with --from and out with --out, byte for byte, with the mode asked for', async () => {
    const bytes = Buffer.concat([randomBytes(200_000), Buffer.from([0, 0xff, 0x0a])]);
    writeFileSync(project.file('in.bin'), bytes);
    const write = await project.run(['sandbox', 'write', box, '/data/nested/in.bin', '--from', 'in.bin', '--mode', '0600']);
    expect(write.code, write.stderr).toBe(0);
    expect(write.stderr).toContain(`Wrote ${bytes.length} bytes to /data/nested/in.bin in sandbox ${box}.`);
    const mode = await project.run(['sandbox', 'exec', box, '--', 'stat', '-c', '%a %s', '/data/nested/in.bin']);
    expect(mode.stdout).toBe(`600 ${bytes.length}\n`);
    const read = await project.run(['sandbox', 'read', box, '/data/nested/in.bin', '--out', 'out.bin']);
    expect(read.code, read.stderr).toBe(0);
    expect(readFileSync(project.file('out.bin')).equals(bytes)).toBe(true);
  });

  it('writes from stdin and reads to stdout unchanged', async () => {
    const bytes = Buffer.from('line one\n\0binary\xff tail', 'latin1');
    const write = await runBytes(['sandbox', 'write', box, '/tmp/piped'], bytes);
    expect(write.code, write.stderr).toBe(0);
    const read = await runBytes(['sandbox', 'read', box, '/tmp/piped']);
    expect(read.code, read.stderr).toBe(0);
    expect(read.stdout.equals(bytes)).toBe(true);
  });

  it('fails with the error code and exit 1 for a missing file, a file over --max-bytes and a sandbox that does not exist', async () => {
    const missing = await project.run(['sandbox', 'read', box, '/no/such']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('DSEC_FILE_NOT_FOUND');
    expect(missing.stderr).toContain(`sandbox ${box} has no file /no/such`);
    const large = await project.run(['sandbox', 'read', box, '/data/nested/in.bin', '--max-bytes', '10']);
    expect(large.code).toBe(1);
    expect(large.stderr).toContain('DSEC_FILE_TOO_LARGE');
    const gone = await project.run(['sandbox', 'write', 'no-such-box', '/x', '--from', 'in.bin']);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('DSEC_SANDBOX_NOT_FOUND');
  });
});

describe('dsec fn invoke', () => {
  it('hands the task (code, input files, stdin, args, env, timeout) to the fleet\'s backend and prints its stdout', async () => {
    writeFileSync(project.file('main.py'), 'print("from a file")\n');
    writeFileSync(project.file('data.csv'), 'a,b\n1,2\n');
    const run = await project.run([
      'fn', 'invoke', 'graders', '--runtime', 'python3', '--code-file', 'main.py',
      '--input-file', 'inputs/data.csv=data.csv', '--stdin', 'hello', '--env', 'MODE=fast', '--timeout', '2.5', '--', '-v',
    ]);
    expect(run.code, run.stderr).toBe(0);
    const echoed = JSON.parse(run.stdout);
    expect(echoed).toEqual({
      fleet: 'graders',
      workers: 2,
      task: {
        runtime: 'python3',
        code: 'print("from a file")\n',
        files: { 'inputs/data.csv': Buffer.from('a,b\n1,2\n').toString('base64') },
        stdin: 'hello',
        args: ['-v'],
        env: { MODE: 'fast' },
        timeoutMs: 2500,
      },
    });
  });

  it('exits with the task\'s exit code and prints its stderr; a timeout says so and exits 124', async () => {
    const failed = await project.run(['fn', 'invoke', 'graders', '--runtime', 'sh', '-c', 'exit 7']);
    expect(failed.code).toBe(7);
    expect(failed.stderr).toContain('err\n');
    const timedOut = await project.run(['fn', 'invoke', 'graders', '--runtime', 'sh', '-c', 'sleep-forever', '--timeout', '3s']);
    expect(timedOut.code).toBe(124);
    expect(timedOut.stdout).toBe('started\n');
    expect(timedOut.stderr).toMatch(/dsec: the task timed out after 3 s and was killed \(worker graders-[a-z0-9]+\)/);
    const json = await project.run(['fn', 'invoke', 'graders', '--runtime', 'sh', '-c', 'exit 3', '--json']);
    expect(json.code).toBe(3);
    expect(JSON.parse(json.stdout)).toMatchObject({ exitCode: 3, timedOut: false, stderr: 'err\n' });
  });

  it('names the fleet without workers, the backend that cannot run tasks, and a task without code', async () => {
    const none = await project.run(['fn', 'invoke', 'nobody', '--runtime', 'sh', '-c', 'true']);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain('DSEC_FUNCTION_NO_WORKERS');
    expect(none.stderr).toContain('fleet nobody has no FnCall workers');
    const container = await project.run(['fn', 'invoke', 'web', '--runtime', 'sh', '-c', 'true']);
    expect(container.code).toBe(1);
    expect(container.stderr).toContain('backend container does not support invoke');
    const noCode = await project.run(['fn', 'invoke', 'graders', '--runtime', 'sh']);
    expect(noCode.code).toBe(1);
    expect(noCode.stderr).toContain('either -c CODE or --code-file FILE');
  });
});

describe('dsec nodes and the SDK', () => {
  it('shows each backend\'s capabilities in dsec nodes, as text and JSON', async () => {
    const text = await project.run(['nodes']);
    expect(text.code, text.stderr).toBe(0);
    const line = /^ {2}backends\s+(.*)$/m.exec(text.stdout)?.[1];
    expect(line).toContain('container: exec, process, session, readFile, writeFile, update, pause, resume, snapshot, usage;');
    expect(line).toMatch(/(^|; )fnecho: invoke($|;)/);
    const [usage] = await project.json<{ capabilities: Record<string, string[]> }[]>(['nodes', '--json']);
    expect(usage.capabilities.fnecho).toEqual(['invoke']);
  });

  it('reads, writes, invokes and reports capabilities through the SDK, with the same errors', async () => {
    const result = await node(`import { connect } from 'dsec';
const dsec = await connect({ dir: process.cwd() });
try {
  await dsec.writeFile(${JSON.stringify(box)}, '/sdk/hello.txt', 'hi from the sdk', { mode: 0o600 });
  await dsec.writeFile(${JSON.stringify(box)}, '/sdk/bytes', Buffer.from([0, 1, 2, 255]));
  const text = (await dsec.readFile(${JSON.stringify(box)}, '/sdk/hello.txt')).toString();
  const bytes = [...(await dsec.readFile(${JSON.stringify(box)}, '/sdk/bytes'))];
  const tooLarge = await dsec.readFile(${JSON.stringify(box)}, '/sdk/hello.txt', { maxBytes: 2 }).catch((e) => e.code);
  const run = await dsec.invoke('graders', { runtime: 'bash', code: 'echo 1' });
  const all = await dsec.capabilities();
  const container = await dsec.capabilities('container');
  const unknown = await dsec.capabilities('nope');
  console.log(JSON.stringify({ text, bytes, tooLarge, run: { exitCode: run.exitCode, task: JSON.parse(run.stdout).task }, all, container, unknown }));
} finally {
  await dsec.close();
}
`);
    expect(result.code, result.stderr).toBe(0);
    const out = JSON.parse(result.stdout);
    expect(out.text).toBe('hi from the sdk');
    expect(out.bytes).toEqual([0, 1, 2, 255]);
    expect(out.tooLarge).toBe('DSEC_FILE_TOO_LARGE');
    expect(out.run).toEqual({ exitCode: 0, task: { runtime: 'bash', code: 'echo 1' } });
    expect(out.all.fnecho).toEqual(['invoke']);
    expect(out.container).toEqual(['exec', 'process', 'session', 'readFile', 'writeFile', 'update', 'pause', 'resume', 'snapshot', 'usage']);
    expect(out.unknown).toEqual([]);
  });
});
