/**
 * The qemu command line of one microVM (without the QMP socket, pidfile and
 * console, which core/qemu's QemuProcess adds). Pure, so it is unit-tested
 * and the same spec always gives the same line: a resumed VM must be
 * started with exactly the line it was saved from.
 *
 *   -M microvm,acpi=on      virtio-mmio devices found through ACPI, no PCI, no firmware boot menu
 *   -nodefaults ...         nothing but what is listed here
 *   -kernel/-initrd         the guest kernel (an unpacked vmlinux where possible) and the initramfs
 *   -drive/-device ...      one read-only virtio-blk per layer (serial dsec-layer-<i>), the upper disk
 *   virtserialport          the guest agent's channel, org.qemu.guest_agent.0, on a unix socket
 */
import type { Accel } from '../../core/plugin-api.js';

/** The guest agent's virtio-serial port name (the QEMU guest agent's own). */
export const GUEST_AGENT_PORT = 'org.qemu.guest_agent.0';
/** Layers a microVM can take: microvm has 24 virtio-mmio slots; the upper disk and the serial port take two. */
export const MAX_LAYERS = 20;

export interface MachineSpec {
  readonly accel: Accel;
  /** TCG's code cache in MiB (ignored under KVM). */
  readonly tcgCacheMiB: number;
  readonly memoryMiB: number;
  readonly vcpus: number;
  readonly kernel: string;
  readonly initrd: string;
  /** Read-only EROFS images, bottom to top. */
  readonly layers: readonly string[];
  /** A raw ext4 image for the upper layer; absent: tmpfs in the guest. */
  readonly upperDisk?: string;
  /** The tmpfs upper's cap, MiB. */
  readonly upperMiB?: number;
  /** The unix socket qemu listens on for the guest agent. */
  readonly agentSocket: string;
  /** The host's TSC rate in kHz: passed as tsc_early_khz under TCG. */
  readonly tscKhz?: number;
  /** The guest's hostname (the sandbox id). */
  readonly hostname: string;
}

/** vCPUs for a CPU request: whole cores, at least one (`cpu: 0.5` gets one vCPU). */
export function vcpusFor(cpu: number): number {
  return Math.max(1, Math.ceil(cpu - 1e-9));
}

export function kernelCmdline(spec: Pick<MachineSpec, 'accel' | 'layers' | 'upperDisk' | 'upperMiB' | 'tscKhz' | 'hostname'>): string {
  return [
    'console=ttyS0',
    'quiet',
    // A panic powers the VM off (with -no-reboot): qemu exits and the host sees it at once.
    'panic=-1',
    // Under TCG the guest cannot calibrate its TSC against emulated timers; told the rate, it does not try (about one boot in five hangs otherwise).
    ...(spec.accel === 'tcg' && spec.tscKhz ? [`tsc_early_khz=${spec.tscKhz}`] : []),
    `dsec.layers=${spec.layers.length}`,
    `dsec.upper=${spec.upperDisk ? 'disk' : 'tmpfs'}`,
    ...(spec.upperDisk === undefined && spec.upperMiB !== undefined ? [`dsec.upper_mib=${spec.upperMiB}`] : []),
    `dsec.hostname=${spec.hostname}`,
  ].join(' ');
}

export function machineArgs(spec: MachineSpec): string[] {
  if (spec.layers.length > MAX_LAYERS) throw new Error(`a microVM takes at most ${MAX_LAYERS} layers, not ${spec.layers.length}`);
  const accel = spec.accel === 'kvm' ? ['-accel', 'kvm', '-cpu', 'host'] : ['-accel', `tcg,tb-size=${spec.tcgCacheMiB}`];
  const layers = spec.layers.flatMap((image, index) => [
    '-drive', `id=layer${index},file=${driveFile(image)},format=raw,if=none,readonly=on`,
    '-device', `virtio-blk-device,drive=layer${index},serial=dsec-layer-${index}`,
  ]);
  const upper = spec.upperDisk
    ? ['-drive', `id=upper,file=${driveFile(spec.upperDisk)},format=raw,if=none,cache=unsafe`, '-device', 'virtio-blk-device,drive=upper,serial=dsec-upper']
    : [];
  return [
    '-M', 'microvm,acpi=on',
    ...accel,
    '-m', `${spec.memoryMiB}M`,
    '-smp', String(spec.vcpus),
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    '-kernel', spec.kernel,
    '-initrd', spec.initrd,
    '-append', kernelCmdline(spec),
    ...layers,
    ...upper,
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=agent,path=${spec.agentSocket},server=on,wait=off`,
    '-device', `virtserialport,chardev=agent,name=${GUEST_AGENT_PORT}`,
  ];
}

/** A path inside a -drive option: commas are doubled (qemu's escape). */
function driveFile(file: string): string {
  return file.replaceAll(',', ',,');
}
