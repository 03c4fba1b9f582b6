/**
 * core/qemu against a real qemu: a busybox-only guest booted from a
 * generated initramfs (no guest agent), driven over QMP; adopted from its
 * pidfile; saved to a file and restored into a new process with its memory
 * intact; killed. And the pieces around it: the KVM probe and its cache,
 * the vmlinux unpacked from Debian's bzImage.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildInitramfs,
  chooseAccel,
  extractVmlinux,
  findGuestKernel,
  findQemu,
  hasPvhNote,
  hostTscRate,
  INCOMING_DEFER,
  QemuProcess,
  qemuPaths,
  restoreVmFromFile,
  saveVmToFile,
  type GuestKernel,
  type QemuBinary,
} from '../../../core/qemu/index.js';
import { killQemuUnder } from '../microvm/vm-processes.js';

let dir: string;
let qemu: QemuBinary;
let kernel: GuestKernel;
let args: string[];
const started: QemuProcess[] = [];

/** The guest prints a counter every 100 ms from a shell variable: it lives only in guest memory. */
const INIT = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo GUEST-UP
n=0
while :; do n=$((n + 1)); echo "count $n"; /bin/busybox usleep 100000; done
`;

async function waitForConsole(file: string, pattern: RegExp, timeoutMs = 30_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    if (pattern.test(text)) return text;
    if (Date.now() > deadline) throw new Error(`no ${pattern} on the console within ${timeoutMs} ms: ${text.slice(-500)}`);
    await sleep(50);
  }
}

function lastCount(text: string): number {
  const counts = [...text.matchAll(/count (\d+)/g)].map((match) => Number(match[1]));
  return counts.at(-1) ?? 0;
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'dsec-qemu-'));
  qemu = await findQemu();
  kernel = await findGuestKernel();
  const initrd = await buildInitramfs({ files: [{ target: '/bin/busybox', source: '/bin/busybox' }, { target: '/init', content: INIT, mode: 0o755 }] }, dir);
  const vmlinux = await extractVmlinux(kernel.vmlinuz, dir);
  const tsc = await hostTscRate();
  args = [
    '-M', 'microvm,acpi=on', '-accel', 'tcg,tb-size=32', '-m', '128M', '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    '-kernel', vmlinux.path ?? kernel.vmlinuz, '-initrd', initrd.path,
    '-append', `console=ttyS0 quiet panic=-1${tsc ? ` tsc_early_khz=${tsc.khz}` : ''}`,
  ];
}, 60_000);

afterAll(async () => {
  try {
    for (const vm of started) await vm.kill().catch(() => undefined);
  } finally {
    killQemuUnder(dir);
    rmSync(dir, { recursive: true, force: true });
  }
});

describe('the qemu toolkit', () => {
  it('finds qemu with its version and the guest kernel', () => {
    expect(qemu.version).toMatch(/^\d+\.\d+/);
    expect(kernel.version).toMatch(/^6\./);
  });

  it("unpacks Debian's LZ4 bzImage into a vmlinux qemu boots through PVH", async () => {
    const first = await extractVmlinux(kernel.vmlinuz, dir);
    expect(first.path).toBeDefined();
    expect(hasPvhNote(readFileSync(first.path!))).toBe(true);
    expect((await extractVmlinux(kernel.vmlinuz, dir)).path).toBe(first.path);
  });

  it('starts a VM, talks QMP to it, adopts it from its pidfile, saves it to a file and restores it with its memory intact', async () => {
    const paths = qemuPaths(dir, 'vm');
    const vm = await QemuProcess.start({ qemu: qemu.path, args, paths });
    started.push(vm);
    expect(await vm.isAlive()).toBe(true);
    const status = await (await vm.qmp()).execute<{ status: string }>('query-status');
    expect(status.status).toBe('running');
    await waitForConsole(paths.console, /count 5\b/);

    vm.releaseQmp();
    const adopted = await QemuProcess.adopt(paths);
    expect(adopted?.pid).toBe(vm.pid);

    const saved = await saveVmToFile(await vm.qmp(), path.join(dir, 'vm.state'));
    expect(saved.bytes).toBeGreaterThan(1024 * 1024);
    const countAtSave = lastCount(readFileSync(paths.console, 'utf8'));
    await vm.quit();
    expect(await vm.isAlive()).toBe(false);
    expect(await QemuProcess.adopt(paths)).toBeUndefined();

    const restored = await QemuProcess.start({ qemu: qemu.path, args: [...args, ...INCOMING_DEFER], paths });
    started.push(restored);
    await restoreVmFromFile(await restored.qmp(), saved.file);
    // The counter goes on from where it was: the shell variable came back with the guest memory.
    const text = await waitForConsole(paths.console, new RegExp(`count ${countAtSave + 3}\\b`));
    expect(text.match(/GUEST-UP/g)).toHaveLength(1);
    await restored.kill();
    expect(await restored.isAlive()).toBe(false);
  });

  it('says why qemu refused to start, with the end of its log', async () => {
    const paths = qemuPaths(dir, 'bad');
    await expect(QemuProcess.start({ qemu: qemu.path, args: [...args, '-device', 'no-such-device'], paths })).rejects.toThrow(
      /qemu exited before it answered on QMP.*no-such-device/,
    );
  });

  it('chooses TCG with the reason when KVM cannot boot the test guest, and keeps the answer in the cache folder', async () => {
    const forced = await chooseAccel({ qemu, kernel, cacheDir: dir, request: 'tcg' });
    expect(forced).toEqual({ accel: 'tcg', reason: 'accel: tcg was asked for', source: 'forced' });
    const choice = await chooseAccel({ qemu, kernel, cacheDir: dir, timeoutMs: 3000 });
    expect(choice.source).toBe('probe');
    expect(choice.reason.length).toBeGreaterThan(10);
    if (choice.accel === 'tcg') expect(choice.reason).toMatch(/\/dev\/kvm/);
    const saved = JSON.parse(readFileSync(path.join(dir, 'accel.json'), 'utf8')) as { key: string; accel: string };
    expect(saved.accel).toBe(choice.accel);
    expect(saved.key).toContain(`qemu ${qemu.version}`);
  });
});
