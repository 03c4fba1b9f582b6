/**
 * The engine-side checks of the microVM backend, at `dsec validate` and plan
 * time: a fleet's memory must boot a guest, and its backendOptions must be
 * ones this backend knows. Caught here, each is a located config error
 * instead of a create failing on the node.
 */
import { isDsecError, type ConfigModel, type Diagnostic } from '../../core/plugin-api.js';
import { sandboxOptions } from './options.js';

/**
 * The smallest guest memory (MiB) a microVM may ask for. Measured with
 * Debian's 6.1 cloud kernel, this backend's initramfs and a busybox layer,
 * under TCG: the kernel reserves about 48 MiB for itself (its image and
 * tables) whatever the size; at 96 MiB the guest boots and execs, below it
 * the initramfs no longer unpacks; 128 MiB leaves room for a tmpfs upper
 * layer and a few processes.
 */
export const MIN_MICROVM_MEMORY_MIB = 128;

export function checkMicrovmFleets(config: ConfigModel, backend: string): Diagnostic[] {
  const diagnostics: Diagnostic[] = [];
  for (const fleet of Object.values(config.fleets)) {
    if (fleet.backend !== backend) continue;
    const at = `/fleets/${pointerToken(fleet.name)}`;
    if (fleet.resources.memoryMiB < MIN_MICROVM_MEMORY_MIB) {
      diagnostics.push({
        code: 'DSEC_CONFIG_INVALID_VALUE',
        severity: 'error',
        message:
          `fleet '${fleet.name}' asks for ${fleet.resources.memoryMiB}Mi of memory, but a ${backend} sandbox needs at least ` +
          `${MIN_MICROVM_MEMORY_MIB}Mi to boot (the guest kernel keeps about 48Mi for itself); set resources.memory to ${MIN_MICROVM_MEMORY_MIB}Mi or more`,
        path: `${at}/resources/memory`,
      });
    }
    try {
      sandboxOptions(fleet.backendOptions ?? {});
    } catch (error) {
      if (!isDsecError(error)) throw error;
      diagnostics.push({
        code: 'DSEC_CONFIG_INVALID_VALUE',
        severity: 'error',
        message: `fleet '${fleet.name}': backendOptions for the ${backend} backend: ${String(error.params?.message ?? error.message)}`,
        path: `${at}/backendOptions`,
      });
    }
  }
  return diagnostics;
}

function pointerToken(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}
