/**
 * The agent re-checks what callers send and reports every problem at once.
 */
import { describe, expect, it } from 'vitest';
import { checkExecRequest, checkResources, checkSpec } from '../../../core/agent/validate.js';

describe('agent request validation', () => {
  it('fills the defaults of a minimal spec', () => {
    expect(checkSpec({ id: 'a-1', backend: 'container', layers: [{ name: 'b', version: '1.0.0', digest: 'sha256:x' }] })).toEqual({
      id: 'a-1',
      backend: 'container',
      layers: [{ name: 'b', version: '1.0.0', digest: 'sha256:x' }],
      env: {},
      workdir: '/',
      user: 'root',
      resources: { cpu: 1, memoryMiB: 256, pids: 256 },
      network: 'none',
      qos: 'best-effort',
      labels: {},
    });
  });

  it('refuses ids that are not DNS-label-like', () => {
    for (const id of ['', 'Upper', '-lead', 'a'.repeat(64), 'a_b', '../x']) {
      expect(() => checkSpec({ id, backend: 'container', layers: [] }), id).toThrow(expect.objectContaining({ code: 'DSEC_AGENT_REQUEST' }));
    }
  });

  it('lists every problem of a spec in one error', () => {
    expect(() =>
      checkSpec({ id: 'ok', backend: '', layers: [{}], workdir: 'rel', user: 'a b', network: 'host', qos: 'gold', env: { '1X': 'y' }, resources: { cpu: 0, pids: 1.5, gpu: 1 } }),
    ).toThrow(
      'the node agent refused the request: backend must be a non-empty string; layers[0] must be {name, version, digest}; workdir must be an absolute path; ' +
        'user must be a name or uid, optionally :group; network must be "none", not "host"; qos must be "best-effort" or "latency-sensitive"; ' +
        'env name "1X" is not a valid variable name; resources: unknown field(s) gpu; resources.cpu must be a number > 0; resources.pids must be a whole number >= 1',
    );
  });

  it('merges a partial resources change over the current one', () => {
    expect(checkResources({ memoryMiB: 512 }, { cpu: 2, memoryMiB: 256, pids: 64 })).toEqual({ cpu: 2, memoryMiB: 512, pids: 64 });
  });

  it('refuses an exec that would capture more output than the agent can hold in memory and answer with', () => {
    expect(checkExecRequest({ cmd: ['yes'], maxOutputBytes: 32 * 1024 * 1024 })).toMatchObject({ maxOutputBytes: 32 * 1024 * 1024 });
    expect(() => checkExecRequest({ cmd: ['yes'], maxOutputBytes: 700 * 1024 * 1024 })).toThrow(
      expect.objectContaining({ code: 'DSEC_AGENT_REQUEST', message: expect.stringContaining('maxOutputBytes must be at most 33554432 (32 MiB per stream)') }),
    );
  });

  it('refuses an exec timeout longer than a timer can hold, which would fire at once', () => {
    expect(checkExecRequest({ cmd: ['sleep', '1'], timeoutMs: 2_147_483_647 })).toMatchObject({ timeoutMs: 2_147_483_647 });
    expect(() => checkExecRequest({ cmd: ['sleep', '1'], timeoutMs: 3_000_000_000 })).toThrow(
      expect.objectContaining({ code: 'DSEC_AGENT_REQUEST', message: expect.stringContaining('timeoutMs must be at most 2147483647') }),
    );
  });

  it('refuses exec arguments, env and workdir that no process can be given (NUL bytes, bad names) as a bad request, not a backend failure', () => {
    expect(() => checkExecRequest({ cmd: ['echo', 'a\0b'], env: { '': 'x', 'A=B': 'c', OK: 'v\0w' }, workdir: '/tmp\0x' })).toThrow(
      'the node agent refused the request: cmd must not hold NUL bytes; env name "" is not a valid variable name; ' +
        'env name "A=B" is not a valid variable name; env value of OK holds a NUL byte; workdir must not hold NUL bytes',
    );
    expect(checkExecRequest({ cmd: ['sh', '-c', 'echo "$X"'], env: { X: "a'b\"c$(id)\n", 'dotted.name-ok': '1' } })).toMatchObject({
      env: { X: "a'b\"c$(id)\n", 'dotted.name-ok': '1' },
    });
  });

  it('checks exec requests', () => {
    expect(checkExecRequest({ cmd: ['ls'], timeoutMs: 5 })).toEqual({ cmd: ['ls'], timeoutMs: 5 });
    expect(() => checkExecRequest({ cmd: 'ls', maxOutputBytes: -1, workdir: 'tmp' })).toThrow(
      'cmd must be a non-empty array of strings; workdir must be an absolute path; maxOutputBytes must be a whole number >= 0',
    );
  });
});
