/** Types of scripts/gen-types.mjs, for the test that imports it (test/unit/config/generated-types.test.ts). */

/** schemas/dsec.schema.json, absolute. */
export declare const SCHEMA_FILE: string;
/** core/config/document.generated.ts, absolute. */
export declare const GENERATED_FILE: string;
/** The generated file's content, from the schema as it is on disk. */
export declare function generateDocumentTypes(): Promise<string>;
