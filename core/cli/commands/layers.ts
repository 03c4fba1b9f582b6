/**
 * `dsec layers ls|inspect|gc|squash`: the layers published on the project's
 * node agent. Only flags and printing here: the agent does the work (gc
 * never removes a layer a sandbox uses; squash is the storage plugin's).
 */
import type { Command } from 'commander';
import { action } from '../command.js';
import type { CliContext } from '../context.js';
import { colors, printJson } from '../output.js';
import { summariseListing } from '../layer-listing.js';
import { DsecError } from '../../errors.js';
import type { LayerRecord, LayerRef, SandboxInfo } from '../../live.js';

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  return rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i])).join('  ').trimEnd()).join('\n') + '\n';
}

export function humanBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

const refOf = (layer: { name: string; version: string }): string => `${layer.name}@${layer.version}`;
const shortDigest = (digest: string): string => digest.replace(/^sha256:/, '').slice(0, 12);

/** Sandbox ids per layer ref. */
function usersByRef(sandboxes: readonly SandboxInfo[]): Map<string, string[]> {
  const users = new Map<string, string[]>();
  for (const sandbox of sandboxes) {
    for (const layer of sandbox.layers) users.set(refOf(layer), [...(users.get(refOf(layer)) ?? []), sandbox.id]);
  }
  return users;
}

function splitRef(text: string): { name: string; version: string } {
  const at = text.lastIndexOf('@');
  if (at < 1 || at === text.length - 1) throw new DsecError('DSEC_USAGE', { message: `expected NAME@VERSION, got '${text}'` });
  return { name: text.slice(0, at), version: text.slice(at + 1) };
}

async function findRecord(ctx: CliContext, ref: string): Promise<LayerRecord> {
  const { name, version } = splitRef(ref);
  const record = (await (await ctx.agent()).listLayers()).find((layer) => layer.name === name && layer.version === version);
  if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
  return record;
}

