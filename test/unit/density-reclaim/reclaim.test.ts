import { describe, expect, it } from 'vitest';
import { Dsec, isDsecError } from '../../../core/plugin-api.js';
import densityReclaim, { parseAlgorithms, parseMemoryStat, parseMmStat, parseProcSwaps } from '../../../plugins/density-reclaim/index.js';

describe('options', () => {
  it('refuses a swap without its size, an unknown compressor and an unknown option, all in one DSEC_PLUGIN_OPTIONS', () => {
    try {
      densityReclaim({ swap: { algorithm: 'gzip' }, zram: true } as never);
      expect.unreachable();
    } catch (error) {
      expect(isDsecError(error) && error.code).toBe('DSEC_PLUGIN_OPTIONS');
      const message = (error as Error).message;
      expect(message).toContain('plugin density-reclaim has invalid options: ');
      expect(message).toContain('unknown option zram (known: enabled, swap)');
      expect(message).toContain('option swap.zramMiB is required');
      expect(message).toContain('option swap.algorithm must be one of lz4, zstd, lzo-rle, got "gzip"');
    }
  });

  it('refuses a zram device smaller than 16 MiB or of a fractional size', () => {
    expect(() => densityReclaim({ swap: { zramMiB: 4 } })).toThrow('option swap.zramMiB must be at least 16, got 4');
    expect(() => densityReclaim({ swap: { zramMiB: 64.5 } })).toThrow('option swap.zramMiB must be an integer, got 64.5');
  });

  it('taps agentStarted only when swap is configured, and nothing when disabled', () => {
    expect(new Dsec().use(densityReclaim()).hooks.agentStarted.taps).toHaveLength(0);
    const withSwap = new Dsec().use(densityReclaim({ swap: { zramMiB: 64 } }));
    expect(withSwap.hooks.agentStarted.taps.map((tap) => tap.name)).toEqual(['density-reclaim']);
    expect(withSwap.hooks.paused.taps).toHaveLength(1);
    const off = new Dsec().use(densityReclaim({ enabled: false, swap: { zramMiB: 64 } }));
    expect([off.hooks.agentStarted.taps.length, off.hooks.paused.taps.length, off.hooks.resuming.taps.length]).toEqual([0, 0, 0]);
  });
});

describe('parsing the kernel\'s files', () => {
  it('reads memory.stat into numbers by name', () => {
    const stat = parseMemoryStat('cache 20381696\nrss 42348544\nswap 0\nhierarchical_memory_limit 268435456\ntotal_cache 20381696\ntotal_rss 42348544\ntotal_swap 4096\n');
    expect(stat).toMatchObject({ total_cache: 20381696, total_rss: 42348544, total_swap: 4096, hierarchical_memory_limit: 268435456 });
  });

  it('reads zram\'s mm_stat: stored, compressed and RAM used', () => {
    expect(parseMmStat('42340352   414680  1265664        0  1265664        0        0        0        0\n')).toEqual({
      origDataSize: 42340352,
      comprDataSize: 414680,
      memUsedTotal: 1265664,
      memLimit: 0,
      memUsedMax: 1265664,
      samePages: 0,
    });
    expect(() => parseMmStat('12 34')).toThrow('mm_stat reads "12 34": expected at least 6 numbers');
  });

  it('reads /proc/swaps, header skipped', () => {
    const swaps = parseProcSwaps('Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/zram1                              partition\t262140\t\t41344\t\t100\n');
    expect(swaps).toEqual([{ filename: '/dev/zram1', type: 'partition', sizeKiB: 262140, usedKiB: 41344, priority: 100 }]);
    expect(parseProcSwaps('Filename\tType\tSize\tUsed\tPriority\n')).toEqual([]);
  });

  it('lists the compressors a zram device offers, the current one unbracketed', () => {
    expect(parseAlgorithms('[lzo-rle] lzo lz4 \n')).toEqual(['lzo-rle', 'lzo', 'lz4']);
  });
});
