/**
 * What etcd says about the cluster: the registered nodes (under their
 * leases) and the placements. Plain reads; a registration that is not valid
 * JSON or lacks an address is kept, named, with its problem, so the node is
 * reported unhealthy rather than dropped.
 */
import type { Etcd3 } from 'etcd3';
import { etcdFailure } from '../../core/cluster/etcd.js';
import type { NodeRegistration, Placement } from '../../core/cluster/keys.js';
import type { clusterKeys } from '../../core/cluster/keys.js';

export type ClusterKeys = ReturnType<typeof clusterKeys>;

export type RegistrationEntry =
  | { readonly name: string; readonly registration: NodeRegistration }
  | { readonly name: string; readonly problem: string };

export interface ClusterRecords {
  /** By node name, sorted. */
  readonly nodes: ReadonlyMap<string, RegistrationEntry>;
  /** By sandbox id. */
  readonly placements: ReadonlyMap<string, Placement>;
}

export async function readRegistrations(etcd: Etcd3, keys: ClusterKeys): Promise<Map<string, RegistrationEntry>> {
  let raw: Record<string, string>;
  try {
    raw = await etcd.getAll().prefix(keys.nodes).strings();
  } catch (error) {
    throw etcdFailure(etcd, error);
  }
  const nodes = new Map<string, RegistrationEntry>();
  for (const key of Object.keys(raw).sort()) {
    const name = key.slice(keys.nodes.length);
    nodes.set(name, parseRegistration(name, raw[key]));
  }
  return nodes;
}

function parseRegistration(name: string, text: string): RegistrationEntry {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { name, problem: 'its registration in etcd is not valid JSON' };
  }
  const registration = value as Partial<NodeRegistration> | null;
  if (!registration || typeof registration !== 'object' || typeof registration.address !== 'string' || !registration.info) {
    return { name, problem: 'its registration in etcd has no address or node info' };
  }
  return { name, registration: { ...registration, labels: registration.labels ?? {} } as NodeRegistration };
}

export async function readPlacements(etcd: Etcd3, keys: ClusterKeys): Promise<Map<string, Placement>> {
  let raw: Record<string, string>;
  try {
    raw = await etcd.getAll().prefix(keys.placements).strings();
  } catch (error) {
    throw etcdFailure(etcd, error);
  }
  const placements = new Map<string, Placement>();
  for (const [key, text] of Object.entries(raw)) {
    const placement = parsePlacement(text);
    if (placement) placements.set(key.slice(keys.placements.length), placement);
  }
  return placements;
}

export async function readPlacement(etcd: Etcd3, keys: ClusterKeys, id: string): Promise<Placement | undefined> {
  let text: string | null;
  try {
    text = await etcd.get(keys.placement(id)).string();
  } catch (error) {
    throw etcdFailure(etcd, error);
  }
  return text === null ? undefined : parsePlacement(text);
}

function parsePlacement(text: string): Placement | undefined {
  try {
    const value = JSON.parse(text) as Placement;
    return value && typeof value.node === 'string' && typeof value.sandbox === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}

export async function writePlacement(etcd: Etcd3, keys: ClusterKeys, placement: Placement): Promise<void> {
  try {
    await etcd.put(keys.placement(placement.sandbox)).value(JSON.stringify(placement));
  } catch (error) {
    throw etcdFailure(etcd, error);
  }
}

export async function deletePlacement(etcd: Etcd3, keys: ClusterKeys, id: string): Promise<void> {
  try {
    await etcd.delete().key(keys.placement(id));
  } catch (error) {
    throw etcdFailure(etcd, error);
  }
}
