/**
 * The apply progress bar: one bar for all sandbox operations of the plan,
 * drawn only on a TTY and only when there is enough work to watch. It listens
 * on the `sandboxOperation` hook like any plugin would, so the engine knows
 * nothing about terminals.
 *
 * Other lines apply prints meanwhile (one per finished resource) must go
 * through `log`: written straight to the terminal they land on the bar's line
 * and the bar redraws over them.
 */
import cliProgress from 'cli-progress';
import type { Dsec } from '../dsec.js';
import type { Plan } from '../plan.js';

const PLUGIN_NAME = 'cli-progress';
/** Below this many sandbox operations the per-resource lines say enough. */
const MIN_OPERATIONS = 20;

export interface Progress {
  /** Print a line on stderr, above the bar while one is drawn. */
  log(line: string): void;
  /** Draw the final state and leave the bar on its own line. */
  stop(): void;
}

export function attachProgress(dsec: Dsec, plan: Plan, enabled: boolean): Progress {
  const total = plan.resource_changes.reduce((n, change) => n + (change.fleet?.operations.length ?? 0), 0);
  if (!enabled || total < MIN_OPERATIONS) return { log: (line) => void process.stderr.write(`${line}\n`), stop() {} };
  // A MultiBar of one bar, for its log(): lines are printed above the bar on
  // the next redraw. (A SingleBar also restores the cursor it saved at start
  // when it stops, which puts it back above every line printed since.)
  const bars = new cliProgress.MultiBar(
    {
      format: '  sandboxes [{bar}] {value}/{total} ({failed} failed) {eta_formatted} left',
      hideCursor: true,
      stream: process.stderr,
    },
    cliProgress.Presets.shades_classic,
  );
  let failed = 0;
  const bar = bars.create(total, 0, { failed });
  dsec.hooks.sandboxOperation.tap(PLUGIN_NAME, (_fleet, _operation, error) => {
    if (error) failed += 1;
    bar.increment(1, { failed });
  });
  return {
    log: (line) => bars.log(`${line}\n`),
    stop: () => {
      // stop() draws the bars but not the lines logged since the last redraw: redraw first.
      bars.update();
      bars.stop();
    },
  };
}
