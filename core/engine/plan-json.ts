/**
 * The machine-readable plan (`dsec plan --json`, `dsec show --json`), shaped
 * like Terraform's `show -json` output and described by
 * schemas/plan.schema.json. Also the change counts the summary line and
 * `--detailed-exitcode` use.
 */
import { ACTION_JSON, type FleetSandboxSummary, type Plan } from '../plan.js';

export interface ChangeCounts {
  readonly add: number;
  readonly change: number;
  readonly destroy: number;
}

/** Terraform's counting: a replace is one to add and one to destroy. */
export function countChanges(plan: Plan): ChangeCounts {
  let add = 0;
  let change = 0;
  let destroy = 0;
  for (const { action } of plan.resource_changes) {
    if (action === 'create' || action === 'replace') add += 1;
    if (action === 'delete' || action === 'replace') destroy += 1;
    if (action === 'update') change += 1;
  }
  return { add, change, destroy };
}

export function planHasChanges(plan: Plan): boolean {
  return plan.resource_changes.some((change) => change.action !== 'no-op');
}

export function planToJson(plan: Plan): Record<string, unknown> {
  return {
    format_version: plan.format_version,
    dsec_version: plan.dsec_version,
    created_at: plan.created_at,
    mode: plan.mode,
    config_file: plan.config_file,
    prior_state: { lineage: plan.prior_state.lineage, serial: plan.prior_state.serial },
    applyable: planHasChanges(plan),
    resource_changes: plan.resource_changes.map((change) => ({
      address: change.address,
      type: change.type,
      name: change.name,
      change: {
        actions: [...ACTION_JSON[change.action]],
        before: change.before,
        after: change.after,
        replace_paths: change.replacePaths.map((path) => [...path]),
      },
      ...(change.reason ? { action_reason: change.reason } : {}),
      ...(change.fleet
        ? {
            fleet_summary: {
              ...summaryJson(change.fleet.summary),
              max_unavailable: change.fleet.maxUnavailable,
              adopted: change.fleet.adopt?.length ?? 0,
              forgotten: change.fleet.forget?.length ?? 0,
            },
          }
        : {}),
    })),
    warnings: [...plan.warnings],
  };
}

/** The summary in the JSON plan's spelling (snake_case), counts of plans saved before pools left out. */
function summaryJson(summary: FleetSandboxSummary): Record<string, number> {
  const { replaceWhenReleased, replaceClaimed, ...rest } = summary;
  const json: Record<string, number> = {};
  for (const [key, value] of Object.entries(rest)) if (value !== undefined) json[key] = value;
  if (replaceWhenReleased !== undefined) json.replace_when_released = replaceWhenReleased;
  if (replaceClaimed !== undefined) json.replace_claimed = replaceClaimed;
  return json;
}
