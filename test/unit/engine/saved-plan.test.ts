import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DsecError } from '../../../core/errors.js';
import { assertPlanFresh, loadPlan, savePlan } from '../../../core/engine/saved-plan.js';
import { FakeProvider } from './fake-provider.js';
import { LINEAGE, converge, freshState, planWith, project } from './fixtures.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'dsec-plan-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const codeOf = async (run: () => unknown): Promise<string | undefined> => {
  try {
    await run();
  } catch (error) {
    return error instanceof DsecError ? error.code : `not a DsecError: ${error}`;
  }
  return undefined;
};

describe('saved plans', () => {
  it('round-trips a plan through a file, operations and desired attributes included', async () => {
    const plan = await planWith(project(), new FakeProvider(), freshState());
    const file = path.join(dir, 'web.plan');
    await savePlan(plan, file);
    expect(await loadPlan(file)).toEqual(plan);
  });

  it('refuses a file that is not JSON or not a plan, naming the file', async () => {
    const file = path.join(dir, 'bad.plan');
    await writeFile(file, '{ nope');
    expect(await codeOf(() => loadPlan(file))).toBe('DSEC_PLAN_FILE');
    await writeFile(file, JSON.stringify({ format_version: '1.0', resource_changes: 'x' }));
    await expect(loadPlan(file)).rejects.toThrow(`could not read plan file ${file}: not a dsec plan:`);
    expect(await codeOf(() => loadPlan(path.join(dir, 'missing.plan')))).toBe('DSEC_PLAN_FILE');
  });

  it('refuses a tampered operation in an otherwise valid plan file', async () => {
    const plan = await planWith(project(), new FakeProvider(), freshState());
    const file = path.join(dir, 'web.plan');
    await savePlan(plan, file);
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.replace('"op":"create"', '"op":"explode"'));
    expect(await codeOf(() => loadPlan(file))).toBe('DSEC_PLAN_FILE');
  });

  it('refuses a plan made against an older serial of the state', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(project({ replicas: 5 }), provider, state);
    expect(() => assertPlanFresh(plan, state)).not.toThrow();
    const moved = { ...state, serial: state.serial + 1 };
    expect(await codeOf(() => assertPlanFresh(plan, moved))).toBe('DSEC_PLAN_STALE');
    expect(() => assertPlanFresh(plan, moved)).toThrow(
      `the saved plan was made against state lineage ${LINEAGE} serial ${state.serial}, but the state is now lineage ${LINEAGE} serial ${state.serial + 1}`,
    );
  });

  it('refuses a plan made against another lineage', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(project({ replicas: 5 }), provider, state);
    expect(await codeOf(() => assertPlanFresh(plan, { ...state, lineage: 'other' }))).toBe('DSEC_PLAN_STALE');
  });

  it('accepts a plan made before the state was ever written against a state still never written', async () => {
    const plan = await planWith(project(), new FakeProvider(), freshState('lineage-a'));
    expect(() => assertPlanFresh(plan, freshState('lineage-b'))).not.toThrow();
  });
});
