/**
 * Where the compiled guest agent is: dist/native/dsec-guest (built statically
 * by `npm run build`), for backends that put it into a guest (a microVM's
 * initramfs, a FnCall worker's container).
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DsecError } from '../errors.js';

const BINARY_NAME = 'dsec-guest';

/** dist/native/ beside the compiled core (this module at dist/core/guest/), or the repository's dist/native/ from the sources. */
const CANDIDATES = [new URL(`../../native/${BINARY_NAME}`, import.meta.url), new URL(`../../dist/native/${BINARY_NAME}`, import.meta.url)].map(
  (url) => fileURLToPath(url),
);

/** The guest agent binary's absolute path; DSEC_NATIVE_HELPER when it was not built (or is not executable). */
export function guestAgentBinaryPath(): string {
  const present = CANDIDATES.find((candidate) => existsSync(candidate));
  if (!present) throw new DsecError('DSEC_NATIVE_HELPER', { path: CANDIDATES[0], problem: 'is missing' });
  try {
    accessSync(present, constants.X_OK);
  } catch {
    throw new DsecError('DSEC_NATIVE_HELPER', { path: present, problem: 'is not executable' });
  }
  return present;
}
