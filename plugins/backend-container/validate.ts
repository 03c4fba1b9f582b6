/**
 * The engine-side check of the container backend: a fleet's memory limit
 * must leave room for a container to start at all. Below the minimum, runc's
 * own init (a Go program that joins the cgroup before it execs the sandbox's
 * init) is OOM-killed, or the first exec is: the create fails on the node
 * with a runtime error that does not say why. Caught here, it is a located
 * config error at plan time instead.
 */
import type { ConfigModel, Diagnostic } from '../../core/plugin-api.js';

/**
 * The smallest memory limit (MiB) a container sandbox may ask for. Measured
 * on Linux 6.18 / runc 1.1.5 / cgroup v1 with a busybox sandbox: runc's init
 * peaks at 2.5 MiB (below that `runc run` cannot even set the limit), one
 * exec works from 3 MiB, four concurrent execs from 6 MiB, and a walk of the
 * whole tree (`ls -R /`, through /proc and /sys) peaks at 20 MiB unconfined
 * and is OOM-killed now and then at 16 MiB. 32 MiB leaves room for all of it.
 */
export const MIN_CONTAINER_MEMORY_MIB = 32;

/** One error per fleet of `backend` whose resources.memory is below the minimum. */
export function checkFleetMemory(config: ConfigModel, backend: string): Diagnostic[] {
  const diagnostics: Diagnostic[] = [];
  for (const fleet of Object.values(config.fleets)) {
    if (fleet.backend !== backend || fleet.resources.memoryMiB >= MIN_CONTAINER_MEMORY_MIB) continue;
    diagnostics.push({
      code: 'DSEC_CONFIG_INVALID_VALUE',
      severity: 'error',
      message:
        `fleet '${fleet.name}' asks for ${fleet.resources.memoryMiB}Mi of memory, but a ${backend} sandbox needs at least ` +
        `${MIN_CONTAINER_MEMORY_MIB}Mi to start (the runtime's init and the first exec run inside the limit); set resources.memory to ${MIN_CONTAINER_MEMORY_MIB}Mi or more`,
      path: `/fleets/${pointerToken(fleet.name)}/resources/memory`,
    });
  }
  return diagnostics;
}

function pointerToken(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}
