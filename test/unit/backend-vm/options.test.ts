/**
 * The full-VM backend's pure parts: its two option schemas, the engine-side
 * fleet checks, and the qemu command line each option set gives.
 */
import { describe, expect, it } from 'vitest';
import type { ConfigModel, FleetModel } from '../../../core/model.js';
import type { SandboxSpec } from '../../../core/live.js';
import { machineArgs, SHORT_SOCKET_ROOT, vcpusFor, vmPaths } from '../../../plugins/backend-vm/machine.js';
import { pluginOptions, sandboxOptions } from '../../../plugins/backend-vm/options.js';
import { checkVmFleets, MIN_VM_MEMORY_MIB } from '../../../plugins/backend-vm/validate.js';
import { caught } from '../../helpers/state.js';

const spec: SandboxSpec = {
  id: 'vm-1',
  backend: 'vm',
  layers: [],
  env: {},
  workdir: '/',
  user: 'root',
  resources: { cpu: 1.5, memoryMiB: 512, pids: 256 },
  network: 'none',
  qos: 'best-effort',
  labels: {},
  image: { path: '/images/disk.qcow2', format: 'qcow2' },
};

function fleet(name: string, extra: Partial<FleetModel> = {}): FleetModel {
  return {
    name,
    environment: 'desktop',
    backend: 'vm',
    replicas: 1,
    resources: { cpu: 1, memoryMiB: 512, pids: 256 },
    network: 'none',
    qos: 'best-effort',
    ttl: {},
    density: { memorySharing: false, reclaimOnPause: true },
    labels: {},
    update: { maxUnavailable: 1 },
    ...extra,
  };
}

function config(fleets: FleetModel[], image = true): ConfigModel {
  return {
    version: 1,
    file: '/project/dsec.yaml',
    dir: '/project',
    provider: { type: 'local', stateDir: '/project/.dsec' },
    plugins: [],
    layers: {},
    environments: {
      desktop: { name: 'desktop', layers: [], env: {}, workdir: '/', user: 'root', ...(image ? { image: { path: '/project/disk.qcow2', format: 'qcow2' } } : {}) },
    },
    fleets: Object.fromEntries(fleets.map((entry) => [entry.name, entry])),
  };
}

describe('backend-vm options', () => {
  it('fills the plugin defaults: qemu on the PATH, probed acceleration, two minutes to boot, a 32 MiB TCG cache', () => {
    expect(pluginOptions(undefined)).toEqual({
      qemu: 'qemu-system-x86_64',
      accel: 'auto',
      bootTimeoutMs: 120_000,
      tcgCacheMiB: 32,
      defaultOutputCapBytes: 1024 * 1024,
    });
  });

  it('reports every bad plugin option in one DSEC_PLUGIN_OPTIONS naming the plugin', async () => {
    const error = await caught(async () => pluginOptions({ accel: 'hvf', bootTimeoutMs: 10, display: true }));
    expect(error.code).toBe('DSEC_PLUGIN_OPTIONS');
    expect(error.message).toContain('plugin backend-vm has invalid options');
    expect(error.message).toContain('unknown option display');
    expect(error.message).toContain('option accel must be one of auto, kvm, tcg, got "hvf"');
    expect(error.message).toContain('option bootTimeoutMs must be from 1000 (one second) to 3600000 (an hour), got 10');
  });

  it('accepts the display options and a boot timeout in a fleet\'s backendOptions, and nothing else', async () => {
    expect(sandboxOptions({ display: { gpu: true, vnc: true }, bootTimeoutSeconds: 30 })).toEqual({ display: { gpu: true, vnc: true }, bootTimeoutSeconds: 30 });
    expect(sandboxOptions(undefined)).toEqual({});
    const error = await caught(async () => sandboxOptions({ display: { vnc: 'on' }, bootTimeoutSeconds: 0 }));
    expect(error.message).toContain('option display.vnc must be a boolean, got "on"');
    expect(error.message).toContain('option bootTimeoutSeconds must be from 1 to 3600 (seconds), got 0');
  });
});

describe('backend-vm fleet checks at plan time', () => {
  it('accepts a VM fleet with enough memory, known backendOptions and an environment image', () => {
    expect(checkVmFleets(config([fleet('ok', { backendOptions: { display: { vnc: true } } })]), 'vm')).toEqual([]);
  });

  it('locates a memory request below the minimum, unknown backendOptions and a missing image', () => {
    const diagnostics = checkVmFleets(
      config([fleet('tiny', { resources: { cpu: 1, memoryMiB: 64, pids: 256 }, backendOptions: { display: { hdmi: true } } }), fleet('other', { backend: 'container' })], false),
      'vm',
    );
    expect(diagnostics.map((entry) => entry.path)).toEqual(['/fleets/tiny/resources/memory', '/fleets/tiny/backendOptions', '/fleets/tiny/backend']);
    expect(diagnostics[0]!.message).toContain(`needs at least ${MIN_VM_MEMORY_MIB}Mi`);
    expect(diagnostics[1]!.message).toContain('unknown option display.hdmi');
    expect(diagnostics[2]!.message).toContain("environment 'desktop' names none");
    expect(diagnostics.every((entry) => entry.severity === 'error')).toBe(true);
  });
});

describe('backend-vm machine', () => {
  const paths = vmPaths('/var/lib/dsec/sandboxes/vm-1');

  it('boots the overlay from firmware on q35 with the guest agent port, no network and the spec\'s memory and vCPUs', () => {
    const args = machineArgs({ spec, paths, accel: 'tcg', tcgCacheMiB: 64, options: {} });
    const joined = args.join(' ');
    expect(joined).toContain('-M q35 -accel tcg,tb-size=64 -m 512 -smp 2');
    expect(joined).toContain('-nic none');
    expect(joined).toContain('-drive file=/var/lib/dsec/sandboxes/vm-1/overlay.qcow2,format=qcow2,if=none,id=disk0');
    expect(joined).toContain('virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0');
    expect(args).not.toContain('-kernel');
    expect(args).not.toContain('-vnc');
    expect(machineArgs({ spec, paths, accel: 'kvm', tcgCacheMiB: 64, options: {} }).join(' ')).toContain('-accel kvm -cpu host');
  });

  it('adds virtio-vga for a GPU, plain VGA for VNC alone, and VNC on the sandbox\'s unix socket', () => {
    const gpu = machineArgs({ spec, paths, accel: 'tcg', tcgCacheMiB: 64, options: { display: { gpu: true } } }).join(' ');
    expect(gpu).toContain('-device virtio-vga');
    expect(gpu).not.toContain('-vnc');
    const vnc = machineArgs({ spec, paths, accel: 'tcg', tcgCacheMiB: 64, options: { display: { vnc: true } } }).join(' ');
    expect(vnc).toContain('-device VGA -vnc unix:/var/lib/dsec/sandboxes/vm-1/vnc.sock');
  });

  it('rounds fractional CPUs up to whole vCPUs', () => {
    expect([0.25, 1, 1.5, 4].map(vcpusFor)).toEqual([1, 1, 2, 4]);
  });

  it('keeps sockets in the sandbox folder unless its path is too long for a unix socket', () => {
    expect(paths.socketDir).toBe('/var/lib/dsec/sandboxes/vm-1');
    const deep = vmPaths(`/tmp/${'d'.repeat(90)}/vm-1`);
    expect(deep.socketDir.startsWith(`${SHORT_SOCKET_ROOT}/`)).toBe(true);
    expect(deep.guestAgent.length).toBeLessThan(108);
    expect(deep.overlay).toBe(`/tmp/${'d'.repeat(90)}/vm-1/overlay.qcow2`);
  });
});
