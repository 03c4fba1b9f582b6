/**
 * The full-VM backend (`backend: vm`): each sandbox is a qemu q35 machine
 * that boots the environment's disk image from its firmware, on a qcow2
 * overlay of its own whose backing file is the shared image (creating a VM
 * copies nothing). Exec and files go through the QEMU guest agent protocol
 * on a virtio-serial port, so any image that runs qemu-ga (or dsec-guest)
 * works.
 *
 *   provision  check the image (qemu-img info) -> overlay -> qemu (KVM when it
 *              really boots guests here, else TCG; behind the native helper
 *              when the sandbox has process traits) -> wait for the guest agent
 *   exec, readFile, writeFile   the guest agent (GuestAgentClient)
 *   probe      qemu alive (pidfile + its QMP socket on the command line); paused: the state file
 *   pause      save memory and device state to a file, quit qemu
 *   resume     a new qemu on the same command line, restored from the file
 *   usage      qemu's resident memory and CPU time
 *   destroy    kill qemu, remove the overlay, sockets, state (idempotent)
 *   validate   (engine) memory minimum, backendOptions, an environment image
 *
 * backendOptions: `display: { gpu: true }` adds a virtio-gpu display,
 * `display: { vnc: true }` a VNC server on a unix socket whose path is in
 * the sandbox's handle (`qemu pid=N vnc=/path`).
 *
 * It imports only the public plugin API, like any third-party backend.
 */
import { failAsBackend, STAGE, type Dsec, type DsecPlugin, type SandboxContext } from '../../core/plugin-api.js';
import { execInGuest, readGuestFile, writeGuestFile } from './guest.js';
import { VmLifecycle } from './lifecycle.js';
import { PLUGIN_NAME, pluginOptions, type BackendVmOptions } from './options.js';
import { checkVmFleets } from './validate.js';

export { PLUGIN_NAME, type BackendVmOptions, type VmSandboxOptions } from './options.js';
export { MIN_VM_MEMORY_MIB } from './validate.js';
export { vmPaths, type VmPaths } from './machine.js';
export type { VmRecord } from './vm.js';

/** The backend kind this plugin provisions (`backend: vm` in a fleet). */
export const BACKEND_KIND = 'vm';

export default function backendVm(rawOptions: BackendVmOptions = {}): DsecPlugin {
  const options = pluginOptions(rawOptions);
  const vms = new VmLifecycle(options);

  return {
    name: PLUGIN_NAME,
    apply(dsec: Dsec) {
      const tap = { name: PLUGIN_NAME, stage: STAGE.BACKEND };
      const hooks = dsec.hooks;
      hooks.provision.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('provision', sandbox, () => vms.provision(sandbox)));
      hooks.exec.for(BACKEND_KIND).tapPromise(tap, (sandbox, request, io) =>
        failAs('exec', sandbox, async () => execInGuest(await vms.guest(sandbox), sandbox.spec, request, options.defaultOutputCapBytes, io)),
      );
      hooks.readFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) =>
        failAs('read a file of', sandbox, async () => readGuestFile(await vms.guest(sandbox), request)),
      );
      hooks.writeFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) =>
        failAs('write a file to', sandbox, async () => writeGuestFile(await vms.guest(sandbox), request)),
      );
      hooks.probe.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('probe', sandbox, () => vms.probe(sandbox)));
      hooks.pause.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('pause', sandbox, () => vms.pause(sandbox)));
      hooks.resume.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('resume', sandbox, () => vms.resume(sandbox)));
      hooks.usage.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('read the usage of', sandbox, () => vms.usage(sandbox)));
      // Engine side: refuse, at plan time, a VM fleet that cannot boot.
      hooks.validate.tap(PLUGIN_NAME, (config, diagnostics) => diagnostics.push(...checkVmFleets(config, BACKEND_KIND)));
      hooks.destroy.tapPromise(tap, async (sandbox) => {
        if (sandbox.spec.backend !== BACKEND_KIND) return;
        await failAs('destroy', sandbox, () => vms.destroy(sandbox));
      });
    },
  };
}

/** One step of this backend: a failure that is not a DsecError is DSEC_BACKEND_FAILED naming it. */
function failAs<T>(operation: string, sandbox: SandboxContext, work: () => Promise<T>): Promise<T> {
  return failAsBackend(BACKEND_KIND, operation, sandbox.spec.id, work);
}
