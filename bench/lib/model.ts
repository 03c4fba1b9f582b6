/**
 * In-memory config models for the planner benchmarks (plan-scale,
 * layers-replan): the same fleet shape and config envelope, so the two
 * measure plans of the same kind of fleet.
 */
import type { ConfigModel, EnvironmentModel, FleetModel, LayerModel } from '../../core/model.js';

/** A fleet as a training job would declare it: 1 CPU, 512 MiB, idle stop after 10 minutes. */
export function benchFleet(name: string, environment: string, replicas: number, maxUnavailable: number): FleetModel {
  return {
    name,
    environment,
    backend: 'container',
    replicas,
    resources: { cpu: 1, memoryMiB: 512, pids: 256 },
    network: 'none',
    qos: 'best-effort',
    ttl: { idleStopSeconds: 600 },
    density: { memorySharing: false, reclaimOnPause: true },
    labels: { team: 'rl' },
    update: { maxUnavailable },
  };
}

/** A config model as if loaded from /bench/dsec.yaml on the local provider. */
export function benchConfig(
  layers: Record<string, LayerModel>,
  environments: Record<string, EnvironmentModel>,
  fleets: Record<string, FleetModel>,
): ConfigModel {
  return {
    version: 1,
    file: '/bench/dsec.yaml',
    dir: '/bench',
    provider: { type: 'local', stateDir: '.dsec' },
    plugins: [],
    layers,
    environments,
    fleets,
  };
}
