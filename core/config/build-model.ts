/**
 * A valid document -> the model: defaults filled in, quantities converted,
 * paths made absolute against the config file's folder, layer references
 * written as `name@version`, maps in sorted order. Runs only after the
 * schema and semantic checks passed, so it does not check anything itself.
 */
import path from 'node:path';
import type {
  ConfigModel,
  EnvironmentModel,
  FleetModel,
  LayerModel,
  LayerSource,
  PluginRef,
  ProviderModel,
  StateModel,
} from '../model.js';
import type {
  DiskImageDocument,
  DsecDocument,
  EnvironmentDocument,
  FleetDocument,
  LayerDocument,
  LayerSourceDocument,
  PluginEntry,
  ProviderDocument,
  StateDocument,
} from './document.generated.js';
import { DEFAULT_CLUSTER_PREFIX } from '../cluster/keys.js';
import { DEFAULT_DENSITY } from '../live.js';
import { splitRef } from './semantic.js';
import { cpuCores, durationSeconds, memoryMiB } from './units.js';

export const DEFAULTS = Object.freeze({
  stateDir: '.dsec',
  busyboxPath: '/bin/busybox',
  workdir: '/',
  user: 'root',
  backend: 'container',
  cpu: 1,
  memoryMiB: 256,
  pids: 256,
  network: 'none',
  qos: 'best-effort',
  maxUnavailable: 1,
  memorySharing: DEFAULT_DENSITY.memorySharing,
  reclaimOnPause: DEFAULT_DENSITY.reclaimOnPause,
  clusterPrefix: DEFAULT_CLUSTER_PREFIX,
  placementStrategy: 'spread',
} as const);

export function buildModel(document: DsecDocument, file: string): ConfigModel {
  const dir = path.dirname(file);
  const declared = document.layers ?? {};
  const layers = mapSorted(declared, (name, layer) => layerModel(name, layer, dir, declared));
  const provider = providerModel(document.provider, dir);
  return {
    version: 1,
    file,
    dir,
    provider,
    ...(document.state === undefined ? {} : { state: stateModel(document.state, provider, dir) }),
    plugins: (document.plugins ?? []).map((plugin) => pluginRef(plugin, dir)),
    layers,
    environments: mapSorted(document.environments ?? {}, (name, environment) =>
      environmentModel(name, environment, layers, dir),
    ),
    fleets: mapSorted(document.fleets ?? {}, fleetModel),
  };
}

function providerModel(provider: ProviderDocument | undefined, dir: string): ProviderModel {
  if (provider && 'cluster' in provider) {
    const { etcd, tokenFile, prefix } = provider.cluster;
    return { type: 'cluster', etcd: [...etcd], tokenFile: path.resolve(dir, tokenFile), prefix: prefix ?? DEFAULTS.clusterPrefix };
  }
  const stateDir = provider?.local.stateDir ?? DEFAULTS.stateDir;
  return { type: 'local', stateDir: path.resolve(dir, stateDir) };
}

/**
 * `backend: etcd` takes its endpoints and prefix from the cluster provider
 * unless it names its own (the semantic checks made sure one of them is
 * there); the key defaults to the config folder's name.
 */
function stateModel(state: StateDocument, provider: ProviderModel, dir: string): StateModel {
  if ((state.backend ?? 'local') === 'local') return { backend: 'local' };
  const cluster = provider.type === 'cluster' ? provider : undefined;
  return {
    backend: 'etcd',
    key: state.key ?? path.basename(dir),
    etcd: [...(state.etcd ?? cluster?.etcd ?? [])],
    prefix: cluster?.prefix ?? DEFAULTS.clusterPrefix,
  };
}

function pluginRef(plugin: PluginEntry, dir: string): PluginRef {
  const { name, options } = typeof plugin === 'string' ? { name: plugin, options: {} } : plugin;
  return { name: isRelativePath(name) ? path.resolve(dir, name) : name, options: { ...(options ?? {}) } };
}

/** `./x.js` and `../x.js` are files next to the config; anything else is a package name. */
export function isRelativePath(name: string): boolean {
  return name === '.' || name === '..' || name.startsWith('./') || name.startsWith('../');
}

function layerModel(
  name: string,
  layer: LayerDocument,
  dir: string,
  layers: Readonly<Record<string, LayerDocument>>,
): LayerModel {
  return {
    ref: `${name}@${layer.version}`,
    name,
    version: layer.version,
    kind: layer.kind,
    source: layerSource(layer.source, dir, layers),
  };
}

function layerSource(
  source: LayerSourceDocument,
  dir: string,
  layers: Readonly<Record<string, LayerDocument>>,
): LayerSource {
  if ('busybox' in source) {
    return { type: 'busybox', path: path.resolve(dir, source.busybox.path ?? DEFAULTS.busyboxPath) };
  }
  if ('dir' in source) return { type: 'dir', path: path.resolve(dir, source.dir) };
  if ('tar' in source) return { type: 'tar', path: path.resolve(dir, source.tar) };
  if ('oci' in source) {
    const { path: image, image: name } = source.oci;
    return { type: 'oci', path: path.resolve(dir, image), ...(name === undefined ? {} : { image: name }) };
  }
  if ('build' in source) {
    const build = source.build;
    return {
      type: 'build',
      from: build.from.map((entry) => layerRefOf(entry, layers)),
      steps: [...build.steps],
      env: sortKeys(build.env ?? {}),
      workdir: build.workdir ?? DEFAULTS.workdir,
    };
  }
  return { type: 'published' };
}

