// A third-party dsec plugin: a policy that vetoes any plan whose fleets would
// hold more sandboxes in total than a budget. It taps the `reviewPlan` engine
// hook, exactly as a built-in plugin would, and imports only the public
// plugin API.
import { DsecError } from 'dsec/plugin';

const PLUGIN_NAME = 'replica-budget';

/** @param {{ maxReplicas?: number }} options */
export default function replicaBudget(options = {}) {
  const maxReplicas = options.maxReplicas ?? 10;
  if (!Number.isInteger(maxReplicas) || maxReplicas < 0) {
    throw new Error(`${PLUGIN_NAME}: maxReplicas must be a non-negative integer, got ${maxReplicas}`);
  }
  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      dsec.hooks.reviewPlan.tapPromise(PLUGIN_NAME, async (plan) => {
        if (plan.mode === 'destroy') return; // tearing down never exceeds a budget
        const total = Object.values(plan.desired.fleets).reduce((sum, fleet) => sum + fleet.replicas, 0);
        if (total > maxReplicas) {
          throw new DsecError('DSEC_PLAN_VETOED', {
            plugin: PLUGIN_NAME,
            message: `the fleets ask for ${total} sandboxes, over the budget of ${maxReplicas}`,
          });
        }
      });
    },
  };
}
