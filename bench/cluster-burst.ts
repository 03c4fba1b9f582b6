/**
 * A real burst over a cluster: `dsec apply` of a fleet of 200 container
 * sandboxes spread over three cluster agents (one etcd member, each agent
 * its own root and loopback port, a shared token), beside the same fleet on
 * the local provider (one agent), in the same run.
 *
 * Rounds interleave the two ways in an order that rotates (so neither always
 * runs on a warmer or busier machine); each way creates the fleet (timed
 * until every sandbox is running, as `dsec apply --auto-approve` runs in
 * process: lock, refresh, plan, apply, unlock), checks that all of them run
 * and where, then destroys it (`dsec destroy --target fleet.bench`).
 * Reported: sandboxes per second each way, the cluster/local ratio within
 * each round and its median, the time per phase of an apply, and the spread
 * (sandboxes per node, max/mean).
 *
 * All four agents share this machine's cores, so the ratio measures what
 * the cluster path costs (placing, etcd placement writes, TCP with a token),
 * not a scale-out gain: there is no more CPU to scale out onto.
 *
 * No target: it prints figures. Needs root, runc, overlayfs and etcd; cleans
 * up everything (sandboxes, agents, etcd, temp folders) even on failure or ^C.
 *
 *   npm run build && node dist/bench/cluster-burst.js [--count 200] [--parallel 10] [--rounds 2] [--nodes 3]
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { agentPaths } from '../core/agent/layout.js';
import { CliContext } from '../core/cli/context.js';
import { LABEL_FLEET } from '../core/live.js';
import { unmountAll } from '../plugins/backend-container/rootfs.js';
import { findRuntime } from '../plugins/backend-container/runtime.js';
import { agentRootOf } from '../providers/local/index.js';
import { type CpuSplit, renderClusterBurst, type BurstRound, type Way, type WayResult } from './lib/cluster-burst-report.js';
import { type ClusterAgent, startAgents, sweepAgent, writeClusterProject, writeLocalProject, writeToken } from './lib/cluster-project.js';
import { applyInProcess, FLEET, FLEET_ADDRESS } from './lib/dsec-project.js';
import { EtcdCluster } from './lib/etcd-cluster.js';
import { measured } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';

export interface ClusterBurstSettings {
  count: number;
  parallel: number;
  rounds: number;
  nodes: number;
}

export function parseClusterBurstArgs(argv: readonly string[]): ClusterBurstSettings {
  const settings: ClusterBurstSettings = { count: 200, parallel: 10, rounds: 2, nodes: 3 };
  const usage = 'usage: cluster-burst [--count N] [--parallel N] [--rounds N] [--nodes N]';
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '') as keyof ClusterBurstSettings;
    const value = Number(argv[++i]);
    if (!['count', 'parallel', 'rounds', 'nodes'].includes(key) || !Number.isInteger(value) || value < 1) throw new Error(usage);
    settings[key] = value;
  }
  return settings;
}

let aborted = false;
const checkAborted = () => {
  if (aborted) throw new Error('interrupted');
};
const say = (message: string) => process.stderr.write(`cluster-burst: ${message}\n`);

/** user + system CPU seconds a process has used (0 once it is gone). */
function processCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** CPU of this process, the way's agents and etcd over `work`. */
async function split<T>(agents: readonly (number | undefined)[], etcd: number | undefined, work: () => Promise<T>): Promise<{ value: T; cpu: CpuSplit }> {
  const sum = () => agents.reduce<number>((total, pid) => total + processCpuSeconds(pid), 0);
  const [engine, agentsBefore, etcdBefore] = [process.cpuUsage(), sum(), processCpuSeconds(etcd)];
  const value = await work();
  const used = process.cpuUsage(engine);
  return {
    value,
    cpu: { engine: (used.user + used.system) / 1e6, agents: sum() - agentsBefore, etcd: etcd === undefined ? 0 : processCpuSeconds(etcd) - etcdBefore },
  };
}

/** The fleet's running sandboxes per node, read through the project's provider (not timed). */
async function runningPerNode(project: string, expected: number): Promise<Record<string, number>> {
  const ctx = new CliContext({ chdir: project, color: false });
  try {
    const provider = await ctx.connect({ autoStart: false });
    const sandboxes = await provider.listSandboxes({ [LABEL_FLEET]: FLEET });
    const running = sandboxes.filter((sandbox) => sandbox.status === 'running');
    if (running.length !== expected) {
      throw new Error(`${expected} sandboxes should run after the apply, ${running.length} do (of ${sandboxes.length} listed)`);
    }
    const perNode: Record<string, number> = {};
    for (const sandbox of running) perNode[sandbox.node] = (perNode[sandbox.node] ?? 0) + 1;
    return perNode;
  } finally {
    await ctx.close();
  }
}

