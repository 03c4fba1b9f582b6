/** The SDK's pure parts: the sandbox selector of pause/resume, and the spec `create` sends. */
import { describe, expect, it } from 'vitest';
import { sandboxSpec, sandboxTarget } from '../../../core/sdk/index.js';

describe('sandboxTarget', () => {
  it('takes one id, a list of ids, or ids and labels as they are', () => {
    expect(sandboxTarget('web-1')).toEqual({ ids: ['web-1'] });
    expect(sandboxTarget(['web-1', 'web-2'])).toEqual({ ids: ['web-1', 'web-2'] });
    expect(sandboxTarget({ labels: { job: 'r17' } })).toEqual({ labels: { job: 'r17' } });
    expect(sandboxTarget({ ids: ['a'], labels: { job: 'r17' } })).toEqual({ ids: ['a'], labels: { job: 'r17' } });
  });
});

describe('sandboxSpec', () => {
  const base = { backend: 'container', layers: [{ name: 'base', version: '1.0.0', digest: 'sha256:a' }] };

  it('carries lifetimes and density switches when given', () => {
    const spec = sandboxSpec({ ...base, ttl: { idleStopSeconds: 60 }, density: { memorySharing: true, reclaimOnPause: false } });
    expect(spec.ttl).toEqual({ idleStopSeconds: 60 });
    expect(spec.density).toEqual({ memorySharing: true, reclaimOnPause: false });
  });

  it('leaves them out when not, so the agent applies its defaults', () => {
    const spec = sandboxSpec(base);
    expect('ttl' in spec).toBe(false);
    expect('density' in spec).toBe(false);
  });
});
