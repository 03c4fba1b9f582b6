/**
 * dsec-guest over a real virtio-serial port: a microVM (qemu -M microvm,
 * the guest kernel, an initramfs whose /init loads the virtio modules and
 * execs the agent as PID 1 with --serial auto) and GuestAgentClient on the
 * host end of the port's chardev socket. Hosts come and go on that socket
 * (a node agent restarting, a resumed VM reconnecting): the agent must keep
 * serving each new one, whatever the last one left half-sent or unread.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { buildInitramfs, findGuestKernel, hostTscRate, resolveKernelModules } from '../../../core/qemu/index.js';
import { buildGuestAgent } from './fixture.js';

const INIT = `#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for module in $($B cat /lib/modules/dsec/load-order); do $B insmod /lib/modules/dsec/$module; done
$B --install -s /bin
$B echo "dsec-test: starting the agent"
exec /dsec-guest --serial auto --init-mounts
`;

let dir: string;
let qemu: ChildProcess | undefined;
let socket: string;
let consoleLog = '';

beforeAll(async () => {
  const agentBinary = buildGuestAgent();
  dir = mkdtempSync(join(tmpdir(), 'dsec-guest-vm-'));
  const kernel = await findGuestKernel();
  const modules = await resolveKernelModules(kernel.modulesDir, ['virtio_mmio', 'virtio_console']);
  const initrd = await buildInitramfs(
    { files: [{ target: '/bin/busybox', source: '/bin/busybox' }, { target: '/dsec-guest', source: agentBinary }, { target: '/init', content: INIT, mode: 0o755 }], modules },
    dir,
  );
  const tsc = await hostTscRate();
  socket = join(dir, 'agent.sock');
  qemu = spawn('qemu-system-x86_64', [
    '-M', 'microvm,acpi=on', '-accel', 'tcg', '-m', '256M', '-smp', '1',
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot', '-serial', 'stdio',
    '-kernel', kernel.vmlinuz, '-initrd', initrd.path,
    '-append', `console=ttyS0 panic=-1 quiet${tsc ? ` tsc_early_khz=${tsc.khz}` : ''}`,
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=agent,path=${socket},server=on,wait=off`,
    '-device', 'virtserialport,chardev=agent,name=org.qemu.guest_agent.0',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  qemu.stdout!.on('data', (chunk: Buffer) => (consoleLog += chunk.toString()));
  qemu.stderr!.on('data', (chunk: Buffer) => (consoleLog += chunk.toString()));
}, 120_000);

afterAll(async () => {
  try {
    if (qemu && qemu.exitCode === null) {
      const exited = new Promise((resolve) => qemu!.once('exit', resolve));
      qemu.kill('SIGKILL');
      await exited;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

async function connect(): Promise<GuestAgentClient> {
  try {
    return await GuestAgentClient.connect(socket, { id: 'vm-serial', timeoutMs: 90_000 });
  } catch (error) {
    throw new Error(`${(error as Error).message}\nconsole:\n${consoleLog.slice(-3000)}`);
  }
}

describe('dsec-guest on a virtio-serial port', () => {
  it('answers as PID 1 of a microVM', async () => {
    const client = await connect();
    try {
      expect((await client.info()).dsec).toBe(true);
      const result = await client.exec({ path: '/bin/sh', args: ['-c', 'echo $PPID; cat /proc/1/cmdline | tr "\\0" " "'] });
      expect(result.stdout.toString()).toBe('1\n/dsec-guest --serial auto --init-mounts ');
      await client.writeFile('/tmp/over-serial.txt', Buffer.from('virtio'));
      expect((await client.readFile('/tmp/over-serial.txt', 100)).toString()).toBe('virtio');
    } finally {
      client.close();
    }
  }, 120_000);

  it('resets the VM: kills every process but itself (kernel threads are not counted) and empties directories', async () => {
    const client = await connect();
    try {
      await client.exec({ path: '/bin/sh', args: ['-c', 'mkdir -p /tmp/work/sub && touch /tmp/work/sub/f; sleep 1000 & setsid sleep 1001 & exit 0'] });
      expect(await client.reset(['/tmp/work'])).toEqual({ killed: 2, ipcRemoved: 0 });
      const after = await client.exec({ path: '/bin/sh', args: ['-c', 'ls -A /tmp/work; pgrep sleep; true'] });
      expect(after.stdout.toString()).toBe('');
    } finally {
      client.close();
    }
  }, 120_000);

  it('serves each new host connection after the last one went away', async () => {
    for (let round = 0; round < 3; round++) {
      const client = await connect();
      try {
        expect((await client.exec({ path: 'echo', args: [`round ${round}`] })).stdout.toString()).toBe(`round ${round}\n`);
      } finally {
        client.close();
      }
    }
  }, 120_000);

  it('drops what a host left half-sent, and answers nobody was there to read', async () => {
    const raw = createConnection({ path: socket });
    await new Promise<void>((resolve, reject) => raw.once('connect', resolve).once('error', reject));
    // A large answer and a late one, both written after the host went away; then half a request.
    raw.write('{"execute":"dsec-exec","arguments":{"path":"head","arg":["-c","3000000","/dev/zero"],"max-output":4000000}}\n');
    raw.write('{"execute":"dsec-exec","arguments":{"path":"/bin/sleep","arg":["1"]}}\n{"execute":"guest-pi');
    await new Promise((resolve) => setTimeout(resolve, 200));
    raw.destroy();
    const client = await connect();
    try {
      const started = Date.now();
      expect((await client.exec({ path: 'echo', args: ['after'] })).stdout.toString()).toBe('after\n');
      expect(Date.now() - started).toBeLessThan(8_000);
    } finally {
      client.close();
    }
  }, 120_000);

  it('idles without a host connected instead of spinning on the port\'s hang-up', async () => {
    (await connect()).close(); // booted, and the host gone again
    const cpuTicks = () => {
      const fields = readFileSync(`/proc/${qemu!.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return Number(fields[11]) + Number(fields[12]); // utime + stime, in clock ticks (100/s)
    };
    await new Promise((resolve) => setTimeout(resolve, 500));
    const before = cpuTicks();
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const used = (cpuTicks() - before) / 100 / 3;
    expect(used).toBeLessThan(0.3);
  }, 120_000);
});
