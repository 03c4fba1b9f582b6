/**
 * The apply progress bar: one bar for all sandbox operations of the plan,
 * drawn only on a TTY and only when there is enough work to watch. It listens
 * on the `sandboxOperation` hook like any plugin would, so the engine knows
 * nothing about terminals.
 */
import cliProgress from 'cli-progress';
import type { Dsec } from '../dsec.js';
import type { Plan } from '../plan.js';

const PLUGIN_NAME = 'cli-progress';
/** Below this many sandbox operations the per-resource lines say enough. */
const MIN_OPERATIONS = 20;

export function attachProgress(dsec: Dsec, plan: Plan, enabled: boolean): { stop(): void } {
  const total = plan.resource_changes.reduce((n, change) => n + (change.fleet?.operations.length ?? 0), 0);
  if (!enabled || total < MIN_OPERATIONS) return { stop() {} };
  const bar = new cliProgress.SingleBar(
    {
      format: '  sandboxes [{bar}] {value}/{total} ({failed} failed) {eta_formatted} left',
      hideCursor: true,
      stream: process.stderr,
    },
    cliProgress.Presets.shades_classic,
  );
  let failed = 0;
  bar.start(total, 0, { failed });
  dsec.hooks.sandboxOperation.tap(PLUGIN_NAME, (_fleet, _operation, error) => {
    if (error) failed += 1;
    bar.increment(1, { failed });
  });
  return { stop: () => bar.stop() };
}
