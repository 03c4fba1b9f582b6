/**
 * What every microVM of a node boots from, found or built once per agent
 * root and kept: the qemu binary, the accelerator (a real KVM probe, cached
 * on disk), the host TSC rate, the guest kernel (unpacked to a vmlinux where
 * possible: a faster boot and ~35 MiB less guest memory touched), and the
 * initramfs. Nothing of it is looked at when the plugin loads: an agent on
 * a machine without qemu starts, and only a microVM create says why not.
 */
import path from 'node:path';
import {
  chooseAccel,
  extractVmlinux,
  findGuestKernel,
  findQemu,
  guestAgentBinaryPath,
  hostTscRate,
  type AccelChoice,
  type Logger,
  type NodeContext,
  type QemuBinary,
} from '../../core/plugin-api.js';
import { microvmInitramfs } from './guest-init.js';
import { PLUGIN_NAME, type ResolvedPluginOptions } from './options.js';

export interface BootAssets {
  readonly qemu: QemuBinary;
  readonly accel: AccelChoice;
  readonly tscKhz?: number;
  /** The kernel qemu loads: an unpacked vmlinux, or the bzImage. */
  readonly kernel: string;
  readonly initrd: string;
}

/** `<root>/backend-microvm`: the plugin's folder on the node. */
export function pluginDir(node: NodeContext): string {
  return path.join(node.root, PLUGIN_NAME);
}

export class AssetCache {
  private readonly byRoot = new Map<string, Promise<BootAssets>>();

  constructor(private readonly options: ResolvedPluginOptions) {}

  /** The node's boot assets; a failure is not kept (the next create tries again). */
  get(node: NodeContext): Promise<BootAssets> {
    let pending = this.byRoot.get(node.root);
    if (!pending) {
      pending = this.load(pluginDir(node), node.log);
      this.byRoot.set(node.root, pending);
      pending.catch(() => this.byRoot.delete(node.root));
    }
    return pending;
  }

  private async load(dir: string, log: Logger): Promise<BootAssets> {
    const qemu = await findQemu(this.options.qemu);
    const kernel = await findGuestKernel(this.options.kernelDir);
    const accel = await chooseAccel({ qemu, kernel, cacheDir: dir, request: this.options.accel });
    log.info(`${PLUGIN_NAME}: ${accel.accel.toUpperCase()} (${accel.reason}${accel.source === 'cache' ? ', probed earlier' : ''})`);
    const tsc = accel.accel === 'tcg' ? await hostTscRate() : undefined;
    if (accel.accel === 'tcg' && !tsc) log.warn(`${PLUGIN_NAME}: the host TSC rate is unknown; guests under TCG calibrate it themselves (and may hang doing so)`);
    const unpacked = await extractVmlinux(kernel.vmlinuz, path.join(dir, 'kernel'));
    if (!unpacked.path) log.info(`${PLUGIN_NAME}: booting the bzImage (${unpacked.reason})`);
    const guestAgent = this.options.guestAgent ?? guestAgentBinaryPath();
    const initramfs = await microvmInitramfs(kernel, guestAgent, path.join(dir, 'initramfs'));
    return {
      qemu,
      accel,
      ...(tsc ? { tscKhz: tsc.khz } : {}),
      kernel: unpacked.path ?? kernel.vmlinuz,
      initrd: initramfs.path,
    };
  }
}
