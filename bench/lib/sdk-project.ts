/**
 * A throwaway dsec project driven the way a user drives one: its fleets
 * (and so their warm pools) made by `dsec apply` in process (the CLI's own
 * code: dsec-project.ts's applyInProcess), and everything a program does with
 * the sandboxes through the SDK's `connect({ dir })`. The project's local
 * agent lives in `<work>/project/.dsec/agent`.
 *
 * `dispose` leaves nothing behind, even after a failure half-way: the pools
 * are deleted first (a pool makes a new sandbox for each one destroyed),
 * then every sandbox (claimed ones too) is destroyed through the agent, the
 * agent is stopped, whatever is left of it is swept (runc containers of its
 * root and their cgroups, mounts and loop devices under the work folder) and
 * the work folder is removed.
 */
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { AgentClient } from '../../core/agent/client.js';
import { agentStatus, stopAgent } from '../../core/agent/daemon.js';
import { agentPaths } from '../../core/agent/layout.js';
import { connect, type DsecClient } from '../../core/sdk/index.js';
import { agentRootOf } from '../../providers/local/index.js';
import { applyInProcess, type ApplyTiming } from './dsec-project.js';
import { sweepAgentLeftovers } from './layer-agent.js';
import { pool } from './measure.js';

/** A create or destroy that takes longer than this is a hang: fail (and clean up) rather than wait for ever. */
const REQUEST_TIMEOUT_MS = 180_000;

export class SdkProject {
  private sdk: DsecClient | undefined;
  private agentClient: AgentClient | undefined;

  private constructor(
    /** Everything of this project lives under it (removed by dispose). */
    readonly work: string,
    readonly dir: string,
  ) {}

  /** A fresh temp folder `dsec-bench-<tag>-*` with an empty project folder in it. */
  static async create(tag: string): Promise<SdkProject> {
    const work = await realpath(await mkdtemp(path.join(tmpdir(), `dsec-bench-${tag}-`)));
    const dir = path.join(work, 'project');
    await mkdir(dir);
    return new SdkProject(work, dir);
  }

  get agentRoot(): string {
    return agentRootOf(path.join(this.dir, '.dsec'));
  }

  /** The project's agent, for what the SDK has no word for (its pools' counts: GET /v1/pools). */
  get agent(): AgentClient {
    return (this.agentClient ??= new AgentClient(agentPaths(this.agentRoot).socket, { timeoutMs: REQUEST_TIMEOUT_MS }));
  }

  /** Write dsec.yaml and `dsec apply --auto-approve` it (every sandbox operation must succeed). */
  async apply(yaml: string, parallelism: number): Promise<ApplyTiming> {
    await writeFile(path.join(this.dir, 'dsec.yaml'), yaml);
    return applyInProcess(this.dir, { destroy: false, parallelism });
  }

  /** The SDK's client for this project (one per project; its agent started by the first apply). */
  async connect(): Promise<DsecClient> {
    return (this.sdk ??= await connect({ dir: this.dir }));
  }

  /** Destroy everything, stop the agent, sweep, remove the folder. Never throws; returns what could not be undone. */
  async dispose(parallel = 16): Promise<string[]> {
    const problems: string[] = [];
    const attempt = async (what: string, work: () => Promise<unknown>) => {
      try {
        await work();
      } catch (error) {
        problems.push(`${what}: ${(error as Error).message}`);
      }
    };
    await attempt('closing the SDK client', async () => this.sdk?.close());
    await attempt('destroying the sandboxes', async () => {
      if (!(await agentStatus(this.agentRoot)).running) return;
      for (const info of await this.agent.listPools()) await this.agent.deletePool(info.fleet, info.lineage);
      // Refills in flight when their pool went away finish, then discard themselves: look again until none is left.
      for (let pass = 0; pass < 10; pass++) {
        const ids = (await this.agent.listSandboxes()).map((sandbox) => sandbox.id);
        if (ids.length === 0) return;
        await pool(ids.length, parallel, async (index) => {
          await this.agent.destroySandbox(ids[index]);
        });
      }
      throw new Error('sandboxes kept coming back after 10 passes');
    });
    this.agentClient?.close();
    await attempt('stopping the agent', () => stopAgent(this.agentRoot));
    await attempt('sweeping', () => sweepAgentLeftovers(this.agentRoot, this.work));
    await attempt(`removing ${this.work}`, () => rm(this.work, { recursive: true, force: true }));
    return problems;
  }
}

/**
 * The `plugins:` entry that lets this machine's agent admit `count`
 * sandboxes of `cpu` cores and `memoryMiB` each (density-admission's
 * defaults, 20x CPU and 1x memory, would refuse a few thousand idle
 * sandboxes that use next to nothing): the ratios needed, with 25% room,
 * never below the defaults.
 */
export function admissionFor(count: number, cpu: number, memoryMiB: number): string {
  const memTotalMiB = Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0) / 1024;
  const cpuRatio = Math.max(20, Math.ceil((count * cpu * 1.25) / cpus().length));
  const memoryRatio = Math.max(1, Math.ceil((count * memoryMiB * 1.25) / Math.max(1, memTotalMiB - 512)));
  return `plugins:\n  - name: density-admission\n    options:\n      overcommit: { cpu: ${cpuRatio}, memory: ${memoryRatio} }\n`;
}

/**
 * One flag per signal for a benchmark that must clean up: the first ^C (or
 * SIGTERM) sets `interrupted` (the step in flight finishes, then the
 * benchmark cleans up); a second one leaves at once. A closed stdout or
 * stderr (`| head`) is ignored rather than let its EPIPE end the process
 * before it cleaned up.
 */
export function interruptible(name: string): { readonly interrupted: () => boolean; check(): void; dispose(): void } {
  for (const stream of [process.stdout, process.stderr]) {
    if (stream.listenerCount('error') === 0) stream.on('error', () => undefined);
  }
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write(`${name}: interrupted; finishing the step in flight, then cleaning up (^C again to leave things behind)\n`);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    interrupted: () => interrupted,
    check() {
      if (interrupted) throw new Error('interrupted');
    },
    dispose() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}
