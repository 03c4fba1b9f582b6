/** The state store: what dsec owns, written atomically under a lock. */
export { LocalStateStore, emptyState, type LocalStateStoreOptions } from './state.js';
export { type StateSession, type StateMutator, serializeState, stateContent } from './session.js';
export { type LockInfo, describeHolder } from './lock.js';
export { validateState } from './schema.js';
