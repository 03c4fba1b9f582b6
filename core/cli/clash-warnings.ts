/**
 * `dsec validate`'s path-clash warnings: two layers of one environment that
 * hold the same path (the upper one wins, as overlayfs stacks them). Only
 * checked when it is cheap and honest: the project's agent is already
 * running (validate never starts one) and every layer of the environment is
 * published there, so its listing can be read; the published content is
 * compared, which is the config's once applied. Anything not checked is said.
 */
import type { AgentClient } from '../agent/client.js';
import type { LayerListingEntry } from '../agent/layer-admin.js';
import { formatMessage, isDsecError, type Diagnostic, type SourceLocation } from '../errors.js';
import type { ConfigModel } from '../model.js';
import { findClashes } from './layer-listing.js';

/** Layers bigger than this are not listed just to warn. */
const MAX_ENTRIES_TO_LIST = 200_000;

export interface ClashCheck {
  readonly warnings: Diagnostic[];
  /** What was not checked, and why, for the user. */
  readonly notes: string[];
}

export async function clashWarnings(
  config: ConfigModel,
  connect: () => Promise<AgentClient>,
  locate: (path: string) => SourceLocation,
): Promise<ClashCheck> {
  const environments = Object.values(config.environments).filter((environment) => environment.layers.length > 1);
  if (environments.length === 0) return { warnings: [], notes: [] };
  let client: AgentClient;
  try {
    client = await connect();
  } catch (error) {
    if (isDsecError(error, 'DSEC_AGENT_UNREACHABLE')) {
      return { warnings: [], notes: ['path clashes between layers were not checked: the project\'s node agent is not running'] };
    }
    throw error;
  }
  const published = new Map((await client.listLayers()).map((record) => [`${record.name}@${record.version}`, record]));
  const listings = new Map<string, Promise<readonly LayerListingEntry[]>>();
  const listing = (ref: string): Promise<readonly LayerListingEntry[]> => {
    let found = listings.get(ref);
    if (!found) {
      const record = published.get(ref)!;
      found = client.layerListing(record.name, record.version).then((result) => result.entries);
      listings.set(ref, found);
    }
    return found;
  };
  const warnings: Diagnostic[] = [];
  const skipped: string[] = [];
  for (const environment of environments) {
    const records = environment.layers.map((ref) => published.get(ref));
    if (records.some((record) => !record || record.files > MAX_ENTRIES_TO_LIST)) {
      skipped.push(environment.name);
      continue;
    }
    const stack = await Promise.all(environment.layers.map(async (ref) => ({ ref, entries: await listing(ref) })));
    for (const clash of findClashes(stack)) {
      const path = `/environments/${environment.name}/layers/${clash.upperIndex}`;
      const shown = clash.paths.map((entry) => `/${entry}`).join(', ');
      const more = clash.count > clash.paths.length ? ', ...' : '';
      warnings.push({
        code: 'DSEC_CONFIG_LAYER_CLASH',
        severity: 'warning',
        message: `${formatMessage('DSEC_CONFIG_LAYER_CLASH', { name: environment.name, lower: clash.lower, upper: clash.upper, count: clash.count })}: ${shown}${more}`,
        path,
        location: locate(path),
      });
    }
  }
  const notes =
    skipped.length > 0
      ? [`path clashes not checked for environment(s) ${skipped.join(', ')}: some of their layers are not published yet (or too big to list)`]
      : [];
  return { warnings, notes };
}
