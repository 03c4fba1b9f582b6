/**
 * `dsec sandbox exec|shell|ps|kill` through the real binary, agent, runc and
 * exec server: output printed as it comes (not when the command ends), stdin
 * streamed while the command runs, exit codes passed through, Ctrl-C killing
 * the command in the sandbox, an interactive terminal on a real pty, and
 * background commands listed and signalled by handle.
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxConfig, DSEC_BIN, Project, waitFor, type SandboxJson } from './harness.js';
import { runOnTerminal, screen } from './terminal.js';

interface BackgroundEntry {
  handle: string;
  pid: number;
  running: boolean;
  signal?: string;
  exitCode?: number;
  command: string[];
}

describe('dsec sandbox exec, shell, ps and kill', () => {
  let project: Project;
  let id: string;

  beforeAll(async () => {
    project = Project.copy();
    project.write('dsec.yaml', busyboxConfig({ work: { replicas: 1 } }));
    const applied = await project.run(['apply', '--auto-approve']);
    if (applied.code !== 0) throw new Error(`apply failed: ${applied.stderr}${applied.stdout}`);
    id = (await project.json<SandboxJson[]>(['sandbox', 'ls']))[0].id;
  });
  afterAll(async () => {
    await project.cleanup();
  });

  const inSandbox = async (script: string) => (await project.run(['sandbox', 'exec', id, '--', 'sh', '-c', script])).stdout;

  it('prints output as it comes and streams stdin while the command runs', async () => {
    const child = spawn(process.execPath, [DSEC_BIN, 'sandbox', 'exec', '-i', id, '--', 'sh', '-c', 'echo first; read line; echo "got $line"'], {
      cwd: project.dir,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    // The command waits for its line: "first" can only be here if it was streamed.
    await waitFor('the first line, before any input', () => stdout === 'first\n', 20_000);
    child.stdin.write('hello\n');
    child.stdin.end();
    expect(await exited, stderr).toBe(0);
    expect(stdout).toBe('first\ngot hello\n');
  });

  it('passes the exit code through and keeps stderr apart', async () => {
    const result = await project.run(['sandbox', 'exec', id, '--', 'sh', '-c', 'echo out; echo err >&2; exit 7']);
    expect(result).toMatchObject({ code: 7, stdout: 'out\n', stderr: 'err\n' });
    const json = await project.run(['sandbox', 'exec', id, '--json', '--', 'sh', '-c', 'printf x; exit 3']);
    expect(json.code).toBe(3);
    expect(JSON.parse(json.stdout)).toMatchObject({ exitCode: 3, stdout: 'x', stderr: '' });
  });

  it('kills the command in the sandbox on Ctrl-C', async () => {
    const running = project.start(['sandbox', 'exec', id, '--', 'sh', '-c', 'echo started; exec sleep 3001']);
    let seen = '';
    running.child.stdout!.on('data', (d) => (seen += d));
    await waitFor('the command to start', () => seen.includes('started'), 20_000);
    expect(await inSandbox('ps -o args')).toContain('sleep 3001');
    running.child.kill('SIGINT');
    const result = await running.result;
    expect(result.code, result.stderr).toBe(130);
    expect(result.stderr).toContain('interrupted');
    await waitFor('the sleep to be gone', async () => !(await inSandbox('ps -o args')).includes('sleep 3001'), 10_000, 200);
  });

  it('runs an interactive shell on a terminal and exits with its code', async () => {
    const result = await runOnTerminal(project, ['sandbox', 'shell', id], 'echo $((6*7)) $(tty)\nexit 5\n');
    expect(result.code, result.stdout).toBe(5);
    // The shell's own terminal answered: a pty in the sandbox, not a pipe.
    expect(screen(result.stdout).some((line) => /^42 \/dev\/pts\/\d+$/.test(line)), result.stdout).toBe(true);
  });

  it('starts background commands, lists them and signals them by handle', async () => {
    const started = await project.run(['sandbox', 'exec', '--background', id, '--', 'sleep', '3002']);
    expect(started.code, started.stderr).toBe(0);
    const handle = started.stdout.trim();
    expect(handle).not.toBe('');
    const listed = await project.json<BackgroundEntry[]>(['sandbox', 'ps', id]);
    expect(listed).toContainEqual(expect.objectContaining({ handle, running: true, command: ['sleep', '3002'] }));
    expect((await project.run(['sandbox', 'ps', id])).stdout).toMatch(new RegExp(`${handle}\\s+\\d+\\s+running`));

    expect((await project.run(['sandbox', 'kill', id, handle])).code).toBe(0);
    const ended = await waitFor('the SIGTERM to land', async () => {
      const entry = (await project.json<BackgroundEntry[]>(['sandbox', 'ps', id])).find((e) => e.handle === handle);
      return entry && !entry.running ? entry : undefined;
    }, 10_000, 100);
    expect(ended.signal).toBe('SIGTERM');
    expect(await inSandbox('ps -o args')).not.toContain('sleep 3002');

    expect((await project.run(['sandbox', 'kill', '--forget', id, handle])).code).toBe(0);
    expect((await project.json<BackgroundEntry[]>(['sandbox', 'ps', id])).map((e) => e.handle)).not.toContain(handle);
    const unknown = await project.run(['sandbox', 'kill', id, handle]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('DSEC_GUEST_UNKNOWN_HANDLE');
  });
});
