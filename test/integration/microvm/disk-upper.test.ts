/**
 * A microVM with a disk for its upper layer (`backendOptions: {upper: disk,
 * upperMiB}`) on a layer given as a plain tree (the fixed-layers test store
 * has no images): the backend builds the layer's EROFS image itself, once,
 * and the guest's writes land on an ext4 disk of the size asked for, which
 * outlives a pause; a guest kernel crash ends its qemu and the sandbox is
 * stopped.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { killQemuUnder, qemuProcessesUnder } from './vm-processes.js';

const ID = 'vm-disk';
let agent: TestAgent;

beforeAll(async () => {
  agent = await TestAgent.start({ storage: 'fixed', backends: [{ name: 'backend-microvm', options: { accel: 'tcg' } }] });
  await agent.client.createSandbox(
    agent.spec(ID, { backend: 'microvm', resources: { cpu: 1, memoryMiB: 192, pids: 256 }, backendOptions: { upper: 'disk', upperMiB: 48 } }),
  );
}, 120_000);

afterAll(async () => {
  try {
    await agent?.dispose();
  } finally {
    if (agent) killQemuUnder(agent.tmp);
  }
});

describe('a microVM with a disk upper layer', () => {
  it('builds the EROFS image of a layer kept as a tree, once, in its own cache', () => {
    const images = readdirSync(path.join(agent.root, 'backend-microvm', 'images'));
    expect(images.filter((name) => name.endsWith('.erofs'))).toHaveLength(1);
  });

  it('writes to an ext4 disk of the size asked for, and refuses to write past it', async () => {
    const disk = path.join(agent.root, 'sandboxes', ID, 'upper.img');
    expect(statSync(disk).size).toBe(48 * 1024 * 1024);
    const fill = await agent.client.exec(ID, {
      cmd: ['sh', '-c', 'dd if=/dev/zero of=/big bs=1M count=20 2>/dev/null && echo wrote; dd if=/dev/zero of=/huge bs=1M count=64 2>&1 | grep -o "No space left on device" | head -1; rm -f /huge; df -m / | tail -1'],
    });
    expect(fill.stdout).toContain('wrote');
    expect(fill.stdout).toMatch(/No space left on device/);
  });

  it('keeps what is on the disk across a pause and resume', async () => {
    await agent.client.writeFile(ID, { path: '/data/note', data: Buffer.from('on disk').toString('base64') });
    await agent.client.pauseSandbox(ID);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    await agent.client.resumeSandbox(ID);
    const note = await agent.client.readFile(ID, { path: '/data/note' });
    expect(Buffer.from(note.data, 'base64').toString()).toBe('on disk');
    expect((await agent.client.exec(ID, { cmd: ['sh', '-c', 'ls -la /big | wc -l'] })).stdout.trim()).toBe('1');
  });

  it('is stopped once its guest kernel crashes (qemu powers off at the panic), and calls say so', async () => {
    await agent.client.exec(ID, { cmd: ['sh', '-c', '(sleep 0.2; echo c > /proc/sysrq-trigger) >/dev/null 2>&1 &'] });
    for (let i = 0; i < 100 && qemuProcessesUnder(agent.tmp).length > 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    expect((await agent.client.getSandbox(ID)).status).toBe('stopped');
    await expect(agent.client.exec(ID, { cmd: ['true'] })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_RUNNING' });
  });

  it('removes the disk with the sandbox', async () => {
    await agent.client.destroySandbox(ID);
    expect(existsSync(path.join(agent.root, 'sandboxes', ID))).toBe(false);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
  });
});
