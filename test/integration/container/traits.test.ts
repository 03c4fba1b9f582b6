/**
 * The container backend's density work on real containers, driven through
 * its hooks in this process (a SandboxContext made here, traits set on it
 * directly, as a density plugin's `prepare` tap would): process traits reach
 * the init and every exec, idleCpu marks the CPU cgroup idle, the cgroup
 * folders are on record, pause freezes and resume thaws, usage reads the
 * counters. The agent-level path (prepare tap, pause over the API) is in
 * traits-agent.test.ts.
 */
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { isDsecError } from '../../../core/errors.js';
import type { NodeContext, ProcessTraits, SandboxContext } from '../../../core/hooks.js';
import type { ExecRequest } from '../../../core/live.js';
import type { Resources } from '../../../core/model.js';
import { probeNativeSupport } from '../../../core/native.js';
import { existingCgroupDirs } from '../../../plugins/backend-container/cgroups.js';
import { killPending } from '../../../plugins/backend-container/freeze.js';
import backendContainer, { cgroupsPathOf, containerId } from '../../../plugins/backend-container/index.js';
import { sweep } from '../../helpers/agent-fixture.js';
import { buildBusyboxTree } from '../../helpers/busybox-tree.js';

const KIND = 'container';
let tmp: string;
let root: string;
let lowerDir: string;
let dsec: Dsec;
const made: SandboxContext[] = [];

const node = (): NodeContext => ({
  name: 'test-node',
  root,
  log: { info() {}, warn() {}, debug() {} },
  capacity: { cpu: 2, memoryMiB: 4096 },
  sandboxes: () => made,
});

function sandbox(id: string, traits: ProcessTraits, resources: Resources = { cpu: 1, memoryMiB: 64, pids: 64 }): SandboxContext {
  const context: SandboxContext = {
    spec: { id, backend: KIND, layers: [], env: {}, workdir: '/', user: 'root', resources, network: 'none', qos: 'best-effort', labels: {} },
    node: node(),
    dir: path.join(root, 'sandboxes', id),
    status: 'creating',
    lowerDirs: [lowerDir],
    storage: {},
    backend: {},
    density: {},
    traits,
    createdAt: new Date().toISOString(),
  };
  made.push(context);
  return context;
}

async function provision(context: SandboxContext): Promise<number> {
  expect(await dsec.hooks.provision.for(KIND).promise(context)).toBe(true);
  context.status = 'running';
  return context.backend.initPid as number;
}

/** The backend's exec tap, its output as text. */
async function exec(context: SandboxContext, cmd: string[], extra: Partial<ExecRequest> = {}) {
  const output = await dsec.hooks.exec.for(KIND).promise(context, { cmd, timeoutMs: 20_000, ...extra }, {});
  return output && { ...output, stdout: output.stdout.toString('utf8'), stderr: output.stderr.toString('utf8') };
}

const ksmMergeAny = (statText: string) => /^ksm_merge_any: (\w+)$/m.exec(statText)?.[1];
const schedPolicy = (schedText: string) => Number(/^policy\s+:\s+(\d+)$/m.exec(schedText)?.[1]);
const cgroupFile = (dir: string | undefined, file: string) => readFileSync(path.join(dir!, file), 'utf8').trim();
const SCHED_IDLE = 5;

beforeAll(() => {
  tmp = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-traits-')));
  root = path.join(tmp, 'agent');
  lowerDir = buildBusyboxTree(path.join(tmp, 'busybox'));
  dsec = new Dsec().use(backendContainer());
});

afterEach(async () => {
  for (const context of made.splice(0)) {
    await dsec.hooks.destroy.promise(context).catch((error: Error) => console.warn(`destroy ${context.spec.id}: ${error.message}`));
  }
});

