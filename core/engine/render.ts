/**
 * The human plan, Terraform-style: a legend of the symbols used, each change
 * with its changed attributes (`# forces replacement` beside the ones that
 * do), one summary line of sandboxes per fleet, and the closing
 * `Plan: N to add, N to change, N to destroy.` line.
 */
import picocolors from 'picocolors';
import type { Action, Plan, ResourceChange } from '../plan.js';
import { ACTION_SYMBOL } from '../plan.js';
import { countChanges, planHasChanges } from './plan-json.js';

export { countChanges, planHasChanges, planToJson, type ChangeCounts } from './plan-json.js';

type Colors = ReturnType<typeof picocolors.createColors>;

const LEGEND: readonly [Exclude<Action, 'no-op'>, string][] = [
  ['create', 'create'],
  ['update', 'update in-place'],
  ['replace', 'destroy and then create replacement'],
  ['delete', 'destroy'],
];

function paint(c: Colors, action: Action, text: string): string {
  switch (action) {
    case 'create':
      return c.green(text);
    case 'update':
      return c.yellow(text);
    case 'replace':
      return c.magenta(text);
    case 'delete':
      return c.red(text);
    default:
      return text;
  }
}

const symbol = (c: Colors, action: Action): string => paint(c, action, ACTION_SYMBOL[action].padStart(3));

/** Nested objects become dotted keys (`resources.cpu`); lists stay whole. */
function flatten(value: Readonly<Record<string, unknown>> | null, prefix = '', into = new Map<string, unknown>()) {
  for (const [key, member] of Object.entries(value ?? {})) {
    const path = prefix ? `${prefix}.${key}` : key;
    if (member !== null && typeof member === 'object' && !Array.isArray(member) && Object.keys(member).length > 0) {
      flatten(member as Record<string, unknown>, path, into);
    } else {
      into.set(path, member);
    }
  }
  return into;
}

const isEmptyObject = (value: unknown): boolean =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length === 0;

const show = (value: unknown): string =>
  Array.isArray(value) ? `[${value.map(show).join(', ')}]` : value === undefined ? 'null' : JSON.stringify(value);

/** What an in-place update is about, when the attribute lines alone would not say why the sandboxes change. */
const UPDATE_NOTE: Readonly<Record<string, string>> = {
  drift: ' (the live sandboxes drifted from the state)',
  update_ttl: ' (ttl changed: each live sandbox gets the new lifetimes, none is replaced)',
  update_density: ' (density.reclaimOnPause changed: each live sandbox gets it for its next pause, none is replaced)',
  update_labels: ' (labels changed: each live sandbox gets them in place, none is replaced)',
  update_pool: " (the nodes' pool records of the fleet are set again; no sandbox is touched)",
};

/** Why the change happens, for the header line; the address is already there. */
function comment(change: ResourceChange): string {
  const layer = change.type === 'layer';
  switch (change.action) {
    case 'create':
      return `${layer ? 'will be published' : 'will be created'}${change.reason === 'create_because_missing' ? ' (the state has it, the store does not)' : ''}`;
    case 'update':
      return `will be updated in-place${UPDATE_NOTE[change.reason ?? ''] ?? ''}`;
    case 'replace': {
      const why =
        change.reason === 'replace_by_request'
          ? ', as requested with --replace'
          : change.reason === 'drift'
            ? ' (failed or stopped)'
            : '';
      return `${change.fleet?.summary.replace ?? 0} sandbox(es) must be replaced${why}`;
    }
    case 'delete':
      return `${layer ? 'will be unpublished' : 'will be destroyed'}${change.reason === 'delete_because_no_resource_config' ? ' because it is no longer in the configuration' : ''}`;
    default:
      return '';
  }
}

function attributeLines(c: Colors, change: ResourceChange): string[] {
  const before = flatten(change.before);
  const after = flatten(change.after);
  const forces = (path: string): boolean =>
    change.replacePaths.some((forcing) => path === forcing.join('.') || path.startsWith(`${forcing.join('.')}.`));
  const note = (path: string): string => (forces(path) ? ` ${c.red('# forces replacement')}` : '');
  // `env: {}` on one side and `env.A` on the other is one change, not two.
  const hasChildren = (map: Map<string, unknown>, key: string): boolean =>
    [...map.keys()].some((other) => other.startsWith(`${key}.`));
  for (const [mine, other] of [
    [before, after],
    [after, before],
  ] as const) {
    for (const [key, value] of mine) if (isEmptyObject(value) && hasChildren(other, key)) mine.delete(key);
  }
  // Attributes keep their display order; nested keys stay beside their parent.
  const topOrder = [...new Set([...after.keys(), ...before.keys()].map((key) => key.split('.')[0]))];
  const keys = [...new Set([...after.keys(), ...before.keys()])].sort(
    (a, b) => topOrder.indexOf(a.split('.')[0]) - topOrder.indexOf(b.split('.')[0]) || a.localeCompare(b),
  );
  const width = Math.max(0, ...keys.map((key) => key.length));
  const lines: string[] = [];
  for (const key of keys) {
    const name = `${key}:`.padEnd(width + 1);
    const inBefore = before.has(key);
    const inAfter = after.has(key);
    if (inBefore && inAfter) {
      const old = show(before.get(key));
      const now = show(after.get(key));
      if (old !== now) lines.push(`      ${c.yellow('~')} ${name} ${old} -> ${now}${note(key)}`);
    } else if (inAfter) {
      lines.push(`      ${c.green('+')} ${name} ${show(after.get(key))}${change.action === 'create' ? '' : note(key)}`);
    } else {
      lines.push(`      ${c.red('-')} ${name} ${show(before.get(key))}${change.action === 'delete' ? '' : note(key)}`);
    }
  }
  return lines;
}

