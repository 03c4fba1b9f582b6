import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../core/engine/limiter.js';
import { fleetSpecHash, newSandboxId, sandboxSpecFor } from '../../../core/engine/spec.js';
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC } from '../../../core/live.js';
import { environment, fleet } from './fixtures.js';

const identity = {
  backend: 'container',
  layers: [{ name: 'python', version: '3.11.9', digest: 'sha256:a' }],
  env: { A: '1', B: '2' },
  workdir: '/',
  user: 'root',
  network: 'none' as const,
  qos: 'best-effort' as const,
  memorySharing: false,
};

describe('fleetSpecHash', () => {
  it('does not depend on key order, but changes with anything that forces a replace', () => {
    const hash = fleetSpecHash(identity);
    expect(hash).toMatch(/^[0-9a-f]{64}$/);
    expect(fleetSpecHash({ ...identity, env: { B: '2', A: '1' } })).toBe(hash);
    expect(fleetSpecHash({ ...identity, qos: 'latency-sensitive' })).not.toBe(hash);
    expect(fleetSpecHash({ ...identity, backend: 'microvm' })).not.toBe(hash);
    expect(fleetSpecHash({ ...identity, layers: [{ ...identity.layers[0], digest: 'sha256:b' }] })).not.toBe(hash);
    // A version renamed over the same content replaces nothing.
    expect(fleetSpecHash({ ...identity, layers: [{ ...identity.layers[0], version: '3.11.10' }] })).toBe(hash);
  });
});

describe('sandboxSpecFor', () => {
  it('labels the sandbox with the lineage, the fleet and the spec hash, over any user label of the same name', () => {
    const web = fleet('web', 'py', { labels: { team: 'rl', [LABEL_LINEAGE]: 'spoofed' } });
    const spec = sandboxSpecFor(web, environment('py', []), identity.layers, 'lineage-1', 'web-abcdefgh');
    expect(spec.labels).toEqual({
      team: 'rl',
      [LABEL_LINEAGE]: 'lineage-1',
      [LABEL_FLEET]: 'web',
      [LABEL_SPEC]: fleetSpecHash({ ...identity, env: {} }),
    });
    expect(spec).toMatchObject({ id: 'web-abcdefgh', backend: 'container', resources: web.resources });
  });
});

describe('newSandboxId', () => {
  it('makes <fleet>-<8 random [a-z0-9]> ids of at most 63 characters, never one already taken', () => {
    const taken = new Set<string>();
    for (let i = 0; i < 2000; i += 1) expect(newSandboxId('web', taken)).toMatch(/^web-[a-z0-9]{8}$/);
    expect(taken.size).toBe(2000);
    const long = newSandboxId('a'.repeat(80));
    expect(long.length).toBeLessThanOrEqual(63);
    expect(long).toMatch(/^a+-[a-z0-9]{8}$/);
  });
});

describe('createLimiter', () => {
  it('runs at most n tasks at once and all of them eventually', async () => {
    const limit = createLimiter(2);
    let running = 0;
    let peak = 0;
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, index) =>
        limit(async () => {
          running += 1;
          peak = Math.max(peak, running);
          await new Promise((resolve) => setTimeout(resolve, 2));
          running -= 1;
          return index;
        }),
      ),
    );
    expect(peak).toBe(2);
    expect(results).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('refuses a parallelism that is not a positive integer', () => {
    expect(() => createLimiter(0)).toThrow(RangeError);
  });
});
