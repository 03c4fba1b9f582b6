import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULT_GUEST_KERNEL_DIR, findGuestKernel, resolveKernelModules } from '../../../core/qemu/guest-kernel.js';

const haveKernel = existsSync(`${DEFAULT_GUEST_KERNEL_DIR}/vmlinuz`);

describe.skipIf(!haveKernel)("the guest kernel's modules", () => {
  it('orders the virtio, erofs and overlay modules with their dependencies first, each once', async () => {
    const kernel = await findGuestKernel();
    const modules = await resolveKernelModules(kernel.modulesDir, ['virtio_blk', 'virtio_mmio', 'virtio_console', 'erofs', 'overlay']);
    const names = modules.map((module) => module.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names.indexOf('virtio')).toBeLessThan(names.indexOf('virtio_mmio'));
    expect(names.indexOf('virtio_ring')).toBeLessThan(names.indexOf('virtio_blk'));
    expect(names.indexOf('libcrc32c')).toBeLessThan(names.indexOf('erofs'));
    expect(names).toContain('overlay');
  });

  it('names a module that neither exists nor is built in', async () => {
    const kernel = await findGuestKernel();
    await expect(resolveKernelModules(kernel.modulesDir, ['no_such_module'])).rejects.toThrow(/no_such_module is neither in/);
  });
});

describe('finding the guest kernel', () => {
  it('is DSEC_VMM_UNAVAILABLE naming the missing file', async () => {
    await expect(findGuestKernel('/nonexistent/kernel')).rejects.toMatchObject({
      code: 'DSEC_VMM_UNAVAILABLE',
      message: expect.stringContaining('/nonexistent/kernel/vmlinuz'),
    });
  });
});
