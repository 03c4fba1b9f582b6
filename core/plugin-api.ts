/**
 * The public plugin API: everything a plugin may import from dsec, built-in or
 * third-party alike (`import { STAGE, DsecError } from 'dsec/plugin'`).
 * Built-in plugins import this file and nothing else of the engine.
 */
export { Dsec, type DsecPlugin, type DsecPluginModule } from './dsec.js';
export {
  STAGE,
  type Hooks,
  type Logger,
  type NodeContext,
  type SandboxContext,
  type BackendProbe,
  type PublishRequest,
  type SnapshotRequest,
  type SnapshotResult,
  type ProcessTraits,
  type SandboxCgroups,
  type ContainerShape,
  type FunctionCall,
} from './hooks.js';
export { DsecError, isDsecError, asBackendFailure, failAsBackend, type ErrorCode, type Diagnostic } from './errors.js';
/** Options checked against the plugin's JSON Schema, every problem in one DSEC_PLUGIN_OPTIONS. */
export { checkPluginOptions, type PluginOptionsSchema, type PluginOptionHints } from './plugin-options.js';
export * from './live.js';
export type * from './model.js';
export type * from './plan.js';
/** The native helper: process traits at spawn, what the node supports, prefetch on resume. */
export {
  nativeHelperPath,
  probeNativeSupport,
  spawnPrefix,
  prefetchProcesses,
  type NativeSupport,
  type NativeCapability,
  type PrefetchResult,
} from './native.js';
/** Config rules a backend applies from its validate tap (a VM backend: its fleets' environments need a disk image). */
export { checkImageRequired } from './config/backend-rules.js';
/** One file inside a sandbox's root, resolved by the kernel inside it (for backends whose sandboxes are host processes). */
export { readFileInRoot, writeFileInRoot, type SandboxRoot, type WriteInRootOptions } from './native-files.js';
/**
 * The guest agent: GuestAgentClient talks to dsec-guest (native/dsec-guest.c)
 * or a plain qemu-ga over a unix socket (exec, files, reset); GuestSession is
 * dsec-guest's async mode (protocol 2: concurrent calls, background
 * processes, terminals, sessions) over openFifoTransport or
 * openSocketTransport; the binary a backend puts into its guests is at
 * guestAgentBinaryPath().
 */
export * from './guest/index.js';
/** The layer store machinery both storage plugins are built from. */
export * from './layers/index.js';
/** The qemu toolkit VM backends are built from: binary, acceleration, QMP, processes, save/restore, initramfs (core/qemu/index.ts). */
export * from './qemu/index.js';
