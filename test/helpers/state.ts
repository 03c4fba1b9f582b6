/** Small helpers the state store tests share (the local file store and the etcd one). */
import { DsecError } from '../../core/errors.js';
import type { StateFile } from '../../core/plan.js';

/** A mutator adding `layer.<name>@1.0.0` to a state. */
export const withLayer =
  (name: string) =>
  (state: StateFile): StateFile => ({
    ...state,
    resources: {
      ...state.resources,
      [`layer.${name}@1.0.0`]: { type: 'layer', name, version: '1.0.0', kind: 'base', digest: `sha256:${name}` },
    },
  });

/** The DsecError `run` rejects with; anything else (or no error) fails the test. */
export async function caught(run: () => Promise<unknown>): Promise<DsecError> {
  try {
    await run();
  } catch (error) {
    if (error instanceof DsecError) return error;
    throw error;
  }
  throw new Error('expected a DsecError');
}

/** The ids of the sandboxes the state records for fleet `name`, sorted; [] when it records no such fleet. */
export function fleetSandboxIds(state: StateFile, name: string): string[] {
  const record = state.resources[`fleet.${name}`];
  return record?.type === 'fleet' ? Object.keys(record.sandboxes).sort() : [];
}
