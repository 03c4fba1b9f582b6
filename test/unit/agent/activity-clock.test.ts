/**
 * A sandbox's activity clock on disk: written at once for the first call,
 * then at most once per ACTIVITY_PERSIST_MS, the last value always landing
 * (a trailing write), and written at once when the agent drains. Real
 * files in a temp folder; only the timers are fake.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { checkSpec } from '../../../core/agent/validate.js';
import { ACTIVITY_PERSIST_MS, RECORD_FILE, SandboxStore, type SandboxEntry } from '../../../core/agent/store.js';
import type { NodeContext } from '../../../core/hooks.js';

let root: string;
let store: SandboxStore;
let entry: SandboxEntry;
const onDisk = () => (JSON.parse(readFileSync(path.join(entry.ctx.dir, RECORD_FILE), 'utf8')) as { lastActivityAt?: string }).lastActivityAt;
const writesSettled = async () => {
  // The write chain is real I/O: let it land.
  for (let i = 0; i < 50 && entry.writing; i++) await new Promise((resolve) => setImmediate(resolve));
  await entry.writing;
};

beforeEach(async () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
  root = mkdtempSync(path.join(tmpdir(), 'dsec-activity-'));
  const node = { name: 'n', root, log: { info() {}, warn() {}, error() {}, debug() {} } } as unknown as NodeContext;
  store = new SandboxStore(root, node);
  entry = store.newEntry(checkSpec({ id: 's-1', backend: 'container', layers: [] }));
  mkdirSync(entry.ctx.dir, { recursive: true });
  store.add(entry);
  await store.persist(entry);
});

afterEach(() => {
  vi.useRealTimers();
  rmSync(root, { recursive: true, force: true });
});

describe('the activity clock on disk', () => {
  it('is written at most once per interval, and the last value lands', async () => {
    vi.advanceTimersByTime(ACTIVITY_PERSIST_MS);
    entry.lastActivityAt = new Date().toISOString();
    store.persistActivity(entry);
    await writesSettled();
    const first = entry.lastActivityAt;
    expect(onDisk()).toBe(first);
    // A burst of calls: nothing more is written until the interval is up...
    for (let i = 1; i <= 20; i++) {
      vi.advanceTimersByTime(100);
      entry.lastActivityAt = new Date().toISOString();
      store.persistActivity(entry);
    }
    await writesSettled();
    expect(onDisk()).toBe(first);
    // ...then the latest one is.
    vi.advanceTimersByTime(ACTIVITY_PERSIST_MS);
    await writesSettled();
    expect(onDisk()).toBe(entry.lastActivityAt);
    expect(onDisk()).not.toBe(first);
  });

  it('is written at once when the agent drains, and never after the sandbox is gone', async () => {
    vi.advanceTimersByTime(ACTIVITY_PERSIST_MS);
    store.persistActivity(entry);
    await writesSettled();
    entry.lastActivityAt = new Date(Date.now() + 1000).toISOString();
    store.persistActivity(entry);
    expect(entry.activityTimer).toBeDefined();
    await store.drain(1000);
    expect(onDisk()).toBe(entry.lastActivityAt);
    expect(entry.activityTimer).toBeUndefined();

    store.persistActivity(entry);
    store.delete('s-1');
    expect(entry.activityTimer).toBeUndefined();
  });
});
