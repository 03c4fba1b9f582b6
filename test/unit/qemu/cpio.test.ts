import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { writeCpio } from '../../../core/qemu/cpio.js';
import { collectEntries } from '../../../core/qemu/initramfs.js';

const temps: string[] = [];
afterEach(() => {
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function temp(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsec-cpio-'));
  temps.push(dir);
  return dir;
}

describe('the newc cpio writer', () => {
  it('writes an archive busybox cpio unpacks to the same files, modes and symlinks', () => {
    const archive = writeCpio([
      { type: 'dir', path: 'bin' },
      { type: 'file', path: 'bin/hello', data: Buffer.from('#!/bin/sh\necho hi\n'), mode: 0o755 },
      { type: 'file', path: 'odd-size', data: Buffer.from('abc') },
      { type: 'symlink', path: 'bin/sh', target: 'hello' },
      { type: 'dir', path: 'empty', mode: 0o700 },
    ]);
    const dir = temp();
    writeFileSync(path.join(dir, 'a.cpio'), archive);
    const out = path.join(dir, 'out');
    execFileSync('/bin/busybox', ['mkdir', out]);
    execFileSync('/bin/busybox', ['sh', '-c', `cd ${out} && /bin/busybox cpio -i -d < ../a.cpio`], { stdio: 'pipe' });
    expect(readFileSync(path.join(out, 'bin/hello'), 'utf8')).toBe('#!/bin/sh\necho hi\n');
    expect(statSync(path.join(out, 'bin/hello')).mode & 0o777).toBe(0o755);
    expect(readFileSync(path.join(out, 'odd-size'), 'utf8')).toBe('abc');
    expect(readlinkSync(path.join(out, 'bin/sh'))).toBe('hello');
    expect(statSync(path.join(out, 'empty')).mode & 0o777).toBe(0o700);
  });

  it('pads every header, name and data to four bytes and ends with the trailer', () => {
    const archive = writeCpio([{ type: 'file', path: 'x', data: Buffer.from('12345') }]);
    expect(archive.length % 4).toBe(0);
    expect(archive.subarray(0, 6).toString()).toBe('070701');
    expect(archive.includes(Buffer.from('TRAILER!!!\0'))).toBe(true);
  });

  it('gives the same bytes for the same entries (no timestamps), so images can be cached by content', () => {
    const entries = [{ type: 'file' as const, path: 'init', data: Buffer.from('x') }];
    expect(writeCpio(entries).equals(writeCpio(entries))).toBe(true);
  });

  it('refuses absolute paths and paths with .. parts', () => {
    expect(() => writeCpio([{ type: 'dir', path: '/etc' }])).toThrow(/must be relative/);
    expect(() => writeCpio([{ type: 'dir', path: 'a/../b' }])).toThrow(/must be relative/);
  });
});

describe('the initramfs entries', () => {
  it('adds every parent directory, /dev/console and /dev/null, sorted with parents first', async () => {
    const entries = await collectEntries({ files: [{ target: '/usr/lib/deep/file', content: 'x' }], symlinks: [{ link: '/bin/sh', target: 'busybox' }] });
    const paths = entries.map((entry) => entry.path);
    expect(paths).toContain('dev/console');
    expect(paths).toContain('dev/null');
    for (const parent of ['usr', 'usr/lib', 'usr/lib/deep']) expect(paths.indexOf(parent)).toBeLessThan(paths.indexOf('usr/lib/deep/file'));
    expect(entries.find((entry) => entry.path === 'dev/console')).toMatchObject({ type: 'char', major: 5, minor: 1 });
  });

  it('refuses a path given twice', async () => {
    await expect(collectEntries({ files: [{ target: '/init', content: 'a' }, { target: '/init', content: 'b' }] })).rejects.toThrow(/given twice/);
  });
});
