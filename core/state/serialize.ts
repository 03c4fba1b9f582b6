/**
 * The state file's text. A state of 100,000 sandboxes is ~36 MB of JSON, and
 * apply writes it after every group of finished operations, so the text is
 * assembled from per-resource pieces cached by object identity: the state
 * mutators share every resource they do not change (the types are
 * readonly), so a write re-serializes only the fleets it touched.
 *
 * Layout: keys sorted within each resource; at the top, the serial and the
 * writer's version first, then the content (lineage, resources, forgotten).
 * "Did the content change?" compares the content part only.
 */
import type { ResourceState, StateFile } from '../plan.js';
import { sortKeys } from '../util/canonical-json.js';

const pieces = new WeakMap<object, string>();

function piece(resource: ResourceState): string {
  let text = pieces.get(resource);
  if (text === undefined) {
    // Indented to its depth in the file: "resources" -> address -> here.
    text = JSON.stringify(sortKeys(resource), null, 2).replace(/\n/g, '\n    ');
    pieces.set(resource, text);
  }
  return text;
}

/** Everything but the serial and the writer's version, as it appears in the file. */
export function stateContent(state: StateFile): string {
  const addresses = Object.keys(state.resources).sort();
  const resources =
    addresses.length === 0
      ? '{}'
      : `{\n${addresses.map((address) => `    ${JSON.stringify(address)}: ${piece(state.resources[address])}`).join(',\n')}\n  }`;
  const forgotten = state.forgotten ? `,\n  "forgotten": ${JSON.stringify(state.forgotten)}` : '';
  return `  "format_version": ${JSON.stringify(state.format_version)},\n  "lineage": ${JSON.stringify(state.lineage)},\n  "resources": ${resources}${forgotten}\n`;
}

export function serializeState(state: StateFile, content = stateContent(state)): string {
  return `{\n  "serial": ${JSON.stringify(state.serial)},\n  "dsec_version": ${JSON.stringify(state.dsec_version)},\n${content}}\n`;
}
