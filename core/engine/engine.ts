/**
 * The plan pipeline the CLI and the SDK run: refresh -> layer digests ->
 * makePlan -> the `plan` hook (each plugin may refine) -> the `reviewPlan`
 * hook (a plugin may veto). Nothing here writes anything.
 */
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import type { ConfigModel } from '../model.js';
import type { Plan, PlanOptions, StateFile } from '../plan.js';
import type { Provider } from '../provider.js';
import { digestDeclaredLayers } from './layers.js';
import { makePlan } from './planner.js';
import { liveViewFromState } from './refresh.js';

export interface PlanProjectArgs {
  readonly config: ConfigModel;
  readonly provider: Provider;
  readonly state: StateFile;
  readonly dsec: Dsec;
  /**
   * `refresh: false` takes the live view from the state alone: no sandbox or
   * layer is listed, so drift goes unseen. The provider still digests the
   * declared layers' sources, which are config, not cluster. @default true
   */
  readonly options: PlanOptions & { readonly refresh?: boolean };
}

export async function planProject({ config, provider, state, dsec, options }: PlanProjectArgs): Promise<Plan> {
  const live = options.refresh === false ? liveViewFromState(state) : await provider.refresh();
  // A destroy needs no digests: nothing is published.
  const layerDigests = options.destroy ? {} : await digestDeclaredLayers(config, provider);
  const planned = makePlan({ config, state, live, layerDigests, options });
  const plan = await dsec.hooks.plan.promise(planned);
  await reviewPlan(dsec, plan);
  return plan;
}

/** Which reviewPlan tap is running, per hook table; the interceptor is added once. */
const runningReviewTap = new WeakMap<object, { name: string }>();

/** A veto that is not already a DsecError is reported as DSEC_PLAN_VETOED naming the plugin. */
async function reviewPlan(dsec: Dsec, plan: Plan): Promise<void> {
  const hook = dsec.hooks.reviewPlan;
  let running = runningReviewTap.get(hook);
  if (!running) {
    const tracker = { name: 'a plugin' };
    hook.intercept({ tap: (tap) => void (tracker.name = tap.name) });
    runningReviewTap.set(hook, tracker);
    running = tracker;
  }
  try {
    await hook.promise(plan);
  } catch (error) {
    if (error instanceof DsecError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    throw new DsecError('DSEC_PLAN_VETOED', { plugin: running.name, message }, { cause: error });
  }
}
