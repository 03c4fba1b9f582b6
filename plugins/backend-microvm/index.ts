/**
 * The microVM backend: each sandbox is a qemu `-M microvm` guest (KVM where
 * a real probe boots one, TCG otherwise) booting Debian's cloud kernel and
 * this backend's initramfs, with the environment's layers as read-only
 * virtio block devices (EROFS images), stacked by overlayfs in the guest
 * under a tmpfs or disk upper layer, and the guest agent (dsec-guest) as
 * PID 1 answering on a virtio-serial port.
 *
 *   provision  layer images -> qemu (machine.ts) -> wait for the guest agent (vm.ts)
 *   exec/files through the guest agent's session (guest.ts: protocol 2, many calls at once):
 *              streamed output, abort, open stdin, terminals (the plugin API's execOnGuest;
 *              files and who a command runs as in calls.ts)
 *   process, session  background commands and persistent shells in the guest agent
 *              (processOnGuest, sessionOnGuest)
 *   probe      qemu alive: running; saved state and no qemu: paused; else stopped
 *   pause      QMP stop + migrate to vm.state + quit: the VM's memory is then on disk
 *   resume     qemu -incoming defer + migrate-incoming + cont, a new guest session (sync + hello)
 *   usage      qemu's CPU time and resident memory (usage.ts)
 *   destroy    kill qemu, remove its files (idempotent)
 *   validate   (engine) memory enough to boot, backendOptions known (validate.ts)
 *
 * It imports only the public plugin API, like any third-party backend.
 */
import {
  DsecError,
  execOnGuest,
  failAsBackend,
  findOnPath,
  IDLE_VM_USAGE,
  processOnGuest,
  qemuUsage,
  sessionOnGuest,
  STAGE,
  type Dsec,
  type DsecPlugin,
  type SandboxContext,
  type SandboxUsage,
} from '../../core/plugin-api.js';
import { AssetCache } from './assets.js';
import { readFileInVm, targetOf, writeFileInVm } from './calls.js';
import { BACKEND_KIND, PLUGIN_NAME, pluginOptions, sandboxOptions, type BackendMicrovmOptions, type MicrovmSandboxOptions } from './options.js';
import { checkMicrovmFleets } from './validate.js';
import { destroyVm, pauseVm, probeVm, provisionVm, resumeVm, runningPid } from './vm.js';

export { BACKEND_KIND, PLUGIN_NAME } from './options.js';
export type { BackendMicrovmOptions, MicrovmSandboxOptions } from './options.js';
export { MIN_MICROVM_MEMORY_MIB } from './validate.js';

export default function backendMicrovm(raw: BackendMicrovmOptions = {}): DsecPlugin {
  const options = pluginOptions(raw);
  const assets = new AssetCache(options);

  return {
    name: PLUGIN_NAME,
    apply(dsec: Dsec) {
      const tap = { name: PLUGIN_NAME, stage: STAGE.BACKEND };
      const hooks = dsec.hooks;
      hooks.provision.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('provision', sandbox, async () => {
          const vmOptions = sandboxOptions(sandbox.spec.backendOptions ?? {});
          await requireVmm(assets, sandbox, vmOptions);
          await provisionVm(assets, options, sandbox, vmOptions);
          return true as const;
        }),
      );
      const target = (sandbox: SandboxContext) => targetOf(sandbox, options.defaultOutputCapBytes);
      hooks.exec.for(BACKEND_KIND).tapPromise(tap, (sandbox, request, io) => failAs('exec', sandbox, async () => execOnGuest(await target(sandbox), request, io)));
      hooks.process.for(BACKEND_KIND).tapPromise(tap, (sandbox, call) => failAs('run a command in', sandbox, async () => processOnGuest(await target(sandbox), call)));
      hooks.session.for(BACKEND_KIND).tapPromise(tap, (sandbox, call) => failAs('run a session in', sandbox, async () => sessionOnGuest(await target(sandbox), call)));
      hooks.readFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) => failAs('read a file in', sandbox, async () => readFileInVm(await target(sandbox), request)));
      hooks.writeFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) => failAs('write a file in', sandbox, async () => writeFileInVm(await target(sandbox), request)));
      hooks.probe.for(BACKEND_KIND).tapPromise(tap, (sandbox) => failAs('probe', sandbox, () => probeVm(sandbox)));
      hooks.pause.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('pause', sandbox, async () => {
          await pauseVm(sandbox);
          return true as const;
        }),
      );
      hooks.resume.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('resume', sandbox, async () => {
          await resumeVm(sandbox);
          return true as const;
        }),
      );
      hooks.usage.for(BACKEND_KIND).tapPromise(tap, (sandbox) =>
        failAs('read the usage of', sandbox, async (): Promise<SandboxUsage> => {
          const pid = await runningPid(sandbox);
          return pid === undefined ? IDLE_VM_USAGE : qemuUsage(pid);
        }),
      );
      hooks.destroy.tapPromise(tap, async (sandbox) => {
        if (sandbox.spec.backend !== BACKEND_KIND) return;
        await failAs('destroy', sandbox, () => destroyVm(sandbox));
      });
      // Engine side: refuse, at plan time, a microVM fleet too small to boot or with options this backend does not know.
      hooks.validate.tap(PLUGIN_NAME, (config, diagnostics) => diagnostics.push(...checkMicrovmFleets(config, BACKEND_KIND)));
    },
  };
}

/**
 * `vmm: firecracker` is refused with the reason: no firecracker binary on
 * the PATH, or a KVM that cannot boot guests (firecracker has no emulation);
 * where both are there, this backend still only drives qemu.
 */
async function requireVmm(assets: AssetCache, sandbox: SandboxContext, vmOptions: MicrovmSandboxOptions): Promise<void> {
  if (vmOptions.vmm !== 'firecracker') return;
  const binary = findOnPath('firecracker');
  if (!binary) throw new DsecError('DSEC_VMM_UNAVAILABLE', { vmm: 'firecracker', message: 'no firecracker binary on the PATH (Debian does not package it); use vmm: qemu' });
  const { accel } = await assets.get(sandbox.node);
  if (accel.accel !== 'kvm') {
    throw new DsecError('DSEC_VMM_UNAVAILABLE', { vmm: 'firecracker', message: `it needs KVM, and KVM cannot boot guests here (${accel.reason}); use vmm: qemu` });
  }
  throw new DsecError('DSEC_VMM_UNAVAILABLE', { vmm: 'firecracker', message: `${binary} is there and KVM works, but dsec drives only qemu so far; use vmm: qemu` });
}

/** One step of this backend: a failure that is not a DsecError is DSEC_BACKEND_FAILED naming it. */
function failAs<T>(operation: string, sandbox: SandboxContext, work: () => Promise<T>): Promise<T> {
  return failAsBackend(BACKEND_KIND, operation, sandbox.spec.id, work);
}
