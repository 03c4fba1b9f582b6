/**
 * The node agent through the real CLI: its status, a SIGKILL and the restart
 * that re-adopts the sandboxes still running and reports the ones that are
 * gone, a stop that leaves sandboxes running, an agent killed in the middle
 * of an apply, and agents racing to start on one root.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { agentOf, busyboxConfig, isRunning, Project, REPO, runcContainers, waitFor, type SandboxJson } from './harness.js';

interface StatusJson {
  running: boolean;
  pid: number | null;
  sandboxes: number;
}

interface PlanJson {
  resource_changes: { address: string; action_reason?: string; change: { actions: string[] }; fleet_summary?: Record<string, number> }[];
}

const mountsUnder = (dir: string) =>
  readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .filter((line) => line.split(' ')[1]?.startsWith(`${dir}/`));

describe('the agent of a project', () => {
  const project = Project.copy();
  project.write('dsec.yaml', busyboxConfig({ web: { replicas: 3 } }));
  const agent = agentOf(project);
  afterAll(() => project.cleanup());

  let ids: string[] = [];
  let firstPid = 0;
  let refill = '';
  const containerOf = (id: string) => runcContainers(project).find((c) => c.id.endsWith(`-${id}`));

  it('is not running before anything, and agent status says so with exit 3', async () => {
    const result = await project.run(['agent', 'status']);
    expect(result.code).toBe(3);
    expect(result.stdout).toContain('Agent is not running.');
    expect(existsSync(project.file('.dsec'))).toBe(false);
  });

  it('runs after apply, and agent status --json gives its pid and sandbox count', async () => {
    const apply = await project.run(['apply', '--auto-approve']);
    expect(apply.code, apply.stderr + apply.stdout).toBe(0);
    const status = await project.json<StatusJson>(['agent', 'status']);
    expect(status).toMatchObject({ running: true, sandboxes: 3 });
    expect(status.pid).toBe(agent.pidFile());
    expect(agent.processes()).toEqual([status.pid]);
    firstPid = status.pid!;
    ids = (await project.json<SandboxJson[]>(['sandbox', 'ls'])).map((s) => s.id).sort();
    expect(ids).toHaveLength(3);
  });

  it('re-adopts the running sandboxes after a SIGKILL, with their files, reports the one killed meanwhile as stopped, and its pool makes one in its place', async () => {
    const [keeper, other, victim] = ids;
    const write = await project.run(['sandbox', 'exec', keeper, '--', 'sh', '-c', 'echo before-the-kill > /root/note']);
    expect(write.code, write.stderr).toBe(0);

    process.kill(firstPid, 'SIGKILL');
    await waitFor('the agent to die', () => !isRunning(firstPid));
    expect((await project.run(['agent', 'status'])).code).toBe(3);
    // The sandboxes do not depend on the agent.
    expect(runcContainers(project).filter((c) => c.status === 'running')).toHaveLength(3);

    // One dies while nobody watches.
    execFileSync('runc', ['kill', containerOf(victim)!.id, 'KILL']);
    await waitFor('the victim to stop', () => containerOf(victim)?.status === 'stopped');

    // The first command starts the agent again.
    const listed = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    const status = Object.fromEntries(listed.map((s) => [s.id, s.status]));
    // The fleet's pool (3 ready) has 2 live ones left: the restarted agent makes a fresh one beside them, with no apply.
    const made = listed.filter((s) => !ids.includes(s.id));
    expect(made).toHaveLength(1);
    refill = made[0].id;
    expect(refill).toMatch(/^web-[a-z0-9]{8}$/);
    expect(status).toEqual({ [keeper]: 'running', [other]: 'running', [victim]: 'stopped', [refill]: expect.stringMatching(/^(creating|running)$/) });
    const pids = agent.processes();
    expect(pids).toHaveLength(1);
    expect(pids[0]).not.toBe(firstPid);
    const log = project.read('.dsec/agent/agent.log');
    expect(log).toContain(`re-adopted [${keeper}, ${other}], stopped [${victim}]`);

    const read = await project.run(['sandbox', 'exec', keeper, '--', 'cat', '/root/note']);
    expect(read.code, read.stderr).toBe(0);
    expect(read.stdout).toBe('before-the-kill\n');
    const dead = await project.run(['sandbox', 'exec', victim, '--', 'true']);
    expect(dead.code).toBe(1);
    expect(dead.stderr).toContain('DSEC_SANDBOX_NOT_RUNNING');
  });

  it('shows the stopped sandbox as drift in the plan: with its place taken, it is deleted', async () => {
    const plan = await project.json<PlanJson>(['plan']);
    const web = plan.resource_changes.find((c) => c.address === 'fleet.web');
    expect(web?.change.actions).toEqual(['update']);
    expect(web?.action_reason).toBe('drift');
    expect(web?.fleet_summary).toMatchObject({ replace: 0, unchanged: 3, create: 0, delete: 1 });
    const text = await project.run(['plan', '--detailed-exitcode']);
    expect(text.code).toBe(2);
    expect(text.stdout).toMatch(/~ fleet\.web/);
  });

  it('restarts the agent when the config changes its plugin options, and the sandboxes keep running under the new policy', async () => {
    const before = agent.pidFile()!;
    const policy = 'plugins:\n  - name: density-admission\n    options:\n      overcommit: { cpu: 3, memory: 2 }\n';
    project.write('dsec.yaml', busyboxConfig({ web: { replicas: 3 } }) + policy);
    const nodes = await project.run(['nodes', '--json']);
    expect(nodes.code, nodes.stderr).toBe(0);
    expect(nodes.stderr).toContain('restarting the node agent');
    const after = agent.pidFile()!;
    expect(after).not.toBe(before);
    expect(isRunning(before)).toBe(false);
    expect(agent.processes()).toEqual([after]);
    const [node] = JSON.parse(nodes.stdout) as { capacity: { cpu: number }; allocatable: { cpu: number } }[];
    expect(node.allocatable.cpu).toBeCloseTo(node.capacity.cpu * 3, 5);
    const listed = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    expect(listed.filter((s) => s.status === 'running').map((s) => s.id).sort()).toEqual([ids[0], ids[1], refill].sort());
    // The same settings again: no restart.
    const again = await project.run(['sandbox', 'ls']);
    expect(again.stderr).not.toContain('restarting');
    expect(agent.pidFile()).toBe(after);
  });

  it('stops on agent stop and leaves the sandboxes running', async () => {
    const pid = agent.pidFile()!;
    const stop = await project.run(['agent', 'stop']);
    expect(stop.code, stop.stderr).toBe(0);
    expect(stop.stdout).toContain('its sandboxes keep running');
    expect(isRunning(pid)).toBe(false);
    expect(agent.processes()).toEqual([]);
    expect((await project.run(['agent', 'status'])).code).toBe(3);
    const running = runcContainers(project).filter((c) => c.status === 'running');
    expect(running.map((c) => c.id.split('-').slice(-2).join('-')).sort()).toEqual([ids[0], ids[1], refill].sort());
  });

  it('destroys everything, the stopped sandbox included: no container, mount or sandbox folder is left', async () => {
    const destroy = await project.run(['destroy', '--auto-approve']);
    expect(destroy.code, destroy.stderr + destroy.stdout).toBe(0);
    expect(runcContainers(project)).toEqual([]);
    expect(mountsUnder(project.dir)).toEqual([]);
    expect(readdirSync(project.file('.dsec/agent/sandboxes'))).toEqual([]);
    expect(await project.json<SandboxJson[]>(['sandbox', 'ls'])).toEqual([]);
  });
});

describe('an agent killed in the middle of an apply', () => {
  const REPLICAS = 10;
  const project = Project.copy();
  project.write('dsec.yaml', busyboxConfig({ pool: { replicas: REPLICAS } }));
  const agent = agentOf(project);
  afterAll(() => project.cleanup());

  it('fails or finishes that apply, and the next apply converges with one agent and no duplicates', async () => {
    expect((await project.run(['agent', 'start'])).code).toBe(0);
    const pid = agent.pidFile()!;
    const apply = project.start(['apply', '--auto-approve', '--parallelism', '3']);
    await waitFor('the first sandboxes', () => runcContainers(project).length >= 2, 30_000, 5);
    process.kill(pid, 'SIGKILL');
    const first = await apply.result;
    // Requests in flight were cut (reported, exit 1), or were retried on the agent the provider restarted.
    if (first.code !== 0) {
      expect(first.code).toBe(1);
      expect(first.stdout).toContain('Apply failed part-way.');
      expect(first.stdout).toContain('DSEC_AGENT_UNREACHABLE');
    }

    const again = await project.run(['apply', '--auto-approve']);
    expect(again.code, again.stderr + again.stdout).toBe(0);
    const live = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    expect(live).toHaveLength(REPLICAS);
    expect(live.every((s) => s.status === 'running')).toBe(true);
    expect(runcContainers(project)).toHaveLength(REPLICAS);
    expect(readdirSync(project.file('.dsec/agent/sandboxes')).sort()).toEqual(live.map((s) => s.id).sort());
    expect(agent.processes()).toHaveLength(1);
    expect((await project.run(['plan', '--detailed-exitcode'])).code).toBe(0);
  });

  it('lets exactly one of several agents started at once after a SIGKILL serve the root', async () => {
    process.kill(agent.pidFile()!, 'SIGKILL');
    await waitFor('the agent to die', () => agent.processes().length === 0);
    const main = path.join(REPO, 'dist/core/agent/main.js');
    const children: ChildProcess[] = [];
    const exits: (number | null)[] = [];
    try {
      for (let i = 0; i < 6; i += 1) {
        const child = spawn(process.execPath, [main, '--root', agent.root, '--base-dir', project.dir], { detached: true, stdio: 'ignore' });
        child.on('exit', (code) => exits.push(code));
        children.push(child);
      }
      // All but one find the root taken and exit with 3 (EXIT_ALREADY_RUNNING).
      await waitFor('five agents to give up', () => exits.length >= 5, 20_000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(exits).toEqual([3, 3, 3, 3, 3]);
      expect(agent.processes()).toHaveLength(1);
      const status = await project.json<{ running: boolean; sandboxes: number; pid: number }>(['agent', 'status']);
      expect(status).toMatchObject({ running: true, sandboxes: REPLICAS, pid: agent.processes()[0] });
    } finally {
      for (const child of children) if (child.exitCode === null) child.unref();
    }
  });
});
