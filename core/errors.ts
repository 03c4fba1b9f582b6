/**
 * The one catalogue of dsec error codes. Every error a user can see carries a
 * code from here, so it can be searched for in docs/errors.md (which explains
 * cause and fix for each). Add new codes here and there, never inline.
 */

export const ERRORS = Object.freeze({
  // config ------------------------------------------------------------------
  DSEC_CONFIG_NOT_FOUND: 'no dsec.yaml or dsec.ts in {dir}',
  DSEC_CONFIG_PARSE: '{file}:{line}:{col}: {message}',
  DSEC_CONFIG_INVALID: 'the configuration has {count} error(s)',
  DSEC_CONFIG_UNKNOWN_LAYER: 'unknown layer {ref}',
  DSEC_CONFIG_UNKNOWN_ENVIRONMENT: 'unknown environment {name}',
  DSEC_CONFIG_DUPLICATE: 'duplicate {what} {name}',
  DSEC_CONFIG_CYCLE: 'dependency cycle: {cycle}',
  DSEC_CONFIG_TS_LOAD: 'could not load {file}: {message}',
  DSEC_CONFIG_AMBIGUOUS: 'both {first} and {second} are in {dir}; keep one of them',
  DSEC_CONFIG_INVALID_VALUE: '{path}: {message}',
  DSEC_CONFIG_INVALID_NAME: 'invalid name {name}: {message}',
  DSEC_CONFIG_UNKNOWN_PROPERTY: 'unknown property {name} at {path}',
  DSEC_CONFIG_MISSING_PROPERTY: 'missing required property {name} at {path}',
  DSEC_CONFIG_LAYER_ORDER: 'environment {name}: {message}',
  DSEC_CONFIG_VERSION_MISMATCH: 'layer {name} is declared at version {declared}, not {wanted}',
  /** Warnings: the config loads, but something in it is probably not what was meant. */
  DSEC_CONFIG_UNUSED_LAYER: 'layer {name} is declared but no environment uses it',
  DSEC_CONFIG_EMPTY_FLEET: 'fleet {name} has 0 replicas',
  DSEC_CONFIG_LAYER_CLASH: 'environment {name}: layers {lower} and {upper} both hold {count} path(s); {upper} wins by stack order',
  // plugins -----------------------------------------------------------------
  DSEC_PLUGIN_LOAD: 'could not load plugin {name}: {message}',
  DSEC_PLUGIN_INVALID: 'plugin {name} is not a dsec plugin: {message}',
  DSEC_PLUGIN_OPTIONS: 'plugin {name} has invalid options: {message}',
  DSEC_PLAN_VETOED: 'plugin {plugin} vetoed the plan: {message}',
  DSEC_PLAN_CLAIMED: '{address}: {count} sandbox(es) are claimed ({holders}); {action} would take them from their rollouts: release them first, or pass --replace-claimed',
  // state -------------------------------------------------------------------
  DSEC_STATE_LOCKED: 'the state is locked by {holder}',
  DSEC_STATE_STALE_LOCK: 'the state is locked by a process that is gone ({holder}); run: dsec force-unlock {id}',
  DSEC_STATE_CORRUPT: 'the state file {file} is not valid: {message}',
  DSEC_PLAN_STALE: 'the saved plan was made against state {planned}, but the state is now {current}',
  DSEC_PLAN_FILE: 'could not read plan file {file}: {message}',
  DSEC_STATE_NO_RESOURCE: 'no resource {address} in the state',
  DSEC_STATE_NOT_LOCKED: 'no state lock with id {id} to remove ({detail}); nothing was unlocked',
  DSEC_STATE_LOCK_LOST: 'the state lock {id} at {location} is no longer ours ({detail}); the write was refused and nothing was written',
  // layers and storage -------------------------------------------------------
  DSEC_LAYER_IMMUTABLE: 'layer {ref} is already published with digest {existing}; its content now has digest {digest}. Publish a new version.',
  DSEC_LAYER_SOURCE: 'layer {ref}: {message}',
  DSEC_LAYER_UNSAFE_ARCHIVE: 'layer {ref}: archive entry {entry} {problem}',
  DSEC_LAYER_IN_USE: 'layer {ref} is used by sandbox {id}',
  DSEC_LAYER_NOT_FOUND: 'layer {ref} is not published on this node',
  DSEC_LAYER_CHANGED: 'layer {ref} changed since the plan was made: planned digest {planned}, published {digest}; run plan again',
  DSEC_LAYER_DIGEST_MISMATCH: 'layer {ref} is published on this node with digest {published}, but the sandbox asks for {digest}; plan and apply again',
  DSEC_LAYER_STORE_CORRUPT: 'the layer store is damaged at {path}: {message}',
  DSEC_LAYER_CONTENT_MISMATCH: 'layer {ref}: {what} {path} does not match what was published (expected {expected}, found {actual}); it was changed or damaged in the store: unpublish and publish the layer again',
  DSEC_LAYER_MOUNT: 'layer {ref}: mounting {path} failed: {message}',
  DSEC_LAYER_SQUASH: 'cannot squash {layers}: {message}',
  DSEC_LAYER_NOT_PUBLISHED: 'layer {ref} is declared as published but is not in the store; make it first (dsec sandbox snapshot ID --as {ref}) or declare its source',
  DSEC_LAYER_BUILD: 'layer {ref}: build step {step} failed ({status}): {command}{stderr}',
  // agent and sandboxes ------------------------------------------------------
  DSEC_AGENT_UNREACHABLE: 'the node agent at {address} is not reachable: {message}',
  DSEC_AGENT_UNAUTHORIZED: 'the node agent at {address} refused the request: {message}',
  DSEC_AGENT_BAD_ANSWER: 'the node agent at {address} gave an answer that is not valid: {message}',
  DSEC_ETCD_UNREACHABLE: 'etcd is not reachable at {endpoints}: {message}',
  DSEC_PLACEMENT_FAILED: 'no node can take sandbox {id}: {reason}',
  DSEC_PROVIDER_UNSUPPORTED: '{operation} is not available with the {provider} provider: {reason}',
  DSEC_AGENT_START: 'the node agent did not start: {message}',
  DSEC_AGENT_REQUEST: 'the node agent refused the request: {message}',
  DSEC_SANDBOX_NOT_FOUND: 'no sandbox {id}',
  DSEC_SANDBOX_NOT_RUNNING: 'sandbox {id} is {status}, not running',
  DSEC_SANDBOX_BUSY: 'sandbox {id} cannot {operation} now: {reason}',
  DSEC_SANDBOX_CLAIMED: 'sandbox {id} is claimed by {holder}',
  DSEC_SANDBOX_NOT_CLAIMED: 'sandbox {id} is not claimed by {holder}: {why}',
  DSEC_POOL_NOT_FOUND: 'fleet {fleet} has no pool on node {node}: {why}',
  DSEC_POOL_AMBIGUOUS: 'fleet {fleet} has pools of {count} projects on node {node} (lineages {lineages}); name the lineage to acquire from',
  DSEC_POOL_EXHAUSTED: 'no sandbox of fleet {fleet} was free on node {node} within {waitedMs} ms: {ready} ready, {claimed} claimed{limit}, {creating} creating, {waiting} waiting{lastError}',
  DSEC_NATIVE_HELPER: 'the native helper {path} {problem}; run npm run build (scripts/setup.sh installs gcc)',
  DSEC_STORAGE_MISSING: 'no storage plugin answered {operation}; load one (e.g. storage-local)',
  DSEC_AGENT_INTERNAL: 'the node agent failed: {message}',
  DSEC_BACKEND_UNKNOWN: 'no plugin provides backend {backend} (have: {known})',
  DSEC_BACKEND_UNSUPPORTED: 'backend {backend} does not support {operation}',
  DSEC_BACKEND_FAILED: 'backend {backend} failed to {operation} sandbox {id}: {message}',
  DSEC_ADMISSION_REFUSED: 'sandbox {id} was refused by {plugin}: {reason}',
  DSEC_FILE_NOT_FOUND: 'sandbox {id} has no file {path}',
  DSEC_FILE_TOO_LARGE: 'file {path} in sandbox {id} is {size} bytes, more than the {limit} asked for',
  DSEC_FILE_INVALID: 'file {path} in sandbox {id}: {message}',
  DSEC_FUNCTION_NO_WORKERS: 'fleet {fleet} has no FnCall workers on {where}; apply a fleet with backend fncall first',
  DSEC_FUNCTION_INVALID: 'the task for fleet {fleet} is not valid: {message}',
  DSEC_FUNCTION_AMBIGUOUS: 'fleet {fleet} on {where} holds workers of {count} projects (lineages {lineages}); tasks would run in whichever environment is free, so none was run: give the fleets distinct names',
  DSEC_GUEST_UNREACHABLE: 'the guest agent of sandbox {id} does not answer: {message}',
  DSEC_GUEST_BOOT_FAILED: 'sandbox {id} did not boot: {message}',
  DSEC_GUEST_COMMAND_FAILED: 'the guest agent of sandbox {id} refused {command}: {message}',
  DSEC_GUEST_UNKNOWN_HANDLE: 'the guest agent of sandbox {id} has no process or session {handle}: {message}',
  DSEC_VM_IMAGE_INVALID: 'disk image {path} cannot be used: {message}',
  DSEC_VMM_UNAVAILABLE: '{vmm} cannot run here: {message}',
  DSEC_RUNTIME_MISSING: 'no OCI runtime found (looked for {looked}); run scripts/setup.sh',
  // apply -------------------------------------------------------------------
  DSEC_APPLY_PARTIAL: '{failed} of {total} action(s) failed; {succeeded} succeeded and are recorded in the state',
  DSEC_APPLY_DEPENDENCY: '{address} was not applied because {dependency} failed',
  DSEC_APPLY_FLEET: '{address}: {failed} of {total} sandbox operation(s) failed{skipped}; first: {first}',
  DSEC_USAGE: '{message}',
} as const);

