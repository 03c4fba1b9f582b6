import { describe, expect, it } from 'vitest';
import { kernelCmdline, machineArgs, MAX_LAYERS, vcpusFor, type MachineSpec } from '../../../plugins/backend-microvm/machine.js';

const base: MachineSpec = {
  accel: 'tcg',
  tcgCacheMiB: 32,
  memoryMiB: 256,
  vcpus: 1,
  kernel: '/k/vmlinux',
  initrd: '/k/initrd.gz',
  layers: ['/img/base.erofs', '/img/tool,s.erofs'],
  agentSocket: '/sb/agent.sock',
  tscKhz: 2_600_000,
  hostname: 'sb-1',
};

function option(args: readonly string[], flag: string): string[] {
  return args.flatMap((arg, index) => (arg === flag ? [args[index + 1]!] : []));
}

describe('the microVM command line', () => {
  it('is a microvm with ACPI, nothing by default, the memory and vCPUs asked for', () => {
    const args = machineArgs(base);
    expect(option(args, '-M')).toEqual(['microvm,acpi=on']);
    expect(args).toEqual(expect.arrayContaining(['-nodefaults', '-no-user-config', '-no-reboot']));
    expect(option(args, '-display')).toEqual(['none']);
    expect(option(args, '-m')).toEqual(['256M']);
    expect(option(args, '-smp')).toEqual(['1']);
    expect(option(args, '-accel')).toEqual(['tcg,tb-size=32']);
  });

  it('gives each layer a read-only virtio block device whose serial names its index, bottom first', () => {
    const args = machineArgs(base);
    expect(option(args, '-drive')).toEqual([
      'id=layer0,file=/img/base.erofs,format=raw,if=none,readonly=on',
      'id=layer1,file=/img/tool,,s.erofs,format=raw,if=none,readonly=on',
    ]);
    expect(option(args, '-device')).toEqual(
      expect.arrayContaining(['virtio-blk-device,drive=layer0,serial=dsec-layer-0', 'virtio-blk-device,drive=layer1,serial=dsec-layer-1']),
    );
  });

  it('adds the guest agent port on a unix socket and, for a disk upper, a writable disk', () => {
    const args = machineArgs({ ...base, upperDisk: '/sb/upper.img' });
    expect(option(args, '-chardev')).toEqual(['socket,id=agent,path=/sb/agent.sock,server=on,wait=off']);
    expect(option(args, '-device')).toContain('virtserialport,chardev=agent,name=org.qemu.guest_agent.0');
    expect(option(args, '-drive')).toContain('id=upper,file=/sb/upper.img,format=raw,if=none,cache=unsafe');
    expect(option(args, '-append')[0]).toContain('dsec.upper=disk');
  });

  it('passes tsc_early_khz under TCG only, and the host CPU under KVM', () => {
    expect(kernelCmdline(base)).toContain('tsc_early_khz=2600000');
    expect(kernelCmdline({ ...base, accel: 'kvm' })).not.toContain('tsc_early_khz');
    const kvm = machineArgs({ ...base, accel: 'kvm' });
    expect(option(kvm, '-accel')).toEqual(['kvm']);
    expect(option(kvm, '-cpu')).toEqual(['host']);
  });

  it('tells the guest init how many layers, which upper and its hostname', () => {
    const line = kernelCmdline({ ...base, upperMiB: 64 });
    expect(line).toContain('dsec.layers=2');
    expect(line).toContain('dsec.upper=tmpfs');
    expect(line).toContain('dsec.upper_mib=64');
    expect(line).toContain('dsec.hostname=sb-1');
    expect(line).toContain('panic=-1');
  });

  it('refuses more layers than microvm has device slots', () => {
    expect(() => machineArgs({ ...base, layers: Array.from({ length: MAX_LAYERS + 1 }, (_, index) => `/img/${index}`) })).toThrow(/at most 20 layers/);
  });

  it('gives whole vCPUs for fractional CPU requests, at least one', () => {
    expect(vcpusFor(0.25)).toBe(1);
    expect(vcpusFor(1)).toBe(1);
    expect(vcpusFor(1.5)).toBe(2);
    expect(vcpusFor(4)).toBe(4);
  });
});
