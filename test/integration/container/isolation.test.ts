/**
 * What a container sandbox can see, checked from INSIDE it through exec: its
 * own init as PID 1, a network namespace with only loopback, none of the
 * host's files (the agent's socket and logs included), masked /proc entries,
 * and its own writes only.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxSpec } from '../../../core/live.js';
import { EXEC_SERVER_ARGS } from '../../../plugins/backend-container/bundle.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;
let marker: string;

const spec = (id: string): SandboxSpec => agent.spec(id, { resources: { cpu: 1, memoryMiB: 128, pids: 128 } });

async function sh(id: string, script: string) {
  return agent.client.exec(id, { cmd: ['/bin/sh', '-c', script], timeoutMs: 20_000 });
}

beforeAll(async () => {
  agent = await TestAgent.start();
  marker = path.join(agent.tmp, 'host-marker.txt');
  writeFileSync(marker, 'host secret\n');
  await agent.client.createSandbox(spec('iso-a'));
  await agent.client.createSandbox(spec('iso-b'));
});

afterAll(async () => {
  await agent?.dispose();
});

describe('container sandbox isolation', () => {
  it('runs the exec server as PID 1 and sees no host process', async () => {
    const cmdline = await sh('iso-a', "tr '\\0' ' ' < /proc/1/cmdline");
    expect(cmdline.stdout).toBe(`${EXEC_SERVER_ARGS.join(' ')} `);
    const processes = await sh('iso-a', 'ls /proc | grep -c "^[0-9]"');
    expect(Number(processes.stdout.trim())).toBeLessThan(10);
    const agentPid = String(await agent.pid());
    const seesAgent = await sh('iso-a', `grep -l 'agent/main.js' /proc/[0-9]*/cmdline 2>/dev/null; test -e /proc/${agentPid}/cmdline && cat /proc/${agentPid}/cmdline`);
    expect(seesAgent.stdout).not.toContain('main.js');
  });

  it('has a network namespace holding only the loopback interface', async () => {
    const links = await sh('iso-a', 'ls /sys/class/net; ip -o link');
    expect(links.stdout.split('\n').filter(Boolean)[0]).toBe('lo');
    expect(links.stdout).not.toMatch(/eth|ens|veth|docker|br-/);
    const connect = await sh('iso-a', 'wget -q -T 2 -O - http://127.0.0.1:1/ 2>&1; echo exit=$?');
    expect(connect.stdout).toMatch(/exit=[1-9]/);
  });

  it('uses the sandbox id as hostname and its own users', async () => {
    expect((await sh('iso-a', 'hostname')).stdout.trim()).toBe('iso-a');
    expect((await sh('iso-a', 'id -u')).stdout.trim()).toBe('0');
  });

  it('cannot see the host files, the agent socket, its log or the test folder', async () => {
    const checks = [marker, agent.socket, path.join(agent.root, 'agent.log'), agent.root, agent.tmp];
    const result = await sh('iso-a', checks.map((file) => `test -e '${file}' && echo "VISIBLE ${file}"`).join('; ') + '; true');
    expect(result.stdout).toBe('');
    const found = await sh('iso-a', 'find / -path /proc -prune -o \\( -name agent.sock -o -name agent.log -o -name host-marker.txt \\) -print 2>/dev/null');
    expect(found.stdout).toBe('');
    const hostHostname = readFileSync('/etc/hostname', 'utf8').trim();
    const etc = await sh('iso-a', 'cat /etc/hostname 2>/dev/null; cat /etc/shadow 2>/dev/null; true');
    expect(etc.stdout.trim()).not.toBe(hostHostname || os.hostname());
    expect(etc.stdout).not.toContain('root:');
  });

  it('masks the kpage* files and other sensitive /proc entries', async () => {
    for (const file of ['/proc/kpagecgroup', '/proc/kpageflags', '/proc/kpagecount', '/proc/kcore', '/proc/keys', '/proc/timer_list']) {
      const read = await sh('iso-a', `head -c 64 ${file} 2>/dev/null | wc -c`);
      expect(read.stdout.trim(), file).toBe('0');
    }
    const sysrq = await sh('iso-a', 'echo h > /proc/sysrq-trigger 2>&1; echo exit=$?');
    expect(sysrq.stdout).toMatch(/exit=[1-9]/);
    const sysfs = await sh('iso-a', 'touch /sys/kernel/x 2>&1; echo exit=$?');
    expect(sysfs.stdout).toMatch(/exit=[1-9]/);
  });

  it('refuses mounts, new user namespaces and other privileged calls', async () => {
    const result = await sh('iso-a', 'mount -t tmpfs none /mnt 2>&1; echo mount=$?; unshare -U true 2>&1; echo unshare=$?; mknod /tmp/sda b 8 0 2>&1 && head -c 1 /tmp/sda; echo mknod=$?');
    expect(result.stdout).toMatch(/mount=[1-9]/);
    expect(result.stdout).toMatch(/unshare=[1-9]/);
    expect(result.stdout).toMatch(/mknod=[1-9]/);
  });

  it('keeps each sandbox writes to itself, and the shared layers untouched', async () => {
    await sh('iso-a', 'echo from-a > /tmp/a.txt; echo "intruder:x:0:0::/:/bin/sh" >> /etc/passwd; rm /bin/vi');
    const fromB = await sh('iso-b', 'cat /tmp/a.txt 2>&1; grep -c intruder /etc/passwd; test -e /bin/vi && echo vi-here');
    expect(fromB.stdout).not.toContain('from-a');
    expect(fromB.stdout).toContain('0\nvi-here');
    await agent.client.createSandbox(spec('iso-c'));
    try {
      const fresh = await sh('iso-c', 'grep -c intruder /etc/passwd; test -e /bin/vi && echo vi-here');
      expect(fresh.stdout).toBe('0\nvi-here\n');
    } finally {
      await agent.client.destroySandbox('iso-c');
    }
    expect((await sh('iso-a', 'cat /tmp/a.txt')).stdout).toBe('from-a\n');
  });
});
