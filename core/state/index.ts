/** The state store: what dsec owns, written atomically under a lock. */
export { LocalStateStore, emptyState, type LocalStateStoreOptions } from './state.js';
export { type StateSession, type StateMutator } from './session.js';
export { serializeState, stateContent } from './serialize.js';
export { type LockInfo, describeHolder } from './lock.js';
export { validateState } from './schema.js';