/** `python` or `python@3.11.9` -> the declared `python@3.11.9` (the semantic checks made sure it exists). */
function layerRefOf(entry: string, layers: Readonly<Record<string, LayerDocument>>): string {
  const name = splitRef(entry)[0];
  return `${name}@${layers[name].version}`;
}

function environmentModel(
  name: string,
  environment: EnvironmentDocument,
  layers: Readonly<Record<string, LayerModel>>,
  dir: string,
): EnvironmentModel {
  return {
    name,
    layers: environment.layers.map((entry) => layers[splitRef(entry)[0]].ref),
    env: sortKeys(environment.env ?? {}),
    workdir: environment.workdir ?? DEFAULTS.workdir,
    user: environment.user ?? DEFAULTS.user,
    ...(environment.image === undefined ? {} : { image: diskImage(environment.image, dir) }),
  };
}

/** `./disk.qcow2` (the format from the extension: .qcow2, else raw) or `{path, format}`, the path made absolute. */
function diskImage(image: DiskImageDocument, dir: string): NonNullable<EnvironmentModel['image']> {
  if (typeof image === 'string') return { path: path.resolve(dir, image), format: image.endsWith('.qcow2') ? 'qcow2' : 'raw' };
  return { path: path.resolve(dir, image.path), format: image.format };
}

/** A deep copy with every object's keys sorted, so the same options give the same model (and spec hash). */
function sortedJson(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedJson);
  if (value === null || typeof value !== 'object') return value;
  return mapSorted(value as Record<string, unknown>, (_key, entry) => sortedJson(entry));
}

function fleetModel(name: string, fleet: FleetDocument): FleetModel {
  const resources = fleet.resources ?? {};
  const ttl = fleet.ttl ?? {};
  return {
    name,
    environment: fleet.environment,
    backend: fleet.backend ?? DEFAULTS.backend,
    replicas: fleet.replicas,
    resources: {
      cpu: resources.cpu === undefined ? DEFAULTS.cpu : cpuCores(resources.cpu)!,
      memoryMiB: resources.memory === undefined ? DEFAULTS.memoryMiB : memoryMiB(resources.memory)!,
      pids: resources.pids ?? DEFAULTS.pids,
    },
    network: fleet.network ?? DEFAULTS.network,
    qos: fleet.qos ?? DEFAULTS.qos,
    ttl: {
      ...(ttl.maxLifetime === undefined ? {} : { maxLifetimeSeconds: durationSeconds(ttl.maxLifetime)! }),
      ...(ttl.idleStop === undefined ? {} : { idleStopSeconds: durationSeconds(ttl.idleStop)! }),
    },
    density: {
      memorySharing: fleet.density?.memorySharing ?? DEFAULTS.memorySharing,
      reclaimOnPause: fleet.density?.reclaimOnPause ?? DEFAULTS.reclaimOnPause,
    },
    labels: sortKeys(fleet.labels ?? {}),
    ...(Object.keys(fleet.backendOptions ?? {}).length === 0 ? {} : { backendOptions: sortedJson(fleet.backendOptions) as Record<string, unknown> }),
    ...(fleet.placement === undefined
      ? {}
      : {
          placement: {
            strategy: fleet.placement.strategy ?? DEFAULTS.placementStrategy,
            nodeSelector: sortKeys(fleet.placement.nodeSelector ?? {}),
          },
        }),
    ...(poolModel(fleet.pool) ?? {}),
    update: { maxUnavailable: fleet.update?.maxUnavailable ?? DEFAULTS.maxUnavailable },
  };
}

/** `pool:` as the model has it; absent when nothing in it is set, so fleets without one keep their recorded attributes. */
function poolModel(pool: FleetDocument['pool']): { pool: FleetModel['pool'] } | undefined {
  const maxClaimed = pool?.maxClaimed;
  const claimTtlSeconds = pool?.claimTtl === undefined ? undefined : durationSeconds(pool.claimTtl);
  if (maxClaimed === undefined && claimTtlSeconds === undefined) return undefined;
  return { pool: { ...(maxClaimed !== undefined ? { maxClaimed } : {}), ...(claimTtlSeconds !== undefined ? { claimTtlSeconds } : {}) } };
}

function mapSorted<T, R>(map: Readonly<Record<string, T>>, build: (name: string, value: T) => R): Record<string, R> {
  const result: Record<string, R> = {};
  for (const name of Object.keys(map).sort()) result[name] = build(name, map[name]);
  return result;
}

function sortKeys<T>(map: Readonly<Record<string, T>>): Record<string, T> {
  return mapSorted(map, (_name, value) => value);
}
