/**
 * The launcher: the small shell that starts mount, umount and runc for the
 * container backend instead of forking the agent. Real shells and real
 * processes; every launcher is closed and every temp folder removed.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Launcher, shellQuote } from '../../../plugins/backend-container/launcher.js';

const opened: Launcher[] = [];
const folders: string[] = [];
afterEach(() => {
  for (const launcher of opened.splice(0)) launcher.close();
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

function newLauncher(): Launcher {
  const launcher = new Launcher();
  opened.push(launcher);
  return launcher;
}

/** The pid of the launcher's shell, read from a job it starts ($PPID of the job is the background subshell's parent). */
async function shellPid(launcher: Launcher): Promise<number> {
  const { stdout } = await launcher.run('/bin/sh', ['-c', 'ps -o ppid= -p $PPID']);
  return Number(stdout.trim());
}

describe('launcher', () => {
  it('runs a command and returns its exit code, stdout and stderr apart', async () => {
    const result = await newLauncher().run('/bin/sh', ['-c', 'echo out; echo err >&2; exit 3']);
    expect(result).toEqual({ code: 3, signal: null, stdout: 'out\n', stderr: 'err\n' });
  });

  it('passes every argument through verbatim, whatever the shell would make of it', async () => {
    const words = ["it's", 'two words', '$HOME', '`id`', 'a\nnewline', '"quoted"', '*', '\\', ''];
    const { stdout } = await newLauncher().run('printf', ['%s|', ...words]);
    expect(stdout).toBe(`${words.join('|')}|`);
  });

  it('refuses an argument with a NUL byte, which no process could receive', () => {
    expect(() => shellQuote('a\0b')).toThrow(/NUL/);
  });

  it('reports a process killed by a signal with that signal', async () => {
    const result = await newLauncher().run('/bin/sh', ['-c', 'kill -KILL $$']);
    expect(result.code).toBeNull();
    expect(result.signal).toBe('SIGKILL');
  });

  it('runs jobs side by side rather than one after the other', async () => {
    const launcher = newLauncher();
    const started = performance.now();
    const results = await Promise.all(Array.from({ length: 8 }, () => launcher.run('sleep', ['0.3'])));
    expect(results.every((result) => result.code === 0)).toBe(true);
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('appends to a log file and returns although the process left a child holding its output', async () => {
    const folder = mkdtempSync(path.join(tmpdir(), 'dsec-launcher-test-'));
    folders.push(folder);
    const log = path.join(folder, 'init.log');
    const pidFile = path.join(folder, 'pid');
    const started = performance.now();
    const result = await newLauncher().run('/bin/sh', ['-c', 'echo started; sleep 5 & echo $! > "$1"', 'sh', pidFile], { logFile: log });
    try {
      expect(result.code).toBe(0);
      expect(performance.now() - started).toBeLessThan(3000);
      expect(readFileSync(log, 'utf8')).toBe('started\n');
    } finally {
      process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
    }
  });

  it('reaps every finished job, so the shell collects no zombies', async () => {
    const launcher = newLauncher();
    await Promise.all(Array.from({ length: 20 }, () => launcher.run('true', [])));
    const shell = await shellPid(launcher);
    // The `wait` lines are sent as answers arrive; give the shell a moment to read the last ones.
    await new Promise((resolve) => setTimeout(resolve, 200));
    let children = '';
    try {
      children = execFileSync('ps', ['--ppid', String(shell), '-o', 'stat='], { encoding: 'utf8' });
    } catch {
      // ps exits 1 when the shell has no child at all
    }
    expect(children.split('\n').filter((stat) => stat.startsWith('Z'))).toEqual([]);
  });

  it('still reports the jobs in flight when its shell dies, and starts a new shell for the next job', async () => {
    const launcher = newLauncher();
    const shell = await shellPid(launcher);
    const inFlight = launcher.run('/bin/sh', ['-c', 'sleep 0.5; echo done']);
    await new Promise((resolve) => setTimeout(resolve, 100));
    process.kill(shell, 'SIGKILL');
    // A job sent before the launcher saw the shell die would fail with it; this one is sent after.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await launcher.run('echo', ['again'])).toMatchObject({ code: 0, stdout: 'again\n' });
    expect(await shellPid(launcher)).not.toBe(shell);
    expect(await inFlight).toMatchObject({ code: 0, stdout: 'done\n' });
  });

  it('fails a job with the reason when its shell cannot start', async () => {
    const launcher = new Launcher('/nonexistent/sh');
    opened.push(launcher);
    await expect(launcher.run('true', [])).rejects.toThrow(/the launcher shell could not start: .*ENOENT/);
  });
});
