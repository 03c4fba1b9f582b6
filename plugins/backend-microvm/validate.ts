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
 * under TCG: the kernel keeps about 35 MiB for itself whatever the size and
 * the booted guest uses 28 MiB more; at 64 MiB the kernel runs out of memory
 * during its own start (a panic), at 80 MiB it boots and runs `ls -R /` and
 * four shells at once with 5 MiB free. 96 MiB leaves room for the tmpfs
 * upper layer and a small workload.
 */
export const MIN_MICROVM_MEMORY_MIB = 96;

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
          `${MIN_MICROVM_MEMORY_MIB}Mi to boot (the guest kernel and its start take about 64Mi); set resources.memory to ${MIN_MICROVM_MEMORY_MIB}Mi or more`,
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
