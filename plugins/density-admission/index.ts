/**
 * density-admission: the node's overcommit policy.
 *
 *   admit         (STAGE.POLICY) refuses a sandbox whose CPU or memory
 *                 request does not fit in what the node still allocates,
 *                 with a reason naming the resource, the figures and the policy
 *   describeNode  adds allocatable, requested and the policy to NodeInfo, so
 *                 the engine can tell before apply that a fleet will not fit
 *   agentStarted  logs the policy once
 *
 * Concurrent creates are admitted in creation order: a sandbox counts only
 * the ones created before it (the agent lists them in that order, the new one
 * already there as `creating`), so two racing creates never both take the
 * last room.
 */
import { STAGE, type DsecPlugin, type NodeContext, type SandboxContext } from '../../core/plugin-api.js';
import { parseOptions, PLUGIN_NAME, type DensityAdmissionOptions } from './options.js';
import { allocatable, describePolicy, refusal, requested } from './policy.js';

export { PLUGIN_NAME, type DensityAdmissionOptions } from './options.js';

export default function densityAdmission(options?: DensityAdmissionOptions): DsecPlugin {
  const { enabled, policy } = parseOptions(options);
  const requestsOf = (sandboxes: readonly SandboxContext[]) =>
    requested(sandboxes.map((sandbox) => ({ status: sandbox.status, resources: sandbox.spec.resources })));
  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      if (!enabled) return;
      dsec.hooks.agentStarted.tapPromise({ name: PLUGIN_NAME, stage: STAGE.POLICY }, async (node: NodeContext) => {
        const limit = allocatable(node.capacity, policy);
        node.log.info(`${PLUGIN_NAME}: admitting up to ${limit.cpu} CPU and ${limit.memoryMiB} MiB (${describePolicy(policy)})`);
      });
      dsec.hooks.admit.tapPromise({ name: PLUGIN_NAME, stage: STAGE.POLICY }, async (sandbox) => {
        const already = requestsOf(createdBefore(sandbox));
        return refusal(sandbox.spec.resources, already, allocatable(sandbox.node.capacity, policy), policy);
      });
      dsec.hooks.describeNode.tapPromise({ name: PLUGIN_NAME, stage: STAGE.POLICY }, async (info, node) => ({
        ...info,
        allocatable: allocatable(node.capacity, policy),
        requested: requestsOf(node.sandboxes()),
        policy,
      }));
    },
  };
}

/** The node's sandboxes created before this one (all of them if it is not listed: it is first in line). */
function createdBefore(sandbox: SandboxContext): readonly SandboxContext[] {
  const all = sandbox.node.sandboxes();
  let at = all.indexOf(sandbox);
  if (at < 0) at = all.findIndex((other) => other.spec.id === sandbox.spec.id);
  return at < 0 ? all : all.slice(0, at);
}
