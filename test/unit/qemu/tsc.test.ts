import { describe, expect, it } from 'vitest';
import { tscFromCpuinfo, tscFromKernelLog } from '../../../core/qemu/tsc.js';

describe('the host TSC rate', () => {
  it('prefers the refined calibration of the kernel log over the first detection', () => {
    const log = '[0.000000] tsc: Detected 2599.998 MHz processor\n[1.2] tsc: Refined TSC clocksource calibration: 2600.012 MHz\n';
    expect(tscFromKernelLog(log)).toBe(2_600_012);
    expect(tscFromKernelLog('[0.0] tsc: Detected 2599.998 MHz processor')).toBe(2_599_998);
    expect(tscFromKernelLog('nothing about clocks')).toBeUndefined();
  });

  it('reads cpu MHz from /proc/cpuinfo only when the TSC is constant', () => {
    const cpuinfo = (flags: string) => `processor\t: 0\ncpu MHz\t\t: 2599.998\nflags\t\t: fpu ${flags} tsc\n`;
    expect(tscFromCpuinfo(cpuinfo('constant_tsc nonstop_tsc'))).toBe(2_599_998);
    expect(tscFromCpuinfo(cpuinfo('pse'))).toBeUndefined();
  });
});
