/**
 * A VM's memory and device state to a file and back, through qemu's
 * migration. qemu 7.2 has no `file:` migration URI, so the stream goes
 * through `exec:cat`: out with `exec:cat > FILE`, in with `exec:cat FILE`
 * on a qemu started with the same command line plus `-incoming defer`.
 * Zero pages are not written, so the file is about the guest memory in use.
 */
import { rename, rm, stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { QmpClient } from './qmp.js';

interface MigrationInfo {
  status?: string;
  'error-desc'?: string;
}

export interface SaveResult {
  readonly file: string;
  readonly bytes: number;
  readonly durationMs: number;
}

/** The argument to add to a qemu command line that restores with restoreVmFromFile. */
export const INCOMING_DEFER = ['-incoming', 'defer'] as const;

/**
 * Stop the VM and write its state to `file` (complete or not at all: it is
 * written beside and renamed). The VM stays stopped; the caller quits qemu.
 */
export async function saveVmToFile(qmp: QmpClient, file: string, options: { timeoutMs?: number } = {}): Promise<SaveResult> {
  const started = Date.now();
  const partial = `${file}.partial`;
  await rm(partial, { force: true });
  await qmp.execute('stop');
  // The default bandwidth cap (128 MiB/s) is for live migration over a network; a file takes what the disk gives.
  await qmp.execute('migrate-set-parameters', { 'max-bandwidth': 64 * 1024 * 1024 * 1024 });
  await qmp.execute('migrate', { uri: `exec:cat > ${shellQuote(partial)}` });
  try {
    await waitForMigration(qmp, options.timeoutMs ?? 120_000, 'save');
  } catch (error) {
    await qmp.execute('migrate_cancel').catch(() => undefined);
    await rm(partial, { force: true });
    throw error;
  }
  await rename(partial, file);
  return { file, bytes: (await stat(file)).size, durationMs: Date.now() - started };
}

/**
 * Load `file` into a qemu started with `-incoming defer` (INCOMING_DEFER)
 * and let the VM run again. Throws when the stream does not load (a
 * command line that differs from the saved VM's, a damaged file).
 */
export async function restoreVmFromFile(qmp: QmpClient, file: string, options: { timeoutMs?: number; start?: boolean } = {}): Promise<void> {
  await stat(file); // a missing file would otherwise be a migration error naming cat
  await qmp.execute('migrate-incoming', { uri: `exec:cat ${shellQuote(file)}` });
  await waitForMigration(qmp, options.timeoutMs ?? 120_000, 'restore');
  if (options.start !== false) await qmp.execute('cont');
}

async function waitForMigration(qmp: QmpClient, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 5; ; delay = Math.min(100, delay * 2)) {
    const info = await qmp.execute<MigrationInfo>('query-migrate');
    if (info.status === 'completed') return;
    if (info.status === 'failed' || info.status === 'cancelled') {
      throw new Error(`${what} failed: migration ${info.status}${info['error-desc'] ? `: ${info['error-desc']}` : ''}`);
    }
    if (Date.now() > deadline) throw new Error(`${what} did not finish within ${timeoutMs} ms (migration ${info.status ?? 'not started'})`);
    await sleep(delay);
  }
}

function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
