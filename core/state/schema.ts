/**
 * The state file's schema (schemas/state.schema.json), compiled once. Reads
 * validate the whole file; writes validate the top level and only the
 * resources the write changed (resources are shared between versions of the
 * state, so one already checked is not checked again).
 */
import { compileSchema } from '../util/ajv.js';
import { readSchema } from '../util/package-files.js';
import type { StateFile } from '../plan.js';

type Validator = (value: unknown) => string | undefined;
let whole: Validator | undefined;
let resource: Validator | undefined;
const checked = new WeakSet<object>();

function validators(): { whole: Validator; resource: Validator } {
  if (!whole || !resource) {
    const schema = readSchema('state.schema.json');
    whole = compileSchema(schema);
    const properties = schema.properties as { resources: { additionalProperties: Record<string, unknown> } };
    resource = compileSchema({ ...properties.resources.additionalProperties, definitions: schema.definitions });
  }
  return { whole, resource };
}

/** Undefined when `value` is a valid state file, else the first problems in one line. */
export function validateState(value: unknown): string | undefined {
  return validators().whole(value);
}

/** The same verdict as validateState, checking only resources not seen valid before. */
export function validateStateChanges(state: StateFile): string | undefined {
  const { whole: validateWhole, resource: validateResource } = validators();
  const shell = validateWhole({ ...state, resources: {} });
  if (shell) return shell;
  for (const [address, item] of Object.entries(state.resources)) {
    if (checked.has(item)) continue;
    const problem = validateResource(item);
    if (problem) return `/resources/${address}${problem.startsWith('/') ? problem : ` ${problem}`}`;
    checked.add(item);
  }
  return undefined;
}
