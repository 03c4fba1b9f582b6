/**
 * Takes the etcd state lock and holds it until killed, for the "crashed
 * holder" tests. Prints the LockInfo as one JSON line once the lock is held.
 *
 *   node --import tsx test/helpers/etcd-lock-holder.ts ENDPOINTS KEY PREFIX TTL_SECONDS
 */
import { connectEtcd } from '../../core/cluster/etcd.js';
import { EtcdStateStore } from '../../core/state/etcd-store.js';

const [endpoints = '', key = 'default', prefix = '/dsec', ttl = '2'] = process.argv.slice(2);
const client = await connectEtcd(endpoints.split(','));
const store = new EtcdStateStore(client, key, { prefix, leaseTtlSeconds: Number(ttl) });
const session = await store.lock({ command: 'dsec apply (lock holder)' });
process.stdout.write(`${JSON.stringify(session.lock)}\n`);
setInterval(() => undefined, 60_000);
