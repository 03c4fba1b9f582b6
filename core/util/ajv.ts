/**
 * One Ajv instance for the engine's and the state's own schemas. A compiled
 * validator returns the first problems as one readable line, or undefined.
 */
import { Ajv, type ErrorObject } from 'ajv';

const ajv = new Ajv({ allErrors: true, strict: false });

export function formatAjvErrors(errors: readonly ErrorObject[] | null | undefined, limit = 3): string {
  const shown = (errors ?? [])
    .slice(0, limit)
    .map((error) => `${error.instancePath || '/'} ${error.message ?? 'is invalid'}`);
  const more = (errors?.length ?? 0) - shown.length;
  return more > 0 ? `${shown.join('; ')}; and ${more} more` : shown.join('; ');
}

export function compileSchema(schema: Record<string, unknown>): (value: unknown) => string | undefined {
  const validate = ajv.compile(schema);
  return (value) => (validate(value) ? undefined : formatAjvErrors(validate.errors));
}
