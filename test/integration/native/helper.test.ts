/**
 * The real dsec-native helper on this machine: spawn gives the command the
 * attributes (and refuses to run it without one it could not set), probe
 * tells what the node supports, prefetch advises a live process's memory.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { nativeHelperPath, prefetchProcesses, probeNativeSupport } from '../../../core/native.js';

let helper: string;
const started: ChildProcess[] = [];

beforeAll(() => {
  execFileSync('node', ['scripts/build-native.mjs'], { stdio: 'inherit' });
  helper = nativeHelperPath();
});

afterEach(() => {
  for (const child of started.splice(0)) child.kill('SIGKILL');
});

function runHelper(args: string[]) {
  return spawnSync(helper, args, { encoding: 'utf8' });
}

describe('dsec-native spawn', () => {
  it('gives the command KSM merging and SCHED_IDLE, which its children inherit across fork and exec', () => {
    const result = runHelper(['spawn', '--merge', '--sched-idle', '--', 'sh', '-c', 'sh -c "cat /proc/self/ksm_stat; grep ^policy /proc/self/sched"']);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('ksm_merge_any: yes');
    expect(result.stdout).toMatch(/^policy\s+:\s+5$/m);
  });

  it('leaves the command as it is without flags', () => {
    const result = runHelper(['spawn', '--', 'sh', '-c', 'cat /proc/self/ksm_stat; grep ^policy /proc/self/sched']);
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('ksm_merge_any: no');
    expect(result.stdout).toMatch(/^policy\s+:\s+0$/m);
  });

  it('exits 125 without running the command when core scheduling cannot be set on this machine', async () => {
    const support = await probeNativeSupport();
    const result = runHelper(['spawn', '--core-sched', '--', 'sh', '-c', 'echo ran']);
    if (support.coreScheduling.ok) {
      expect(result.status).toBe(0);
      return;
    }
    expect(result.status).toBe(125);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/^dsec-native: coreScheduling: (No such device|Invalid argument)\n$/);
  });

  it('refuses an unknown option and a missing command with a usage message', () => {
    expect(runHelper(['spawn', '--fast', '--', 'true']).stderr).toContain('unknown option --fast');
    expect(runHelper(['spawn', '--merge', '--']).status).toBe(2);
  });

  it('reports a command that cannot be found with exit 127', () => {
    const result = runHelper(['spawn', '--', '/nonexistent/runc']);
    expect(result.status).toBe(127);
    expect(result.stderr).toContain('dsec-native: exec /nonexistent/runc: No such file or directory');
  });
});

describe('probeNativeSupport', () => {
  it('reports memory merging and SCHED_IDLE as available and core scheduling as unavailable, with the kernel reason', async () => {
    const support = await probeNativeSupport();
    expect(support.memoryMerge).toEqual({ ok: true });
    expect(support.schedIdle).toEqual({ ok: true });
    // This machine has no SMT and its kernel lacks CONFIG_SCHED_CORE: either reason says so.
    expect(support.coreScheduling.ok).toBe(false);
    expect(support.coreScheduling.reason).toMatch(/no SMT siblings on this machine|kernel without CONFIG_SCHED_CORE/);
    expect(await probeNativeSupport()).toBe(support);
  });

  it('leaves the calling process unchanged, since each attribute is tried in a child', () => {
    const result = runHelper(['probe']);
    expect(result.status).toBe(0);
    expect(readFileSync('/proc/self/ksm_stat', 'utf8')).toContain('ksm_merge_any: no');
    expect(readFileSync('/proc/self/sched', 'utf8')).toMatch(/^policy\s+:\s+0$/m);
  });
});

describe('prefetchProcesses', () => {
  it('advises every mapping of a live process and reports the bytes', async () => {
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    started.push(child);
    await new Promise((resolve) => child.once('spawn', resolve));
    // 'spawn' comes right after exec, before the dynamic loader mapped libc: wait until sleep sleeps.
    const state = () => readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]?.[0];
    for (let i = 0; i < 200 && state() !== 'S'; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    const result = await prefetchProcesses([child.pid!]);
    expect(result.advisedBytes).toBeGreaterThan(1024 * 1024);
    expect(result.errors).toEqual([]);
  });

  it('reports a process that is gone as an error and still advises the others', async () => {
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    started.push(child);
    await new Promise((resolve) => child.once('spawn', resolve));
    const gone = spawnSync('sh', ['-c', 'echo $$'], { encoding: 'utf8' });
    const deadPid = Number(gone.stdout.trim());
    const result = await prefetchProcesses([deadPid, child.pid!]);
    expect(result.advisedBytes).toBeGreaterThan(0);
    expect(result.errors).toEqual([`pid ${deadPid}: pidfd_open: No such process`]);
  });

  it('answers at once with nothing to do for an empty list', async () => {
    expect(await prefetchProcesses([])).toEqual({ advisedBytes: 0, errors: [] });
  });

  it('skips numbers that cannot be pids, and the helper itself refuses a word that is not one', async () => {
    expect(await prefetchProcesses([-1, 0, 1.5])).toEqual({ advisedBytes: 0, errors: [] });
    const direct = runHelper(['prefetch', 'abc']);
    expect(direct.status).toBe(2);
    expect(direct.stderr).toContain('dsec-native: prefetch: not a pid: abc');
  });
});
