/**
 * The cluster-burst tables: per-round rates of the local and cluster ways
 * with the cluster/local ratio (taken within a round, then the median), the
 * time of each phase of an apply, the machine CPU per sandbox, and how the
 * cluster's sandboxes spread over the nodes.
 */
import type { ApplyTiming } from './dsec-project.js';
import { coreCount, fixed, median, table } from './measure.js';

export type Way = 'local' | 'cluster';

/** CPU seconds of the processes of one way, for one batch. */
export interface CpuSplit {
  /** This process: the CLI's code (plan, apply, the provider's client side, placing). */
  readonly engine: number;
  /** The way's node agents (their own processes; runc and the containers are not in it). */
  readonly agents: number;
  /** etcd (cluster only). */
  readonly etcd: number;
}

/** One way in one round. CPU in machine-seconds for the whole batch. */
export interface WayResult {
  readonly create: ApplyTiming;
  readonly createCpu: number;
  readonly createSplit: CpuSplit;
  readonly destroy: ApplyTiming;
  readonly destroyCpu: number;
  readonly destroySplit: CpuSplit;
  /** The fleet's running sandboxes per node after the create. */
  readonly perNode: Readonly<Record<string, number>>;
}

export type BurstRound = Partial<Record<Way, WayResult>>;

export interface BurstSettings {
  readonly count: number;
  readonly parallel: number;
  readonly nodes: number;
}

/** max / mean of the per-node counts, over `nodes` nodes (a node with none counts as 0). */
export function maxOverMean(perNode: Readonly<Record<string, number>>, nodes: number): number {
  const counts = Object.values(perNode);
  const mean = counts.reduce((sum, count) => sum + count, 0) / nodes;
  return Math.max(...counts) / mean;
}

type Pick = (round: BurstRound) => number | undefined;

function ratesTable(rounds: readonly BurstRound[], count: number, phase: 'create' | 'destroy'): string {
  const whole = (way: Way): Pick => (round) => (round[way] ? count / round[way]![phase].whole : undefined);
  const sandboxes = (way: Way): Pick => (round) => (round[way] ? count / round[way]![phase].sandboxes : undefined);
  const ratio: Pick = (round) => {
    const [cluster, local] = [whole('cluster')(round), whole('local')(round)];
    return cluster === undefined || local === undefined ? undefined : cluster / local;
  };
  const columns: [string, Pick, number][] = [
    [`local ${phase === 'create' ? 'apply' : 'destroy'}`, whole('local'), 1],
    ['sandbox phase', sandboxes('local'), 1],
    [`cluster ${phase === 'create' ? 'apply' : 'destroy'}`, whole('cluster'), 1],
    ['sandbox phase', sandboxes('cluster'), 1],
    ['cluster/local', ratio, 2],
  ];
  const cell = (value: number | undefined, digits: number) => (value === undefined ? '-' : fixed(value, digits));
  const rows = rounds.map((round, index) => [String(index + 1), ...columns.map(([, pick, digits]) => cell(pick(round), digits))]);
  const medians = columns.map(([, pick, digits]) => {
    const values = rounds.map(pick).filter((value): value is number => value !== undefined);
    return cell(values.length > 0 ? median(values) : undefined, digits);
  });
  return table(['round', ...columns.map(([title]) => title)], [...rows, ['median', ...medians]]);
}

function phasesTable(rounds: readonly BurstRound[], count: number): string {
  const med = (way: Way, value: (result: WayResult) => number) => {
    const values = rounds.flatMap((round) => (round[way] ? [value(round[way]!)] : []));
    return values.length > 0 ? median(values) : Number.NaN;
  };
  const seconds = (way: Way, phase: 'create' | 'destroy', part: keyof ApplyTiming) => fixed(med(way, (r) => r[phase][part]), 2);
  const rest = (way: Way, phase: 'create' | 'destroy') =>
    fixed(med(way, (r) => r[phase].whole - r[phase].plan - r[phase].sandboxes), 2);
  const cpu = (way: Way, phase: 'createCpu' | 'destroyCpu') => fixed((med(way, (r) => r[phase]) * 1000) / count, 1);
  const split = (way: Way, phase: 'create' | 'destroy', part: keyof CpuSplit) =>
    fixed((med(way, (r) => r[phase === 'create' ? 'createSplit' : 'destroySplit'][part]) * 1000) / count, 1);
  const row = (way: Way, phase: 'create' | 'destroy'): string[] => [
    `${way} ${phase}`,
    seconds(way, phase, 'plan'),
    seconds(way, phase, 'sandboxes'),
    rest(way, phase),
    seconds(way, phase, 'whole'),
    cpu(way, phase === 'create' ? 'createCpu' : 'destroyCpu'),
    split(way, phase, 'engine'),
    split(way, phase, 'agents'),
    way === 'cluster' ? split(way, phase, 'etcd') : '-',
  ];
  const ways = (['local', 'cluster'] as const).filter((way) => rounds.some((round) => round[way]));
  return table(
    ['', 'lock+refresh+plan s', 'sandbox phase s', 'other s', 'whole s', 'machine', 'engine', 'agents', 'etcd'],
    ways.flatMap((way) => [row(way, 'create'), row(way, 'destroy')]),
  );
}

function spreadLines(rounds: readonly BurstRound[], nodes: number): string {
  return rounds
    .map((round, index) => {
      const perNode = round.cluster?.perNode;
      if (!perNode) return `  round ${index + 1}: -\n`;
      const counts = Object.entries(perNode)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([node, count]) => `${node} ${count}`)
        .join(', ');
      return `  round ${index + 1}: ${counts}; max/mean ${fixed(maxOverMean(perNode, nodes), 3)}\n`;
    })
    .join('');
}

/** The whole printout, and the median cluster/local ratio of the create rates. */
export function renderClusterBurst(rounds: readonly BurstRound[], settings: BurstSettings): { text: string; ratio: number } {
  const ratios = rounds.flatMap((round) => (round.local && round.cluster ? [round.local.create.whole / round.cluster.create.whole] : []));
  const ratio = ratios.length > 0 ? median(ratios) : Number.NaN;
  const text = [
    `cluster-burst: a fleet of ${settings.count} container sandboxes, apply parallelism ${settings.parallel}, ` +
      `${rounds.length} interleaved rounds, ${coreCount()} cores\n`,
    `  local:   one node agent (the local provider)\n`,
    `  cluster: ${settings.nodes} cluster agents on this same machine, one etcd member, density-placement (spread, k = 2)\n`,
    `  all ${settings.nodes + 1} agents share these ${coreCount()} cores: the ratio is the cost of the cluster path ` +
      `(etcd placement writes and reads, TCP with a token, placing), not a scale-out gain\n`,
    '\ncreate, sandboxes per second (`dsec apply`, in process: lock, refresh, plan, apply, unlock)\n',
    ratesTable(rounds, settings.count, 'create'),
    '\ndestroy, sandboxes per second (`dsec destroy --target fleet.bench`)\n',
    ratesTable(rounds, settings.count, 'destroy'),
    '\ntime per phase, and CPU ms per sandbox (medians over the rounds): the machine\'s (every process, runc and the\n' +
      '  containers included, other work too), this process\'s (the engine), the node agents\' and etcd\'s own\n',
    phasesTable(rounds, settings.count),
    `\nspread of the cluster's fleet over its ${settings.nodes} nodes (running sandboxes per node after the apply)\n`,
    spreadLines(rounds, settings.nodes),
    `\ncluster / local create rate (median of per-round ratios): ${fixed(ratio, 2)}x\n`,
  ].join('');
  return { text, ratio };
}
