/**
 * Every benchmark, one after the other, each in its own Node process (so one
 * benchmark's heap and peak RSS never colour the next one's figures, and each
 * gets --expose-gc). Their tables go straight to stdout. A benchmark is any
 * file of this folder but this one: the known ones run first, in the order
 * below, then the others by name.
 *
 *   npm run build && npm run bench                 # all of them
 *   node dist/bench/index.js create-rate           # only the named ones
 *   node dist/bench/index.js create-rate -- --rounds 3   # arguments after -- go to each
 *
 * Exits non-zero when a benchmark missed its target or failed.
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface Benchmark {
  readonly name: string;
  /** What it checks, printed above its table. */
  readonly title: string;
}

const KNOWN: readonly Benchmark[] = [
  { name: 'plan-scale', title: 'planning is cheap at scale' },
  { name: 'create-rate', title: "creating sandboxes is close to the runtime's own cost" },
  { name: 'layers-start', title: 'starting 32 sandboxes of a 1 GiB image: on demand vs pre-cached vs tar extraction' },
  { name: 'layers-read-fraction', title: "a sandbox reads a small fraction of its image's bytes" },
  { name: 'layers-replan', title: 'a toolkit upgrade across 1,000 environments publishes one layer' },
  { name: 'qos', title: 'CPU QoS: a latency-sensitive task next to best-effort load, QoS off vs on' },
  { name: 'placement', title: 'placement: a 32,000-sandbox burst over 160 nodes, decisions/s and max/mean load' },
  { name: 'cluster-burst', title: 'a fleet of 200 container sandboxes over three cluster agents beside one local agent, sandboxes/s' },
  { name: 'fncall', title: 'FnCall: invocations/s of a trivial task through a pool beside a fresh container per task' },
  { name: 'backends', title: 'container, fncall, microVM, full VM: create-to-first-exec latency and memory per idle sandbox, with the accelerator' },
  { name: 'exec', title: 'exec latency and throughput through the SDK beside runc exec, with 10 and with 2,000 idle sandboxes on the node' },
  { name: 'acquire', title: 'a warm pool of 256: concurrent acquire latency, and the refill after 256 releases beside the plain create rate' },
  { name: 'rollouts', title: '32 concurrent SWE-style rollouts on Debian with pytest: rollouts per minute and the share of wall time in dsec' },
];

const here = path.dirname(fileURLToPath(import.meta.url));

function benchmarks(): Benchmark[] {
  const self = path.basename(fileURLToPath(import.meta.url), '.js');
  const found = readdirSync(here)
    .filter((file) => file.endsWith('.js') && path.basename(file, '.js') !== self)
    .map((file) => path.basename(file, '.js'));
  const known = KNOWN.filter((benchmark) => found.includes(benchmark.name));
  const others = found
    .filter((name) => !KNOWN.some((benchmark) => benchmark.name === name))
    .sort()
    .map((name) => ({ name, title: name }));
  return [...known, ...others];
}

function run(benchmark: Benchmark, args: readonly string[]): Promise<number> {
  const file = path.join(here, `${benchmark.name}.js`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--expose-gc', file, ...args], { stdio: 'inherit' });
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

async function main(argv: readonly string[]): Promise<number> {
  const split = argv.indexOf('--');
  const names = split === -1 ? argv : argv.slice(0, split);
  const args = split === -1 ? [] : argv.slice(split + 1);
  const all = benchmarks();
  const unknown = names.filter((name) => !all.some((benchmark) => benchmark.name === name));
  if (unknown.length > 0) {
    process.stderr.write(`unknown benchmark(s): ${unknown.join(', ')}; known: ${all.map((b) => b.name).join(', ')}\n`);
    return 2;
  }
  const chosen = names.length > 0 ? all.filter((benchmark) => names.includes(benchmark.name)) : all;
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
