/**
 * Config loading: find the config file of a folder, load and validate it
 * (YAML or TypeScript) into the model, print diagnostics, synthesise the
 * model as deterministic JSON.
 */
export { findConfigFile, CONFIG_FILE_NAMES } from './find.js';
export { loadConfig, type LoadOptions, type LoadedConfig } from './load.js';
export { formatDiagnostics, type FormatOptions } from './format.js';
export { synthConfig, stableStringify } from './synth.js';
export { documentSchema } from './schema.js';
export { DEFAULTS } from './build-model.js';
export type * from './document.generated.js';
