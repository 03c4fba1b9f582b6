/**
 * Saved plans (`dsec plan --out FILE`, `dsec apply FILE`). The file is the
 * whole Plan as JSON, operations and desired attributes included, so it
 * applies exactly without reading the config again. Before applying one the
 * caller checks it was made against the state as it is now.
 */
import { randomBytes } from 'node:crypto';
import { open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { DsecError } from '../errors.js';
import type { Plan, StateFile } from '../plan.js';
import { compileSchema } from './ajv.js';
import { PLAN_FILE_SCHEMA } from './plan-file-schema.js';

let validatePlanFile: ReturnType<typeof compileSchema> | undefined;

export async function savePlan(plan: Plan, file: string): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${randomBytes(4).toString('hex')}.tmp`);
  // 0600: a plan carries the environments' variables, which may be secrets.
  const handle = await open(temp, 'wx', 0o600);
  try {
    await handle.writeFile(`${JSON.stringify(plan)}\n`);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  await rename(temp, file);
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
