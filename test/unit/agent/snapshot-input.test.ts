import { describe, expect, it } from 'vitest';
import { buildIdentity, stderrTail } from '../../../core/agent/build.js';
import { checkGcRequest } from '../../../core/agent/layer-admin.js';
import { checkSnapshotInput } from '../../../core/agent/snapshot.js';
import { DsecError } from '../../../core/errors.js';

const problemOf = (run: () => unknown): string => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(DsecError);
    expect((error as DsecError).code).toBe('DSEC_AGENT_REQUEST');
    return (error as DsecError).message;
  }
  throw new Error('expected the request to be refused');
};

describe('a snapshot request', () => {
  it('takes name@version, defaults the kind to workspace, and normalises the excluded paths', () => {
    expect(checkSnapshotInput({ as: 'solved@1.2.3-rc.1', exclude: ['/root/.token/', '//tmp/./cache', '/root/.token'] })).toEqual({
      name: 'solved',
      version: '1.2.3-rc.1',
      kind: 'workspace',
      exclude: ['/root/.token', '/tmp/cache'],
    });
  });

  it('refuses a bad ref, kind and exclude paths, with every problem at once', () => {
    const message = problemOf(() => checkSnapshotInput({ as: 'Solved@latest', kind: 'image', exclude: ['relative', '/', '/a/../etc/shadow', 7] }));
    expect(message).toContain('layer name "Solved" must be 1 to 63 lower-case letters');
    expect(message).toContain('version "latest" must be a semantic version');
    expect(message).toContain('kind must be one of base, workspace, toolkit, got "image"');
    for (const bad of ['"relative"', '"/"', '"/a/../etc/shadow"', '7']) expect(message).toContain(`exclude path ${bad} must be an absolute path`);
    expect(problemOf(() => checkSnapshotInput({}))).toBe('the node agent refused the request: as must be name@version, got undefined');
  });
});

describe('a gc request', () => {
  it('takes the refs to keep and a dry-run flag', () => {
    expect(checkGcRequest({ keep: ['a@1.0.0'], dryRun: true })).toEqual({ keep: ['a@1.0.0'], dryRun: true });
    expect(checkGcRequest({})).toEqual({ keep: [], dryRun: false });
    expect(problemOf(() => checkGcRequest({ keep: 'a@1.0.0' }))).toContain('keep must be a list of name@version');
  });
});

describe('a build identity', () => {
  it('changes with the parents, the steps, the env and the workdir, and only with them', () => {
    const source = { steps: ['make'], env: { A: '1' }, workdir: '/' };
    const identity = buildIdentity(['sha256:a'], source);
    expect(buildIdentity(['sha256:a'], { ...source, env: { A: '1' } })).toBe(identity);
    expect(buildIdentity(['sha256:b'], source)).not.toBe(identity);
    expect(buildIdentity(['sha256:a'], { ...source, steps: ['make install'] })).not.toBe(identity);
    expect(buildIdentity(['sha256:a'], { ...source, env: { A: '2' } })).not.toBe(identity);
    expect(buildIdentity(['sha256:a'], { ...source, workdir: '/src' })).not.toBe(identity);
  });

  it('keeps the last lines of a failing step\'s stderr', () => {
    const stderr = Array.from({ length: 30 }, (_, index) => `line ${index}`).join('\n');
    expect(stderrTail(stderr).split('\n')).toEqual(Array.from({ length: 20 }, (_, index) => `line ${index + 10}`));
    expect(stderrTail('x'.repeat(5000)).length).toBe(2003);
  });
});
