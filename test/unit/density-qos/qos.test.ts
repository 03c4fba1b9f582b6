/**
 * density-qos's decisions and report, for nodes that can and cannot do each
 * feature (pure logic), and its option checks.
 */
import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import densityQos from '../../../plugins/density-qos/index.js';
import { parseOptions } from '../../../plugins/density-qos/options.js';
import { decide, qosReport, unsupported, type QosSupport } from '../../../plugins/density-qos/qos.js';

const everything: QosSupport = { schedIdle: { ok: true }, coreScheduling: { ok: true } };
const noSmt: QosSupport = { schedIdle: { ok: true }, coreScheduling: { ok: false, reason: 'no SMT siblings on this machine' } };

describe('density-qos decisions', () => {
  it('gives best-effort sandboxes idle CPU and latency-sensitive ones core scheduling where the node can do both', () => {
    expect(decide('best-effort', everything)).toEqual({ traits: { idleCpu: true } });
    expect(decide('latency-sensitive', everything)).toEqual({ traits: { coreScheduling: true } });
  });

  it('leaves core scheduling off on a node without it, and says why', () => {
    expect(decide('latency-sensitive', noSmt)).toEqual({
      traits: {},
      missing: { trait: 'coreScheduling', reason: 'no SMT siblings on this machine' },
    });
    expect(decide('best-effort', noSmt)).toEqual({ traits: { idleCpu: true } });
  });

  it('leaves idle CPU off when the probe failed, rather than have the backend fail the create', () => {
    const failed = unsupported('the native probe failed: helper missing');
    expect(decide('best-effort', failed)).toEqual({ traits: {}, missing: { trait: 'idleCpu', reason: 'the native probe failed: helper missing' } });
  });

  it('reports each feature as available or unavailable with the reason', () => {
    expect(qosReport(everything)).toEqual({ coreScheduling: 'available', idleCpu: 'available' });
    expect(qosReport(noSmt)).toEqual({ coreScheduling: 'unavailable: no SMT siblings on this machine', idleCpu: 'available' });
    expect(qosReport({ schedIdle: { ok: false }, coreScheduling: { ok: true } }).idleCpu).toBe('unavailable: not supported here');
  });
});

describe('density-qos options', () => {
  it('is enabled by default and can be switched off', () => {
    expect(parseOptions(undefined)).toEqual({ enabled: true });
    expect(parseOptions({ enabled: false })).toEqual({ enabled: false });
  });

  it('refuses unknown keys and a non-boolean switch with DSEC_PLUGIN_OPTIONS listing both', () => {
    expect(() => parseOptions({ enabled: 'yes', coreSched: true })).toThrow(
      expect.objectContaining({
        code: 'DSEC_PLUGIN_OPTIONS',
        message: 'plugin density-qos has invalid options: unknown option coreSched (known: enabled); option enabled must be a boolean, got "yes"',
      }),
    );
  });

  it('taps nothing when disabled', () => {
    const dsec = new Dsec().use(densityQos({ enabled: false }));
    expect(dsec.hooks.prepare.taps).toHaveLength(0);
    expect(dsec.hooks.nodeUsage.taps).toHaveLength(0);
  });
});
