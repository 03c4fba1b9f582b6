import { describe, expect, it } from 'vitest';
import { DsecError, isDsecError } from '../../../core/errors.js';
import {
  assertAcyclic,
  buildGraph,
  dependenciesOf,
  graphToDot,
  walkOrder,
  type Graph,
} from '../../../core/engine/graph.js';
import { config, environment, fleet, layer, project } from './fixtures.js';

const codeOf = (run: () => unknown): string | undefined => {
  try {
    run();
  } catch (error) {
    return error instanceof DsecError ? error.code : 'not a DsecError';
  }
  return undefined;
};

describe('buildGraph', () => {
  it('connects layers to environments to fleets', () => {
    const graph = buildGraph(project());
    expect([...graph.nodes.values()]).toEqual([
      { address: 'layer.python@3.11.9', type: 'layer', dependsOn: [] },
      { address: 'layer.tools@1.0.0', type: 'layer', dependsOn: [] },
      { address: 'environment.py', type: 'environment', dependsOn: ['layer.python@3.11.9', 'layer.tools@1.0.0'] },
      { address: 'fleet.web', type: 'fleet', dependsOn: ['environment.py'] },
    ]);
    expect([...dependenciesOf(graph, 'fleet.web')].sort()).toEqual(
      ['environment.py', 'fleet.web', 'layer.python@3.11.9', 'layer.tools@1.0.0'].sort(),
    );
  });

  it('walks every node after everything it depends on', () => {
    const order = walkOrder(buildGraph(project()));
    expect(order.indexOf('layer.tools@1.0.0')).toBeLessThan(order.indexOf('environment.py'));
    expect(order.indexOf('environment.py')).toBeLessThan(order.indexOf('fleet.web'));
    expect(order).toHaveLength(4);
  });

  it('rejects an environment naming a layer version that is not declared', () => {
    const model = config({
      layers: [layer('python', '3.11.9')],
      environments: [environment('py', ['python@3.12.0'])],
      fleets: [],
    });
    expect(codeOf(() => buildGraph(model))).toBe('DSEC_CONFIG_UNKNOWN_LAYER');
    expect(() => buildGraph(model)).toThrow('unknown layer python@3.12.0 (used by environment.py)');
  });

  it('rejects a fleet naming an environment that is not declared', () => {
    const model = config({ layers: [], environments: [], fleets: [fleet('web', 'nope')] });
    expect(codeOf(() => buildGraph(model))).toBe('DSEC_CONFIG_UNKNOWN_ENVIRONMENT');
  });

  it('names the cycle when the graph has one', () => {
    const graph: Graph = {
      nodes: new Map([
        ['environment.a', { address: 'environment.a', type: 'environment', dependsOn: ['environment.b'] }],
        ['environment.b', { address: 'environment.b', type: 'environment', dependsOn: ['environment.a'] }],
      ]),
    };
    let caught: unknown;
    try {
      assertAcyclic(graph);
    } catch (error) {
      caught = error;
    }
    expect(isDsecError(caught, 'DSEC_CONFIG_CYCLE')).toBe(true);
    expect((caught as Error).message).toBe('dependency cycle: environment.a -> environment.b -> environment.a');
  });

  it('renders a DOT digraph with one cluster per type and data-flow edges', () => {
    const dot = graphToDot(buildGraph(project()));
    expect(dot.startsWith('digraph dsec {')).toBe(true);
    expect(dot).toContain('subgraph "cluster_layer"');
    expect(dot).toContain('subgraph "cluster_fleet"');
    expect(dot).toContain('"layer.python@3.11.9" -> "environment.py";');
    expect(dot).toContain('"environment.py" -> "fleet.web";');
    expect(dot).toContain('shape = box3d');
    expect(dot.trimEnd().endsWith('}')).toBe(true);
  });
});
