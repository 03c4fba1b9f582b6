/**
 * density-qos's options: only the switch, so a config or a benchmark can
 * turn CPU QoS off on a node.
 */
import { DsecError } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'density-qos';

export interface DensityQosOptions {
  /** Off: no taps, every sandbox runs under the normal scheduler whatever its class (cpu.shares still follow its cpu). @default true */
  readonly enabled?: boolean;
}

/** Throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): { enabled: boolean } {
  const value = options ?? {};
  const problems: string[] = [];
  if (typeof value !== 'object' || Array.isArray(value)) problems.push('options must be an object');
  else {
    for (const key of Object.keys(value)) if (key !== 'enabled') problems.push(`unknown option ${JSON.stringify(key)} (known: enabled)`);
    const { enabled } = value as { enabled?: unknown };
    if (enabled !== undefined && typeof enabled !== 'boolean') problems.push(`option enabled must be a boolean, got ${JSON.stringify(enabled)}`);
  }
  if (problems.length > 0) throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
  return { enabled: (value as DensityQosOptions).enabled ?? true };
}
