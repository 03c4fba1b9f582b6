import { type ChildProcess, spawn } from 'node:child_process';
import { hostname } from 'node:os';
import path from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectEtcd } from '../../../core/cluster/etcd.js';
import { clusterKeys } from '../../../core/cluster/keys.js';
import type { StateFile } from '../../../core/plan.js';
import { EtcdStateStore } from '../../../core/state/etcd-store.js';
import type { LockInfo, StateSession } from '../../../core/state/index.js';
import { EtcdCluster, freePorts } from '../../helpers/etcd.js';
import { caught, withLayer } from '../../helpers/state.js';

const HOLDER = path.resolve(import.meta.dirname, '../../helpers/etcd-lock-holder.ts');
const PREFIX = '/dsec-test';

let etcd: EtcdCluster;
let client: Etcd3;
const sessions: StateSession[] = [];
const children: ChildProcess[] = [];
let keyCount = 0;
/** A fresh state key per test, so tests share one etcd without seeing each other. */
const freshKey = (): string => `t${++keyCount}-${process.pid}`;

beforeAll(async () => {
  etcd = await EtcdCluster.start({ members: 1 });
  client = await connectEtcd(etcd.endpoints);
});
afterEach(async () => {
  for (const session of sessions.splice(0)) await session.release().catch(() => undefined);
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});
afterAll(async () => {
  try {
    client?.close();
  } finally {
    await etcd?.stop();
  }
});


async function lock(store: EtcdStateStore, command = 'dsec apply'): Promise<StateSession> {
  const session = await store.lock({ command });
  sessions.push(session);
  return session;
}

/** Start the lock-holder script; resolves with its LockInfo once it holds the lock. */
function spawnHolder(key: string, ttlSeconds: number): Promise<{ child: ChildProcess; info: LockInfo }> {
  const child = spawn(process.execPath, ['--import', 'tsx', HOLDER, etcd.endpoints.join(','), key, PREFIX, String(ttlSeconds)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve({ child, info: JSON.parse(out.split('\n')[0]) as LockInfo });
    });
    child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('exit', (code) => reject(new Error(`the lock holder exited (${code}): ${err}`)));
  });
}

describe('EtcdStateStore.read', () => {
  it('reads a key never written as a fresh state with serial 0', async () => {
    const store = new EtcdStateStore(client, freshKey(), { prefix: PREFIX });
    const state = await store.read();
    expect(state).toMatchObject({ format_version: 1, serial: 0, resources: {} });
    expect(store.location).toBe(`etcd:${PREFIX}/state/${store.key}`);
  });

  it('refuses a stored state that is not valid JSON, naming the etcd key', async () => {
    const store = new EtcdStateStore(client, freshKey(), { prefix: PREFIX });
    await client.put(clusterKeys(PREFIX).state(store.key)).value('{"format_version": 1, ');
    const error = await caught(() => store.read());
    expect(error.code).toBe('DSEC_STATE_CORRUPT');
    expect(error.message).toContain(`the state file etcd:${PREFIX}/state/${store.key} is not valid:`);
    const lockError = await caught(() => store.lock({ command: 'dsec apply' }));
    expect(lockError.code).toBe('DSEC_STATE_CORRUPT');
    expect(await store.lockHolder()).toBeUndefined();
  });
});

