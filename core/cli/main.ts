/**
 * The `dsec` command line. Each command lives in core/cli/commands/ and only
 * parses flags and prints: the work is in the engine.
 */
import { Command } from 'commander';
import { registerAgentCommands } from './commands/agent.js';
import { registerApply } from './commands/apply.js';
import { registerConfigCommands } from './commands/config.js';
import { registerFunctionCommands } from './commands/fn.js';
import { registerLayerCommands } from './commands/layers.js';
import { registerNodesCommand } from './commands/nodes.js';
import { registerPlan } from './commands/plan.js';
import { registerSandboxCommands } from './commands/sandbox.js';
import { registerStateCommands } from './commands/state.js';
import { DSEC_VERSION } from '../version.js';

/**
 * Terraform users type `-out plan.bin`, `-auto-approve`, `-refresh=false`.
 * Accept those single-dash long flags by rewriting them to `--out` etc.;
 * single-letter flags (`-C`, `-f`) are left alone, and nothing after `--`.
 */
export function normalizeArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  let passthrough = false;
  for (const arg of argv) {
    if (arg === '--') passthrough = true;
    out.push(!passthrough && /^-[a-z][a-z-]+(=.*)?$/.test(arg) ? `-${arg}` : arg);
  }
  return out;
}

export function buildProgram(): Command {
  const program = new Command('dsec')
    .description('Sandbox infrastructure as code: declare layers, environments and sandbox fleets; plan and apply them.')
    .version(DSEC_VERSION, '-V, --version')
    .option('-C, --chdir <dir>', 'run as if dsec was started in <dir>')
    .option('-f, --file <file>', 'the config file (default: dsec.ts or dsec.yaml in the working folder)')
    .option('--no-color', 'never colour the output (also: NO_COLOR=1)')
    .option('-v, --verbose', 'say more on stderr')
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText(
      'after',
      `
Examples:
  $ dsec plan                      # what would change?
  $ dsec apply --auto-approve      # make it so
  $ dsec sandbox ls                # what runs
  $ dsec sandbox exec ID -- uname -a
  $ dsec sandbox write ID /work/in.txt --from in.txt && dsec sandbox read ID /work/out.txt
  $ dsec fn invoke graders --runtime python3 -c 'print(2 + 2)'
  $ dsec sandbox snapshot ID --as solved@1.0.0 --exclude /root/.token
  $ dsec sandbox pause --label job=rollout-17   # freeze a job's sandboxes, reclaim their memory
  $ dsec nodes                     # capacity, usage, shared and reclaimed memory
  $ dsec layers ls
  $ dsec plan --out tf.plan && dsec apply tf.plan
  $ dsec destroy --auto-approve`,
    );
  registerConfigCommands(program);
  registerPlan(program);
  registerApply(program);
  registerStateCommands(program);
  registerSandboxCommands(program);
  registerFunctionCommands(program);
  registerLayerCommands(program);
  registerNodesCommand(program);
  registerAgentCommands(program);
  return program;
}

export async function main(argv: readonly string[] = process.argv): Promise<void> {
  await buildProgram().parseAsync(normalizeArgv(argv));
}
