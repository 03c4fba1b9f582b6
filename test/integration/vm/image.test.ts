/**
 * The test VM image builder: a qcow2 whose MBR carries syslinux's boot code
 * and one active Linux partition (extlinux's boot sector told where it
 * starts), built once per cache folder and then reused, leaving no mount,
 * loop device or scratch behind.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { leftovers, sweepMounts } from '../../helpers/mounts.js';
import { buildTestVmImage, type TestVmImage } from '../../helpers/vm-image.js';

let cache: string;
let image: TestVmImage;
let buildMs: number;

beforeAll(async () => {
  cache = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-vm-image-test-')));
  const started = Date.now();
  image = await buildTestVmImage(cache);
  buildMs = Date.now() - started;
}, 120_000);

afterAll(() => {
  sweepMounts(cache);
  rmSync(cache, { recursive: true, force: true });
});

describe('the test VM image', () => {
  it('is a qcow2 in the cache folder, built in seconds, with nothing of the build left', () => {
    expect(image.format).toBe('qcow2');
    expect(path.dirname(image.path)).toBe(cache);
    const info = JSON.parse(execFileSync('qemu-img', ['info', '--output=json', image.path], { encoding: 'utf8' }));
    expect(info.format).toBe('qcow2');
    expect(info['virtual-size']).toBe(96 * 1024 * 1024);
    expect(statSync(image.path).mode & 0o777).toBe(0o444);
    expect(buildMs).toBeLessThan(60_000);
    expect(leftovers(cache)).toEqual({ mounts: [], loops: [] });
    expect(readdirSync(cache)).toEqual([path.basename(image.path)]);
  });

  it('boots from its MBR: syslinux boot code, one active Linux partition at 1 MiB, its boot sector told that offset', () => {
    const raw = path.join(cache, 'check.raw');
    execFileSync('qemu-img', ['convert', '-O', 'raw', image.path, raw]);
    try {
      const disk = readFileSync(raw);
      expect(disk.subarray(0, 440)).toEqual(readFileSync('/usr/lib/syslinux/mbr/mbr.bin').subarray(0, 440));
      const entry = disk.subarray(0x1be, 0x1be + 16);
      expect(entry[0]).toBe(0x80); // active
      expect(entry[4]).toBe(0x83); // Linux
      expect(entry.readUInt32LE(8)).toBe(2048);
      expect(disk.readUInt16LE(510)).toBe(0xaa55);
      expect(disk.readUInt32LE(2048 * 512 + 0x1c)).toBe(2048); // extlinux's "hidden sectors"
    } finally {
      rmSync(raw, { force: true });
    }
  });

  it('is reused from the cache on the next call, not built again', async () => {
    const before = statSync(image.path);
    const started = Date.now();
    const again = await buildTestVmImage(cache);
    expect(again).toEqual(image);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(statSync(image.path).ino).toBe(before.ino);
  });
});
