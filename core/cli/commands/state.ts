/**
 * Commands on the state: `show`, `state list|show|rm`, `refresh` and
 * `force-unlock`. Reading commands never take the lock; writing ones do.
 */
import path from 'node:path';
import type { Command } from 'commander';
import { action } from '../command.js';
import type { CliContext } from '../context.js';
import { colors, printJson } from '../output.js';
import { reconcileState } from '../../engine/refresh.js';
import { planToJson, renderPlan } from '../../engine/render.js';
import { loadPlan } from '../../engine/saved-plan.js';
import { DsecError } from '../../errors.js';
import type { ResourceState, StateFile } from '../../plan.js';

function describeResource(resource: ResourceState): string {
  if (resource.type === 'layer') return `layer ${resource.name}@${resource.version} (${resource.kind}) ${resource.digest}`;
  const a = resource.attributes;
  const count = Object.keys(resource.sandboxes).length;
  return [
    `fleet ${resource.name}: ${count}/${a.replicas} sandboxes of environment ${a.environment} on ${a.backend}`,
    `  layers:    ${a.layers.map((l) => `${l.name}@${l.version}`).join(', ')}`,
    `  resources: cpu ${a.resources.cpu}, memory ${a.resources.memoryMiB} MiB, pids ${a.resources.pids}`,
    ...Object.values(resource.sandboxes).map((s) => `  - ${s.id} on ${s.node} since ${s.createdAt}`),
  ].join('\n');
}

function renderState(state: StateFile, color: boolean): string {
  const c = colors(color);
  const addresses = Object.keys(state.resources).sort();
  if (addresses.length === 0) return 'The state is empty. Nothing is managed yet: run dsec apply.\n';
  const lines = [c.dim(`# lineage ${state.lineage}, serial ${state.serial}`)];
  for (const address of addresses) lines.push(`${c.bold(address)}\n${describeResource(state.resources[address])}`);
  return `${lines.join('\n\n')}\n`;
}

function resourceAt(state: StateFile, address: string): ResourceState {
  const resource = state.resources[address];
  if (!resource) throw new DsecError('DSEC_STATE_NO_RESOURCE', { address });
  return resource;
}

export function registerStateCommands(program: Command): void {
  program
    .command('show')
    .argument('[planfile]', 'show a saved plan instead of the state')
    .description('Show the state (what dsec manages), or a saved plan.')
    .option('--json', 'print it as JSON')
    .action(
      action<{ json?: boolean; color: boolean }, [string | undefined]>(async (ctx, flags, planFile) => {
        if (planFile) {
          const plan = await loadPlan(path.resolve(ctx.cwd, planFile));
          if (flags.json) printJson(planToJson(plan));
          else process.stdout.write(renderPlan(plan, { color: flags.color }));
          return 0;
        }
        const state = await (await ctx.stateStore()).read();
        if (flags.json) printJson(state);
        else process.stdout.write(renderState(state, flags.color));
        return 0;
      }),
    );

  const stateCommand = program.command('state').description('Inspect and edit the state by hand (advanced).');
  stateCommand
    .command('list')
    .description('List the addresses of every resource in the state.')
    .option('--json', 'print a JSON array')
    .action(
      action<{ json?: boolean }, []>(async (ctx, flags) => {
        const addresses = Object.keys((await (await ctx.stateStore()).read()).resources).sort();
        if (flags.json) printJson(addresses);
        else for (const address of addresses) process.stdout.write(`${address}\n`);
        return 0;
      }),
    );
  stateCommand
    .command('show')
    .argument('<address>', 'e.g. fleet.workers or layer.base@1.0.0')
    .description('Show one resource of the state.')
    .option('--json', 'print it as JSON')
    .action(
      action<{ json?: boolean }, [string]>(async (ctx, flags, address) => {
        const resource = resourceAt(await (await ctx.stateStore()).read(), address);
        if (flags.json) printJson(resource);
        else process.stdout.write(`${describeResource(resource)}\n`);
        return 0;
      }),
    );
  stateCommand
    .command('rm')
    .argument('<address...>', 'addresses to forget')
    .description('Forget resources without destroying them: dsec never touches their sandboxes again.')
    .action(
      action<object, [string[]]>(async (ctx, _flags, addresses) => {
        const session = await (await ctx.stateStore()).lock({ command: 'dsec state rm' });
        try {
          for (const address of addresses) resourceAt(session.state, address);
          await session.write((state) => forget(state, addresses));
          for (const address of addresses) process.stdout.write(`Removed ${address}\n`);
          return 0;
        } finally {
          await session.release();
        }
      }),
    );

  program
    .command('refresh')
    .description('Update the state from the live cluster: adopt sandboxes a crashed apply created, drop ones that are gone.')
    .option('--json', 'print the new state as JSON')
    .action(
      action<{ json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const provider = await ctx.connect();
        const session = await (await ctx.stateStore()).lock({ command: 'dsec refresh' });
        try {
          const live = await provider.refresh();
          const next = await session.write((state) => reconcileState(state, live));
          if (flags.json) printJson(next);
          else process.stdout.write(renderState(next, flags.color));
          return 0;
        } finally {
          await session.release();
        }
      }),
    );

  program
    .command('force-unlock')
    .argument('<lock-id>', 'the id printed in the lock error')
    .description('Remove a state lock left by a process that died. Make sure no apply is running first.')
    .action(
      action<object, [string]>(async (ctx, _flags, id) => {
        await (await ctx.stateStore()).forceUnlock(id);
        process.stdout.write(`The state has been unlocked.\n`);
        return 0;
      }),
    );
}

/** Drop the resources and remember their sandbox ids, so refresh never adopts them back. */
function forget(state: StateFile, addresses: readonly string[]): StateFile {
  const resources = { ...state.resources };
  const forgotten = new Set(state.forgotten ?? []);
  for (const address of addresses) {
    const resource = resources[address];
    if (resource?.type === 'fleet') for (const id of Object.keys(resource.sandboxes)) forgotten.add(id);
    delete resources[address];
  }
  return { ...state, resources, forgotten: [...forgotten].sort() };
}
