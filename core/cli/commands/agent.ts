/**
 * `dsec agent start|stop|status`: the project's node agent. The local provider
 * starts it on first use, so these are for operators who want to see or
 * control it. Stopping the agent leaves the sandboxes running: a restarted
 * agent adopts them again.
 *
 * With `--root DIR` they act on the agent of that folder instead, with no
 * project config: that is how a cluster node is run
 * (`dsec agent start --root /var/lib/dsec --join http://etcd:2379 --listen
 * 10.0.0.5:7001 --token-file /etc/dsec/token`).
 */
import path from 'node:path';
import type { Command } from 'commander';
import { DsecError } from '../../errors.js';
import type { PluginRef } from '../../model.js';
import { action, collect } from '../command.js';
import { printJson } from '../output.js';
import type { CliContext } from '../context.js';
import { startClusterAgent } from '../../agent/cluster-daemon.js';
import { parseLabel, parseLeaseTtl } from '../../agent/cluster-flags.js';
import { agentStatus, startAgentDaemon, stopAgent } from '../../agent/daemon.js';

interface StartFlags {
  json?: boolean;
  root?: string;
  name?: string;
  plugins?: string;
  join?: string;
  listen?: string;
  advertise?: string;
  tokenFile?: string;
  nodeLabel?: string[];
  leaseTtl?: string;
  prefix?: string;
}

/** `--root DIR`, or the project's own agent folder. */
async function agentRoot(ctx: CliContext, root: string | undefined): Promise<string> {
  return root ? path.resolve(root) : path.join(await ctx.stateDir(), 'agent');
}

export function registerAgentCommands(program: Command): void {
  const agent = program.command('agent').description("Start, stop and inspect this project's node agent.");

  agent
    .command('start')
    .description('Start the node agent in the background (no-op when it already runs); with --join, a cluster node.')
    .option('--json', 'print {pid, socket} as JSON')
    .option('--root <dir>', "the agent's folder (no project config needed); required with --join")
    .option('--name <node>', 'the node name (default: the hostname); unique in the cluster')
    .option('--plugins <json>', 'with --root: plugins on top of the built-ins, a JSON array of {name, options}')
    .option('--join <urls>', 'register in etcd at these endpoints (comma-separated URLs)')
    .option('--listen <host:port>', 'serve the API on TCP here (needs --token-file)')
    .option('--advertise <host:port>', 'the address the engine reaches the agent at (default: --listen)')
    .option('--token-file <file>', 'the shared cluster token (16+ characters) every TCP request must carry')
    .option('--node-label <k=v>', 'a node label for placement.nodeSelector (repeatable)', collect)
    .option('--lease-ttl <seconds>', 'the registration lease TTL (default 5)')
    .option('--prefix <prefix>', 'the etcd key prefix (default /dsec)')
    .action(
      action<StartFlags, []>(async (ctx, flags) => {
        const root = await agentRoot(ctx, flags.root);
        const before = await agentStatus(root);
        let started: { pid: number | null; address?: string } = { pid: before.pid };
        if (!before.running) started = flags.root ? await startRootAgent(root, flags) : await startProjectAgent(ctx, root);
        const status = await agentStatus(root);
        if (flags.json) printJson({ ...status, ...(started.address ? { address: started.address } : {}) });
        else {
          const tcp = started.address ? `, TCP ${started.address}` : '';
          process.stdout.write(`${before.running ? 'Agent already running' : 'Agent started'}: pid ${started.pid}, socket ${status.socket}${tcp}\n`);
        }
        return 0;
      }),
    );

  agent
    .command('stop')
    .description('Stop the node agent (a cluster node leaves the cluster). Sandboxes keep running and are adopted when it starts again.')
    .option('--root <dir>', "the agent's folder (default: the project's agent)")
    .action(
      action<{ root?: string }, []>(async (ctx, flags) => {
        const root = await agentRoot(ctx, flags.root);
        const status = await agentStatus(root);
        if (!status.running) {
          process.stdout.write('Agent is not running.\n');
          return 0;
        }
        await stopAgent(root);
        process.stdout.write(`Agent stopped (pid ${status.pid}); its sandboxes keep running.\n`);
        return 0;
      }),
    );

  agent
    .command('status')
    .description('Say whether the node agent runs, where, and how many sandboxes it holds. Exit 3 when it is not running.')
    .option('--json', 'print the status as JSON')
    .option('--root <dir>', "the agent's folder (default: the project's agent)")
    .action(
      action<{ json?: boolean; root?: string }, []>(async (ctx, flags) => {
        const status = await agentStatus(await agentRoot(ctx, flags.root));
        if (flags.json) printJson(status);
        else if (status.running) process.stdout.write(`Agent running: pid ${status.pid}, socket ${status.socket}, ${status.sandboxes} sandbox(es)\n`);
        else process.stdout.write('Agent is not running.\n');
        return status.running ? 0 : 3;
      }),
    );
}

async function startProjectAgent(ctx: CliContext, root: string): Promise<{ pid: number }> {
  const { config } = await ctx.load();
  return startAgentDaemon({ root, plugins: config.plugins, baseDir: config.dir });
}

/** The agent of `--root`, plugins from `--plugins` (resolved from the current folder); a cluster node with --join. */
async function startRootAgent(root: string, flags: StartFlags): Promise<{ pid: number; address?: string }> {
  const plugins = flags.plugins ? parsePlugins(flags.plugins) : undefined;
  const common = { root, baseDir: process.cwd(), ...(flags.name ? { name: flags.name } : {}), ...(plugins ? { plugins } : {}) };
  const clusterOnly = flags.listen || flags.tokenFile || flags.advertise || flags.nodeLabel || flags.leaseTtl || flags.prefix;
  if (!flags.join) {
    if (clusterOnly) throw new DsecError('DSEC_USAGE', { message: '--listen, --token-file, --advertise, --node-label, --lease-ttl and --prefix go with --join' });
    return startAgentDaemon(common);
  }
  if (!flags.listen || !flags.tokenFile) {
    throw new DsecError('DSEC_USAGE', { message: '--join needs --listen HOST:PORT and --token-file FILE: cluster agents serve the engine over TCP, with a token' });
  }
  return startClusterAgent({
    ...common,
    etcd: flags.join.split(','),
    listen: flags.listen,
    tokenFile: path.resolve(flags.tokenFile),
    ...(flags.advertise ? { advertise: flags.advertise } : {}),
    labels: Object.fromEntries((flags.nodeLabel ?? []).map(parseLabel)),
    ...(flags.leaseTtl !== undefined ? { leaseTtlSeconds: parseLeaseTtl(flags.leaseTtl) } : {}),
    ...(flags.prefix ? { prefix: flags.prefix } : {}),
  });
}

function parsePlugins(text: string): PluginRef[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new DsecError('DSEC_USAGE', { message: `--plugins is not JSON: ${(error as Error).message}` });
  }
  if (!Array.isArray(parsed)) throw new DsecError('DSEC_USAGE', { message: '--plugins must be a JSON array of {name, options}' });
  return parsed.map((entry) => (typeof entry === 'string' ? { name: entry, options: {} } : (entry as PluginRef)));
}
