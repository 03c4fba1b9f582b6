/**
 * Warm-pool claims: a fleet with `replicas: R` (default 256; busybox
 * container sandboxes, 32 MiB, 0.05 CPU) applied by `dsec apply`, then per
 * round, through the SDK (`connect({ dir })`):
 *
 *   pool     first `--single` acquires (default 16) one at a time, each on a
 *            quiet pool (full, nothing being made), and their releases; then
 *            R concurrent `acquire(fleet, { holder })`: latency of each
 *            (median, p99); then R concurrent `release(id)` (recycled:
 *            destroyed; the pool began refilling at the hand-outs): the time
 *            until the pool is full again (R ready, unclaimed: the agent's
 *            GET /v1/pools, polled every 25 ms), from the first acquire and
 *            from the first release, and the refill rate (R / the former)
 *   create   C sandboxes (default 64) created directly with `create` on the
 *            same layer and limits, 16 in flight (what a pool refills with at
 *            once), then destroyed: the plain create and destroy rates
 *
 * Sides in an order that rotates from round to round, so both see the same
 * machine. The refill does R creates beside R recycles, so it is compared
 * with both plain rates: R / create rate + R / destroy rate is what the same
 * work costs done by hand, one after the other.
 * Targets (the issue's): acquire median < 10 ms, p99 < 50 ms, for the R concurrent ones.
 * Cleans up everything, even on failure or ^C.
 *
 *   npm run build && node dist/bench/acquire.js [--replicas 256] [--single 16] [--creates 64] [--rounds 3] [--parallel 16]
 */
import type { LayerRef } from '../core/live.js';
import type { DsecClient } from '../core/sdk/index.js';
import { loadAverage, machineLine, ms, parseFlags, summarize, timedCalls, type Summary } from './lib/latency.js';
import { fixed, median, table } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';
import { admissionFor, interruptible, SdkProject } from './lib/sdk-project.js';

const DEFAULTS = { replicas: 256, single: 16, creates: 64, rounds: 3, parallel: 16 };
export type AcquireSettings = typeof DEFAULTS;
const USAGE = 'usage: acquire [--replicas N] [--single N] [--creates N] [--rounds N] [--parallel N]';
const FLEET = 'pool';
const RESOURCES = { cpu: 0.05, memoryMiB: 32, pids: 64 };
/** The pool refills at most this many at once (core/agent/pools.ts MAX_REFILLS_IN_FLIGHT): the plain creates get the same. */
const CREATE_PARALLEL = 16;
const POLL_MS = 25;
/** A pool that is not full this long after its releases is stuck: fail (and clean up) rather than wait for ever. */
const FULL_TIMEOUT_MS = 10 * 60_000;

interface PoolRound {
  /** One acquire at a time on a quiet pool (full, nothing being made), and its release. */
  readonly single: Summary;
  readonly singleRelease: Summary;
  readonly acquire: Summary;
  readonly acquireWall: number;
  readonly release: Summary;
  readonly releaseWall: number;
  /** Seconds from the first acquire until R ready again (and every release answered). */
  readonly fullFromAcquire: number;
  readonly fullFromRelease: number;
  /** The most acquires that had to wait for a refill (pool counts `waiting`, as polled). */
  readonly waited: number;
}

interface CreateRound {
  readonly createRate: number;
  readonly destroyRate: number;
  readonly create: Summary;
}

function projectYaml(settings: AcquireSettings): string {
  return (
    `# written by bench/acquire\nversion: 1\nprovider:\n  local: {}\n` +
    admissionFor(2 * settings.replicas + settings.creates, RESOURCES.cpu, RESOURCES.memoryMiB) +
    `layers:\n  base:\n    kind: base\n    version: 1.0.0\n    source:\n      busybox: {}\nenvironments:\n  shell:\n    layers: [base]\n` +
    `fleets:\n  ${FLEET}:\n    environment: shell\n    backend: container\n    replicas: ${settings.replicas}\n` +
    `    resources: { cpu: ${RESOURCES.cpu}, memory: ${RESOURCES.memoryMiB}Mi, pids: ${RESOURCES.pids} }\n`
  );
}

