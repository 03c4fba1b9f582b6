/**
 * The full-VM backend's faults, driven through the hooks of a Dsec with the
 * plugin applied (no agent: each case needs only the backend): images that
 * are missing, garbage, mislabelled or not named end in
 * DSEC_VM_IMAGE_INVALID before qemu starts; a disk that never boots ends in
 * DSEC_GUEST_BOOT_FAILED within the boot timeout, saying why; bad
 * backendOptions are DSEC_PLUGIN_OPTIONS. After each, nothing of the VM is
 * left: no qemu, no overlay, no socket.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import type { SandboxContext } from '../../../core/hooks.js';
import type { DiskImageRef, SandboxSpec } from '../../../core/live.js';
import backendVm from '../../../plugins/backend-vm/index.js';
import { caught } from '../../helpers/state.js';
import { buildTestVmImage, defaultVmImageCacheDir, killQemuUnder, qemuProcessesUnder } from '../../helpers/vm-image.js';

let tmp: string;
let dsec: Dsec;
let testImage: DiskImageRef;
const warnings: string[] = [];

function sandbox(id: string, extra: Partial<SandboxSpec> = {}): SandboxContext {
  const dir = path.join(tmp, 'sandboxes', id);
  mkdirSync(dir, { recursive: true });
  const spec: SandboxSpec = {
    id,
    backend: 'vm',
    layers: [],
    env: {},
    workdir: '/',
    user: 'root',
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    network: 'none',
    qos: 'best-effort',
    labels: {},
    ...extra,
  };
  const node = {
    name: 'test',
    root: tmp,
    log: { info: () => {}, warn: (message: string) => warnings.push(message), debug: () => {} },
    capacity: { cpu: 2, memoryMiB: 4096 },
    sandboxes: () => [],
  };
  return { spec, node, dir, status: 'creating', lowerDirs: [], storage: {}, backend: {}, density: {}, traits: {}, createdAt: new Date().toISOString() };
}

/** Provision `ctx`, expecting it to fail; then check that nothing of the VM is left, and destroy it (as the agent would). */
async function failedCreate(ctx: SandboxContext) {
  const error = await caught(() => dsec.hooks.provision.for('vm').promise(ctx));
  expect(qemuProcessesUnder(ctx.dir)).toEqual([]);
  expect(readdirSync(ctx.dir)).toEqual([]);
  await dsec.hooks.destroy.promise(ctx);
  return error;
}

beforeAll(async () => {
  tmp = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-vm-faults-')));
  dsec = new Dsec().use(backendVm({ bootTimeoutMs: 60_000 }));
  testImage = await buildTestVmImage(defaultVmImageCacheDir());
}, 120_000);

afterAll(() => {
  killQemuUnder(tmp);
  rmSync(tmp, { recursive: true, force: true });
});

describe('disk images the backend refuses before starting qemu', () => {
  it('refuses a missing image with DSEC_VM_IMAGE_INVALID naming the file', async () => {
    const error = await failedCreate(sandbox('missing', { image: { path: path.join(tmp, 'nowhere.qcow2'), format: 'qcow2' } }));
    expect(error.code).toBe('DSEC_VM_IMAGE_INVALID');
    expect(error.message).toBe(`disk image ${path.join(tmp, 'nowhere.qcow2')} cannot be used: no such file`);
  });

  it('refuses a file of garbage bytes declared qcow2', async () => {
    const garbage = path.join(tmp, 'garbage.qcow2');
    writeFileSync(garbage, Buffer.from(Array.from({ length: 256 * 1024 }, (_, i) => (i * 7919 + 13) % 251)));
    const error = await failedCreate(sandbox('garbage', { image: { path: garbage, format: 'qcow2' } }));
    expect(error.code).toBe('DSEC_VM_IMAGE_INVALID');
    expect(error.message).toContain(garbage);
    expect(error.message).toContain('not in qcow2 format');
  });

  it('refuses a qcow2 image declared raw, which would boot its bytes as a disk', async () => {
    const error = await failedCreate(sandbox('mislabelled', { image: { path: testImage.path, format: 'raw' } }));
    expect(error.code).toBe('DSEC_VM_IMAGE_INVALID');
    expect(error.message).toContain('declared raw, but the file is a qcow2 image; declare format: qcow2');
  });

  it('refuses a sandbox whose environment names no image', async () => {
    const error = await failedCreate(sandbox('no-image'));
    expect(error.code).toBe('DSEC_VM_IMAGE_INVALID');
    expect(error.message).toContain('names no disk image');
  });

  it('refuses backendOptions it does not know with DSEC_PLUGIN_OPTIONS naming each problem', async () => {
    const error = await failedCreate(sandbox('bad-options', { image: testImage, backendOptions: { display: { gpu: 'yes', sound: true } } }));
    expect(error.code).toBe('DSEC_PLUGIN_OPTIONS');
    expect(error.message).toContain('backend-vm');
    expect(error.message).toContain('unknown option display.sound');
    expect(error.message).toContain('option display.gpu must be a boolean, got "yes"');
  });
});

describe('a guest that never boots', () => {
  it('fails a blank disk with DSEC_GUEST_BOOT_FAILED within the boot timeout, quoting the firmware, and kills qemu', async () => {
    const blank = path.join(tmp, 'blank.qcow2');
    execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', blank, '64M']);
    const ctx = sandbox('blank', { image: { path: blank, format: 'qcow2' }, backendOptions: { bootTimeoutSeconds: 6 } });
    const started = Date.now();
    const error = await failedCreate(ctx);
    expect(error.code).toBe('DSEC_GUEST_BOOT_FAILED');
    expect(error.message).toContain('sandbox blank did not boot: the guest agent did not answer within 6 s');
    expect(error.message).toContain('No bootable device');
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(warnings).toEqual([]);
  }, 60_000);
});
