/** The state store: what dsec owns, written atomically under a lock. */
export { LocalStateStore, emptyState, type LocalStateStoreOptions } from './state.js';
export { type StateSession, type StateMutator, type StateSink, GroupCommitStateSession } from './session.js';
export { type StateStore } from './store.js';
// EtcdStateStore lives in './etcd-store.js', imported from there on purpose:
// it loads the etcd client (gRPC), which a local-state CLI run need not pay for.
export { serializeState, stateContent } from './serialize.js';
export { type LockInfo, describeHolder } from './lock.js';
export { validateState } from './schema.js';
