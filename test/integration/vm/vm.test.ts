/**
 * The full-VM backend through a real node agent: one VM boots the test image
 * (SeaBIOS -> syslinux -> Debian's cloud kernel, Debian's own qemu-ga) under
 * the accelerator the probe picks (TCG here), on a qcow2 overlay, with a
 * virtio-gpu display served over VNC on a unix socket, and the tests share it
 * in order: create, exec, files, VNC, pause to a file and resume, qemu killed
 * from outside, destroy. Each boot costs seconds, so there is one.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DiskImageRef, SandboxSpec } from '../../../core/live.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { caught } from '../../helpers/state.js';
import { buildTestVmImage, defaultVmImageCacheDir, killQemuUnder, qemuProcessesUnder } from '../../helpers/vm-image.js';

const ID = 'vm-a';
let agent: TestAgent;
let image: DiskImageRef;
let imageDigest: string;

function digestOf(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

function vmSpec(id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
  return agent.spec(id, {
    backend: 'vm',
    image,
    env: { GREETING: 'hello from the host' },
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    backendOptions: { display: { gpu: true, vnc: true } },
    density: { memorySharing: true, reclaimOnPause: false },
    ...extra,
  });
}

const sandboxDir = (id: string) => path.join(agent.root, 'sandboxes', id);

/** The qemu pid from the sandbox's handle (`qemu pid=N vnc=...`). */
async function qemuPid(id: string): Promise<number> {
  const info = await agent.client.getSandbox(id);
  return Number(/pid=(\d+)/.exec(info.handle ?? '')?.[1]);
}

const SCHED_IDLE = 5;

/** A process's scheduling policy (/proc/<pid>/stat field 41). */
function schedulingPolicy(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[38]);
}