export type ErrorCode = keyof typeof ERRORS;

/** Where in a config file a problem is. Lines and columns are 1-based. */
export interface SourceLocation {
  readonly file: string;
  readonly line: number;
  readonly col: number;
}

/** One problem found in a config: where, at which path in the document, what was expected. */
export interface Diagnostic {
  readonly code: ErrorCode;
  readonly severity: 'error' | 'warning';
  readonly message: string;
  /** JSON-pointer-like path in the document, e.g. `/fleets/web/replicas`. */
  readonly path: string;
  readonly location?: SourceLocation;
}

export function formatMessage(code: ErrorCode, params: Readonly<Record<string, unknown>>): string {
  return ERRORS[code].replace(/\{(\w+)\}/g, (whole, key: string) =>
    key in params ? String(params[key]) : whole,
  );
}

/** The error every dsec failure a user can act on is thrown as. */
export class DsecError extends Error {
  readonly code: ErrorCode;
  readonly params: Readonly<Record<string, unknown>>;
  /** Config errors carry every problem found, so they can be reported together. */
  readonly diagnostics: readonly Diagnostic[];

  constructor(
    code: ErrorCode,
    params: Readonly<Record<string, unknown>> = {},
    options: { diagnostics?: readonly Diagnostic[]; cause?: unknown } = {},
  ) {
    super(formatMessage(code, params), { cause: options.cause });
    this.name = 'DsecError';
    this.code = code;
    this.params = params;
    this.diagnostics = options.diagnostics ?? [];
  }

  toJSON(): Record<string, unknown> {
    return { code: this.code, message: this.message, diagnostics: this.diagnostics };
  }
}

export function isDsecError(error: unknown, code?: ErrorCode): error is DsecError {
  return error instanceof DsecError && (code === undefined || error.code === code);
}

/** The location formatted the way editors and CI annotate: `file:line:col`. */
export function formatLocation(location: SourceLocation | undefined): string {
  return location ? `${location.file}:${location.line}:${location.col}` : '';
}

/** A thrown DsecError as is; anything else as backend `backend`'s failure to `operation` sandbox `id` (DSEC_BACKEND_FAILED, the error kept as its cause). */
export function asBackendFailure(error: unknown, backend: string, operation: string, id: string): DsecError {
  if (error instanceof DsecError) return error;
  return new DsecError('DSEC_BACKEND_FAILED', { backend, operation, id, message: (error as Error).message }, { cause: error });
}

/** Run one step of a backend; what it throws that is not a DsecError becomes DSEC_BACKEND_FAILED (see asBackendFailure). */
export async function failAsBackend<T>(backend: string, operation: string, id: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw asBackendFailure(error, backend, operation, id);
  }
}