function sandboxLine(c: Colors, change: ResourceChange): string[] {
  if (!change.fleet) return [];
  const { summary, maxUnavailable, adopt, forget } = change.fleet;
  const parts = [
    c.green(`+${summary.create} create`),
    c.yellow(`~${summary.update} update`),
    c.magenta(`-/+ ${summary.replace} replace (batches of ${maxUnavailable})`),
    c.red(`-${summary.delete} destroy`),
  ];
  const lines = [`        sandboxes: ${parts.join(', ')}; ${summary.unchanged} unchanged`];
  const claimed = summary.claimed ?? 0;
  const kept = summary.kept ?? 0;
  if (claimed + kept > 0) {
    // The pool beside the claims: claimed sandboxes are never replaced under a rollout unless --replace-claimed.
    const later = summary.replaceWhenReleased ? c.yellow(` ~${summary.replaceWhenReleased} replace when released`) : '';
    const taken = summary.replaceClaimed ? c.red(`; ${summary.replaceClaimed} taken from their holders (--replace-claimed)`) : '';
    lines.push(`        pool: ${summary.ready ?? 0} ready, ${claimed} claimed${later}${kept > 0 ? `, ${kept} kept` : ''}${taken}`);
  }
  if (adopt && adopt.length > 0) {
    lines.push(
      c.dim(`        # ${adopt.length} live sandbox(es) an earlier apply created but did not record will be adopted`),
    );
  }
  if (forget && forget.length > 0) {
    lines.push(c.dim(`        # ${forget.length} sandbox(es) in the state are gone and will be dropped from it`));
  }
  return lines;
}

function warningLines(c: Colors, plan: Plan): string[] {
  return plan.warnings.flatMap((warning) => ['', `${c.yellow(c.bold('Warning:'))} ${warning}`]);
}

export function renderPlan(plan: Plan, options: { color: boolean }): string {
  const c = picocolors.createColors(options.color);
  if (!planHasChanges(plan)) {
    return [
      `${c.green(c.bold('No changes.'))} ${c.bold('Your infrastructure matches the configuration.')}`,
      '',
      'dsec compared the configuration with the live layers and sandboxes and found nothing to do.',
      ...warningLines(c, plan),
      '',
    ].join('\n');
  }
  const changes = plan.resource_changes.filter((change) => change.action !== 'no-op');
  const used = new Set(changes.map((change) => change.action));
  const lines = ['Resource actions are indicated with the following symbols:'];
  for (const [action, meaning] of LEGEND) if (used.has(action)) lines.push(`${symbol(c, action)} ${meaning}`);
  lines.push('', `dsec will perform the following actions${plan.mode === 'destroy' ? ' (destroy)' : ''}:`);
  for (const change of changes) {
    lines.push('', `${symbol(c, change.action)} ${c.bold(change.address)}  ${c.dim(`# ${comment(change)}`)}`);
    lines.push(...attributeLines(c, change), ...sandboxLine(c, change));
  }
  const counts = countChanges(plan);
  lines.push('', c.bold(`Plan: ${counts.add} to add, ${counts.change} to change, ${counts.destroy} to destroy.`));
  const totals = { create: 0, update: 0, replace: 0, delete: 0 };
  for (const change of changes) {
    if (!change.fleet) continue;
    for (const key of Object.keys(totals) as (keyof typeof totals)[]) totals[key] += change.fleet.summary[key];
  }
  if (totals.create + totals.update + totals.replace + totals.delete > 0) {
    lines.push(
      `Sandboxes: ${totals.create} to create, ${totals.update} to update, ${totals.replace} to replace, ${totals.delete} to destroy.`,
    );
  }
  lines.push(...warningLines(c, plan), '');
  return lines.join('\n');
}
