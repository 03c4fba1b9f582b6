/**
 * Mounts and loop devices a test made under its temp folder: listed (to
 * assert none is left) and swept (so a failed test still leaves nothing).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

function unescapeMountPath(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_whole, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** Mount points at or under `dir`, deepest first. */
export function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => unescapeMountPath(line.split(' ')[4] ?? ''))
    .filter((point) => point === dir || point.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

/** Loop devices whose backing file is under `dir` (as `losetup -a` shows them). */
export function loopsUnder(dir: string): string[] {
  const text = execFileSync('losetup', ['--list', '--json', '--output', 'NAME,BACK-FILE'], { encoding: 'utf8' });
  if (text.trim() === '') return [];
  const parsed = JSON.parse(text) as { loopdevices?: Array<{ name: string; 'back-file': string | null }> };
  return (parsed.loopdevices ?? []).filter((loop) => (loop['back-file'] ?? '').startsWith(`${dir}/`)).map((loop) => loop.name);
}

/** What a test left under `dir`: mount points and loop devices. */
export function leftovers(dir: string): { mounts: string[]; loops: string[] } {
  return { mounts: mountsUnder(dir), loops: loopsUnder(dir) };
}

/** Unmount everything under `dir` and detach its loop devices. Never throws. */
export function sweepMounts(dir: string): void {
  for (const point of mountsUnder(dir)) {
    try {
      execFileSync('umount', [point], { stdio: 'ignore' });
    } catch {
      try {
        execFileSync('umount', ['-l', point], { stdio: 'ignore' });
      } catch {
        // already gone
      }
    }
  }
  for (const device of loopsUnder(dir)) {
    try {
      execFileSync('losetup', ['--detach', device], { stdio: 'ignore' });
    } catch {
      // already gone
    }
  }
}
