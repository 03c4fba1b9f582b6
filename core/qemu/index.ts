/**
 * The qemu toolkit VM backends are built from (backend-microvm, backend-vm),
 * exported through the public plugin API:
 *
 *   binary       findQemu(): the binary and its version (DSEC_VMM_UNAVAILABLE when missing)
 *   accel        chooseAccel(): KVM when a real probe boots a guest with it, else TCG, with the reason
 *   tsc          hostTscRate(): the host TSC kHz for `tsc_early_khz=` under TCG
 *   qmp          QmpClient: QMP over a unix socket (commands with timeouts, events)
 *   process      QemuProcess: start (detached, QMP, pidfile, console log), kill, wait, adopt
 *   save-restore saveVmToFile / restoreVmFromFile: memory and device state to a file and back
 *   guest-kernel findGuestKernel, resolveKernelModules: the guest kernel and the modules it needs
 *   vmlinux      extractVmlinux: the bzImage's kernel unpacked, for a PVH boot (faster, less guest memory touched)
 *   initramfs    buildInitramfs: a gzipped newc cpio of files, texts and modules, cached by digest
 *   usage        qemuUsage / savedVmUsage: what a running or paused VM uses, from /proc and its state file
 */
export { DEFAULT_QEMU, findOnPath, findQemu, type QemuBinary } from './binary.js';
export { chooseAccel, probeKvm, PROBE_MARKER, type Accel, type AccelChoice, type AccelOptions, type AccelRequest } from './accel.js';
export { hostTscRate, tscFromCpuinfo, tscFromKernelLog, type TscRate } from './tsc.js';
export { QmpClient, QmpError, type QmpEvent, type QmpOptions } from './qmp.js';
export { CONSOLE_CHARDEV, QemuProcess, isQemuOf, qemuArgv, qemuPaths, tailOf, type QemuLaunch, type QemuPaths } from './process.js';
export { INCOMING_DEFER, restoreVmFromFile, saveVmToFile, type SaveResult } from './save-restore.js';
export {
  DEFAULT_GUEST_KERNEL_DIR,
  dependsOf,
  findGuestKernel,
  resolveKernelModules,
  type GuestKernel,
  type KernelModule,
} from './guest-kernel.js';
export { bzImagePayload, extractVmlinux, hasPvhNote, lz4Block, lz4Legacy } from './vmlinux.js';
export { writeCpio, type CpioEntry } from './cpio.js';
export {
  INITRAMFS_MODULES_DIR,
  buildInitramfs,
  collectEntries,
  type BuiltInitramfs,
  type InitramfsFile,
  type InitramfsSpec,
} from './initramfs.js';
export { IDLE_VM_USAGE, qemuUsage, savedVmUsage } from './usage.js';
