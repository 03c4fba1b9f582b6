/**
 * The full-VM backend's two sets of options, each a JSON Schema checked with
 * the public checkPluginOptions:
 *
 *   plugin options   how this node runs VMs (qemu binary, accelerator, boot
 *                    timeout, TCG's code cache), given where the plugin is loaded
 *   backendOptions   what one fleet's VMs get (`fleets.X.backendOptions`,
 *                    arriving as spec.backendOptions): GUI devices, boot timeout
 */
import { checkPluginOptions, MAX_EXEC_OUTPUT_BYTES, type PluginOptionsSchema } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'backend-vm';

export interface BackendVmOptions {
  /** The qemu binary, a name on the PATH or an absolute path. @default 'qemu-system-x86_64' */
  readonly qemu?: string;
  /** `auto` probes whether KVM really boots a guest here and falls back to TCG. @default 'auto' */
  readonly accel?: 'auto' | 'kvm' | 'tcg';
  /** How long a VM has from qemu's start until its guest agent answers. @default 120000 */
  readonly bootTimeoutMs?: number;
  /**
   * TCG's translated-code cache per VM, in MiB (qemu's `tb-size`), resident
   * (in huge pages) once the guest has run a while. Measured with the test
   * image: 16 MiB slows commands that run much code, 64 MiB costs 30 MiB
   * more per VM than 32 for no measurable gain. Ignored under KVM.
   * @default 32
   */
  readonly tcgCacheMiB?: number;
  /** Per-stream output cap of exec when the request gives none. @default 1 MiB */
  readonly defaultOutputCapBytes?: number;
}

export const PLUGIN_OPTIONS_SCHEMA: PluginOptionsSchema = Object.freeze({
  type: 'object',
  additionalProperties: false,
  properties: {
    qemu: { type: 'string', minLength: 1, description: 'The qemu binary, a name on the PATH or an absolute path' },
    accel: { enum: ['auto', 'kvm', 'tcg'] },
    bootTimeoutMs: { type: 'integer', minimum: 1000, maximum: 3_600_000 },
    tcgCacheMiB: { type: 'integer', minimum: 8, maximum: 2048 },
    defaultOutputCapBytes: { type: 'integer', minimum: 0, maximum: MAX_EXEC_OUTPUT_BYTES },
  },
});

/** What a fleet may ask of its VMs in `backendOptions`. */
export interface VmSandboxOptions {
  readonly display?: {
    /** A virtio-gpu display device (`virtio-vga`: VGA-compatible, so firmware and boot loader show on it too). @default false */
    readonly gpu?: boolean;
    /** A VNC server on a unix socket in the sandbox's folder, its path in the sandbox's handle. @default false */
    readonly vnc?: boolean;
  };
  /** Overrides the plugin's bootTimeoutMs for this fleet (an image that boots slowly). */
  readonly bootTimeoutSeconds?: number;
}

export const SANDBOX_OPTIONS_SCHEMA: PluginOptionsSchema = Object.freeze({
  type: 'object',
  additionalProperties: false,
  properties: {
    display: {
      type: 'object',
      additionalProperties: false,
      properties: {
        gpu: { type: 'boolean', description: 'Add a virtio-gpu display device' },
        vnc: { type: 'boolean', description: 'Serve the display over VNC on a unix socket' },
      },
    },
    bootTimeoutSeconds: { type: 'integer', minimum: 1, maximum: 3600 },
  },
});

/** The plugin's options, checked, with defaults. Throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function pluginOptions(raw: unknown): Required<BackendVmOptions> {
  const options = checkPluginOptions<BackendVmOptions>(PLUGIN_NAME, PLUGIN_OPTIONS_SCHEMA, raw, {
    bootTimeoutMs: 'must be from 1000 (one second) to 3600000 (an hour)',
    tcgCacheMiB: 'must be from 8 to 2048 (MiB)',
  });
  return {
    qemu: options.qemu ?? 'qemu-system-x86_64',
    accel: options.accel ?? 'auto',
    bootTimeoutMs: options.bootTimeoutMs ?? 120_000,
    tcgCacheMiB: options.tcgCacheMiB ?? 32,
    defaultOutputCapBytes: options.defaultOutputCapBytes ?? 1024 * 1024,
  };
}

/** One sandbox's backendOptions, checked. Throws DSEC_PLUGIN_OPTIONS (naming backend-vm) listing every problem. */
export function sandboxOptions(raw: unknown): VmSandboxOptions {
  return checkPluginOptions<VmSandboxOptions>(PLUGIN_NAME, SANDBOX_OPTIONS_SCHEMA, raw, {
    bootTimeoutSeconds: 'must be from 1 to 3600 (seconds)',
  });
}
