/** The document types are generated from the schema; the committed file must match a fresh generation. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generateDocumentTypes, GENERATED_FILE } from '../../../scripts/gen-types.mjs';

describe('core/config/document.generated.ts', () => {
  it('is what scripts/gen-types.mjs generates from schemas/dsec.schema.json now (run it after editing the schema)', async () => {
    const fresh = await generateDocumentTypes();
    expect(readFileSync(GENERATED_FILE, 'utf8')).toBe(fresh);
    expect(fresh).toContain('DO NOT EDIT');
  });
});
