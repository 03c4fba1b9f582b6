import { describe, expect, it } from 'vitest';
import type { ConfigModel, FleetModel } from '../../../core/model.js';
import { pluginOptions, sandboxOptions } from '../../../plugins/backend-microvm/options.js';
import { checkMicrovmFleets, MIN_MICROVM_MEMORY_MIB } from '../../../plugins/backend-microvm/validate.js';

describe('the microVM plugin options', () => {
  it('fills the defaults', () => {
    expect(pluginOptions({})).toMatchObject({ qemu: 'qemu-system-x86_64', accel: 'auto', kernelDir: '/var/lib/dsec/guest-kernel', bootTimeoutMs: 60_000 });
  });

  it('lists every problem in one DSEC_PLUGIN_OPTIONS naming the plugin', () => {
    expect(() => pluginOptions({ accel: 'hvf', kernelDir: 'relative', bogus: 1 })).toThrow(
      expect.objectContaining({
        code: 'DSEC_PLUGIN_OPTIONS',
        message: expect.stringMatching(/backend-microvm.*unknown option bogus.*kernelDir must be an absolute path.*accel must be one of auto, kvm, tcg/s),
      }),
    );
  });
});

describe("a fleet's microVM backendOptions", () => {
  it('accepts a tmpfs or a sized disk upper and the qemu or firecracker VMM', () => {
    expect(sandboxOptions({ upper: 'disk', upperMiB: 512, vmm: 'qemu' })).toEqual({ upper: 'disk', upperMiB: 512, vmm: 'qemu' });
    expect(sandboxOptions(undefined)).toEqual({});
  });

  it('needs upperMiB for a disk upper', () => {
    expect(() => sandboxOptions({ upper: 'disk' })).toThrow(expect.objectContaining({ code: 'DSEC_PLUGIN_OPTIONS', message: expect.stringContaining('upperMiB is required with upper: disk') }));
  });

  it('refuses an unknown upper or option', () => {
    expect(() => sandboxOptions({ upper: 'nfs', display: true })).toThrow(/unknown option display.*upper must be one of tmpfs, disk/s);
  });
});

describe('the engine-side check of microVM fleets', () => {
  const fleet = (name: string, memoryMiB: number, backendOptions?: Record<string, unknown>): FleetModel =>
    ({ name, backend: 'microvm', resources: { cpu: 1, memoryMiB, pids: 64 }, ...(backendOptions ? { backendOptions } : {}) }) as unknown as FleetModel;

  it('locates a fleet too small to boot and bad backendOptions, leaving other backends alone', () => {
    const config = {
      fleets: {
        tiny: fleet('tiny', 64),
        bad: fleet('bad', 256, { upper: 'disk' }),
        fine: fleet('fine', MIN_MICROVM_MEMORY_MIB),
        other: { ...fleet('other', 16), backend: 'container' },
      },
    } as unknown as ConfigModel;
    const diagnostics = checkMicrovmFleets(config, 'microvm');
    expect(diagnostics.map((diagnostic) => diagnostic.path)).toEqual(['/fleets/tiny/resources/memory', '/fleets/bad/backendOptions']);
    expect(diagnostics[0]!.message).toContain(`at least ${MIN_MICROVM_MEMORY_MIB}Mi`);
    expect(diagnostics[1]!.message).toContain('upperMiB is required');
  });
});
