/**
 * density-qos's options: only the switch, so a config or a benchmark can
 * turn CPU QoS off on a node.
 */
import { checkPluginOptions } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'density-qos';

export interface DensityQosOptions {
  /** Off: no taps, every sandbox runs under the normal scheduler whatever its class (cpu.shares still follow its cpu). @default true */
  readonly enabled?: boolean;
}

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/density-qos.json',
  title: 'density-qos options',
  type: 'object',
  additionalProperties: false,
  properties: {
    enabled: { type: 'boolean', description: 'Give each sandbox its QoS class\'s CPU scheduling (default true).' },
  },
} as const;

/** Throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): { enabled: boolean } {
  return { enabled: checkPluginOptions<DensityQosOptions>(PLUGIN_NAME, optionsSchema, options).enabled ?? true };
}
