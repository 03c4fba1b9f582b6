/**
 * The engine-side checks of the full-VM backend, at plan time, so a fleet
 * that cannot boot is a located config error rather than a create that
 * fails on every node: enough memory for a kernel to boot, backendOptions
 * this backend understands, and an environment that names a disk image
 * (the plugin API's generic checkImageRequired). Whether the image file is
 * there and sound is the node's to check (the engine may run on another
 * machine): DSEC_VM_IMAGE_INVALID at create.
 */
import { checkImageRequired, isDsecError, type ConfigModel, type Diagnostic } from '../../core/plugin-api.js';
import { sandboxOptions } from './options.js';

/**
 * The smallest guest memory (MiB) a VM fleet may ask for. Measured with the
 * test image (Debian's 6.1 cloud kernel, a gzip initramfs, busybox and
 * qemu-ga) on qemu 7.2 q35: it boots with 96 MiB and does not with 64 (the
 * kernel and its initramfs do not fit while unpacking). 128 leaves room for
 * a guest's first commands; real distribution images want more.
 */
export const MIN_VM_MEMORY_MIB = 128;

export function checkVmFleets(config: ConfigModel, backend: string): Diagnostic[] {
  const diagnostics: Diagnostic[] = [];
  const error = (message: string, at: string): void => {
    diagnostics.push({ code: 'DSEC_CONFIG_INVALID_VALUE', severity: 'error', message, path: at });
  };
  for (const fleet of Object.values(config.fleets)) {
    if (fleet.backend !== backend) continue;
    const at = `/fleets/${pointerToken(fleet.name)}`;
    if (fleet.resources.memoryMiB < MIN_VM_MEMORY_MIB) {
      error(
        `fleet '${fleet.name}' asks for ${fleet.resources.memoryMiB}Mi of memory, but a ${backend} sandbox needs at least ` +
          `${MIN_VM_MEMORY_MIB}Mi (its guest kernel boots in that memory); set resources.memory to ${MIN_VM_MEMORY_MIB}Mi or more`,
        `${at}/resources/memory`,
      );
    }
    try {
      sandboxOptions(fleet.backendOptions);
    } catch (problem) {
      if (!isDsecError(problem, 'DSEC_PLUGIN_OPTIONS')) throw problem;
      error(`fleet '${fleet.name}' has backendOptions the ${backend} backend does not accept: ${String(problem.params.message)}`, `${at}/backendOptions`);
    }
  }
  // The environment must name a disk image: the generic rule, at the fleet's `backend`.
  diagnostics.push(...checkImageRequired(config, backend));
  return diagnostics;
}

function pointerToken(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}