function readRfbGreeting(socket: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const client = connect(socket);
    let received = '';
    const timer = setTimeout(() => {
      client.destroy();
      reject(new Error(`no RFB greeting on ${socket} within 5 s (got ${JSON.stringify(received)})`));
    }, 5000);
    client.on('data', (chunk) => {
      received += chunk.toString('latin1');
      if (received.length >= 12) {
        clearTimeout(timer);
        client.destroy();
        resolve(received.slice(0, 12));
      }
    });
    client.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

beforeAll(async () => {
  image = await buildTestVmImage(defaultVmImageCacheDir());
  imageDigest = digestOf(image.path);
  // With the density plugins that set process traits, as a default agent runs.
  agent = await TestAgent.start({
    backends: [{ name: 'backend-vm', options: { bootTimeoutMs: 120_000 } }],
    storage: 'fixed',
    plugins: [
      { name: 'density-qos', options: {} },
      { name: 'density-memory', options: {} },
    ],
  });
}, 180_000);

afterAll(async () => {
  try {
    await agent?.dispose();
  } finally {
    if (agent) killQemuUnder(agent.tmp);
  }
}, 60_000);

describe('a full VM through the agent', () => {
  it('boots a VM from the image on a small qcow2 overlay that leaves the image unchanged', async () => {
    const started = Date.now();
    const info = await agent.client.createSandbox(vmSpec(ID));
    expect(info.status).toBe('running');
    expect(info.backend).toBe('vm');
    expect(info.handle).toMatch(/^qemu pid=\d+ vnc=\//);
    expect(Date.now() - started).toBeLessThan(120_000);

    const overlay = path.join(sandboxDir(ID), 'overlay.qcow2');
    expect(statSync(overlay).size).toBeLessThan(8 * 1024 * 1024);
    const overlayInfo = JSON.parse(execFileSync('qemu-img', ['info', '--output=json', '--force-share', overlay], { encoding: 'utf8' }));
    expect(overlayInfo['backing-filename']).toBe(image.path);
    expect(digestOf(image.path)).toBe(imageDigest);
    expect(qemuProcessesUnder(agent.tmp)).toHaveLength(1);
  }, 150_000);

  it('runs qemu with the process traits the density plugins set: SCHED_IDLE for best-effort, KSM merging for memory sharing', async () => {
    const pid = await qemuPid(ID);
    expect(schedulingPolicy(pid)).toBe(SCHED_IDLE);
    expect(readFileSync(`/proc/${pid}/ksm_stat`, 'utf8')).toContain('ksm_merge_any: yes');
  });

  it('runs commands through the guest agent, with the spec env, exit codes and stderr', async () => {
    const result = await agent.client.exec(ID, { cmd: ['/bin/sh', '-c', 'echo "$GREETING"; uname -r; cat /proc/1/comm; echo oops >&2; exit 3'] });
    const kernel = readFileSync('/var/lib/dsec/guest-kernel/version', 'utf8').trim();
    expect(result.stdout).toBe(`hello from the host\n${kernel}\ninit\n`);
    expect(result.stderr).toBe('oops\n');
    expect(result.exitCode).toBe(3);
    expect(result.timedOut).toBe(false);
  });

  it('writes a file inside the guest and reads the same bytes back', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 10, 13, ...Buffer.from('dsec vm file')]);
    await agent.client.writeFile(ID, { path: '/root/notes/kept.bin', data: bytes.toString('base64'), mode: 0o600 });
    const read = await agent.client.readFile(ID, { path: '/root/notes/kept.bin' });
    expect(Buffer.from(read.data, 'base64')).toEqual(bytes);
    expect(read.size).toBe(bytes.length);
    const listed = await agent.client.exec(ID, { cmd: ['/bin/sh', '-c', 'stat -c %a /root/notes/kept.bin; wc -c < /root/notes/kept.bin'] });
    expect(listed.stdout.split('\n').map((line) => line.trim())).toEqual(['600', String(bytes.length), '']);

    const missing = await caught(() => agent.client.readFile(ID, { path: '/root/notes/absent.txt' }));
    expect(missing.code).toBe('DSEC_FILE_NOT_FOUND');
    expect(missing.message).toContain('/root/notes/absent.txt');
  });

  it('kills a command at its timeout, and survives its guest agent dying: the call in flight fails, the next one works', async () => {
    const slow = await agent.client.exec(ID, { cmd: ['sleep', '100'], timeoutMs: 1500 });
    expect(slow.timedOut).toBe(true);
    expect(slow.exitCode).toBeNull();
    expect((await agent.client.exec(ID, { cmd: ['/bin/sh', '-c', 'pidof sleep || echo none'] })).stdout).toBe('none\n');

    const agentPid = (await agent.client.exec(ID, { cmd: ['pidof', 'qemu-ga'] })).stdout.trim();
    const killed = await caught(() => agent.client.exec(ID, { cmd: ['/bin/sh', '-c', 'kill -9 $(pidof qemu-ga)'] }));
    expect(killed.code).toMatch(/^DSEC_GUEST_(COMMAND_FAILED|UNREACHABLE)$/);
    expect(killed.message).toContain(ID);
    // The guest's init starts it again; the client finds the stream again with a sync.
    const respawned = (await agent.client.exec(ID, { cmd: ['pidof', 'qemu-ga'] })).stdout.trim();
    expect(respawned).toMatch(/^\d+$/);
    expect(respawned).not.toBe(agentPid);
    expect((await agent.client.getSandbox(ID)).status).toBe('running');
  }, 60_000);

  it('serves the display over VNC on a unix socket named in the handle, answering the RFB handshake', async () => {
    const info = await agent.client.getSandbox(ID);
    const socket = /vnc=(\S+)/.exec(info.handle ?? '')?.[1];
    expect(socket).toBe(path.join(sandboxDir(ID), 'vnc.sock'));
    expect(await readRfbGreeting(socket!)).toMatch(/^RFB 003\.00\d\n$/);
  });

  it('pauses to a state file with no qemu left, and resumes the same boot with the file still there', async () => {
    const bootId = (await agent.client.exec(ID, { cmd: ['cat', '/proc/sys/kernel/random/boot_id'] })).stdout;
    const before = await qemuPid(ID);

    const paused = await agent.client.pauseSandbox(ID);
    expect(paused.status).toBe('paused');
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    expect(statSync(path.join(sandboxDir(ID), 'state.vmstate')).size).toBeGreaterThan(1024 * 1024);

    const resumed = await agent.client.resumeSandbox(ID);
    expect(resumed.status).toBe('running');
    const after = await qemuPid(ID);
    expect(after).not.toBe(before);
    expect(existsSync(path.join(sandboxDir(ID), 'state.vmstate'))).toBe(false);
    expect(schedulingPolicy(after)).toBe(SCHED_IDLE); // the new qemu has the traits too
    // The same boot (memory restored, not a reboot), and the file written before the pause.
    expect((await agent.client.exec(ID, { cmd: ['cat', '/proc/sys/kernel/random/boot_id'] })).stdout).toBe(bootId);
    const read = await agent.client.readFile(ID, { path: '/root/notes/kept.bin' });
    expect(Buffer.from(read.data, 'base64').toString('latin1')).toContain('dsec vm file');
  }, 60_000);

  it('is adopted by an agent restarted after a SIGKILL: still running, exec, pause and resume work on the same VM', async () => {
    const pid = await qemuPid(ID);
    await agent.kill();
    expect(qemuProcessesUnder(agent.tmp)).toEqual([pid]);
    await agent.startDaemon();

    const info = await agent.client.getSandbox(ID);
    expect(info.status).toBe('running');
    expect(info.handle).toContain(`pid=${pid}`);
    expect((await agent.client.exec(ID, { cmd: ['cat', '/root/notes/kept.bin'] })).stdout).toContain('dsec vm file');
    expect((await agent.client.pauseSandbox(ID)).status).toBe('paused');
    expect((await agent.client.resumeSandbox(ID)).status).toBe('running');
    expect((await agent.client.exec(ID, { cmd: ['true'] })).exitCode).toBe(0);
    const usage = await agent.client.nodeUsage();
    expect(usage.sandboxes.vm?.running).toBe(1);
    expect(usage.used.memoryMiB).toBeGreaterThan(50);
  }, 60_000);

  it('refuses a VM whose image is missing with DSEC_VM_IMAGE_INVALID, leaving the running VM and the agent alone', async () => {
    const error = await caught(() => agent.client.createSandbox(vmSpec('vm-missing', { image: { path: '/nonexistent/disk.qcow2', format: 'qcow2' } })));
    expect(error.code).toBe('DSEC_VM_IMAGE_INVALID');
    expect(error.message).toContain('/nonexistent/disk.qcow2');
    expect(existsSync(path.join(sandboxDir('vm-missing'), 'overlay.qcow2'))).toBe(false);
    await agent.client.destroySandbox('vm-missing');
    expect((await agent.client.exec(ID, { cmd: ['true'] })).exitCode).toBe(0);
  });

  it('reports a VM whose qemu was killed from outside as stopped, with clear errors, while the agent keeps serving', async () => {
    process.kill(await qemuPid(ID), 'SIGKILL');
    for (let i = 0; i < 100 && qemuProcessesUnder(agent.tmp).length > 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));

    expect((await agent.client.getSandbox(ID)).status).toBe('stopped');
    const error = await caught(() => agent.client.exec(ID, { cmd: ['true'] }));
    expect(error.code).toBe('DSEC_SANDBOX_NOT_RUNNING');
    expect(error.message).toContain(ID);
    expect((await agent.client.health()).ok).toBe(true);
  });

  it('destroys the VM leaving no qemu and no file, and the image unchanged', async () => {
    expect((await agent.client.destroySandbox(ID)).existed).toBe(true);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    expect(existsSync(sandboxDir(ID))).toBe(false);
    expect((await agent.client.destroySandbox(ID)).existed).toBe(false);
    expect(digestOf(image.path)).toBe(imageDigest);
  });
});
