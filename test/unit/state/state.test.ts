import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { Ajv } from 'ajv';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { StateFile } from '../../../core/plan.js';
import { LocalStateStore } from '../../../core/state/index.js';
import { caught, withLayer } from '../../helpers/state.js';

let dir: string;
let store: LocalStateStore;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'dsec-state-'));
  store = new LocalStateStore(dir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});


describe('LocalStateStore.read', () => {
  it('treats a missing state file as a fresh state with a new lineage and serial 0', async () => {
    const state = await store.read();
    expect(state).toMatchObject({ format_version: 1, serial: 0, resources: {} });
    expect(state.lineage).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('refuses a state file that is not JSON, and leaves it as it is', async () => {
    await writeFile(store.file, '{"format_version": 1, ');
    const error = await caught(() => store.read());
    expect(error.code).toBe('DSEC_STATE_CORRUPT');
    expect(error.message).toContain(`the state file ${store.file} is not valid:`);
    expect(await readFile(store.file, 'utf8')).toBe('{"format_version": 1, ');
  });

  it('refuses a state file that does not match the schema, saying where', async () => {
    await writeFile(
      store.file,
      JSON.stringify({ format_version: 1, lineage: 'x', serial: -1, dsec_version: '0', resources: {} }),
    );
    const error = await caught(() => store.read());
    expect(error.code).toBe('DSEC_STATE_CORRUPT');
    expect(error.message).toContain('/serial must be >= 0');
  });
});

describe('StateSession.write', () => {
  it('writes atomically, keeps the previous version as the backup and bumps the serial only on change', async () => {
    const session = await store.lock({ command: 'test' });
    try {
      const lineage = session.state.lineage;
      const first = await session.write(withLayer('a'));
      expect(first.serial).toBe(1);
      const second = await session.write(withLayer('b'));
      expect(second.serial).toBe(2);
      const unchanged = await session.write((state) => ({ ...state }));
      expect(unchanged.serial).toBe(2);

      const onDisk = JSON.parse(await readFile(store.file, 'utf8')) as StateFile;
      expect(onDisk).toMatchObject({ lineage, serial: 2 });
      expect(Object.keys(onDisk.resources).sort()).toEqual(['layer.a@1.0.0', 'layer.b@1.0.0']);
      const backup = JSON.parse(await readFile(store.backupFile, 'utf8')) as StateFile;
      expect(backup.serial).toBe(1);
      expect(Object.keys(backup.resources)).toEqual(['layer.a@1.0.0']);
      expect((await readdir(dir)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
    } finally {
      await session.release();
    }
  });

  it('writes a never-written state on its first write even when nothing changed, pinning its lineage', async () => {
    const session = await store.lock({ command: 'test' });
    try {
      const written = await session.write((state) => state);
      expect(written.serial).toBe(1);
      expect((await store.read()).lineage).toBe(session.state.lineage);
    } finally {
      await session.release();
    }
  });

  it('loses none of many concurrent writes and shares disk writes between them', async () => {
    const session = await store.lock({ command: 'test' });
    try {
      const names = Array.from({ length: 100 }, (_, index) => `l${index}`);
      const results = await Promise.all(names.map((name) => session.write(withLayer(name))));
      const final = await store.read();
      expect(Object.keys(final.resources)).toHaveLength(100);
      expect(final.serial).toBeLessThan(100);
      for (const [index, result] of results.entries())
        expect(result.resources[`layer.${names[index]}@1.0.0`]).toBeDefined();
    } finally {
      await session.release();
    }
  });

  it('rejects only the write whose mutator threw', async () => {
    const session = await store.lock({ command: 'test' });
    try {
      const failing = session.write(() => {
        throw new Error('bad mutator');
      });
      const fine = session.write(withLayer('a'));
      await expect(failing).rejects.toThrow('bad mutator');
      expect((await fine).resources['layer.a@1.0.0']).toBeDefined();
    } finally {
      await session.release();
    }
  });

  it('never writes a state that would not validate', async () => {
    const session = await store.lock({ command: 'test' });
    try {
      await expect(session.write((state) => ({ ...state, serial: 0, lineage: '' }))).rejects.toThrow(
        /refusing to write an invalid state/,
      );
      await expect(store.read()).resolves.toMatchObject({ serial: 0 });
    } finally {
      await session.release();
    }
  });

  it('writes state files that validate against schemas/state.schema.json', async () => {
    const session = await store.lock({ command: 'test' });
    try {
      await session.write((state) => ({
        ...withLayer('a')(state),
        resources: {
          ...withLayer('a')(state).resources,
          'fleet.web': {
            type: 'fleet',
            name: 'web',
            attributes: {
              name: 'web',
              environment: 'py',
              backend: 'container',
              replicas: 1,
              resources: { cpu: 1, memoryMiB: 256, pids: 256 },
              network: 'none',
              qos: 'best-effort',
              ttl: {},
              labels: {},
              update: { maxUnavailable: 1 },
              density: { memorySharing: false, reclaimOnPause: true },
              layers: [{ name: 'a', version: '1.0.0', digest: 'sha256:a' }],
              env: {},
              workdir: '/',
              user: 'root',
              specHash: 'abc',
            },
            sandboxes: {
              'web-abcdefgh': {
                id: 'web-abcdefgh',
                node: 'n',
                specHash: 'abc',
                resources: { cpu: 1, memoryMiB: 256, pids: 256 },
                createdAt: 'now',
              },
            },
          },
        },
      }));
    } finally {
      await session.release();
    }
    const schema = JSON.parse(await readFile(new URL('../../../schemas/state.schema.json', import.meta.url), 'utf8'));
    const validate = new Ajv().compile(schema);
    expect(validate(JSON.parse(await readFile(store.file, 'utf8')))).toBe(true);
  });

  it('refuses writes after release', async () => {
    const session = await store.lock({ command: 'test' });
    await session.release();
    await expect(session.write(withLayer('a'))).rejects.toThrow(/released/);
  });
});

describe('the state lock', () => {
  it('refuses a second lock naming the holder: pid, host, command and since when', async () => {
    const session = await store.lock({ command: 'dsec apply' });
    try {
      const error = await caught(() => store.lock({ command: 'dsec destroy' }));
      expect(error.code).toBe('DSEC_STATE_LOCKED');
      expect(error.message).toContain(
        `pid ${process.pid} on ${hostname()} running \`dsec apply\` since ${session.lock.createdAt}`,
      );
      expect(error.params).toMatchObject({
        pid: process.pid,
        host: hostname(),
        command: 'dsec apply',
        id: session.lock.id,
      });
    } finally {
      await session.release();
    }
    const again = await store.lock({ command: 'dsec destroy' });
    await again.release();
  });

  it('waits for the lock with backoff up to lockTimeoutMs', async () => {
    const holder = await store.lock({ command: 'dsec apply' });
    setTimeout(() => void holder.release(), 150);
    const patient = new LocalStateStore(dir, { lockTimeoutMs: 5000 });
    const session = await patient.lock({ command: 'dsec plan' });
    expect(session.lock.command).toBe('dsec plan');
    await session.release();
  });

  it('reports a lock left by a dead process as stale, with the force-unlock command', async () => {
    const dead = spawnSync(process.execPath, ['-e', 'process.pid']).pid!;
    const id = 'dead-lock-id';
    await writeFile(
      store.lockFile,
      JSON.stringify({ id, pid: dead, host: hostname(), command: 'dsec apply', createdAt: '2025-01-01T00:00:00.000Z' }),
    );
    const error = await caught(() => store.lock({ command: 'dsec apply' }));
    expect(error.code).toBe('DSEC_STATE_STALE_LOCK');
    expect(error.message).toContain(`run: dsec force-unlock ${id}`);
    expect(error.message).toContain(`pid ${dead} on ${hostname()}`);

    expect((await caught(() => store.forceUnlock('wrong-id'))).code).toBe('DSEC_STATE_NOT_LOCKED');
    await store.forceUnlock(id);
    expect(await store.lockHolder()).toBeUndefined();
    const session = await store.lock({ command: 'dsec apply' });
    await session.release();
  });

  it('does not remove a lock someone else took after a force-unlock', async () => {
    const first = await store.lock({ command: 'dsec apply' });
    await store.forceUnlock(first.lock.id);
    const second = await store.lock({ command: 'dsec apply' });
    await first.release();
    expect((await store.lockHolder())?.id).toBe(second.lock.id);
    await second.release();
    expect(await store.lockHolder()).toBeUndefined();
  });

  it('refuses to force-unlock a state that is not locked', async () => {
    const error = await caught(() => store.forceUnlock('anything'));
    expect(error.code).toBe('DSEC_STATE_NOT_LOCKED');
    expect(error.message).toBe(
      'no state lock with id anything to remove (the state is not locked); nothing was unlocked',
    );
  });
});
