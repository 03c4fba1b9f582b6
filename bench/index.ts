/**
 * Every benchmark, one after the other, each in its own Node process (so one
 * benchmark's heap and peak RSS never colour the next one's figures, and
 * plan-scale gets --expose-gc). Their tables go straight to stdout.
 *
 *   npm run build && npm run bench                 # all of them
 *   node dist/bench/index.js create-rate           # only the named ones
 *   node dist/bench/index.js create-rate -- --rounds 3   # arguments after -- go to each
 *
 * Exits non-zero when a benchmark missed its target or failed.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface Benchmark {
  readonly name: string;
  /** What it checks, printed above its table. */
  readonly title: string;
  readonly nodeFlags: readonly string[];
}

const BENCHMARKS: readonly Benchmark[] = [
  { name: 'plan-scale', title: 'planning is cheap at scale', nodeFlags: ['--expose-gc'] },
  { name: 'create-rate', title: "creating sandboxes is close to the runtime's own cost", nodeFlags: [] },
];

function run(benchmark: Benchmark, args: readonly string[]): Promise<number> {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const file = path.join(here, `${benchmark.name}.js`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...benchmark.nodeFlags, file, ...args], { stdio: 'inherit' });
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

async function main(argv: readonly string[]): Promise<number> {
  const split = argv.indexOf('--');
  const names = split === -1 ? argv : argv.slice(0, split);
  const args = split === -1 ? [] : argv.slice(split + 1);
  const unknown = names.filter((name) => !BENCHMARKS.some((benchmark) => benchmark.name === name));
  if (unknown.length > 0) {
    process.stderr.write(`unknown benchmark(s): ${unknown.join(', ')}; known: ${BENCHMARKS.map((b) => b.name).join(', ')}\n`);
    return 2;
  }
  const chosen = names.length > 0 ? BENCHMARKS.filter((benchmark) => names.includes(benchmark.name)) : BENCHMARKS;
  const outcomes: string[] = [];
  let failed = 0;
  for (const benchmark of chosen) {
    process.stdout.write(`\n=== ${benchmark.name}: ${benchmark.title}\n\n`);
    const code = await run(benchmark, args);
    if (code !== 0) failed += 1;
    outcomes.push(`  ${benchmark.name.padEnd(12)} ${code === 0 ? 'target met' : `target missed or failed (exit ${code})`}`);
  }
  process.stdout.write(`\n=== summary\n${outcomes.join('\n')}\n`);
  return failed > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: Error) => {
    process.stderr.write(`bench: ${error.stack ?? error.message}\n`);
    process.exitCode = 1;
  },
);
