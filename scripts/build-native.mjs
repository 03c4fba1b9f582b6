#!/usr/bin/env node
/**
 * Compiles the native programs into dist/native/ (part of `npm run build`):
 * - dsec-native (native/dsec-native.c): the agent's helper for the kernel
 *   calls Node cannot make (see the file's header). It runs on the host only,
 *   so a dynamic build is fine.
 * - dsec-guest (native/dsec-guest.c + native/guest/*.c): the guest agent of
 *   microVM, VM and FnCall sandboxes. It runs inside guests whose C library
 *   is unknown (or absent), so it is linked statically; a failed static link
 *   fails the build.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const OUT_DIR = `${root}dist/native`;
const compiler = process.env.CC || 'gcc';
const guestSources = readdirSync(`${root}native/guest`)
  .filter((name) => name.endsWith('.c'))
  .sort()
  .map((name) => `${root}native/guest/${name}`);
const guestHeaders = readdirSync(`${root}native/guest`)
  .filter((name) => name.endsWith('.h'))
  .map((name) => `${root}native/guest/${name}`);

const PROGRAMS = [
  {
    output: `${OUT_DIR}/dsec-native`,
    sources: [`${root}native/dsec-native.c`, `${root}native/host/files.c`],
    inputs: [`${root}native/dsec-native.c`, `${root}native/host/files.c`, `${root}native/host/files.h`],
    flags: [],
    hint: 'without libc6-dev, run scripts/setup.sh',
  },
  {
    output: `${OUT_DIR}/dsec-guest`,
    sources: [`${root}native/dsec-guest.c`, ...guestSources],
    inputs: [`${root}native/dsec-guest.c`, ...guestSources, ...guestHeaders],
    flags: ['-static', '-s'],
    hint: 'the guest agent must link statically: it needs the static C library (libc.a from libc6-dev; run scripts/setup.sh)',
  },
];

const found = spawnSync(compiler, ['--version'], { stdio: 'ignore' });
if (found.error || found.status !== 0) {
  console.error(`build-native: ${compiler} is not installed; run scripts/setup.sh (it installs gcc and libc6-dev), then npm run build`);
  process.exit(1);
}

const age = (file) => statSync(file, { throwIfNoEntry: false })?.mtimeMs;
mkdirSync(OUT_DIR, { recursive: true });
for (const program of PROGRAMS) {
  // Skip the compile when the binary is newer than every input (npm run build runs often).
  const newestInput = Math.max(...program.inputs.map((file) => age(file) ?? Infinity));
  if ((age(program.output) ?? 0) > newestInput) continue;
  // Compile beside the target and rename: a process starting the program meanwhile sees the old or the new file, never half of one.
  const partial = `${program.output}.${process.pid}.tmp`;
  try {
    execFileSync(compiler, ['-O2', '-Wall', '-Wextra', ...program.flags, '-o', partial, ...program.sources], { stdio: 'inherit' });
  } catch {
    rmSync(partial, { force: true });
    console.error(`build-native: compiling ${program.output.slice(root.length)} failed (see above); ${program.hint}`);
    process.exit(1);
  }
  renameSync(partial, program.output);
}
