/**
 * microVMs that go wrong, through a real node agent: a VMM that is not
 * there, a guest that never boots, a guest agent that never answers, a
 * guest that stops answering, qemu killed from outside, and the agent
 * itself killed and restarted under a running VM. Each ends in a clear
 * error or a sandbox marked as it is; the agent keeps serving; nothing of a
 * sandbox stays after destroy. One VM serves the cases that need a running one.
 */
import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxSpec } from '../../../core/live.js';
import { QmpClient, saveVmToFile } from '../../../core/qemu/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { isRunning, killQemuUnder, pidOfHandle, qemuProcessesUnder } from './vm-processes.js';

const ID = 'vm-fault';
const agents: TestAgent[] = [];
let agent: TestAgent;

function spec(target: TestAgent, id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
  return target.spec(id, { backend: 'microvm', resources: { cpu: 1, memoryMiB: 256, pids: 256 }, ...extra });
}

async function rejection(promise: Promise<unknown>): Promise<{ code?: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('expected a rejection');
}

beforeAll(async () => {
  agent = await TestAgent.start({ backends: [{ name: 'backend-microvm', options: { accel: 'tcg' } }] });
  agents.push(agent);
  await agent.client.createSandbox(spec(agent, ID));
}, 120_000);

afterAll(async () => {
  for (const each of agents) {
    try {
      await each.dispose();
    } finally {
      killQemuUnder(each.tmp);
    }
  }
});

