/**
 * Finding qemu-system-x86_64 (or another binary a VM backend names) on the
 * PATH, with its version: the version keys the acceleration cache, and a
 * missing binary is DSEC_VMM_UNAVAILABLE saying how to install it.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { DsecError } from '../errors.js';

const execFileAsync = promisify(execFile);

export const DEFAULT_QEMU = 'qemu-system-x86_64';

export interface QemuBinary {
  /** Absolute path of the binary. */
  readonly path: string;
  /** `7.2.22` from `qemu-system-x86_64 --version`. */
  readonly version: string;
}

/** An executable file named `name` on `PATH` (or `name` itself when it is a path), else undefined. */
export function findOnPath(name: string, envPath = process.env.PATH ?? ''): string | undefined {
  const candidates = name.includes('/') ? [path.resolve(name)] : envPath.split(':').filter(Boolean).map((dir) => path.join(dir, name));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here: next
    }
  }
  return undefined;
}

const found = new Map<string, Promise<QemuBinary>>();

/**
 * The qemu binary and its version, looked up once per process and name.
 * DSEC_VMM_UNAVAILABLE when it is not installed or does not run.
 */
export function findQemu(name = DEFAULT_QEMU): Promise<QemuBinary> {
  let pending = found.get(name);
  if (!pending) {
    pending = lookUp(name);
    found.set(name, pending);
    pending.catch(() => found.delete(name)); // installed later: ask again
  }
  return pending;
}

async function lookUp(name: string): Promise<QemuBinary> {
  const binary = findOnPath(name);
  if (!binary) {
    throw new DsecError('DSEC_VMM_UNAVAILABLE', {
      vmm: name,
      message: `no ${name} on the PATH; install Debian's qemu-system-x86 (scripts/setup.sh does)`,
    });
  }
  try {
    const { stdout } = await execFileAsync(binary, ['--version'], { timeout: 10_000 });
    const version = /version (\d+\.\d+(?:\.\d+)?)/.exec(stdout)?.[1];
    if (!version) throw new Error(`unexpected --version output: ${stdout.split('\n')[0]}`);
    return { path: binary, version };
  } catch (error) {
    throw new DsecError('DSEC_VMM_UNAVAILABLE', { vmm: name, message: `${binary} --version failed: ${(error as Error).message}` }, { cause: error });
  }
}
