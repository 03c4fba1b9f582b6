/** Finding the config file of a project folder. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { DsecError } from '../errors.js';

export const CONFIG_FILE_NAMES = Object.freeze(['dsec.ts', 'dsec.yaml', 'dsec.yml']);

/**
 * The absolute path of `dsec.ts`, `dsec.yaml` or `dsec.yml` in `dir`. Two of
 * them at once would make it unclear which one `dsec apply` uses, so that is
 * an error (DSEC_CONFIG_AMBIGUOUS), as is none (DSEC_CONFIG_NOT_FOUND).
 */
export function findConfigFile(dir: string): string {
  const folder = path.resolve(dir);
  const present = CONFIG_FILE_NAMES.filter((name) => existsSync(path.join(folder, name)));
  if (present.length === 0) throw new DsecError('DSEC_CONFIG_NOT_FOUND', { dir: folder });
  if (present.length > 1) {
    throw new DsecError('DSEC_CONFIG_AMBIGUOUS', { first: present[0], second: present[1], dir: folder });
  }
  return path.join(folder, present[0]);
}