describe('microVM faults', () => {
  it('refuses vmm: firecracker with DSEC_VMM_UNAVAILABLE saying why, leaving nothing running', async () => {
    const error = await rejection(agent.client.createSandbox(spec(agent, 'vm-fc', { backendOptions: { vmm: 'firecracker' } })));
    expect(error.code).toBe('DSEC_VMM_UNAVAILABLE');
    expect(error.message).toMatch(/firecracker cannot run here: (no firecracker binary on the PATH|it needs KVM)/);
    expect(qemuProcessesUnder(path.join(agent.root, 'sandboxes', 'vm-fc'))).toEqual([]);
    await agent.client.destroySandbox('vm-fc');
  });

  it('refuses unknown backendOptions as DSEC_PLUGIN_OPTIONS naming the plugin', async () => {
    const error = await rejection(agent.client.createSandbox(spec(agent, 'vm-opts', { backendOptions: { upper: 'nfs' } })));
    expect(error).toMatchObject({ code: 'DSEC_PLUGIN_OPTIONS', message: expect.stringContaining('backend-microvm') });
    await agent.client.destroySandbox('vm-opts');
  });

  it('reports a guest that never boots (too little memory: the kernel panics) as DSEC_GUEST_BOOT_FAILED with its console, and leaves no qemu', async () => {
    const started = Date.now();
    const error = await rejection(agent.client.createSandbox(spec(agent, 'vm-tiny', { resources: { cpu: 1, memoryMiB: 64, pids: 64 } })));
    expect(error.code).toBe('DSEC_GUEST_BOOT_FAILED');
    expect(error.message).toContain('sandbox vm-tiny did not boot');
    expect(error.message).toMatch(/Kernel panic|Out of memory/);
    expect(Date.now() - started).toBeLessThan(30_000); // noticed when qemu exits, not at the boot timeout
    expect((await agent.client.getSandbox('vm-tiny')).status).toBe('failed');
    expect(qemuProcessesUnder(path.join(agent.root, 'sandboxes', 'vm-tiny'))).toEqual([]);
    await agent.client.destroySandbox('vm-tiny');
    expect(existsSync(path.join(agent.root, 'sandboxes', 'vm-tiny'))).toBe(false);
  });

  it('adopts a running microVM after the agent is killed and started again', async () => {
    const before = pidOfHandle((await agent.client.getSandbox(ID)).handle);
    await agent.client.exec(ID, { cmd: ['sh', '-c', 'echo kept > /tmp/kept'] });
    await agent.kill();
    await agent.startDaemon();
    const info = await agent.client.getSandbox(ID);
    expect(info.status).toBe('running');
    expect(pidOfHandle(info.handle)).toBe(before);
    expect((await agent.client.exec(ID, { cmd: ['cat', '/tmp/kept'] })).stdout).toBe('kept\n');
    expect((await agent.client.pauseSandbox(ID)).status).toBe('paused');
    expect((await agent.client.resumeSandbox(ID)).status).toBe('running');
    expect((await agent.client.exec(ID, { cmd: ['cat', '/tmp/kept'] })).stdout).toBe('kept\n');
  });

  it('finishes a pause that an agent killed half-way did not: saved but not ended, it is ended and the sandbox is paused', async () => {
    const pid = pidOfHandle((await agent.client.getSandbox(ID)).handle);
    await agent.kill();
    // What the dead agent had done: the VM stopped and saved to its state file, qemu not yet told to quit.
    const qmp = await QmpClient.connect(path.join(agent.root, 'sandboxes', ID, 'qemu.qmp'));
    try {
      await saveVmToFile(qmp, path.join(agent.root, 'sandboxes', ID, 'vm.state'));
    } finally {
      qmp.close();
    }
    await agent.startDaemon();
    expect((await agent.client.getSandbox(ID)).status).toBe('paused');
    expect(isRunning(pid)).toBe(false);
    expect((await agent.client.resumeSandbox(ID)).status).toBe('running');
    expect((await agent.client.exec(ID, { cmd: ['cat', '/tmp/kept'] })).stdout).toBe('kept\n');
  });

  it('says DSEC_GUEST_UNREACHABLE when the guest stops answering (its vCPUs stopped), and carries on once it runs again', async () => {
    const qmp = await QmpClient.connect(path.join(agent.root, 'sandboxes', ID, 'qemu.qmp'));
    try {
      await qmp.execute('stop');
      const error = await rejection(agent.client.exec(ID, { cmd: ['true'], timeoutMs: 1000 }));
      expect(error).toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining(`guest agent of sandbox ${ID} does not answer`) });
      expect((await agent.client.getSandbox(ID)).status).toBe('running'); // qemu is there: the sandbox is not lost
      await qmp.execute('cont');
    } finally {
      qmp.close();
    }
    expect((await agent.client.exec(ID, { cmd: ['cat', '/tmp/kept'] })).stdout).toBe('kept\n');
  }, 90_000);

  it('marks a microVM whose qemu was killed from outside as stopped, refuses calls clearly, and keeps serving', async () => {
    const pid = pidOfHandle((await agent.client.getSandbox(ID)).handle);
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 100 && isRunning(pid); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await agent.client.getSandbox(ID)).status).toBe('stopped');
    const error = await rejection(agent.client.exec(ID, { cmd: ['true'] }));
    expect(error).toMatchObject({ code: 'DSEC_SANDBOX_NOT_RUNNING', message: expect.stringContaining(`sandbox ${ID} is stopped`) });
    expect((await agent.client.health()).ok).toBe(true);
    await agent.client.destroySandbox(ID);
    expect(existsSync(path.join(agent.root, 'sandboxes', ID))).toBe(false);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
  });

  it('gives up on a guest whose agent never answers at the boot timeout, with DSEC_GUEST_BOOT_FAILED, and kills its qemu', async () => {
    // A "guest agent" that only sleeps: the guest boots, nothing answers on the port.
    const silent = path.join(agent.tmp, 'silent-agent');
    writeFileSync(silent, '#!/bin/sh\nexec sleep 3600\n');
    chmodSync(silent, 0o755);
    const quiet = await TestAgent.start({ backends: [{ name: 'backend-microvm', options: { accel: 'tcg', guestAgent: silent, bootTimeoutMs: 6000 } }] });
    agents.push(quiet);
    const error = await rejection(quiet.client.createSandbox(spec(quiet, 'vm-silent')));
    expect(error.code).toBe('DSEC_GUEST_BOOT_FAILED');
    expect(error.message).toContain('its guest agent did not answer within 6000 ms');
    expect(error.message).toContain('dsec-init: starting the guest agent');
    expect(qemuProcessesUnder(quiet.tmp)).toEqual([]);
    await quiet.client.destroySandbox('vm-silent');
    expect(existsSync(path.join(quiet.root, 'sandboxes', 'vm-silent'))).toBe(false);
  }, 60_000);
});
