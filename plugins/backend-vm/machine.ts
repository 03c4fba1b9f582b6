/**
 * One VM's files and qemu command line.
 *
 * The machine is a q35 PC booting the overlay from its firmware (SeaBIOS), as
 * a real disk image expects: no -kernel. Devices, all virtio: the disk, a
 * virtio-serial port named org.qemu.guest_agent.0 on a unix socket (exec and
 * files), a balloon that only reports free pages (qemu drops them, so what
 * the guest touched while booting and freed again goes back to the host:
 * about 30 MiB of an idle test VM), no network card; optionally a display
 * (virtio-vga, or plain VGA for VNC alone) and a VNC server on a unix socket. The firmware's debug
 * port is written to a file, so a disk that does not boot says why
 * ("No bootable device") even before any serial output.
 *
 * The argv is computed once at provision and kept in the sandbox's record:
 * a resume must start qemu with exactly the command line the saved state
 * came from.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import type { Accel, QemuPaths, SandboxSpec } from '../../core/plugin-api.js';
import type { VmSandboxOptions } from './options.js';

export const GUEST_AGENT_PORT = 'org.qemu.guest_agent.0';

/** Unix socket paths must fit in sockaddr_un (108 bytes with the NUL). */
const MAX_SOCKET_PATH = 100;
/** Where sockets go when the sandbox's own folder is too deep for them. */
export const SHORT_SOCKET_ROOT = '/run/dsec-vm';

export interface VmPaths {
  /** The sandbox's folder: the overlay, the saved state, logs. */
  readonly dir: string;
  /** The folder of the unix sockets: `dir` itself, or a short one under SHORT_SOCKET_ROOT when `dir` is too deep. */
  readonly socketDir: string;
  readonly overlay: string;
  /** Memory and device state while paused. */
  readonly state: string;
  readonly guestAgent: string;
  readonly vnc: string;
  readonly firmwareLog: string;
  readonly qemu: QemuPaths;
}

export function vmPaths(dir: string): VmPaths {
  const inDir = path.join(dir, 'qemu.qmp').length <= MAX_SOCKET_PATH;
  const socketDir = inDir ? dir : path.join(SHORT_SOCKET_ROOT, createHash('sha256').update(path.resolve(dir)).digest('hex').slice(0, 16));
  return {
    dir,
    socketDir,
    overlay: path.join(dir, 'overlay.qcow2'),
    state: path.join(dir, 'state.vmstate'),
    guestAgent: path.join(socketDir, 'qga.sock'),
    vnc: path.join(socketDir, 'vnc.sock'),
    firmwareLog: path.join(dir, 'firmware.log'),
    qemu: {
      dir,
      qmp: path.join(socketDir, 'qemu.qmp'),
      pidFile: path.join(dir, 'qemu.pid'),
      console: path.join(dir, 'console.log'),
      log: path.join(dir, 'qemu.log'),
    },
  };
}

export interface MachineInput {
  readonly spec: SandboxSpec;
  readonly paths: VmPaths;
  readonly accel: Accel;
  readonly tcgCacheMiB: number;
  readonly options: VmSandboxOptions;
}

/** vCPUs for a fractional CPU request: at least one, rounded up. */
export function vcpusFor(cpu: number): number {
  return Math.max(1, Math.ceil(cpu));
}

/** qemu's arguments (the QMP socket, pidfile and serial console are added by core/qemu's QemuProcess). */
export function machineArgs({ spec, paths, accel, tcgCacheMiB, options }: MachineInput): string[] {
  const display = options.display ?? {};
  const args = [
    '-name', `dsec-${spec.id}`,
    '-M', 'q35',
    ...(accel === 'kvm' ? ['-accel', 'kvm', '-cpu', 'host'] : ['-accel', `tcg,tb-size=${tcgCacheMiB}`]),
    '-m', String(Math.round(spec.resources.memoryMiB)),
    '-smp', String(vcpusFor(spec.resources.cpu)),
    '-nodefaults', '-no-user-config', '-no-reboot',
    '-display', 'none',
    // network: none. Only a loopback inside the guest.
    '-nic', 'none',
    '-drive', `file=${paths.overlay},format=qcow2,if=none,id=disk0,discard=unmap`,
    '-device', 'virtio-blk-pci,drive=disk0,bootindex=0',
    '-device', 'virtio-serial-pci,id=vser0',
    '-chardev', `socket,id=qga0,path=${paths.guestAgent},server=on,wait=off`,
    '-device', `virtserialport,bus=vser0.0,chardev=qga0,name=${GUEST_AGENT_PORT}`,
    '-chardev', `file,id=firmware,path=${paths.firmwareLog},append=on`,
    '-device', 'isa-debugcon,iobase=0x402,chardev=firmware',
    '-device', 'virtio-balloon-pci,free-page-reporting=on',
  ];
  if (display.gpu) args.push('-device', 'virtio-vga');
  else if (display.vnc) args.push('-device', 'VGA'); // VNC needs something to show: the standard VGA adapter
  if (display.vnc) args.push('-vnc', `unix:${paths.vnc}`);
  return args;
}
