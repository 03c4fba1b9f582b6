/**
 * Resource addresses, the names plans, targets and the state use:
 * `layer.<name>@<version>`, `environment.<name>`, `fleet.<name>` and, for
 * `--replace`, `fleet.<name>[<sandbox id>]`.
 */
import { DsecError } from '../errors.js';
import type { ConfigModel, LayerModel } from '../model.js';

export type NodeType = 'layer' | 'environment' | 'fleet';

export const layerAddress = (ref: string): string => `layer.${ref}`;
export const environmentAddress = (name: string): string => `environment.${name}`;
export const fleetAddress = (name: string): string => `fleet.${name}`;
export const layerRef = (name: string, version: string): string => `${name}@${version}`;

export interface ParsedAddress {
  readonly type: NodeType;
  /** For layers: `name@version`, or just `name` when the address named no version. */
  readonly name: string;
  /** `fleet.web[web-abc12345]` names one sandbox. */
  readonly sandbox?: string;
}

const ADDRESS = /^(layer|environment|fleet)\.([^[\]]+)(?:\[([a-z0-9-]+)\])?$/;

export function parseAddress(address: string): ParsedAddress | undefined {
  const match = ADDRESS.exec(address);
  if (!match) return undefined;
  const [, type, name, sandbox] = match;
  if (sandbox !== undefined && type !== 'fleet') return undefined;
  return { type: type as NodeType, name, ...(sandbox !== undefined ? { sandbox } : {}) };
}

/** `name@version` split at its last `@`; a bare name has no version. */
export function splitLayerRef(ref: string): { name: string; version?: string } {
  const at = ref.lastIndexOf('@');
  return at > 0 ? { name: ref.slice(0, at), version: ref.slice(at + 1) } : { name: ref };
}

/**
 * The declared layer an environment's ref points at. The model keys layers by
 * name (one version per layer), so `python@3.11.9` must match the declared
 * version exactly; a bare `python` takes whichever version is declared.
 */
export function resolveLayerRef(config: ConfigModel, ref: string): LayerModel | undefined {
  const { name, version } = splitLayerRef(ref);
  const layer = config.layers[name];
  if (!layer || (version !== undefined && layer.version !== version)) return undefined;
  return layer;
}

export function requireLayerRef(config: ConfigModel, ref: string, usedBy: string): LayerModel {
  const layer = resolveLayerRef(config, ref);
  if (!layer)
    // The ref param carries who uses it: the catalogue message has no slot for it.
    if (!layer) throw new DsecError('DSEC_CONFIG_UNKNOWN_LAYER', { ref: `${ref} (used by ${usedBy})`, usedBy });
  return layer;
}
