/**
 * `dsec agent start|stop|status`: the project's node agent. The local provider
 * starts it on first use, so these are for operators who want to see or
 * control it. Stopping the agent leaves the sandboxes running: a restarted
 * agent adopts them again.
 */
import path from 'node:path';
import type { Command } from 'commander';
import { action } from '../command.js';
import { printJson } from '../output.js';
import { agentStatus, startAgentDaemon, stopAgent } from '../../agent/daemon.js';

export function registerAgentCommands(program: Command): void {
  const agent = program.command('agent').description("Start, stop and inspect this project's node agent.");

  agent
    .command('start')
    .description('Start the node agent in the background (no-op when it already runs).')
    .option('--json', 'print {pid, socket} as JSON')
    .action(
      action<{ json?: boolean }, []>(async (ctx, flags) => {
        const { config } = await ctx.load();
        const root = path.join(await ctx.stateDir(), 'agent');
        const before = await agentStatus(root);
        const started = before.running ? { pid: before.pid } : await startAgentDaemon({ root, plugins: config.plugins, baseDir: config.dir });
        const status = await agentStatus(root);
        if (flags.json) printJson(status);
        else process.stdout.write(`${before.running ? 'Agent already running' : 'Agent started'}: pid ${started.pid}, socket ${status.socket}\n`);
        return 0;
      }),
    );

  agent
    .command('stop')
    .description('Stop the node agent. Sandboxes keep running and are adopted when it starts again.')
    .action(
      action(async (ctx) => {
        const root = path.join(await ctx.stateDir(), 'agent');
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
    .action(
      action<{ json?: boolean }, []>(async (ctx, flags) => {
        const status = await agentStatus(path.join(await ctx.stateDir(), 'agent'));
        if (flags.json) printJson(status);
        else if (status.running) process.stdout.write(`Agent running: pid ${status.pid}, socket ${status.socket}, ${status.sandboxes} sandbox(es)\n`);
        else process.stdout.write('Agent is not running.\n');
        return status.running ? 0 : 3;
      }),
    );
}
