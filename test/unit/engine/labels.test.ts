/**
 * A fleet's labels through the engine: a change is an in-place update that
 * reaches every live sandbox (read back from the provider's view, which the
 * next plan then finds in step), a label changed on a live sandbox behind
 * dsec's back is drift, and dsec's own `dsec.io/` labels are never touched.
 */
import { describe, expect, it } from 'vitest';
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC } from '../../../core/live.js';
import type { ResourceChange } from '../../../core/plan.js';
import { converge, planWith, project } from './fixtures.js';

const webChange = (changes: readonly ResourceChange[]): ResourceChange => {
  const found = changes.find((item) => item.address === 'fleet.web');
  if (!found) throw new Error('no change for fleet.web');
  return found;
};

describe('planning a labels change', () => {
  it('updates every live sandbox in place, and the sandboxes then carry the new labels beside dsec\'s own', async () => {
    const { provider, state } = await converge(project({ fleet: { labels: { team: 'rl' } } }));
    const desired = project({ fleet: { labels: { team: 'eval', job: 'swe-17' } } });
    const plan = await planWith(desired, provider, state);
    const web = webChange(plan.resource_changes);
    expect(web).toMatchObject({ action: 'update', reason: 'update_labels', replacePaths: [] });
    expect(web.fleet!.summary).toMatchObject({ update: 4, replace: 0, create: 0 });
    expect(web.fleet!.operations.every((op) => op.op === 'update' && op.labels?.team === 'eval' && op.labels.job === 'swe-17')).toBe(true);

    const after = await converge(desired, provider, state);
    for (const sandbox of provider.sandboxes.values()) {
      expect(sandbox.labels).toMatchObject({ team: 'eval', job: 'swe-17', [LABEL_FLEET]: 'web' });
      expect(sandbox.labels[LABEL_LINEAGE]).toBe(state.lineage);
      expect(sandbox.labels[LABEL_SPEC]).toMatch(/^[0-9a-f]{64}$/);
    }
    const again = webChange((await planWith(desired, provider, after.state)).resource_changes);
    expect(again.action).toBe('no-op');
  });

  it('removes a label the fleet no longer declares from the live sandboxes', async () => {
    const { provider, state } = await converge(project({ fleet: { labels: { team: 'rl', tmp: 'x' } } }));
    await converge(project({ fleet: { labels: { team: 'rl' } } }), provider, state);
    for (const sandbox of provider.sandboxes.values()) {
      expect(sandbox.labels.tmp).toBeUndefined();
      expect(sandbox.labels.team).toBe('rl');
    }
  });

  it('shows a label changed on a live sandbox behind dsec\'s back as drift, and puts it back', async () => {
    const model = project({ fleet: { labels: { team: 'rl' } } });
    const { provider, state } = await converge(model);
    const victim = [...provider.sandboxes.values()][0];
    provider.sandboxes.set(victim.id, { ...victim, labels: { ...victim.labels, team: 'hacked' } });
    const web = webChange((await planWith(model, provider, state)).resource_changes);
    expect(web).toMatchObject({ action: 'update', reason: 'drift' });
    expect(web.fleet!.operations).toEqual([expect.objectContaining({ op: 'update', id: victim.id, labels: { team: 'rl' } })]);
    await converge(model, provider, state);
    expect(provider.sandboxes.get(victim.id)!.labels.team).toBe('rl');
  });
});
