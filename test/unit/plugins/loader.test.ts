/**
 * The plugin loader finds built-ins, paths and npm packages the same way, and
 * says which plugin failed and why.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_AGENT_PLUGINS, loadPlugins, mergePluginRefs } from '../../../core/plugins.js';

/** The defaults after the store and the backend (the density plugins), which every merge below keeps as they are. */
const DENSITY_DEFAULTS = DEFAULT_AGENT_PLUGINS.slice(3);

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
let dir: string;

function write(relative: string, text: string): void {
  const file = path.join(dir, relative);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
}

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'dsec-loader-'));
  write('plugins/factory.mjs', `export default (options) => ({ name: 'factory-' + (options.suffix ?? 'none'), apply() {} });`);
  write('plugins/object.mjs', `export default { name: 'plain-object', apply() {} };`);
  write('plugins/typed.ts', `const plugin: { name: string; apply(d: unknown): void } = { name: 'typed', apply() {} };\nexport default plugin;`);
  write('plugins/no-default.mjs', `export const plugin = { name: 'x', apply() {} };`);
  write('plugins/wrong-shape.mjs', `export default { name: 'no-apply' };`);
  write('plugins/throws.mjs', `throw new Error('boom at import');`);
  write('node_modules/dsec-plugin-esm/package.json', JSON.stringify({ name: 'dsec-plugin-esm', type: 'module', exports: { '.': { import: './main.js' } } }));
  write('node_modules/dsec-plugin-esm/main.js', `export default () => ({ name: 'from-esm-package', apply() {} });`);
  write('node_modules/@acme/dsec-policy/package.json', JSON.stringify({ name: '@acme/dsec-policy', main: 'index.cjs' }));
  write('node_modules/@acme/dsec-policy/index.cjs', `module.exports = { name: 'from-cjs-package', apply() {} };`);
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('plugin loader', () => {
  it('loads the built-ins by name, calling their factory with the options', async () => {
    const plugins = await loadPlugins([...DEFAULT_AGENT_PLUGINS, { name: 'backend-container', options: { defaultOutputCapBytes: 10 } }], dir);
    expect(plugins.map((plugin) => plugin.name)).toEqual([
      'storage-local',
      'backend-container',
      'backend-fncall',
      ...DENSITY_DEFAULTS.map((ref) => ref.name),
      'backend-container',
    ]);
  });

  it('reports invalid options of a built-in as DSEC_PLUGIN_OPTIONS', async () => {
    await expect(loadPlugins([{ name: 'backend-container', options: { runtime: 'docker' } }], dir)).rejects.toMatchObject({
      code: 'DSEC_PLUGIN_OPTIONS',
      message: expect.stringContaining('runtime must be "runc" or "crun"'),
    });
  });

  it('loads plugins by path relative to the base folder, JavaScript and TypeScript', async () => {
    const plugins = await loadPlugins(
      [
        { name: './plugins/factory.mjs', options: { suffix: 'a' } },
        { name: './plugins/object.mjs', options: {} },
        { name: path.join(dir, 'plugins/typed.ts'), options: {} },
      ],
      dir,
    );
    expect(plugins.map((plugin) => plugin.name)).toEqual(['factory-a', 'plain-object', 'typed']);
  });

  it('loads a TypeScript plugin from the compiled loader too (through tsx)', () => {
    const script = `import { loadPlugins } from ${JSON.stringify(path.join(REPO, 'dist/core/plugins.js'))};
      const [plugin] = await loadPlugins([{ name: './plugins/typed.ts', options: {} }], ${JSON.stringify(dir)});
      process.stdout.write(plugin.name);`;
    expect(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })).toBe('typed');
  });

  it('loads npm packages from the base folder, ESM-only and CommonJS', async () => {
    const plugins = await loadPlugins([{ name: 'dsec-plugin-esm', options: {} }, { name: '@acme/dsec-policy', options: {} }], dir);
    expect(plugins.map((plugin) => plugin.name)).toEqual(['from-esm-package', 'from-cjs-package']);
  });

  it('names the plugin that could not be imported', async () => {
    await expect(loadPlugins([{ name: './plugins/missing.mjs', options: {} }], dir)).rejects.toMatchObject({
      code: 'DSEC_PLUGIN_LOAD',
      message: `could not load plugin ./plugins/missing.mjs: no file ${path.join(dir, 'plugins/missing.mjs')}`,
    });
    await expect(loadPlugins([{ name: 'dsec-plugin-nowhere', options: {} }], dir)).rejects.toMatchObject({
      code: 'DSEC_PLUGIN_LOAD',
      message: expect.stringContaining('cannot find package dsec-plugin-nowhere'),
    });
    await expect(loadPlugins([{ name: './plugins/throws.mjs', options: {} }], dir)).rejects.toMatchObject({
      code: 'DSEC_PLUGIN_LOAD',
      message: 'could not load plugin ./plugins/throws.mjs: boom at import',
    });
  });

  it('refuses modules that are not plugins', async () => {
    await expect(loadPlugins([{ name: './plugins/no-default.mjs', options: {} }], dir)).rejects.toMatchObject({
      code: 'DSEC_PLUGIN_INVALID',
      message: 'plugin ./plugins/no-default.mjs is not a dsec plugin: the module has no default export',
    });
    await expect(loadPlugins([{ name: './plugins/wrong-shape.mjs', options: {} }], dir)).rejects.toMatchObject({ code: 'DSEC_PLUGIN_INVALID' });
    await expect(loadPlugins([{ name: './plugins/object.mjs', options: { x: 1 } }], dir)).rejects.toMatchObject({
      code: 'DSEC_PLUGIN_INVALID',
      message: expect.stringContaining('takes no options'),
    });
  });

  it('merges a config plugin list over the built-ins, replacing a built-in of the same name', () => {
    const merged = mergePluginRefs(DEFAULT_AGENT_PLUGINS, [
      { name: 'backend-container', options: { runtime: 'runc' } },
      { name: './policy.mjs', options: {} },
    ]);
    expect(merged).toEqual([
      { name: 'storage-local', options: {} },
      { name: 'backend-container', options: { runtime: 'runc' } },
      { name: 'backend-fncall', options: {} },
      ...DENSITY_DEFAULTS,
      { name: './policy.mjs', options: {} },
    ]);
  });

  it('replaces the default storage-local with a storage plugin the config names, instead of loading both', () => {
    const merged = mergePluginRefs(DEFAULT_AGENT_PLUGINS, [{ name: 'storage-3fs', options: { mount: '/mnt/3fs' } }]);
    expect(merged).toEqual([
      { name: 'storage-3fs', options: { mount: '/mnt/3fs' } },
      { name: 'backend-container', options: {} },
      { name: 'backend-fncall', options: {} },
      ...DENSITY_DEFAULTS,
    ]);
  });

  it('loads storage-3fs by its bare name, like every built-in', async () => {
    const [plugin] = await loadPlugins([{ name: 'storage-3fs', options: { mount: '/mnt/3fs' } }], process.cwd());
    expect(plugin.name).toBe('storage-3fs');
  });
});
