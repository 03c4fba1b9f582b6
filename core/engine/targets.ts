/**
 * `--target` and `--replace`: which addresses a plan covers and which
 * sandboxes it must replace regardless of drift.
 */
import { DsecError } from '../errors.js';
import type { FleetState } from '../plan.js';
import { layerAddress, layerRef, parseAddress } from './addresses.js';
import { dependenciesOf, type Graph } from './graph.js';

/** An address filter: everything when no target was given. */
export type Scope = (address: string) => boolean;

const usage = (flag: string, address: string): DsecError =>
  new DsecError('DSEC_USAGE', {
    message: `${flag} ${address}: not a resource address (expected layer.<name>@<version>, environment.<name> or fleet.<name>)`,
  });

/**
 * Normal mode: each target plus what it depends on (a fleet pulls in its
 * layers). Destroy mode goes the other way, as Terraform's does: destroying a
 * layer takes the fleets built on it along, since they cannot outlive it.
 */
export function targetScope(args: {
  targets: readonly string[] | undefined;
  mode: 'normal' | 'destroy';
  graph: Graph;
  /** Every address the state holds, and its fleet records (destroy mode follows them to their layers). */
  recorded: { addresses: Iterable<string>; fleets: Iterable<FleetState> };
  liveFleets: Iterable<string>;
  warn: (message: string) => void;
}): Scope {
  const { targets, mode, graph, recorded } = args;
  if (!targets || targets.length === 0) return () => true;
  const known = new Set<string>(mode === 'normal' ? graph.nodes.keys() : []);
  for (const address of recorded.addresses) known.add(address);
  for (const fleet of args.liveFleets) known.add(`fleet.${fleet}`);

  const included = new Set<string>();
  for (const target of targets) {
    const parsed = parseAddress(target);
    if (!parsed) throw usage('--target', target);
    const exact = `${parsed.type}.${parsed.name}`;
    const matches =
      parsed.type === 'layer' && !parsed.name.includes('@')
        ? [...known].filter((address) => address.startsWith(`layer.${parsed.name}@`))
        : known.has(exact)
          ? [exact]
          : [];
    if (matches.length === 0)
      args.warn(`--target ${target} matches no resource in the configuration, the state or the live view`);
    for (const address of matches) {
      if (mode === 'normal') {
        for (const dependency of graph.nodes.has(address) ? dependenciesOf(graph, address) : [address]) {
          included.add(dependency);
        }
        continue;
      }
      included.add(address);
      for (const fleet of recorded.fleets) {
        const usesLayer = fleet.attributes.layers.some(
          (layer) => layerAddress(layerRef(layer.name, layer.version)) === address,
        );
        if (usesLayer || address === `environment.${fleet.attributes.environment}`) included.add(`fleet.${fleet.name}`);
      }
    }
  }
  return (address) => included.has(address);
}

export interface ReplaceRequest {
  readonly fleets: ReadonlySet<string>;
  readonly sandboxes: ReadonlyMap<string, ReadonlySet<string>>;
}

export function parseReplace(args: {
  replace: readonly string[] | undefined;
  mode: 'normal' | 'destroy';
  declaredFleets: ReadonlySet<string>;
  warn: (message: string) => void;
}): ReplaceRequest {
  const fleets = new Set<string>();
  const sandboxes = new Map<string, Set<string>>();
  for (const address of args.replace ?? []) {
    const parsed = parseAddress(address);
    if (!parsed) throw usage('--replace', address);
    if (args.mode === 'destroy') {
      args.warn(`--replace ${address} is ignored when destroying`);
    } else if (parsed.type !== 'fleet') {
      args.warn(`--replace ${address}: only fleets can be replaced (layers are immutable: publish a new version)`);
    } else if (!args.declaredFleets.has(parsed.name)) {
      args.warn(`--replace ${address}: fleet.${parsed.name} is not in the configuration`);
    } else if (parsed.sandbox !== undefined) {
      const ids = sandboxes.get(parsed.name) ?? new Set<string>();
      ids.add(parsed.sandbox);
      sandboxes.set(parsed.name, ids);
    } else {
      fleets.add(parsed.name);
    }
  }
  return { fleets, sandboxes };
}
