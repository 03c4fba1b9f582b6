import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { countChanges, planHasChanges, planToJson, renderPlan } from '../../../core/engine/render.js';
import type { Plan } from '../../../core/plan.js';
import { FakeProvider } from './fake-provider.js';
import { config, converge, environment, fleet, freshState, layer, planWith, project } from './fixtures.js';

const schema = JSON.parse(readFileSync(new URL('../../../schemas/plan.schema.json', import.meta.url), 'utf8'));
const validate = new Ajv({ allErrors: true }).compile(schema);

async function samplePlans(): Promise<Record<string, Plan>> {
  const fromEmpty = await planWith(project(), new FakeProvider(), freshState());
  const { provider, state } = await converge(project({ replicas: 4 }));
  const scaled = await planWith(project({ replicas: 6 }), provider, state);
  const moved = config({
    layers: [layer('python', '3.11.9'), layer('python3', '3.12.0'), layer('tools', '1.0.0', 'toolkit')],
    environments: [
      environment('py', ['python@3.11.9', 'tools@1.0.0']),
      environment('py312', ['python3@3.12.0', 'tools@1.0.0']),
    ],
    fleets: [fleet('web', 'py312', { replicas: 4 })],
  });
  const replaced = await planWith(moved, provider, state);
  const destroyed = await planWith(project(), provider, state, { destroy: true });
  const unchanged = await planWith(project({ replicas: 4 }), provider, state);
  return { fromEmpty, scaled, replaced, destroyed, unchanged };
}

describe('renderPlan', () => {
  it('shows a create with its symbol, the sandbox line and the summary', async () => {
    const { fromEmpty } = await samplePlans();
    const text = renderPlan(fromEmpty, { color: false });
    expect(text).toContain('  + create');
    expect(text).toContain('  + fleet.web');
    expect(text).toContain('  + layer.python@3.11.9');
    expect(text).toContain('  + layer.python@3.11.9  # will be published');
    expect(text).toContain('sandboxes: +4 create, ~0 update, -/+ 0 replace (batches of 1), -0 destroy');
    expect(text).toContain('Plan: 3 to add, 0 to change, 0 to destroy.');
    expect(text).not.toMatch(/\u001b\[/);
  });

  it('shows a replica change as one in-place update with the changed attribute', async () => {
    const { scaled } = await samplePlans();
    const text = renderPlan(scaled, { color: false });
    expect(text).toContain('  ~ fleet.web  # will be updated in-place');
    expect(text.match(/fleet\.web/g)).toHaveLength(1);
    expect(text).toMatch(/~ replicas: +4 -> 6/);
    expect(text).toContain('sandboxes: +2 create, ~0 update, -/+ 0 replace (batches of 1), -0 destroy; 4 unchanged');
    expect(text).toContain('Plan: 0 to add, 1 to change, 0 to destroy.');
  });

  it('marks the attribute that forces a replacement', async () => {
    const { replaced } = await samplePlans();
    const text = renderPlan(replaced, { color: false });
    expect(text).toContain('-/+ fleet.web  # 4 sandbox(es) must be replaced');
    expect(text).toMatch(/~ environment: +"py" -> "py312" # forces replacement/);
    expect(text).toContain('-/+ 4 replace (batches of 1)');
    expect(text).toContain('Plan: 2 to add, 0 to change, 1 to destroy.');
  });

  it('shows a destroy with minus signs', async () => {
    const { destroyed } = await samplePlans();
    const text = renderPlan(destroyed, { color: false });
    expect(text).toContain('  - fleet.web');
    expect(text).toContain('  - layer.tools@1.0.0  # will be unpublished');
    expect(text).toContain('Plan: 0 to add, 0 to change, 3 to destroy.');
  });

  it('says there is nothing to do when nothing changes', async () => {
    const { unchanged } = await samplePlans();
    expect(planHasChanges(unchanged)).toBe(false);
    expect(renderPlan(unchanged, { color: false })).toContain(
      'No changes. Your infrastructure matches the configuration.',
    );
  });

  it('colours the symbols only when asked to', async () => {
    const { fromEmpty } = await samplePlans();
    expect(renderPlan(fromEmpty, { color: true })).toContain('\u001b[32m  +\u001b[39m');
  });

  it('counts a replace as one to add and one to destroy', async () => {
    const { replaced } = await samplePlans();
    expect(countChanges(replaced)).toEqual({ add: 2, change: 0, destroy: 1 });
  });
});

describe('planToJson', () => {
  it('produces JSON that validates against schemas/plan.schema.json for every kind of plan', async () => {
    for (const [name, plan] of Object.entries(await samplePlans())) {
      const json = JSON.parse(JSON.stringify(planToJson(plan)));
      const valid = validate(json);
      expect(validate.errors ?? [], name).toEqual([]);
      expect(valid).toBe(true);
    }
  });

  it("uses Terraform's action lists and carries the fleet summary", async () => {
    const { replaced, scaled } = await samplePlans();
    const fleetChange = (plan: Plan) =>
      (planToJson(plan).resource_changes as Record<string, any>[]).find((item) => item.address === 'fleet.web')!;
    expect(fleetChange(replaced).change.actions).toEqual(['delete', 'create']);
    expect(fleetChange(replaced).change.replace_paths).toContainEqual(['environment']);
    expect(fleetChange(replaced).action_reason).toBe('replace_because_cannot_update');
    expect(fleetChange(scaled).change.actions).toEqual(['update']);
    expect(fleetChange(scaled).fleet_summary).toMatchObject({ desired: 6, live: 4, create: 2, max_unavailable: 1 });
  });
});
