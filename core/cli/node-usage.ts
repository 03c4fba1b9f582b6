/**
 * What `dsec nodes` prints for each node's usage report: its sandboxes by
 * backend and state, CPU and memory requested against what the policy
 * admits and what is used, the memory the density plugins saved (shared,
 * reclaimed, swap), the QoS the node can give, and a table of its fleets.
 * Pure, so the layout is tested without an agent.
 */
import type { NodeInfo, NodeUsage, SandboxStatus } from '../live.js';
import { table, type Colors } from './output.js';

const STATUS_ORDER: readonly SandboxStatus[] = ['running', 'paused', 'creating', 'stopped', 'failed'];

/** At most 2 decimals, no trailing zeros. */
const num = (value: number): string => String(Math.round(value * 100) / 100);
const mib = (value: number): string => `${Math.round(value)} MiB`;
const cores = (value: number): string => `${num(value)} CPU`;

/** `container: 3 running, 1 paused; microvm: 1 failed`, or `none`. */
export function sandboxCounts(sandboxes: NodeUsage['sandboxes'], c: Colors): string {
  const paint = (status: SandboxStatus, text: string): string =>
    status === 'running' ? c.green(text) : status === 'failed' ? c.red(text) : status === 'paused' ? c.cyan(text) : c.yellow(text);
  const parts: string[] = [];
  for (const backend of Object.keys(sandboxes).sort()) {
    const counts = sandboxes[backend];
    const statuses = [...STATUS_ORDER, ...Object.keys(counts).filter((s) => !STATUS_ORDER.includes(s as SandboxStatus)).sort()];
    const shown = statuses
      .filter((status) => (counts[status as SandboxStatus] ?? 0) > 0)
      .map((status) => paint(status as SandboxStatus, `${counts[status as SandboxStatus]} ${status}`));
    if (shown.length > 0) parts.push(`${backend}: ${shown.join(', ')}`);
  }
  return parts.length > 0 ? parts.join('; ') : 'none';
}

function resourceLine(usage: NodeUsage, key: 'cpu' | 'memoryMiB'): string {
  const show = key === 'cpu' ? cores : mib;
  const requested = `${show(usage.requested[key])} requested`;
  const admits = usage.allocatable
    ? ` of ${show(usage.allocatable[key])} allocatable`
    : ' (no admission policy)';
  const used = `${show(usage.used[key])} used`;
  const host = key === 'memoryMiB' ? `; host ${mib(usage.host.availableMiB)} available of ${mib(usage.host.memoryMiB)}` : '';
  return `${requested}${admits}, ${used}; capacity ${show(usage.capacity[key])}${host}`;
}

function sharedLine(memory: NodeUsage['memory']): string {
  const ksm = memory.ksm;
  const state = ksm
    ? ` (KSM ${ksm.running ? 'running' : 'stopped'}: ${ksm.mergeableSandboxes} mergeable sandbox(es), ${ksm.pagesToScan} pages every ${ksm.sleepMillisecs} ms)`
    : '';
  if (memory.sharedMiB === undefined) return ksm ? `-${state}` : '- (no memory sharing plugin)';
  return `${mib(memory.sharedMiB)}${state}`;
}

function swapLine(swap: NodeUsage['memory']['swap']): string {
  if (!swap) return 'none';
  const compressed = swap.compressedMiB === undefined ? '' : `, ${mib(swap.compressedMiB)} compressed`;
  return `${swap.device}: ${mib(swap.usedMiB)} used of ${mib(swap.totalMiB)}${compressed}`;
}

function qosLine(qos: NodeUsage['qos']): string {
  return `core scheduling: ${qos.coreScheduling ?? 'not reported'}; idle CPU: ${qos.idleCpu ?? 'not reported'}`;
}

const optionalMiB = (value: number | undefined): string => (value === undefined ? '-' : mib(value));

function fleetTable(usage: NodeUsage): string {
  if (usage.fleets.length === 0) return '  No fleet sandboxes.\n';
  const rows = [['FLEET', 'SANDBOXES', 'CPU REQ', 'CPU USED', 'MEM REQ', 'MEM USED', 'SHARED', 'RECLAIMED']];
  for (const fleet of [...usage.fleets].sort((a, b) => a.fleet.localeCompare(b.fleet))) {
    rows.push([
      fleet.fleet,
      String(fleet.sandboxes),
      num(fleet.requested.cpu),
      num(fleet.used.cpu),
      mib(fleet.requested.memoryMiB),
      mib(fleet.used.memoryMiB),
      optionalMiB(fleet.sharedMiB),
      optionalMiB(fleet.reclaimedMiB),
    ]);
  }
  return table(rows).replace(/^/gm, '  ');
}

/** `container: exec, readFile, writeFile...; fncall: invoke`: what each backend can do (from its plugin's taps), or undefined when the node did not say. */
export function capabilitiesLine(node: NodeInfo | undefined): string | undefined {
  if (!node?.capabilities) return undefined;
  const backends = Object.keys(node.capabilities).sort();
  if (backends.length === 0) return 'none';
  return backends.map((backend) => `${backend}: ${node.capabilities![backend].join(', ') || 'create and destroy only'}`).join('; ');
}

/** `healthy, 10.0.0.5:7001` or `unhealthy (no answer within 5000 ms), 10.0.0.6:7001`; empty for the local provider's node. */
export function healthLine(node: NodeInfo, c: Colors): string {
  if (!node.health) return '';
  const health = node.health === 'healthy' ? c.green('healthy') : c.red(`unhealthy (${node.healthReason ?? 'no reason given'})`);
  return node.address ? `${health}, ${node.address}` : health;
}

/**
 * Every node's block. With `nodes` (the cluster provider's), each block
 * says the node's health and address, and an unhealthy node (which gives no
 * usage report) is listed with its reason.
 */
export function renderNodeUsage(usages: readonly NodeUsage[], c: Colors, nodes: readonly NodeInfo[] = []): string {
  const unhealthy = nodes.filter((node) => node.health === 'unhealthy' && !usages.some((usage) => usage.node === node.name));
  if (usages.length === 0 && unhealthy.length === 0) return 'No nodes.\n';
  const infoOf = new Map(nodes.map((node) => [node.name, node]));
  const headline = (name: string): string => {
    const info = infoOf.get(name);
    const health = info ? healthLine(info, c) : '';
    return health ? `${c.bold(`Node ${name}`)}  ${health}` : c.bold(`Node ${name}`);
  };
  const sick = unhealthy.map((node) => headline(node.name));
  const blocks = usages.map((usage) => {
    const backends = capabilitiesLine(infoOf.get(usage.node));
    const lines: [string, string][] = [
      ...(backends === undefined ? [] : [['backends', backends] as [string, string]]),
      ['sandboxes', sandboxCounts(usage.sandboxes, c)],
      ['cpu', resourceLine(usage, 'cpu')],
      ['memory', resourceLine(usage, 'memoryMiB')],
      ['shared', sharedLine(usage.memory)],
      ['reclaimed', usage.memory.reclaimedMiB === undefined ? '- (no reclaim plugin)' : mib(usage.memory.reclaimedMiB)],
      ['swap', swapLine(usage.memory.swap)],
      ['qos', qosLine(usage.qos)],
    ];
    const width = Math.max(...lines.map(([key]) => key.length));
    return [
      headline(usage.node),
      ...lines.map(([key, value]) => `  ${c.dim(key.padEnd(width))}  ${value}`),
      '',
      fleetTable(usage).trimEnd(),
    ].join('\n');
  });
  return `${[...blocks, ...sick].join('\n\n')}\n`;
}
