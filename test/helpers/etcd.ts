/**
 * The tests' etcd: the same fixture the benchmarks use (bench/lib is part of
 * the compiled tree, test/ is not), re-exported under the name tests import.
 */
export * from '../../bench/lib/etcd-cluster.js';