describe('EtcdStateStore sessions', () => {
  it('writes the state to etcd, bumps the serial only on change, and another store reads it back', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX });
    const session = await lock(store);
    const lineage = session.state.lineage;
    expect((await session.write(withLayer('a'))).serial).toBe(1);
    expect((await session.write(withLayer('b'))).serial).toBe(2);
    expect((await session.write((state) => ({ ...state }))).serial).toBe(2);
    const concurrent = await Promise.all([session.write(withLayer('c')), session.write(withLayer('d'))]);
    expect(concurrent.map((state) => state.serial)).toEqual([3, 3]);
    await session.release();

    const read = await new EtcdStateStore(client, key, { prefix: PREFIX }).read();
    expect(read).toMatchObject({ lineage, serial: 3 });
    expect(Object.keys(read.resources).sort()).toEqual(['layer.a@1.0.0', 'layer.b@1.0.0', 'layer.c@1.0.0', 'layer.d@1.0.0']);
    const again = await lock(store);
    expect(again.state).toMatchObject({ lineage, serial: 3 });
  });

  it('refuses a second lock while the first is held, naming the holder, and grants it after the release', async () => {
    const store = new EtcdStateStore(client, freshKey(), { prefix: PREFIX });
    const first = await lock(store, 'dsec apply');
    const error = await caught(() => store.lock({ command: 'dsec destroy' }));
    expect(error.code).toBe('DSEC_STATE_LOCKED');
    expect(error.message).toContain(`the state is locked by pid ${process.pid} on ${hostname()} running \`dsec apply\``);
    expect(error.message).toContain(`(lock id ${first.lock.id})`);
    expect(error.params).toMatchObject({ id: first.lock.id, command: 'dsec apply' });
    expect(await store.lockHolder()).toEqual(first.lock);

    await first.release();
    expect(await store.lockHolder()).toBeUndefined();
    const second = await lock(store, 'dsec destroy');
    expect(second.lock.command).toBe('dsec destroy');
  });

  it('waits for the lock up to lockTimeoutMs and takes it once the holder releases', async () => {
    const key = freshKey();
    const first = await lock(new EtcdStateStore(client, key, { prefix: PREFIX }));
    setTimeout(() => void first.release(), 300);
    const waiting = new EtcdStateStore(client, key, { prefix: PREFIX, lockTimeoutMs: 5000 });
    const second = await lock(waiting, 'dsec refresh');
    expect((await waiting.lockHolder())?.id).toBe(second.lock.id);
  });

  it('frees the lock of a holder killed with SIGKILL once its lease lapses', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX });
    const { child, info } = await spawnHolder(key, 2);
    expect((await store.lockHolder())?.id).toBe(info.id);
    const locked = await caught(() => store.lock({ command: 'dsec apply' }));
    expect(locked.code).toBe('DSEC_STATE_LOCKED');
    expect(locked.message).toContain(`pid ${child.pid}`);
    expect(locked.message).toMatch(/; if that process is gone, the lock lapses within [12] s$/);

    const killedAt = Date.now();
    child.kill('SIGKILL');
    const session = await lock(new EtcdStateStore(client, key, { prefix: PREFIX, lockTimeoutMs: 10_000 }));
    const waited = Date.now() - killedAt;
    expect(waited).toBeLessThan(8000);
    expect(session.lock.pid).toBe(process.pid);
  });

  it('refuses a write once the session lease was revoked, and writes nothing', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX });
    const session = await lock(store);
    await session.write(withLayer('a'));
    const lockKv = (await client.get(clusterKeys(PREFIX).stateLock(key)).exec()).kvs[0];
    await client.leaseClient.leaseRevoke({ ID: lockKv.lease });

    const error = await caught(() => session.write(withLayer('b')));
    expect(error.code).toBe('DSEC_STATE_LOCK_LOST');
    expect(error.message).toContain(`the state lock ${session.lock.id} at etcd:${PREFIX}/state/${key} is no longer ours`);
    expect(await store.read()).toMatchObject({ serial: 1 });
    expect(Object.keys((await store.read()).resources)).toEqual(['layer.a@1.0.0']);
  });

  it('refuses a write from a holder whose lock was forced open and taken by another, naming the new holder', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX });
    const old = await lock(store, 'dsec apply');

    const wrongId = await caught(() => store.forceUnlock('not-the-id'));
    expect(wrongId.code).toBe('DSEC_STATE_NOT_LOCKED');
    expect(wrongId.message).toContain(`the lock is held by pid ${process.pid}`);
    await store.forceUnlock(old.lock.id);
    expect(await store.lockHolder()).toBeUndefined();
    const notLocked = await caught(() => store.forceUnlock(old.lock.id));
    expect(notLocked.code).toBe('DSEC_STATE_NOT_LOCKED');

    const next = await lock(store, 'dsec refresh');
    await next.write(withLayer('new'));
    const error = await caught(() => old.write(withLayer('old')));
    expect(error.code).toBe('DSEC_STATE_LOCK_LOST');
    expect(error.message).toContain(`the lock is now held by pid ${process.pid}`);
    expect(error.message).toContain('`dsec refresh`');
    expect(Object.keys((await store.read()).resources)).toEqual(['layer.new@1.0.0']);
  });

  it('refuses a write when the state changed in etcd behind the lock, instead of overwriting it', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX });
    const session = await lock(store);
    await session.write(withLayer('a'));
    const outside = { ...(await store.read()), serial: 7 };
    await client.put(clusterKeys(PREFIX).state(key)).value(JSON.stringify(outside));

    const error = await caught(() => session.write(withLayer('b')));
    expect(error.code).toBe('DSEC_STATE_LOCK_LOST');
    expect(error.message).toContain('changed since revision');
    expect((await store.read()).serial).toBe(7);
  });
});