afterAll(async () => {
  try {
    await sweep(root, tmp);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

describe('process traits on container sandboxes', () => {
  it('gives the init and every exec KSM merging when the sandbox has the memoryMerge trait', async () => {
    const merged = sandbox('merged', { memoryMerge: true });
    const initPid = await provision(merged);
    expect(ksmMergeAny(readFileSync(`/proc/${initPid}/ksm_stat`, 'utf8'))).toBe('yes');
    const inside = await exec(merged, ['cat', '/proc/self/ksm_stat']);
    expect(inside?.exitCode).toBe(0);
    expect(ksmMergeAny(inside!.stdout)).toBe('yes');
    // A process left running by an exec, seen from the host: it too is mergeable.
    await exec(merged, ['sh', '-c', 'sleep 300 >/dev/null 2>&1 &']);
    const procs = cgroupFile(merged.cgroups?.memory, 'cgroup.procs').split('\n').map(Number);
    const others = procs.filter((pid) => pid !== initPid);
    expect(others.length).toBeGreaterThan(0);
    for (const pid of others) expect(ksmMergeAny(readFileSync(`/proc/${pid}/ksm_stat`, 'utf8'))).toBe('yes');
  });

  it('leaves a sandbox without traits unmerged, under the normal scheduler and not idle', async () => {
    const plain = sandbox('plain', {});
    const initPid = await provision(plain);
    expect(ksmMergeAny(readFileSync(`/proc/${initPid}/ksm_stat`, 'utf8'))).toBe('no');
    expect(schedPolicy(readFileSync(`/proc/${initPid}/sched`, 'utf8'))).toBe(0);
    const inside = await exec(plain, ['sh', '-c', 'cat /proc/self/ksm_stat; cat /proc/self/sched']);
    expect(ksmMergeAny(inside!.stdout)).toBe('no');
    expect(schedPolicy(inside!.stdout)).toBe(0);
    expect(cgroupFile(plain.cgroups?.cpu, 'cpu.idle')).toBe('0');
  });

  it('runs the init and every exec under SCHED_IDLE and marks the CPU cgroup idle when the sandbox has idleCpu', async () => {
    const idle = sandbox('idle', { idleCpu: true });
    const initPid = await provision(idle);
    expect(schedPolicy(readFileSync(`/proc/${initPid}/sched`, 'utf8'))).toBe(SCHED_IDLE);
    const inside = await exec(idle, ['cat', '/proc/self/sched']);
    expect(schedPolicy(inside!.stdout)).toBe(SCHED_IDLE);
    expect(cgroupFile(idle.cgroups?.cpu, 'cpu.idle')).toBe('1');
    // The kernel reports an idle group's weight as the idle weight, whatever shares it had.
    expect(Number(cgroupFile(idle.cgroups?.cpu, 'cpu.shares'))).toBeLessThan(16);
  });

  it('changes the limits of an idle sandbox in place and keeps it idle (the kernel refuses shares on an idle group)', async () => {
    const idle = sandbox('idle-update', { idleCpu: true });
    await provision(idle);
    expect(await dsec.hooks.update.for(KIND).promise(idle, { cpu: 0.5, memoryMiB: 96, pids: 40 })).toBe(true);
    expect(Number(cgroupFile(idle.cgroups?.memory, 'memory.limit_in_bytes'))).toBe(96 * 1024 * 1024);
    expect(cgroupFile(idle.cgroups?.pids, 'pids.max')).toBe('40');
    expect(cgroupFile(idle.cgroups?.cpu, 'cpu.idle')).toBe('1');
  });

  it('gives every sandbox 1024 CPU shares per core it asks for, whatever its QoS class', async () => {
    const half = sandbox('half', {}, { cpu: 0.5, memoryMiB: 64, pids: 64 });
    await provision(half);
    expect(cgroupFile(half.cgroups?.cpu, 'cpu.shares')).toBe('512');
    expect(await dsec.hooks.update.for(KIND).promise(half, { cpu: 1.5, memoryMiB: 64, pids: 64 })).toBe(true);
    expect(cgroupFile(half.cgroups?.cpu, 'cpu.shares')).toBe('1536');
  });

  it('fails the create with the helper\'s reason when core scheduling is asked for on a machine without it', async () => {
    const support = await probeNativeSupport();
    const cored = sandbox('cored', { coreScheduling: true });
    if (support.coreScheduling.ok) {
      await provision(cored);
      return;
    }
    const error = await dsec.hooks.provision.for(KIND).promise(cored).then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(isDsecError(error, 'DSEC_BACKEND_FAILED')).toBe(true);
    expect((error as Error).message).toMatch(/failed to provision sandbox cored: runc run exited 125: dsec-native: coreScheduling: (Invalid argument|No such device)/);
    await dsec.hooks.destroy.promise(cored);
    expect(await existingCgroupDirs(cgroupsPathOf(containerId(root, 'cored')))).toEqual([]);
  });
});

describe('cgroups, pause, resume and usage of container sandboxes', () => {
  it('records the absolute cgroup folder of each v1 controller, each holding the init', async () => {
    const box = sandbox('folders', {});
    const initPid = await provision(box);
    const cgroups = box.cgroups!;
    expect(Object.keys(cgroups).sort()).toEqual(['cpu', 'cpuacct', 'freezer', 'memory', 'pids']);
    for (const dir of Object.values(cgroups)) {
      expect(path.isAbsolute(dir!)).toBe(true);
      expect(dir!.endsWith(cgroupsPathOf(containerId(root, 'folders')))).toBe(true);
      expect(cgroupFile(dir, 'cgroup.procs').split('\n').map(Number)).toContain(initPid);
    }
    expect(existsSync(path.join(cgroups.memory!, 'memory.limit_in_bytes'))).toBe(true);
    expect(existsSync(path.join(cgroups.cpuacct!, 'cpuacct.usage'))).toBe(true);
  });

  it('freezes the sandbox on pause (probe says paused) and runs it again on resume, where exec works', async () => {
    const box = sandbox('pausing', {});
    await provision(box);
    await exec(box, ['sh', '-c', 'echo kept > /tmp/file']);
    expect(await dsec.hooks.pause.for(KIND).promise(box)).toBe(true);
    expect(cgroupFile(box.cgroups?.freezer, 'freezer.state')).toBe('FROZEN');
    expect(await dsec.hooks.probe.for(KIND).promise(box)).toBe('paused');
    // Pausing a paused sandbox is a no-op.
    expect(await dsec.hooks.pause.for(KIND).promise(box)).toBe(true);
    expect(await dsec.hooks.resume.for(KIND).promise(box)).toBe(true);
    expect(cgroupFile(box.cgroups?.freezer, 'freezer.state')).toBe('THAWED');
    expect(await dsec.hooks.probe.for(KIND).promise(box)).toBe('running');
    expect(await exec(box, ['cat', '/tmp/file'])).toMatchObject({ exitCode: 0, stdout: 'kept\n' });
    // Resuming a running sandbox is a no-op too.
    expect(await dsec.hooks.resume.for(KIND).promise(box)).toBe(true);
  });

  it('returns from resume only once an init killed while frozen is gone, so the next probe says stopped', async () => {
    const box = sandbox('killed-frozen', {});
    const initPid = await provision(box);
    await dsec.hooks.pause.for(KIND).promise(box);
    process.kill(initPid, 'SIGKILL');
    // Frozen, it cannot die yet: the kill is pending, which is how resume knows to wait.
    expect(killPending(initPid)).toBe(true);
    expect(await dsec.hooks.resume.for(KIND).promise(box)).toBe(true);
    expect(await dsec.hooks.probe.for(KIND).promise(box)).toBe('stopped');
  });

  it('pauses and resumes a sandbox with traits, which keep their attributes', async () => {
    const box = sandbox('pausing-traits', { memoryMerge: true, idleCpu: true });
    const initPid = await provision(box);
    await dsec.hooks.pause.for(KIND).promise(box);
    await dsec.hooks.resume.for(KIND).promise(box);
    expect(ksmMergeAny(readFileSync(`/proc/${initPid}/ksm_stat`, 'utf8'))).toBe('yes');
    expect((await exec(box, ['cat', '/proc/self/sched']))?.stdout).toMatch(/^policy\s+:\s+5$/m);
  });

  it('reports plausible usage from the cgroup counters, and what a sandbox adds shows up', async () => {
    const box = sandbox('usage', {}, { cpu: 1, memoryMiB: 128, pids: 64 });
    await provision(box);
    const before = await dsec.hooks.usage.for(KIND).promise(box);
    expect(before).toBeDefined();
    expect(before!.processes).toBeGreaterThanOrEqual(1); // the init shell (and its sleep, once started)
    expect(before!.memoryMiB).toBeGreaterThan(0);
    expect(before!.memoryMiB).toBeLessThan(128);
    expect(before!.swapMiB).toBe(0);
    // 16 MiB in tmpfs (page cache that cannot be dropped) and a busy loop of at least 1 s (to the
    // second after next: `date +%s` has whole seconds, so "+ 1" could end at once).
    await exec(box, ['sh', '-c', 'head -c 16m /dev/zero > /dev/shm/blob; end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done']);
    const after = await dsec.hooks.usage.for(KIND).promise(box);
    expect(after!.memoryMiB - before!.memoryMiB).toBeGreaterThan(15);
    expect(after!.cacheMiB).toBeGreaterThan(15);
    expect(after!.cpuSeconds - before!.cpuSeconds).toBeGreaterThan(0.1);
    expect(after!.cpuSeconds).toBeLessThan(30);
  });

  it('says the sandbox is not running when its usage is asked after its processes are gone', async () => {
    const box = sandbox('gone', {});
    await provision(box);
    await dsec.hooks.destroy.promise(box);
    const error = await dsec.hooks.usage.for(KIND).promise(box).then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(isDsecError(error, 'DSEC_BACKEND_FAILED')).toBe(true);
    expect((error as Error).message).toMatch(/failed to read the usage of sandbox gone: .* is gone: the sandbox is not running/);
  });
});
