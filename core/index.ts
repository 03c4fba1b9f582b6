/**
 * The package's public entry: `import { connect } from 'dsec'`.
 * Plugins import `dsec/plugin` instead (core/plugin-api.ts).
 */
export {
  connect,
  DsecClient,
  sandboxSpec,
  execRequest,
  capabilitiesOf,
  type ConnectOptions,
  type CreateSandboxInput,
  type SnapshotOptions,
  type WriteFileOptions,
} from './sdk/index.js';
export { DsecError, isDsecError, ERRORS, type ErrorCode, type Diagnostic, type SourceLocation } from './errors.js';
export { Dsec, type DsecPlugin, type DsecPluginModule } from './dsec.js';
export { STAGE, type Hooks, type Logger, type NodeContext, type SandboxContext, type BackendProbe, type PublishRequest } from './hooks.js';
export { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC } from './live.js';
export type * from './live.js';
export type * from './model.js';
export type * from './plan.js';
export type { Provider } from './provider.js';
export { DSEC_VERSION } from './version.js';
