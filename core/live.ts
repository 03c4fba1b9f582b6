/**
 * What is really there: the shapes the node agent speaks over its API and the
 * provider hands to the planner as the live view. Plain JSON-able data, in
 * four files that import only downwards (live-sandboxes.ts at the bottom);
 * everything else imports them from here.
 */
export * from './live-sandboxes.js';
export * from './live-calls.js';
export * from './live-pools.js';
export * from './live-process.js';
