/**
 * The create-rate tables: per-round rates and ratios with their medians, and
 * the machine CPU each side spent per sandbox. Ratios are taken within a
 * round (both sides saw the same machine) before the median is taken.
 */
import { coreCount, fixed, median, table } from './measure.js';

/** dsec apply (in process), dsec CLI, bare runc driven from Node, bare runc driven from sh. */
export type Side = 'dsec' | 'cli' | 'bare' | 'sh';

/** One side in one round: rates in sandboxes/s, CPU in machine-seconds for the whole batch. */
export interface SideResult {
  readonly create: number;
  readonly createCpu: number;
  readonly destroy?: number;
  readonly destroyCpu?: number;
  /** dsec only: the rate of the sandbox phase alone. */
  readonly createPhase?: number;
  readonly destroyPhase?: number;
}

export type Round = Partial<Record<Side, SideResult>>;

export interface ReportSettings {
  readonly count: number;
  readonly parallel: number;
}

interface Column {
  readonly title: string;
  readonly value: (round: Round) => number | undefined;
  /** Ratios get two decimals. */
  readonly ratio?: boolean;
}

const rate = (side: Side, pick: (result: SideResult) => number | undefined) => (round: Round) =>
  round[side] ? pick(round[side]!) : undefined;
const ratio = (a: (round: Round) => number | undefined, b: (round: Round) => number | undefined) => (round: Round) => {
  const top = a(round);
  const bottom = b(round);
  return top === undefined || bottom === undefined ? undefined : top / bottom;
};

function roundsTable(rounds: readonly Round[], columns: readonly Column[]): string {
  const shown = columns.filter((column) => rounds.some((round) => column.value(round) !== undefined));
  const cell = (column: Column, value: number | undefined) => (value === undefined ? '-' : fixed(value, column.ratio ? 2 : 1));
  const rows = rounds.map((round, index) => [String(index + 1), ...shown.map((column) => cell(column, column.value(round)))]);
  const medians = shown.map((column) => {
    const values = rounds.map(column.value).filter((value): value is number => value !== undefined);
    return cell(column, values.length > 0 ? median(values) : undefined);
  });
  return table(['round', ...shown.map((column) => column.title)], [...rows, ['median', ...medians]]);
}

/** Median over the rounds of a per-round figure (undefined when no round has it). */
function medianOf(rounds: readonly Round[], value: (round: Round) => number | undefined): number | undefined {
  const values = rounds.map(value).filter((item): item is number => item !== undefined);
  return values.length > 0 ? median(values) : undefined;
}

export function renderCreateRate(rounds: readonly Round[], settings: ReportSettings): { text: string; ratios: { bare?: number; sh?: number } } {
  const apply = rate('dsec', (r) => r.create);
  const bare = rate('bare', (r) => r.create);
  const sh = rate('sh', (r) => r.create);
  const cli = rate('cli', (r) => r.create);
  const create: Column[] = [
    { title: 'dsec apply', value: apply },
    { title: 'sandbox phase', value: rate('dsec', (r) => r.createPhase) },
    { title: 'dsec CLI', value: cli },
    { title: 'bare runc', value: bare },
    { title: 'bare sh', value: sh },
    { title: 'apply/bare', value: ratio(apply, bare), ratio: true },
    { title: 'apply/sh', value: ratio(apply, sh), ratio: true },
    { title: 'CLI/bare', value: ratio(cli, bare), ratio: true },
  ];
  const applyDown = rate('dsec', (r) => r.destroy);
  const bareDown = rate('bare', (r) => r.destroy);
  const cliDown = rate('cli', (r) => r.destroy);
  const destroy: Column[] = [
    { title: 'dsec destroy', value: applyDown },
    { title: 'sandbox phase', value: rate('dsec', (r) => r.destroyPhase) },
    { title: 'dsec CLI', value: cliDown },
    { title: 'bare runc', value: bareDown },
    { title: 'destroy/bare', value: ratio(applyDown, bareDown), ratio: true },
    { title: 'CLI/bare', value: ratio(cliDown, bareDown), ratio: true },
  ];
  const cpuCell = (side: Side, pick: (result: SideResult) => number | undefined) => {
    const seconds = medianOf(rounds, rate(side, pick));
    return seconds === undefined ? '-' : fixed((seconds * 1000) / settings.count);
  };
  const sides = (['dsec', 'cli', 'bare', 'sh'] as const).filter((side) => rounds.some((round) => round[side]));
  const titles: Record<Side, string> = { dsec: 'dsec', cli: 'dsec CLI', bare: 'bare runc', sh: 'bare sh' };
  const cpu = table(
    ['', ...sides.map((side) => titles[side])],
    [
      ['create', ...sides.map((side) => cpuCell(side, (r) => r.createCpu))],
      ['destroy', ...sides.map((side) => cpuCell(side, (r) => r.destroyCpu))],
    ],
  );

  const ratios = { bare: medianOf(rounds, ratio(apply, bare)), sh: medianOf(rounds, ratio(apply, sh)) };
  const text = [
    `create-rate: ${settings.count} container sandboxes per apply, parallelism ${settings.parallel}, ` +
      `${rounds.length} interleaved rounds, ${coreCount()} cores\n`,
    '\ncreate, sandboxes per second\n',
    roundsTable(rounds, create),
    '\ndestroy, sandboxes per second\n',
    roundsTable(rounds, destroy),
    '\nmachine CPU per sandbox, ms (median; the whole apply, command or batch; every process on the machine)\n',
    cpu,
  ].join('');
  return { text, ratios };
}
