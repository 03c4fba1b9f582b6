/**
 * A fleet's backendOptions and an environment's disk image: parsed from
 * YAML and dsec.ts alike into the model and the sandbox spec, part of the
 * spec hash (a change replaces), wrong types reported where they are, and
 * the generic "this backend boots an image" rule a VM backend taps.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig, synthConfig } from '../../../core/config/index.js';
import { checkImageRequired } from '../../../core/config/backend-rules.js';
import { Dsec } from '../../../core/dsec.js';
import { forcingPaths, displayFleet, resolveFleet } from '../../../core/engine/fleet-attributes.js';
import { sandboxSpecFor } from '../../../core/engine/spec.js';
import { DEFINITIONS, loadErrors, summary, TempProject, where } from './fixtures.js';

const YAML = `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
  desktop:
    layers: [base]
    image: images/debian.qcow2
  plain-disk:
    layers: [base]
    image: { path: /var/lib/images/disk.bin, format: raw }
  img: { layers: [base], image: ./disk.img }
fleets:
  vms:
    environment: desktop
    backend: vm
    replicas: 1
    backendOptions: { display: vnc, memoryBalloon: true, devices: { gpu: virtio } }
  plain: { environment: shell, replicas: 1 }
`;

const TS = `import { App, Environment, Fleet, Layer } from ${JSON.stringify(DEFINITIONS)};

const app = new App();
const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
const shell = new Environment(app, 'shell', { layers: [base] });
const desktop = new Environment(app, 'desktop', { layers: [base], image: 'images/debian.qcow2' });
new Environment(app, 'plain-disk', { layers: [base], image: { path: '/var/lib/images/disk.bin', format: 'raw' } });
new Environment(app, 'img', { layers: [base], image: './disk.img' });
new Fleet(app, 'vms', { environment: desktop, backend: 'vm', replicas: 1, backendOptions: { display: 'vnc', memoryBalloon: true, devices: { gpu: 'virtio' } } });
new Fleet(app, 'plain', { environment: shell, replicas: 1 });
export default app;
`;

describe('backendOptions and disk images in the config', () => {
  let project: TempProject | undefined;
  afterEach(() => {
    project?.remove();
    project = undefined;
  });

  it('resolves an image path against the config folder, takes the format from the extension or from the long form, and keeps backendOptions', async () => {
    project = new TempProject();
    const { model } = await loadConfig(project.write('proj/dsec.yaml', YAML));
    expect(model.environments.desktop.image).toEqual({ path: project.file('proj/images/debian.qcow2'), format: 'qcow2' });
    expect(model.environments['plain-disk'].image).toEqual({ path: '/var/lib/images/disk.bin', format: 'raw' });
    expect(model.environments.img.image).toEqual({ path: project.file('proj/disk.img'), format: 'raw' });
    expect(model.environments.shell.image).toBeUndefined();
    expect(model.fleets.vms.backendOptions).toEqual({ devices: { gpu: 'virtio' }, display: 'vnc', memoryBalloon: true });
    expect(model.fleets.plain.backendOptions).toBeUndefined();
  });

  it('puts both into the sandbox spec and the spec hash, leaving the hash of a fleet without them as it was', async () => {
    project = new TempProject();
    const { model } = await loadConfig(project.write('dsec.yaml', YAML));
    const { vms, plain } = model.fleets;
    const spec = sandboxSpecFor(vms, model.environments.desktop, [], 'lineage', 'vms-1');
    expect(spec.backendOptions).toEqual({ devices: { gpu: 'virtio' }, display: 'vnc', memoryBalloon: true });
    expect(spec.image).toEqual({ path: project.file('images/debian.qcow2'), format: 'qcow2' });
    const plainSpec = sandboxSpecFor(plain, model.environments.shell, [], 'lineage', 'plain-1');
    expect('backendOptions' in plainSpec || 'image' in plainSpec).toBe(false);
    // The hash of a fleet without either is the one computed before they existed (empty options count as none).
    const emptyOptions = sandboxSpecFor({ ...plain, backendOptions: {} }, model.environments.shell, [], 'lineage', 'plain-1');
    expect(emptyOptions.labels['dsec.io/spec']).toBe(plainSpec.labels['dsec.io/spec']);
    const { backendOptions: _none, ...withoutField } = plain;
    expect(sandboxSpecFor(withoutField, model.environments.shell, [], 'lineage', 'plain-1').labels['dsec.io/spec']).toBe(plainSpec.labels['dsec.io/spec']);
    const otherOptions = sandboxSpecFor({ ...vms, backendOptions: { display: 'none' } }, model.environments.desktop, [], 'lineage', 'vms-1');
    expect(otherOptions.labels['dsec.io/spec']).not.toBe(spec.labels['dsec.io/spec']);
    const otherImage = sandboxSpecFor(vms, { ...model.environments.desktop, image: { path: '/other.qcow2', format: 'qcow2' } }, [], 'lineage', 'vms-1');
    expect(otherImage.labels['dsec.io/spec']).not.toBe(spec.labels['dsec.io/spec']);
  });

  it('shows both in the plan and names them as what forces a replace, also when one appears or goes away', async () => {
    project = new TempProject();
    const { model } = await loadConfig(project.write('dsec.yaml', YAML));
    const before = displayFleet(resolveFleet(model, model.fleets.vms, { 'base@1.0.0': 'sha256:a' }));
    expect(before.image).toEqual({ path: project.file('images/debian.qcow2'), format: 'qcow2' });
    expect(before.backendOptions).toEqual({ devices: { gpu: 'virtio' }, display: 'vnc', memoryBalloon: true });
    const changed = { ...model, fleets: { ...model.fleets, vms: { ...model.fleets.vms, backendOptions: { display: 'none' } } } };
    const after = displayFleet(resolveFleet(changed, changed.fleets.vms, { 'base@1.0.0': 'sha256:a' }));
    expect(forcingPaths(before, after)).toEqual([['backendOptions']]);
    const { backendOptions: _dropped, image: _image, ...bare } = before;
    expect(forcingPaths(bare, before)).toEqual([['image'], ['backendOptions']]);
  });

  it('synthesises the same model from dsec.ts as from dsec.yaml', async () => {
    project = new TempProject();
    project.write('package.json', '{ "type": "module" }\n');
    const fromTs = await loadConfig(project.write('dsec.ts', TS));
    const fromYaml = await loadConfig(project.write('dsec.yaml', YAML));
    expect(synthConfig(fromTs.model)).toBe(synthConfig(fromYaml.model));
  });

  it('reports wrong types where they are: options that are not an object, an image without a known extension, a bad format', async () => {
    project = new TempProject();
    const text = `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  a: { layers: [base], image: ./disk.vmdk }
  b: { layers: [base], image: { path: ./disk, format: vmdk } }
  c: { layers: [base], image: 42 }
fleets:
  web: { environment: a, replicas: 1, backendOptions: fast }
  api: { environment: b, replicas: 1, backendOptions: [1, 2] }
`;
    const diagnostics = await loadErrors(project.write('dsec.yaml', text));
    const byPath = new Map(diagnostics.map((diagnostic) => [diagnostic.path, diagnostic]));
    expect(summary(byPath.get('/environments/a/image')!)).toBe(`DSEC_CONFIG_INVALID_VALUE /environments/a/image dsec.yaml:${where(text, 'image: ./disk.vmdk', './disk.vmdk')}`);
    expect(byPath.get('/environments/a/image')!.message).toContain('ending in .qcow2, .raw or .img');
    expect(summary(byPath.get('/environments/b/image/format')!)).toBe(`DSEC_CONFIG_INVALID_VALUE /environments/b/image/format dsec.yaml:${where(text, 'format: vmdk', 'vmdk')}`);
    expect(byPath.get('/environments/b/image/format')!.message).toBe("expected one of 'qcow2', 'raw', got 'vmdk'");
    expect(byPath.get('/environments/c/image')!.message).toContain('disk image');
    expect(summary(byPath.get('/fleets/web/backendOptions')!)).toBe(`DSEC_CONFIG_INVALID_VALUE /fleets/web/backendOptions dsec.yaml:${where(text, 'backendOptions: fast', 'fast')}`);
    expect(byPath.get('/fleets/web/backendOptions')!.message).toContain('expected an object of options for the backend');
    expect(byPath.get('/fleets/api/backendOptions')).toBeDefined();
  });

  it('fails a vm fleet whose environment names no image, located at the fleet backend, when the backend taps the rule', async () => {
    project = new TempProject();
    const text = `version: 1
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
  desktop: { layers: [base], image: ./disk.qcow2 }
fleets:
  bare: { environment: shell, backend: vm, replicas: 1 }
  good: { environment: desktop, backend: vm, replicas: 1 }
  other: { environment: shell, replicas: 1 }
`;
    const dsec = new Dsec().use({
      name: 'vm-rules',
      apply(d) {
        d.hooks.validate.tap('vm-rules', (config, diagnostics) => diagnostics.push(...checkImageRequired(config, 'vm')));
      },
    });
    const error = (await loadConfig(project.write('dsec.yaml', text), { dsec }).catch((e: unknown) => e)) as { code: string; diagnostics: never[] };
    expect(error.code).toBe('DSEC_CONFIG_INVALID');
    const diagnostics = error.diagnostics as Parameters<typeof summary>[0][];
    expect(diagnostics.map(summary)).toEqual([`DSEC_CONFIG_MISSING_PROPERTY /fleets/bare/backend dsec.yaml:${where(text, 'backend: vm', 'vm')}`]);
    expect(diagnostics[0].message).toBe(
      "fleet 'bare' runs on backend vm, which boots a disk image, but environment 'shell' names none; add image: ./disk.qcow2 (or { path, format: qcow2 | raw }) to environment 'shell'",
    );
  });
});