export async function runAcquire(settings: AcquireSettings): Promise<boolean> {
  const guard = interruptible('acquire');
  const project = await SdkProject.create('acquire');
  const pools: PoolRound[] = [];
  const creates: CreateRound[] = [];
  let setupSeconds = 0;
  process.stdout.write(`machine: ${machineLine()}\n`);
  try {
    const applied = await project.apply(projectYaml(settings), settings.parallel);
    setupSeconds = applied.whole;
    process.stderr.write(`acquire: fleet ${FLEET} of ${settings.replicas} applied in ${fixed(applied.whole, 1)} s\n`);
    const dsec = await project.connect();
    const base = (await dsec.layers()).find((layer) => layer.name === 'base');
    if (!base) throw new Error('the base layer is not published after the apply');
    const layer: LayerRef = { name: base.name, version: base.version, digest: base.digest };
    await waitFull(project, settings.replicas, []);
    // Warm-up, untimed: one acquire and release, one create and destroy.
    await dsec.release((await dsec.acquire(FLEET, { holder: 'warm-up', waitMs: 30_000 })).id);
    await createSide(dsec, layer, 1, 'warm');
    await waitFull(project, settings.replicas, []);
    for (let round = 0; round < settings.rounds; round++) {
      const sides = round % 2 === 0 ? (['pool', 'create'] as const) : (['create', 'pool'] as const);
      for (const side of sides) {
        guard.check();
        if (side === 'pool') pools.push(await poolSide(dsec, project, settings, round));
        else creates.push(await createSide(dsec, layer, settings.creates, `r${round}`));
      }
      process.stderr.write(`acquire: round ${round + 1}/${settings.rounds} done (load ${loadAverage()})\n`);
    }
  } finally {
    guard.dispose();
    const problems = await project.dispose(settings.parallel);
    for (const problem of problems) process.stderr.write(`acquire: cleanup: ${problem}\n`);
  }
  return report(settings, setupSeconds, pools, creates);
}

