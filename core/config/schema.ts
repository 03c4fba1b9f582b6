/**
 * Validation against schemas/dsec.schema.json, the single source of the
 * document's shape (editors complete dsec.yaml from it; the document types
 * are generated from it). ajv's findings become human Problems in
 * humanize.ts.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import schema from '../../schemas/dsec.schema.json' with { type: 'json' };
import { humanizeSchemaErrors } from './humanize.js';
import type { Problem } from './problems.js';

export { schema as documentSchema };

let compiled: ValidateFunction | undefined;

function validator(): ValidateFunction {
  if (!compiled) {
    const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, strictTypes: false });
    // `errorMessage` is the human "expected ..." phrase of a schema node. Editors
    // (VS Code, yaml-language-server) show it too; for ajv it is an annotation.
    ajv.addKeyword({ keyword: 'errorMessage', schemaType: 'string' });
    compiled = ajv.compile(schema);
  }
  return compiled;
}

/**
 * Every way `data` breaks the schema, as Problems. `sourceText` gives the
 * literal text of a scalar where the source has it (YAML), so a message can
 * say "got 1.0" where the parsed value is the number 1.
 */
export function validateDocumentSchema(
  data: unknown,
  sourceText?: (path: string) => string | undefined,
): Problem[] {
  const validate = validator();
  if (validate(data)) return [];
  return humanizeSchemaErrors(validate.errors ?? [], sourceText);
}
