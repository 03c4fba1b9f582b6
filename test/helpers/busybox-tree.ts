/**
 * A busybox root filesystem built by hand, for tests that need a layer tree
 * without a storage plugin: /bin/busybox (Debian's static one), a symlink per
 * applet, the usual empty top-level folders and a minimal /etc.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import path from 'node:path';

export const BUSYBOX = '/bin/busybox';

export function buildBusyboxTree(dir: string): string {
  for (const sub of ['bin', 'dev', 'etc', 'home', 'proc', 'root', 'run', 'sbin', 'sys', 'tmp', 'usr/bin', 'usr/sbin', 'var']) {
    mkdirSync(path.join(dir, sub), { recursive: true });
  }
  chmodSync(path.join(dir, 'tmp'), 0o1777);
  copyFileSync(BUSYBOX, path.join(dir, 'bin/busybox'));
  chmodSync(path.join(dir, 'bin/busybox'), 0o755);
  const applets = execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' }).split('\n').filter(Boolean);
  for (const applet of applets) {
    if (applet === 'busybox') continue;
    symlinkSync('busybox', path.join(dir, 'bin', applet));
  }
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
  return dir;
}
