/**
 * Reaching a backend's tap for one operation. Backends tap HookMaps keyed by
 * their kind; an operation no tap of that kind answers is a clear error, not
 * a silent no-op.
 */
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import { BACKEND_OPERATIONS, type BackendOperation } from '../live.js';

export type BackendHookKind = 'provision' | 'probe' | BackendOperation;

/** The HookMap hook for a backend kind; none tapped -> DSEC_BACKEND_UNKNOWN (provision) or DSEC_BACKEND_UNSUPPORTED (the rest). */
export function backendHook<K extends BackendHookKind>(dsec: Dsec, kind: K, backend: string) {
  const hook = dsec.hooks[kind].get(backend) as ReturnType<Dsec['hooks'][K]['for']> | undefined;
  if (!hook || !hook.isUsed()) {
    if (kind === 'provision') throw new DsecError('DSEC_BACKEND_UNKNOWN', { backend, known: dsec.backends.join(', ') || 'none' });
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: kind });
  }
  return hook;
}

/** True when some tap of this backend kind answers `kind`. */
export function backendSupports(dsec: Dsec, kind: BackendHookKind, backend: string): boolean {
  const hook = dsec.hooks[kind].get(backend);
  return hook !== undefined && hook.isUsed();
}

/**
 * What each backend can do beyond create and destroy, from the taps it has
 * (never a list kept beside them that could drift): NodeInfo.capabilities.
 */
export function backendCapabilities(dsec: Dsec): Record<string, BackendOperation[]> {
  const capabilities: Record<string, BackendOperation[]> = {};
  for (const backend of dsec.backends) capabilities[backend] = BACKEND_OPERATIONS.filter((operation) => backendSupports(dsec, operation, backend));
  return capabilities;
}
