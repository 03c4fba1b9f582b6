#!/usr/bin/env node
/**
 * Compiles native/dsec-native.c (the agent's helper for the kernel calls Node
 * cannot make: see the file's header) into dist/native/dsec-native. Part of
 * `npm run build`; it runs on the host only, so a dynamic build is fine.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const SOURCE = `${root}native/dsec-native.c`;
const OUT_DIR = `${root}dist/native`;
const OUTPUT = `${OUT_DIR}/dsec-native`;
const compiler = process.env.CC || 'gcc';

const found = spawnSync(compiler, ['--version'], { stdio: 'ignore' });
if (found.error || found.status !== 0) {
  console.error(`build-native: ${compiler} is not installed; run scripts/setup.sh (it installs gcc and libc6-dev), then npm run build`);
  process.exit(1);
}

// Skip the compile when the binary is newer than its source (npm run build runs often).
const age = (file) => statSync(file, { throwIfNoEntry: false })?.mtimeMs;
if ((age(OUTPUT) ?? 0) > (age(SOURCE) ?? Infinity)) process.exit(0);

mkdirSync(OUT_DIR, { recursive: true });
// Compile beside the target and rename: an agent starting the helper meanwhile sees the old or the new file, never half of one.
const partial = `${OUTPUT}.${process.pid}.tmp`;
try {
  execFileSync(compiler, ['-O2', '-Wall', '-Wextra', '-o', partial, SOURCE], { stdio: 'inherit' });
} catch {
  rmSync(partial, { force: true });
  console.error(`build-native: compiling ${SOURCE} failed (see above); without libc6-dev, run scripts/setup.sh`);
  process.exit(1);
}
renameSync(partial, OUTPUT);
