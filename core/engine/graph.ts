/**
 * The dependency graph: layers -> environments -> fleets, and a build layer
 * -> its parent layers. Built, like
 * Terraform's graph builder, by an ordered list of small steps, each with one
 * job; a comment says where one step must come before another. Plan targeting,
 * apply ordering and `dsec graph` all read it.
 */
import { DsecError } from '../errors.js';
import type { ConfigModel } from '../model.js';
import { environmentAddress, fleetAddress, layerAddress, type NodeType, requireLayerRef } from './addresses.js';

export interface GraphNode {
  readonly address: string;
  readonly type: NodeType;
  /** Addresses this node needs first (a fleet needs its environment, an environment its layers, a build its parents). */
  readonly dependsOn: string[];
}

export interface Graph {
  /** Insertion order: layers, environments, fleets, each sorted by name. */
  readonly nodes: ReadonlyMap<string, GraphNode>;
}

type GraphStep = (config: ConfigModel, nodes: Map<string, GraphNode>) => void;

const addNode = (nodes: Map<string, GraphNode>, address: string, type: NodeType): void => {
  if (nodes.has(address)) throw new DsecError('DSEC_CONFIG_DUPLICATE', { what: type, name: address });
  nodes.set(address, { address, type, dependsOn: [] });
};

const sortedValues = <T>(record: Readonly<Record<string, T>>): T[] =>
  Object.keys(record)
    .sort()
    .map((key) => record[key]);

const addLayerNodes: GraphStep = (config, nodes) => {
  for (const layer of sortedValues(config.layers)) addNode(nodes, layerAddress(layer.ref), 'layer');
};

const addEnvironmentNodes: GraphStep = (config, nodes) => {
  for (const environment of sortedValues(config.environments)) {
    addNode(nodes, environmentAddress(environment.name), 'environment');
  }
};

const addFleetNodes: GraphStep = (config, nodes) => {
  for (const fleet of sortedValues(config.fleets)) addNode(nodes, fleetAddress(fleet.name), 'fleet');
};

const connectEnvironmentsToLayers: GraphStep = (config, nodes) => {
  for (const environment of sortedValues(config.environments)) {
    const address = environmentAddress(environment.name);
    const node = nodes.get(address)!;
    for (const ref of environment.layers) {
      const layer = requireLayerRef(config, ref, address);
      node.dependsOn.push(layerAddress(layer.ref));
    }
  }
};

/** A build runs on its parents: they are published first (a `from` entry is an edge, layer -> layer). */
const connectBuildsToParents: GraphStep = (config, nodes) => {
  for (const layer of sortedValues(config.layers)) {
    if (layer.source.type !== 'build') continue;
    const address = layerAddress(layer.ref);
    const node = nodes.get(address)!;
    for (const ref of layer.source.from) node.dependsOn.push(layerAddress(requireLayerRef(config, ref, address).ref));
  }
};

const connectFleetsToEnvironments: GraphStep = (config, nodes) => {
  for (const fleet of sortedValues(config.fleets)) {
    const environment = environmentAddress(fleet.environment);
    if (!nodes.has(environment)) {
      throw new DsecError('DSEC_CONFIG_UNKNOWN_ENVIRONMENT', {
        name: `${fleet.environment} (used by fleet.${fleet.name})`,
      });
    }
    nodes.get(fleetAddress(fleet.name))!.dependsOn.push(environment);
  }
};

const rejectCycles: GraphStep = (_config, nodes) => assertAcyclic({ nodes });

/**
 * The steps, in order. Every node is added before any edge is drawn, so an
 * edge to a missing node is a dangling reference and not an ordering
 * accident. The cycle check runs last, once every edge is in.
 */
const STEPS: readonly GraphStep[] = [
  addLayerNodes,
  addEnvironmentNodes,
  addFleetNodes,
  connectBuildsToParents,
  connectEnvironmentsToLayers,
  connectFleetsToEnvironments,
  rejectCycles,
];

export function buildGraph(config: ConfigModel): Graph {
  const nodes = new Map<string, GraphNode>();
  for (const step of STEPS) step(config, nodes);
  return { nodes };
}

/**
 * Throws DSEC_CONFIG_CYCLE naming the cycle (`a -> b -> a`) if there is one:
 * builds on top of each other are the one way to make one (the config's
 * semantic checks catch it first, with a location).
 */
export function assertAcyclic(graph: Graph): void {
  const VISITING = 1;
  const DONE = 2;
  const mark = new Map<string, number>();
  const path: string[] = [];
  const visit = (address: string): void => {
    const seen = mark.get(address);
    if (seen === DONE) return;
    if (seen === VISITING) {
      const cycle = [...path.slice(path.indexOf(address)), address];
      throw new DsecError('DSEC_CONFIG_CYCLE', { cycle: cycle.join(' -> ') });
    }
    mark.set(address, VISITING);
    path.push(address);
    for (const dependency of graph.nodes.get(address)?.dependsOn ?? []) visit(dependency);
    path.pop();
    mark.set(address, DONE);
  };
  for (const address of graph.nodes.keys()) visit(address);
}

/** Every address in an order where each node comes after all it depends on (deterministic). */
export function walkOrder(graph: Graph): string[] {
  const order: string[] = [];
  const done = new Set<string>();
  const visit = (address: string): void => {
    if (done.has(address)) return;
    done.add(address);
    for (const dependency of graph.nodes.get(address)?.dependsOn ?? []) visit(dependency);
    order.push(address);
  };
  for (const address of graph.nodes.keys()) visit(address);
  return order;
}

/** `address` and everything it depends on, transitively. */
export function dependenciesOf(graph: Graph, address: string): Set<string> {
  const found = new Set<string>();
  const visit = (current: string): void => {
    if (found.has(current)) return;
    found.add(current);
    for (const dependency of graph.nodes.get(current)?.dependsOn ?? []) visit(dependency);
  };
  visit(address);
  return found;
}

const DOT_STYLE: Readonly<Record<NodeType, { label: string; shape: string; color: string }>> = {
  layer: { label: 'layers', shape: 'box', color: 'lightblue' },
  environment: { label: 'environments', shape: 'ellipse', color: 'lightyellow' },
  fleet: { label: 'fleets', shape: 'box3d', color: 'palegreen' },
};

const quote = (text: string): string => `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/**
 * A DOT digraph, one cluster per node type, edges drawn the way data flows
 * (layer -> environment -> fleet), left to right. `dsec graph | dot -Tsvg`.
 */
export function graphToDot(graph: Graph): string {
  const lines = ['digraph dsec {', '  rankdir = "LR";', '  node [fontname = "sans-serif"];'];
  for (const type of ['layer', 'environment', 'fleet'] as const) {
    const style = DOT_STYLE[type];
    lines.push(`  subgraph ${quote(`cluster_${type}`)} {`, `    label = ${quote(style.label)};`);
    for (const node of graph.nodes.values()) {
      if (node.type !== type) continue;
      const label = node.address.slice(type.length + 1);
      lines.push(
        `    ${quote(node.address)} [label = ${quote(label)}, shape = ${style.shape}, style = filled, fillcolor = ${style.color}];`,
      );
    }
    lines.push('  }');
  }
  for (const node of graph.nodes.values()) {
    for (const dependency of node.dependsOn) lines.push(`  ${quote(dependency)} -> ${quote(node.address)};`);
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}
