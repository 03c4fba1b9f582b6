/**
 * The state through the real CLI: the lock, stale locks, saved plans that went
 * stale, and a third-party plugin's veto.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { Project } from './harness.js';

describe('the state lock', () => {
  const project = Project.copy('quickstart');
  project.edit('replicas: 3', 'replicas: 1');
  afterAll(() => project.cleanup());

  it('refuses a second apply at once, naming the holder', async () => {
    const holder = spawn('sleep', ['30']);
    try {
      mkdirSync(project.file('.dsec'), { recursive: true });
      writeFileSync(
        project.file('.dsec/state.lock'),
        JSON.stringify({ id: 'lock-1', pid: holder.pid, host: hostname(), command: 'dsec apply', createdAt: new Date().toISOString() }),
      );
      const started = Date.now();
      const result = await project.run(['apply', '--auto-approve']);
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('DSEC_STATE_LOCKED');
      expect(result.stderr).toContain(String(holder.pid));
      expect(result.stderr).toContain('dsec apply');
    } finally {
      holder.kill();
    }
  });

  it('reports a lock left by a dead process with the force-unlock command to run', async () => {
    writeFileSync(
      project.file('.dsec/state.lock'),
      JSON.stringify({ id: 'lock-2', pid: 2 ** 22 + 17, host: hostname(), command: 'dsec apply', createdAt: new Date().toISOString() }),
    );
    const result = await project.run(['apply', '--auto-approve']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('DSEC_STATE_STALE_LOCK');
    expect(result.stderr).toContain('dsec force-unlock lock-2');
    const unlock = await project.run(['force-unlock', 'lock-2']);
    expect(unlock.code).toBe(0);
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr).toBe(0);
  });

  it('refuses a saved plan once the state has moved on', async () => {
    project.edit('replicas: 1', 'replicas: 2');
    const saved = await project.run(['plan', '-out', 'scale.plan']);
    expect(saved.code, saved.stderr).toBe(0);
    // Someone else applies first: the state's serial moves on.
    const other = await project.run(['apply', '--auto-approve']);
    expect(other.code, other.stderr).toBe(0);
    const stale = await project.run(['apply', 'scale.plan']);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain('DSEC_PLAN_STALE');
  });

  it('applies a fresh saved plan exactly, without asking', async () => {
    project.edit('replicas: 2', 'replicas: 1');
    expect((await project.run(['plan', '--out', 'down.plan'])).code).toBe(0);
    const shown = await project.run(['show', 'down.plan']);
    expect(shown.stdout).toMatch(/~ fleet\.workers/);
    const apply = await project.run(['apply', 'down.plan']);
    expect(apply.code, apply.stderr).toBe(0);
    expect(await project.json<unknown[]>(['sandbox', 'ls'])).toHaveLength(1);
    expect(await project.json<string[]>(['state', 'list'])).toEqual(['fleet.workers', 'layer.base@1.0.0', 'layer.hello@0.1.0']);
  });
});

describe('a third-party plugin', () => {
  const project = Project.copy('custom-plugin');
  afterAll(() => project.cleanup());

  it('is loaded from a relative path and vetoes a plan over its budget', async () => {
    const ok = await project.run(['plan', '--refresh=false']);
    expect(ok.code, ok.stderr).toBe(0);
    project.edit('  other:\n    environment: shell\n    replicas: 2', '  other:\n    environment: shell\n    replicas: 3');
    const vetoed = await project.run(['plan']);
    expect(vetoed.code).toBe(1);
    expect(vetoed.stderr).toContain('DSEC_PLAN_VETOED');
    expect(vetoed.stderr).toContain('replica-budget');
    expect(vetoed.stderr).toContain('5 sandboxes, over the budget of 4');
  });
});