export async function runClusterBurst(settings: ClusterBurstSettings): Promise<boolean> {
  const runtime = findRuntime('runc');
  const work = await realpath(await mkdtemp(path.join(tmpdir(), 'dsec-bench-cluster-')));
  const projects: Record<Way, string> = { local: path.join(work, 'local'), cluster: path.join(work, 'cluster') };
  const names = Array.from({ length: settings.nodes }, (_, i) => `node-${String.fromCharCode(97 + i)}`);
  const tokenFile = path.join(work, 'token');
  const agents: ClusterAgent[] = [];
  let etcd: EtcdCluster | undefined;
  const onSignal = () => {
    if (aborted) process.exit(130);
    aborted = true;
    say('interrupted; finishing the step in flight, then cleaning up (^C again to leave things behind)');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const rounds: BurstRound[] = [];
  try {
    await mkdir(projects.local);
    await mkdir(projects.cluster);
    await writeToken(tokenFile);
    etcd = await EtcdCluster.start({ members: 1 });
    const endpoint = etcd.endpoints[0];
    await startAgents(path.join(work, 'agents'), names, endpoint, tokenFile, agents);
    await writeLocalProject(projects.local, settings.count);
    await writeClusterProject(projects.cluster, settings.count, endpoint, tokenFile, names);
    say(`etcd on ${endpoint}; agents ${agents.map((agent) => `${agent.name} on ${agent.address}`).join(', ')}`);

    const holders: Record<Way, number> = { local: 1, cluster: settings.nodes };
    const apply = { destroy: false, parallelism: settings.parallel, expect: settings.count };
    const destroy = { ...apply, destroy: true, targets: [FLEET_ADDRESS] };
    // Warm-up, untimed: starts the local agent, publishes the layer on every node, one full apply and destroy each way.
    for (const way of ['local', 'cluster'] as const) {
      checkAborted();
      await applyInProcess(projects[way], { ...apply, expect: settings.count + holders[way] });
      await applyInProcess(projects[way], destroy);
      say(`warm-up (${way}) done`);
    }

    const localPid = Number.parseInt(readFileSync(agentPaths(agentRootOf(path.join(projects.local, '.dsec'))).pidFile, 'utf8'), 10);
    const pids: Record<Way, (number | undefined)[]> = { local: [localPid], cluster: agents.map((agent) => agent.pid) };
    const etcdPid: Record<Way, number | undefined> = { local: undefined, cluster: etcd.pid(0) };
    const timed = (way: Way, options: typeof apply) => measured(() => split(pids[way], etcdPid[way], () => applyInProcess(projects[way], options)));
    const run = async (way: Way): Promise<WayResult> => {
      const up = await timed(way, apply);
      const perNode = await runningPerNode(projects[way], settings.count);
      checkAborted();
      const down = await timed(way, destroy);
      return {
        create: up.value.value,
        createCpu: up.cpuSeconds,
        createSplit: up.value.cpu,
        destroy: down.value.value,
        destroyCpu: down.cpuSeconds,
        destroySplit: down.value.cpu,
        perNode,
      };
    };
    const ways: Way[] = ['local', 'cluster'];
    for (let round = 0; round < settings.rounds; round++) {
      const results: BurstRound = {};
      for (const way of ways.map((_, i) => ways[(i + round) % ways.length])) {
        checkAborted();
        results[way] = await run(way);
      }
      rounds.push(results);
      say(`round ${round + 1}/${settings.rounds} done`);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const problems = await cleanUp({ runtime, work, projects, agents, etcd, parallel: settings.parallel });
    for (const problem of problems) say(`cleanup: ${problem}`);
  }
  const { text } = renderClusterBurst(rounds, { count: settings.count, parallel: settings.parallel, nodes: settings.nodes });
  process.stdout.write(text);
  return true;
}

/**
 * Leave the machine as it was: `dsec destroy` of both projects (fleets,
 * holders, layers), the agents, whatever containers they left, etcd, mounts
 * and the temp folder. The cluster is destroyed while etcd and its agents
 * still run. Returns what could not be undone.
 */
async function cleanUp(args: {
  runtime: ReturnType<typeof findRuntime>;
  work: string;
  projects: Record<Way, string>;
  agents: readonly ClusterAgent[];
  etcd: EtcdCluster | undefined;
  parallel: number;
}): Promise<string[]> {
  const { runtime, work, projects, agents, etcd } = args;
  const problems: string[] = [];
  for (const way of ['cluster', 'local'] as const) {
    // A project never written (a failure before it) has nothing to destroy.
    if (!existsSync(path.join(projects[way], 'dsec.yaml'))) continue;
    try {
      await applyInProcess(projects[way], { destroy: true, parallelism: args.parallel });
    } catch (error) {
      problems.push(`dsec destroy (${way}): ${(error as Error).message}`);
    }
  }
  const roots = [agentRootOf(path.join(projects.local, '.dsec')), ...agents.map((agent) => agent.root)];
  for (const root of roots) problems.push(...(await sweepAgent(runtime, root)));
  await etcd?.stop().catch((error: Error) => problems.push(`stopping etcd: ${error.message}`));
  try {
    await unmountAll(work);
    await rm(work, { recursive: true, force: true });
  } catch (error) {
    problems.push(`removing ${work}: ${(error as Error).message}`);
  }
  return problems;
}

runWhenMain(import.meta.url, 'cluster-burst', (argv) => runClusterBurst(parseClusterBurstArgs(argv)));