export function registerLayerCommands(program: Command): void {
  const layers = program.command('layers').description('Look after the layers published on this project\'s node agent.');

  layers
    .command('ls')
    .description('List the published layers: kind, digest, size, format, and how many sandboxes use each.')
    .option('--json', 'print {storage, layers} as JSON')
    .action(
      action<{ json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const client = await ctx.agent();
        const [records, sandboxes, node] = await Promise.all([client.listLayers(), client.listSandboxes(), client.node()]);
        const users = usersByRef(sandboxes);
        const rows = records.map((record) => ({ ...record, format: record.format ?? 'tree', sandboxes: users.get(refOf(record))?.length ?? 0 }));
        if (flags.json) {
          printJson({ storage: node.storage ?? null, layers: rows });
          return 0;
        }
        const c = colors(flags.color);
        if (rows.length === 0) process.stdout.write('No layers are published.\n');
        else {
          const lines = [['NAME', 'VERSION', 'KIND', 'DIGEST', 'SIZE', 'FILES', 'FORMAT', 'USED BY']];
          for (const row of rows) {
            lines.push([row.name, row.version, row.kind, shortDigest(row.digest), humanBytes(row.sizeBytes), String(row.files), row.format, `${row.sandboxes} sandbox(es)`]);
          }
          process.stdout.write(table(lines));
        }
        if (node.storage) {
          const why = node.storage.reason ? ` (${node.storage.reason})` : '';
          process.stdout.write(c.dim(`storage: ${node.storage.plugin}, format ${node.storage.format}${why}\n`));
        }
        return 0;
      }),
    );

  layers
    .command('inspect')
    .argument('<ref>', 'NAME@VERSION')
    .description('Show a published layer: its record, the sandboxes using it, and a summary of its content.')
    .option('--files', 'list every entry too')
    .option('--json', 'print {record, sandboxes, summary} as JSON (and entries with --files)')
    .action(
      action<{ files?: boolean; json?: boolean; color: boolean }, [string]>(async (ctx, flags, ref) => {
        const record = await findRecord(ctx, ref);
        const client = await ctx.agent();
        const [sandboxes, listing] = await Promise.all([client.listSandboxes(), client.layerListing(record.name, record.version)]);
        const users = usersByRef(sandboxes).get(ref) ?? [];
        const summary = summariseListing(listing.entries);
        if (flags.json) {
          printJson({ record: { ...record, format: record.format ?? 'tree' }, sandboxes: users, summary, ...(flags.files ? { entries: listing.entries } : {}) });
          return 0;
        }
        const c = colors(flags.color);
        const lines = [
          `${c.bold(ref)} (${record.kind})`,
          `  digest:     ${record.digest}`,
          `  published:  ${record.publishedAt}`,
          `  format:     ${record.format ?? 'tree'}`,
          `  size:       ${humanBytes(record.sizeBytes)} in ${record.files} entries`,
          `  content:    ${summary.files} file(s), ${summary.dirs} dir(s), ${summary.symlinks} symlink(s), ${summary.whiteouts} whiteout(s), ${summary.opaqueDirs} opaque dir(s)`,
          `  used by:    ${users.length === 0 ? 'no sandbox' : users.join(', ')}`,
          '  top level:',
          ...summary.top.map((top) => `    /${top.path.padEnd(20)} ${String(top.entries).padStart(7)} entries  ${humanBytes(top.bytes).padStart(9)}`),
        ];
        if (summary.whiteoutPaths.length > 0) {
          lines.push(`  deletes (whiteouts): ${summary.whiteoutPaths.map((path) => `/${path}`).join(', ')}${summary.whiteouts > summary.whiteoutPaths.length ? ', ...' : ''}`);
        }
        if (flags.files) lines.push('  entries:', ...listing.entries.map((entry) => `    ${entry.type.padEnd(8)} /${entry.path}${entry.target ? ` -> ${entry.target}` : ''}`));
        process.stdout.write(`${lines.join('\n')}\n`);
        return 0;
      }),
    );

  layers
    .command('gc')
    .description('Unpublish the layers that no sandbox (live, stopped or failed) and no layer of the current config uses.')
    .option('--dry-run', 'only say what would be removed')
    .option('--json', 'print {dryRun, removed, kept} as JSON')
    .action(
      action<{ dryRun?: boolean; json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const { config } = await ctx.load();
        const keep = Object.values(config.layers).map((layer) => layer.ref);
        const result = await (await ctx.agent()).gcLayers({ keep, dryRun: Boolean(flags.dryRun) });
        if (flags.json) {
          printJson(result);
          return 0;
        }
        const c = colors(flags.color);
        const verb = result.dryRun ? 'would remove' : 'removed';
        for (const record of result.removed) process.stdout.write(`${c.red('-')} ${refOf(record)} ${c.dim(`(${humanBytes(record.sizeBytes)})`)}\n`);
        for (const kept of result.kept) process.stdout.write(c.dim(`  kept ${kept.ref}: ${kept.reason}\n`));
        const bytes = result.removed.reduce((sum, record) => sum + record.sizeBytes, 0);
        process.stdout.write(`gc ${verb} ${result.removed.length} layer(s), ${humanBytes(bytes)}; kept ${result.kept.length}.\n`);
        return 0;
      }),
    );

  layers
    .command('squash')
    .argument('<environment>', 'an environment of the config')
    .description('Merge the layers of an environment into one image offline (whiteouts kept), so its sandboxes mount one image instead of many.')
    .option('--json', 'print the squash record as JSON')
    .action(
      action<{ json?: boolean; color: boolean }, [string]>(async (ctx, flags, name) => {
        const { config } = await ctx.load();
        const environment = config.environments[name];
        if (!environment) {
          throw new DsecError('DSEC_CONFIG_UNKNOWN_ENVIRONMENT', { name: `${name} (declared: ${Object.keys(config.environments).join(', ') || 'none'})` });
        }
        const client = await ctx.agent();
        const published = await client.listLayers();
        const refs: LayerRef[] = environment.layers.map((ref) => {
          const record = published.find((layer) => refOf(layer) === ref);
          if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref: `${ref} (run dsec apply first: squash merges published layers)` });
          return { name: record.name, version: record.version, digest: record.digest };
        });
        const record = await client.squashLayers(refs);
        if (flags.json) {
          printJson(record);
          return 0;
        }
        process.stdout.write(
          `Squashed ${environment.layers.join(' + ')} into ${record.digest} (${record.format}, ${humanBytes(record.sizeBytes)}, ${record.files} entries).\n` +
            `Sandboxes of ${name} created from now on mount it as one image; the plan is unchanged.\n`,
        );
        return 0;
      }),
    );
}
