/**
 * The full-VM backend's test image: the same builder the benchmarks use
 * (bench/lib is part of the compiled tree, test/ is not), re-exported under
 * the name tests import; and a sweep for qemu processes a failed test left.
 */
export * from '../../bench/lib/vm-image.js';
export { GUEST_AGENT_PORT } from '../../bench/lib/vm-image-parts.js';

export { killQemuUnder, qemuProcessesUnder } from '../../bench/lib/qemu-processes.js';
