/**
 * A real FnCall fleet through the real `dsec` binary: `dsec apply` makes the
 * pool from a fleet with `backend: fncall` (the default agent loads the
 * backend), `dsec fn invoke` runs tasks on it and exits with their exit code,
 * a fleet's bad backendOptions are a located config error at plan time, and
 * `dsec destroy` leaves no worker container behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, runcList } from './harness.js';

const project = Project.copy();

beforeAll(async () => {
  project.write('dsec.yaml', busyboxConfig({ tools: { replicas: 2, backend: 'fncall' } }));
  const apply = await project.run(['apply', '--auto-approve']);
  expect(apply.code, apply.stderr + apply.stdout).toBe(0);
}, 120_000);

afterAll(() => project.cleanup());

describe('an FnCall fleet through the CLI', () => {
  it('runs a task on the pool and exits with its exit code', async () => {
    const ok = await project.run(['fn', 'invoke', 'tools', '--runtime', 'sh', '-c', 'echo "hi $1"; cat', '--stdin', 'piped', '--', 'there']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toBe('hi there\npiped');
    const failing = await project.run(['fn', 'invoke', 'tools', '--runtime', 'sh', '-c', 'echo oops >&2; exit 7']);
    expect(failing.code).toBe(7);
    expect(failing.stderr).toContain('oops');
  });

  it('exits 124 when the task runs past its timeout', async () => {
    const slow = await project.run(['fn', 'invoke', 'tools', '--runtime', 'sh', '-c', 'sleep 30', '--timeout', '0.3']);
    expect(slow.code).toBe(124);
  });

  it('says a runtime the environment lacks is not valid', async () => {
    const missing = await project.run(['fn', 'invoke', 'tools', '--runtime', 'python3', '-c', 'print(1)']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('DSEC_FUNCTION_INVALID');
    expect(missing.stderr).toContain("runtime python3 is not in the fleet's environment");
  });

  it('refuses to hand a worker out to one holder: any task may use it', async () => {
    const acquired = await project.run(['sandbox', 'acquire', 'tools', '--holder', 'someone']);
    expect(acquired.code).toBe(1);
    expect(acquired.stderr).toContain('[DSEC_BACKEND_UNSUPPORTED]');
    expect(acquired.stderr).toContain("fleet tools's sandboxes are workers for invoke");
    const listed = await project.json<{ claim?: unknown }[]>(['sandbox', 'ls', '--fleet', 'tools']);
    expect(listed.filter((s) => s.claim)).toEqual([]);
  });

  it("refuses bad backendOptions at plan time, located at the field", async () => {
    const original = project.read('dsec.yaml');
    try {
      project.edit('    backend: fncall\n', '    backend: fncall\n    backendOptions: { outputCapBytes: -1 }\n');
      const plan = await project.run(['plan']);
      expect(plan.code).toBe(1);
      expect(plan.stderr + plan.stdout).toContain("fleet 'tools': backendOptions.outputCapBytes must be a whole number from 0 to 33554432, not -1");
      expect(plan.stderr + plan.stdout).toMatch(/dsec\.yaml:\d+:\d+/);
    } finally {
      project.write('dsec.yaml', original);
    }
  });

  it('leaves no worker container after dsec destroy', async () => {
    const destroy = await project.run(['destroy', '--auto-approve']);
    expect(destroy.code, destroy.stderr + destroy.stdout).toBe(0);
    expect(runcList().filter((container) => container.bundle.startsWith(project.dir))).toEqual([]);
  });
});
