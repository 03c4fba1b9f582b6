/** The engine's public surface: graph, planner, renderings, saved plans, apply. */
export {
  buildGraph,
  graphToDot,
  walkOrder,
  assertAcyclic,
  dependenciesOf,
  type Graph,
  type GraphNode,
} from './graph.js';
export { digestDeclaredLayers } from './layers.js';
export { fleetSpecHash, sandboxSpecFor, newSandboxId, type SpecIdentity } from './spec.js';
export { makePlan, indexOwnedSandboxes } from './planner.js';
export { capacityShortfalls, capacityWarnings, type CapacityShortfall } from './capacity.js';
export { renderPlan, planToJson, countChanges, planHasChanges, type ChangeCounts } from './render.js';
export { savePlan, loadPlan, assertPlanFresh } from './saved-plan.js';
export { applyPlan, type ApplyDeps, type ApplyResult } from './apply.js';
export { planProject, type PlanProjectArgs } from './engine.js';
export { reconcileState, liveViewFromState } from './refresh.js';
export { createLimiter, type Limiter } from './limiter.js';
export { canonicalJson } from '../util/canonical-json.js';