/** Poll the pool until it has `replicas` ready, none being made and `claimed` claimed, and `pending` (releases) have all answered. */
async function waitFull(project: SdkProject, replicas: number, pending: readonly Promise<unknown>[], onCounts?: (waiting: number) => void, claimed = 0): Promise<void> {
  let released = pending.length === 0;
  void Promise.all(pending).then(() => (released = true), () => (released = true));
  const deadline = Date.now() + FULL_TIMEOUT_MS;
  for (;;) {
    const info = (await project.agent.listPools()).find((pool) => pool.fleet === FLEET);
    if (!info) throw new Error(`the agent has no pool ${FLEET}`);
    onCounts?.(info.counts.waiting);
    if (released && info.counts.ready + info.counts.claimed >= replicas && info.counts.claimed === claimed && info.counts.creating === 0) return;
    if (Date.now() > deadline) throw new Error(`pool ${FLEET} is not full after ${FULL_TIMEOUT_MS / 1000} s: ${JSON.stringify(info.counts)}${info.lastError ? `; ${info.lastError.message}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

async function poolSide(dsec: DsecClient, project: SdkProject, settings: AcquireSettings, round: number): Promise<PoolRound> {
  const { replicas } = settings;
  // One at a time, each on a quiet pool: what an acquire costs when nothing else runs on the agent.
  const single: number[] = [];
  const singleRelease: number[] = [];
  for (let index = 0; index < settings.single; index++) {
    await waitFull(project, replicas, []);
    let begun = performance.now();
    const sandbox = await dsec.acquire(FLEET, { holder: `single-r${round}-${index}`, waitMs: 60_000 });
    single.push(performance.now() - begun);
    await waitFull(project, replicas + 1, [], undefined, 1);
    begun = performance.now();
    await dsec.release(sandbox.id);
    singleRelease.push(performance.now() - begun);
  }
  await waitFull(project, replicas, []);
  let waited = 0;
  const ids: string[] = [];
  const started = performance.now();
  // Watch the counts while the acquires run (an acquire that found no ready sandbox waits for a refill).
  let acquiring = true;
  const watching = (async () => {
    while (acquiring) {
      const info = (await project.agent.listPools()).find((pool) => pool.fleet === FLEET);
      waited = Math.max(waited, info?.counts.waiting ?? 0);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  })();
  let acquired;
  try {
    acquired = await timedCalls(replicas, replicas, async (index) => {
      const sandbox = await dsec.acquire(FLEET, { holder: `bench-r${round}-${index}`, waitMs: 60_000 });
      if (sandbox.claim?.holder !== `bench-r${round}-${index}`) throw new Error(`acquire answered ${sandbox.id} without the claim: ${JSON.stringify(sandbox.claim)}`);
      ids.push(sandbox.id);
    });
  } finally {
    acquiring = false;
    await watching;
  }
  if (new Set(ids).size !== ids.length) throw new Error(`two acquires got the same sandbox: ${ids.length} acquires, ${new Set(ids).size} sandboxes`);
  const releaseStart = performance.now();
  const releaseLatencies: number[] = [];
  const releases = ids.map(async (id) => {
    const begun = performance.now();
    const result = await dsec.release(id);
    if (!result.recycled) throw new Error(`release ${id} did not recycle it: ${JSON.stringify(result)}`);
    releaseLatencies.push(performance.now() - begun);
  });
  let releaseWall = 0;
  const allReleased = Promise.all(releases).then(() => (releaseWall = (performance.now() - releaseStart) / 1000));
  await waitFull(project, replicas, [allReleased], (waiting) => (waited = Math.max(waited, waiting)));
  await allReleased;
  const full = performance.now();
  return {
    single: summarize(single),
    singleRelease: summarize(singleRelease),
    acquire: summarize(acquired.latencies),
    acquireWall: acquired.seconds,
    release: summarize(releaseLatencies),
    releaseWall,
    fullFromAcquire: (full - started) / 1000,
    fullFromRelease: (full - releaseStart) / 1000,
    waited,
  };
}

async function createSide(dsec: DsecClient, layer: LayerRef, count: number, tag: string): Promise<CreateRound> {
  const ids = Array.from({ length: count }, (_, index) => `plain-${tag}-${index}`);
  const made: string[] = [];
  try {
    const created = await timedCalls(count, CREATE_PARALLEL, async (index) => {
      const info = await dsec.create({ id: ids[index], backend: 'container', layers: [layer], resources: RESOURCES, labels: { bench: 'acquire' } });
      made.push(info.id);
      if (info.status !== 'running') throw new Error(`sandbox ${info.id} is ${info.status} after create: ${info.error ?? ''}`);
    });
    const destroyed = await timedCalls(count, CREATE_PARALLEL, async (index) => {
      await dsec.destroy(ids[index]);
    });
    made.length = 0;
    return { createRate: count / created.seconds, destroyRate: count / destroyed.seconds, create: summarize(created.latencies) };
  } finally {
    // After a failure half-way: whatever was made goes (dispose would get it too).
    for (const id of made) await dsec.destroy(id).catch(() => undefined);
  }
}

function report(settings: AcquireSettings, setupSeconds: number, pools: readonly PoolRound[], creates: readonly CreateRound[]): boolean {
  const out = (text: string) => process.stdout.write(text);
  const R = settings.replicas;
  out(`\nwarm pool: fleet ${FLEET} of ${R} busybox container sandboxes (${RESOURCES.memoryMiB} MiB, ${RESOURCES.cpu} CPU), SDK connect({dir}); applied in ${fixed(setupSeconds, 1)} s\n`);
  if (pools.length === 0 || creates.length === 0) return false;
  const rounds = pools.map((_, index) => `r${index + 1}`);
  const perRound = (label: string, values: readonly number[], digits = 1, suffix = '') => [label, ...values.map((value) => `${fixed(value, digits)}${suffix}`), `${fixed(median(values), digits)}${suffix}`];
  out(`\n${settings.single} acquires one at a time, each on a quiet pool (full, nothing being made), each released once its refill is done\n`);
  out(
    table(['per round', ...rounds, 'median'], [
      perRound('acquire median, ms', pools.map((pool) => pool.single.median)),
      perRound('acquire max, ms', pools.map((pool) => pool.single.max)),
      perRound('release (recycle) median, ms', pools.map((pool) => pool.singleRelease.median)),
    ]),
  );
  out(`\n${R} concurrent acquires, then ${R} concurrent releases\n`);
  out(
    table(['per round', ...rounds, 'median'], [
      perRound('acquire median, ms', pools.map((pool) => pool.acquire.median)),
      perRound('acquire p90, ms', pools.map((pool) => pool.acquire.p90)),
      perRound('acquire p99, ms', pools.map((pool) => pool.acquire.p99)),
      perRound('acquire max, ms', pools.map((pool) => pool.acquire.max)),
      perRound(`all ${R} acquired, s`, pools.map((pool) => pool.acquireWall), 2),
      perRound('acquires that waited for a refill', pools.map((pool) => pool.waited), 0),
      perRound('release median, ms', pools.map((pool) => pool.release.median), 0),
      perRound('release p99, ms', pools.map((pool) => pool.release.p99), 0),
      perRound(`all ${R} released, s`, pools.map((pool) => pool.releaseWall), 2),
      perRound(`pool full again (${R} ready) from the first acquire, s`, pools.map((pool) => pool.fullFromAcquire), 2),
      perRound('... from the first release, s', pools.map((pool) => pool.fullFromRelease), 2),
      perRound('refill rate, sandboxes/s', pools.map((pool) => R / pool.fullFromAcquire)),
    ]),
  );
  out(`\nplain sandboxes: ${settings.creates} created with create(), ${CREATE_PARALLEL} in flight, then destroyed\n`);
  out(
    table(['per round', ...rounds, 'median'], [
      perRound('create, sandboxes/s', creates.map((round) => round.createRate)),
      perRound('create median, ms', creates.map((round) => round.create.median), 0),
      perRound('destroy, sandboxes/s', creates.map((round) => round.destroyRate)),
    ]),
  );
  const refill = pools.map((pool) => R / pool.fullFromAcquire);
  const byHand = pools.map((pool, index) => R / creates[index].createRate + R / creates[index].destroyRate);
  out('\nratios (within each round, then the median)\n');
  out(
    table(['', ...rounds, 'median'], [
      perRound('refill rate / plain create rate', refill.map((rate, index) => rate / creates[index].createRate), 2, 'x'),
      perRound(`(${R} creates + ${R} destroys by hand, s) / refill time`, byHand.map((seconds, index) => seconds / pools[index].fullFromAcquire), 2, 'x'),
    ]),
  );
  const acquireMedian = median(pools.map((pool) => pool.acquire.median));
  const acquireP99 = median(pools.map((pool) => pool.acquire.p99));
  const checks: [string, boolean, string][] = [
    ['acquire median < 10 ms', acquireMedian < 10, `${ms(acquireMedian)} ms`],
    ['acquire p99 < 50 ms', acquireP99 < 50, `${ms(acquireP99)} ms`],
  ];
  out('\ntargets (medians over the rounds)\n');
  out(table(['', 'met', 'figure'], checks.map(([what, met, figure]) => [what, met ? 'met' : 'NOT met', figure])));
  out(`  load average at the end: ${loadAverage()}\n`);
  return checks.every(([, met]) => met);
}

runWhenMain(import.meta.url, 'acquire', (argv) => runAcquire(parseFlags(argv, DEFAULTS, USAGE)), { exit: true });
