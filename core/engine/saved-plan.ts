/**
 * Saved plans (`dsec plan --out FILE`, `dsec apply FILE`). The file is the
 * whole Plan as JSON, operations and desired attributes included, so it
 * applies exactly without reading the config again. Before applying one the
 * caller checks it was made against the state as it is now.
 */
import { readFile } from 'node:fs/promises';
import { DsecError } from '../errors.js';
import type { Plan, StateFile } from '../plan.js';
import { writeFileAtomic } from '../state/files.js';
import { compileSchema } from '../util/ajv.js';
import { PLAN_FILE_SCHEMA } from './plan-file-schema.js';

let validatePlanFile: ReturnType<typeof compileSchema> | undefined;

export async function savePlan(plan: Plan, file: string): Promise<void> {
  // Written like the state (temp file, fsync, rename), with mode 0600: a plan
  // carries the environments' variables, which may be secrets.
  await writeFileAtomic(file, `${JSON.stringify(plan)}\n`);
}

export async function loadPlan(file: string): Promise<Plan> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new DsecError('DSEC_PLAN_FILE', { file, message: (error as Error).message }, { cause: error });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new DsecError('DSEC_PLAN_FILE', { file, message: `not JSON: ${(error as Error).message}` }, { cause: error });
  }
  validatePlanFile ??= compileSchema(PLAN_FILE_SCHEMA);
  const problem = validatePlanFile(value);
  if (problem) throw new DsecError('DSEC_PLAN_FILE', { file, message: `not a dsec plan: ${problem}` });
  return value as Plan;
}

const describe = (lineage: string, serial: number): string => `lineage ${lineage} serial ${serial}`;

/**
 * Refuse a saved plan made against another state (lineage) or an older
 * version of this one (serial). One exception: a plan made before the state
 * was ever written (serial 0, nothing in it) against a state still never
 * written; apply then takes the plan's lineage, which its sandboxes' labels carry.
 */
export function assertPlanFresh(plan: Plan, state: StateFile): void {
  const planned = plan.prior_state;
  const neverWritten = state.serial === 0 && Object.keys(state.resources).length === 0;
  if (neverWritten && planned.serial === 0) return;
  if (planned.lineage !== state.lineage || planned.serial !== state.serial) {
    throw new DsecError('DSEC_PLAN_STALE', {
      planned: describe(planned.lineage, planned.serial),
      current: describe(state.lineage, state.serial),
    });
  }
}