describe('EtcdStateStore with a state bigger than one etcd value', () => {
  const manyLayers =
    (count: number, tag: string) =>
    (state: StateFile): StateFile => {
      const resources = { ...state.resources };
      for (let i = 0; i < count; i++) {
        const name = `l${i}`;
        resources[`layer.${name}@1.0.0`] = { type: 'layer', name, version: '1.0.0', kind: 'base', digest: `sha256:${tag}${i}` };
      }
      return { ...state, resources };
    };
  const chunkKeys = async (key: string): Promise<string[]> =>
    client.getAll().prefix(`${clusterKeys(PREFIX).state(key)}.chunks/`).keys();

  it('stores a 3 MB state in chunks under etcd\'s request limit, reads it back whole, and drops the old chunks on the next write', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX });
    const session = await lock(store);
    const first = await session.write(manyLayers(20_000, 'a'));
    expect((await store.read()).resources).toEqual(first.resources);
    const firstChunks = await chunkKeys(key);
    expect(firstChunks.length).toBeGreaterThanOrEqual(3);
    const manifest = JSON.parse((await client.get(clusterKeys(PREFIX).state(key)).string())!) as { generation: string };
    expect(firstChunks.every((chunk) => chunk.includes(`/${manifest.generation}/`))).toBe(true);

    const second = await session.write(manyLayers(20_000, 'b'));
    expect(second.serial).toBe(2);
    const read = await new EtcdStateStore(client, key, { prefix: PREFIX }).read();
    expect(read.serial).toBe(2);
    expect(read.resources['layer.l19999@1.0.0']).toMatchObject({ digest: 'sha256:b19999' });
    const secondChunks = await chunkKeys(key);
    expect(secondChunks.some((chunk) => firstChunks.includes(chunk))).toBe(false);

    await session.write((state) => ({ ...state, resources: {} }));
    expect(await chunkKeys(key)).toEqual([]);
    expect(JSON.parse((await client.get(clusterKeys(PREFIX).state(key)).string())!)).toMatchObject({ serial: 3, resources: {} });
  });

  it('refuses chunks that do not match their manifest as a corrupt state', async () => {
    const key = freshKey();
    const store = new EtcdStateStore(client, key, { prefix: PREFIX, maxValueBytes: 4096 });
    const session = await lock(store);
    await session.write(manyLayers(100, 'a'));
    await session.release();
    const [firstChunk] = await chunkKeys(key);
    await client.put(firstChunk).value('garbage');
    // Chunks are read at the manifest's revision: rewrite it so the garbage is what it names.
    const stateKey = clusterKeys(PREFIX).state(key);
    await client.put(stateKey).value((await client.get(stateKey).string())!);
    const error = await caught(() => store.read());
    expect(error.code).toBe('DSEC_STATE_CORRUPT');
    expect(error.message).toContain('do not match their manifest');
  });
});

describe('etcd unreachable', () => {
  it('connectEtcd fails within its timeout with DSEC_ETCD_UNREACHABLE naming every endpoint', async () => {
    const [a, b] = await freePorts(2);
    const endpoints = [`http://127.0.0.1:${a}`, `127.0.0.1:${b}`];
    const started = Date.now();
    const error = await caught(() => connectEtcd(endpoints, { timeoutMs: 2000 }));
    expect(Date.now() - started).toBeLessThan(4000);
    expect(error.code).toBe('DSEC_ETCD_UNREACHABLE');
    expect(error.message).toContain(`etcd is not reachable at http://127.0.0.1:${a}, 127.0.0.1:${b}:`);
  });

  it('turns a store call on an etcd that went away into DSEC_ETCD_UNREACHABLE naming the endpoints', async () => {
    const gone = await EtcdCluster.start({ members: 1 });
    let goneClient: Etcd3 | undefined;
    try {
      goneClient = await connectEtcd(gone.endpoints, { timeoutMs: 1500 });
      const store = new EtcdStateStore(goneClient, 'x', { prefix: PREFIX });
      await gone.kill(0);
      const error = await caught(() => store.read());
      expect(error.code).toBe('DSEC_ETCD_UNREACHABLE');
      expect(error.message).toContain(`etcd is not reachable at ${gone.endpoints[0]}`);
    } finally {
      goneClient?.close();
      await gone.stop();
    }
  });
});

describe('EtcdStateStore on three members', () => {
  it('keeps writing through a session while one etcd member is killed and restarted', async () => {
    const three = await EtcdCluster.start({ members: 3 });
    let threeClient: Etcd3 | undefined;
    try {
      threeClient = await connectEtcd(three.endpoints);
      const store = new EtcdStateStore(threeClient, 'ha', { prefix: PREFIX, leaseTtlSeconds: 5 });
      const session = await store.lock({ command: 'dsec apply' });
      try {
        const writes: Promise<StateFile>[] = [];
        for (let i = 0; i < 10; i++) writes.push(session.write(withLayer(`before${i}`)));
        await three.kill(0);
        for (let i = 0; i < 10; i++) writes.push(session.write(withLayer(`during${i}`)));
        await Promise.all(writes);
        await three.restart(0);
        await session.write(withLayer('after'));
      } finally {
        await session.release();
      }
      const read = await store.read();
      expect(Object.keys(read.resources)).toHaveLength(21);
      expect(await store.lockHolder()).toBeUndefined();
    } finally {
      threeClient?.close();
      await three.stop();
    }
  });
});
