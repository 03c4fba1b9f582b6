/**
 * The microVM backend's two sets of options, each a JSON Schema checked with
 * the public checkPluginOptions:
 *
 *   plugin options   how this node runs microVMs (qemu binary, guest kernel,
 *                    accelerator, boot timeout, TCG's code cache)
 *   backendOptions   what one fleet's microVMs get (`fleets.X.backendOptions`,
 *                    arriving as spec.backendOptions): the upper layer, the VMM
 */
import { checkPluginOptions, DEFAULT_GUEST_KERNEL_DIR, DsecError, MAX_EXEC_OUTPUT_BYTES, type PluginOptionsSchema } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'backend-microvm';
/** The backend kind this plugin provisions (`backend: microvm` in a fleet). */
export const BACKEND_KIND = 'microvm';

export interface BackendMicrovmOptions {
  /** The qemu binary, a name on the PATH or an absolute path. @default 'qemu-system-x86_64' */
  readonly qemu?: string;
  /** The guest kernel's folder (vmlinuz, version, modules/). @default '/var/lib/dsec/guest-kernel' */
  readonly kernelDir?: string;
  /** `auto` probes whether KVM really boots a guest here and falls back to TCG. @default 'auto' */
  readonly accel?: 'auto' | 'kvm' | 'tcg';
  /** How long a microVM has from qemu's start until its guest agent answers. @default 60000 */
  readonly bootTimeoutMs?: number;
  /**
   * TCG's translated-code cache per VM, in MiB (qemu's `tb-size`), resident
   * once used. Measured with two idle microVMs: 32 instead of 64 saves 17 MiB
   * per VM and boots as fast. @default 32
   */
  readonly tcgCacheMiB?: number;
  /** The guest agent binary (static). @default dist/native/dsec-guest of this package */
  readonly guestAgent?: string;
  /** Per-stream output cap of exec when the request gives none. @default 1 MiB */
  readonly defaultOutputCapBytes?: number;
}

export type ResolvedPluginOptions = Required<Omit<BackendMicrovmOptions, 'guestAgent'>> & { readonly guestAgent?: string };

export const PLUGIN_OPTIONS_SCHEMA: PluginOptionsSchema = Object.freeze({
  type: 'object',
  additionalProperties: false,
  properties: {
    qemu: { type: 'string', minLength: 1, description: 'The qemu binary, a name on the PATH or an absolute path' },
    kernelDir: { type: 'string', pattern: '^/', description: "The guest kernel's folder" },
    accel: { enum: ['auto', 'kvm', 'tcg'] },
    bootTimeoutMs: { type: 'integer', minimum: 1000, maximum: 3_600_000 },
    tcgCacheMiB: { type: 'integer', minimum: 8, maximum: 2048 },
    guestAgent: { type: 'string', pattern: '^/', description: 'The guest agent binary' },
    defaultOutputCapBytes: { type: 'integer', minimum: 0, maximum: MAX_EXEC_OUTPUT_BYTES },
  },
});

/** What a fleet may ask of its microVMs in `backendOptions`. */
export interface MicrovmSandboxOptions {
  /**
   * The writable layer above the read-only layers: `tmpfs` (guest memory,
   * capped at upperMiB when given) or `disk` (a raw ext4 disk of upperMiB in
   * the sandbox's folder). @default 'tmpfs'
   */
  readonly upper?: 'tmpfs' | 'disk';
  /** The upper layer's size in MiB: required for `disk`; for tmpfs, its cap. */
  readonly upperMiB?: number;
  /** The virtual machine monitor. Only qemu runs here; firecracker is detected and refused with the reason. @default 'qemu' */
  readonly vmm?: 'qemu' | 'firecracker';
}

export const SANDBOX_OPTIONS_SCHEMA: PluginOptionsSchema = Object.freeze({
  type: 'object',
  additionalProperties: false,
  properties: {
    upper: { enum: ['tmpfs', 'disk'], description: 'The writable layer: guest memory or a disk' },
    upperMiB: { type: 'integer', minimum: 16, maximum: 1_048_576 },
    vmm: { enum: ['qemu', 'firecracker'] },
  },
});

/** The plugin's options, checked, with defaults. Throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function pluginOptions(raw: unknown): ResolvedPluginOptions {
  const options = checkPluginOptions<BackendMicrovmOptions>(PLUGIN_NAME, PLUGIN_OPTIONS_SCHEMA, raw, {
    kernelDir: 'must be an absolute path',
    guestAgent: 'must be an absolute path',
    bootTimeoutMs: 'must be from 1000 (one second) to 3600000 (an hour)',
    tcgCacheMiB: 'must be from 8 to 2048 (MiB)',
  });
  return {
    qemu: options.qemu ?? 'qemu-system-x86_64',
    kernelDir: options.kernelDir ?? DEFAULT_GUEST_KERNEL_DIR,
    accel: options.accel ?? 'auto',
    bootTimeoutMs: options.bootTimeoutMs ?? 60_000,
    tcgCacheMiB: options.tcgCacheMiB ?? 32,
    ...(options.guestAgent ? { guestAgent: options.guestAgent } : {}),
    defaultOutputCapBytes: options.defaultOutputCapBytes ?? 1024 * 1024,
  };
}

/**
 * One sandbox's backendOptions, checked. Throws DSEC_PLUGIN_OPTIONS (naming
 * backend-microvm) listing every problem, the schema's and `upper: disk`
 * without upperMiB.
 */
export function sandboxOptions(raw: unknown): MicrovmSandboxOptions {
  const options = checkPluginOptions<MicrovmSandboxOptions>(PLUGIN_NAME, SANDBOX_OPTIONS_SCHEMA, raw, {
    upperMiB: 'must be from 16 to 1048576 (MiB)',
  });
  if (options.upper === 'disk' && options.upperMiB === undefined) {
    throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: 'option upperMiB is required with upper: disk (the disk size in MiB)' });
  }
  return options;
}
