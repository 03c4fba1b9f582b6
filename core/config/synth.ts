/**
 * `dsec synth`: the model as deterministic JSON (sorted keys, 2-space
 * indent, trailing newline), so the same declaration gives byte-identical
 * output whether written in YAML or TypeScript, and output can be diffed in
 * review. `file` and `dir` are left out and paths are shown relative to the
 * config folder, so the output does not depend on where the project lives.
 */
import path from 'node:path';
import { stableStringify } from '../util/canonical-json.js';
import type { ConfigModel, LayerSource, PluginRef, ProviderModel } from '../model.js';

export { stableStringify };

export function synthConfig(model: ConfigModel): string {
  const { file: _file, dir, ...rest } = model;
  const relative = (target: string) => relativeTo(dir, target);
  const portable = {
    ...rest,
    provider: providerView(model.provider, relative),
    plugins: model.plugins.map((plugin): PluginRef =>
      path.isAbsolute(plugin.name) ? { ...plugin, name: relative(plugin.name) } : plugin,
    ),
    layers: Object.fromEntries(
      Object.entries(model.layers).map(([name, layer]) => [
        name,
        { ...layer, source: sourceView(layer.source, dir, relative) },
      ]),
    ),
  };
  return `${stableStringify(portable)}\n`;
}

function providerView(provider: ProviderModel, relative: (target: string) => string): ProviderModel {
  return provider.type === 'local'
    ? { ...provider, stateDir: relative(provider.stateDir) }
    : { ...provider, tokenFile: relative(provider.tokenFile) };
}

/** A busybox binary outside the project is a host path (`/bin/busybox`) and stays absolute. */
function sourceView(source: LayerSource, dir: string, relative: (target: string) => string): LayerSource {
  if (source.type === 'build' || source.type === 'published') return source;
  if (source.type === 'busybox' && !isInside(dir, source.path)) return source;
  return { ...source, path: relative(source.path) };
}

/** `./toolkit`, `../shared/x.tar.gz`, or `.` for the folder itself. */
export function relativeTo(dir: string, target: string): string {
  const relative = path.relative(dir, target).split(path.sep).join('/');
  if (relative === '') return '.';
  return relative.startsWith('../') || relative === '..' ? relative : `./${relative}`;
}

function isInside(dir: string, target: string): boolean {
  const relative = path.relative(dir, target);
  return relative !== '' && !relative.startsWith('..') && !path.isAbsolute(relative);
}
