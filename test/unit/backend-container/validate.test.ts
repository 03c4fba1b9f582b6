/**
 * The container backend's engine-side check: a container fleet asking for
 * less memory than a container needs to start is a located config error at
 * load time, naming the fleet, the field and the minimum.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { isDsecError, type Diagnostic } from '../../../core/errors.js';
import { loadConfig } from '../../../core/config/index.js';
import backendContainer from '../../../plugins/backend-container/index.js';
import { MIN_CONTAINER_MEMORY_MIB } from '../../../plugins/backend-container/validate.js';
import { summary, TempProject, where } from '../config/fixtures.js';

function config(fleets: string): string {
  return `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
environments:
  shell:
    layers: [base]
fleets:
${fleets}`;
}

describe('backend-container validate', () => {
  let project: TempProject;
  afterEach(() => project?.remove());

  it('refuses a container fleet below the minimum memory, located at its resources.memory', async () => {
    project = new TempProject();
    const text = config(`  tiny:
    environment: shell
    backend: container
    replicas: 2
    resources: { memory: 16Mi }
  roomy:
    environment: shell
    replicas: 1
    resources: { memory: 32Mi }
`);
    const dsec = new Dsec().use(backendContainer());
    const error = await loadConfig(project.write('dsec.yaml', text), { dsec }).catch((thrown: unknown) => thrown);
    expect(isDsecError(error, 'DSEC_CONFIG_INVALID')).toBe(true);
    const diagnostics = (error as { diagnostics: Diagnostic[] }).diagnostics;
    expect(diagnostics.map(summary)).toEqual([`DSEC_CONFIG_INVALID_VALUE /fleets/tiny/resources/memory dsec.yaml:${where(text, 'memory: 16Mi', '16Mi')}`]);
    expect(diagnostics[0]!.message).toBe(
      "fleet 'tiny' asks for 16Mi of memory, but a container sandbox needs at least 32Mi to start (the runtime's init and the first exec run inside the limit); set resources.memory to 32Mi or more",
    );
  });

  it('leaves fleets of other backends, and container fleets at the minimum, alone', async () => {
    project = new TempProject();
    const text = config(`  vm:
    environment: shell
    backend: microvm
    replicas: 1
    resources: { memory: 16Mi }
  exact:
    environment: shell
    backend: container
    replicas: 1
    resources: { memory: ${MIN_CONTAINER_MEMORY_MIB}Mi }
`);
    const { model, warnings } = await loadConfig(project.write('dsec.yaml', text), { dsec: new Dsec().use(backendContainer()) });
    expect(Object.keys(model.fleets).sort()).toEqual(['exact', 'vm']);
    expect(warnings).toEqual([]);
  });
});
