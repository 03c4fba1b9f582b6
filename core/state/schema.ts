/** The state file's schema (schemas/state.schema.json), compiled once. */
import { compileSchema } from '../engine/ajv.js';
import { readSchema } from '../engine/package-files.js';

let validate: ((value: unknown) => string | undefined) | undefined;

/** Undefined when `value` is a valid state file, else the first problems in one line. */
export function validateState(value: unknown): string | undefined {
  validate ??= compileSchema(readSchema('state.schema.json'));
  return validate(value);
}
