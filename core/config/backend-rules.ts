/**
 * Config rules a backend plugin applies from its `validate` tap, for what
 * only it knows it needs: the rule is generic (any backend that boots a disk
 * image calls `checkImageRequired` with its kind), the decision to apply it
 * is the backend's. Each problem is a diagnostic at a document path, which
 * the loader locates (file:line:col).
 */
import type { Diagnostic } from '../errors.js';
import type { ConfigModel } from '../model.js';
import { toPointer } from './pointer.js';

/** One error per fleet of `backend` whose environment names no disk image (`image:`), at the fleet's `backend`. */
export function checkImageRequired(config: ConfigModel, backend: string): Diagnostic[] {
  const diagnostics: Diagnostic[] = [];
  for (const fleet of Object.values(config.fleets)) {
    if (fleet.backend !== backend) continue;
    const environment = config.environments[fleet.environment];
    if (!environment || environment.image) continue;
    diagnostics.push({
      code: 'DSEC_CONFIG_MISSING_PROPERTY',
      severity: 'error',
      message:
        `fleet '${fleet.name}' runs on backend ${backend}, which boots a disk image, but environment '${environment.name}' names none; ` +
        `add image: ./disk.qcow2 (or { path, format: qcow2 | raw }) to environment '${environment.name}'`,
      path: toPointer(['fleets', fleet.name, 'backend']),
    });
  }
  return diagnostics;
}
