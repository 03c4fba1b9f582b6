/**
 * One real microVM (qemu -M microvm, TCG here) through a real node agent:
 * exec with the spec's env, workdir and user; files in and out; the layers
 * read-only with writes landing in the upper; pause to a file with qemu gone
 * and resume with a background process's memory intact; destroy leaving no
 * process and no file. One VM serves the whole file: each boot costs seconds.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxInfo, SandboxSpec } from '../../../core/live.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { isRunning, killQemuUnder, pidOfHandle, qemuProcessesUnder } from './vm-processes.js';

const ID = 'vm-life';
let agent: TestAgent;
let info: SandboxInfo;
let bootMs = 0;

function spec(id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
  return agent.spec(id, {
    backend: 'microvm',
    env: { GREETING: 'hello from the spec' },
    workdir: '/tmp',
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    ...extra,
  });
}

/** sha256 of every EROFS image under the agent's root: the layers the guest reads. */
function layerImageDigests(): Record<string, string> {
  const digests: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.erofs')) digests[full] = createHash('sha256').update(readFileSync(full)).digest('hex');
    }
  };
  walk(agent.root);
  return digests;
}

beforeAll(async () => {
  agent = await TestAgent.start({ backends: [{ name: 'backend-microvm', options: {} }] });
  const started = Date.now();
  info = await agent.client.createSandbox(spec(ID));
  bootMs = Date.now() - started;
}, 120_000);

afterAll(async () => {
  try {
    await agent?.dispose();
  } finally {
    if (agent) killQemuUnder(agent.tmp);
  }
});

describe('a microVM sandbox', () => {
  it('boots a guest kernel of its own and runs commands with the spec env, workdir and user', async () => {
    expect(info.status).toBe('running');
    expect(info.handle).toMatch(/^qemu pid \d+ \((tcg|kvm)\)$/);
    console.log(`microVM create-to-running: ${bootMs} ms (${info.handle})`);
    const result = await agent.client.exec(ID, { cmd: ['sh', '-c', 'echo "$GREETING"; pwd; id -u; uname -r; cat /proc/1/comm'] });
    expect(result.exitCode).toBe(0);
    const [greeting, cwd, uid, kernel, init] = result.stdout.trim().split('\n');
    expect(greeting).toBe('hello from the spec');
    expect(cwd).toBe('/tmp');
    expect(uid).toBe('0');
    expect(kernel).toBe(readFileSync('/var/lib/dsec/guest-kernel/version', 'utf8').trim());
    expect(init).toBe('guest');
  });

  it('reports exit codes, stderr, the request env and stdin', async () => {
    const result = await agent.client.exec(ID, { cmd: ['sh', '-c', 'cat; echo "$EXTRA" >&2; exit 3'], stdin: 'from stdin', env: { EXTRA: 'extra' } });
    expect(result).toMatchObject({ exitCode: 3, stdout: 'from stdin', stderr: 'extra\n', timedOut: false });
  });

  it('kills a command that runs past its timeout', async () => {
    const result = await agent.client.exec(ID, { cmd: ['sleep', '30'], timeoutMs: 500 });
    expect(result.timedOut).toBe(true);
    expect(result.exitCode).toBeNull();
  });

  it('writes and reads files through the guest agent, binary content intact', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 10, 13, 0x80]);
    await agent.client.writeFile(ID, { path: '/work/deep/data.bin', data: bytes.toString('base64'), mode: 0o600 });
    const read = await agent.client.readFile(ID, { path: '/work/deep/data.bin' });
    expect(Buffer.from(read.data, 'base64').equals(bytes)).toBe(true);
    expect(read.size).toBe(bytes.length);
    const listed = await agent.client.exec(ID, { cmd: ['stat', '-c', '%a %s', '/work/deep/data.bin'] });
    expect(listed.stdout.trim()).toBe('600 7');
  });

  it("keeps what code in the guest writes to the console off the host's disk once it booted", async () => {
    const consoleLog = path.join(agent.root, 'sandboxes', ID, 'qemu-console.log');
    const size = statSync(consoleLog).size;
    expect(readFileSync(consoleLog, 'utf8')).toContain('dsec-init: starting the guest agent');
    await agent.client.exec(ID, { cmd: ['sh', '-c', 'for i in $(seq 200); do echo flooding the console > /dev/console; done'] });
    expect(statSync(consoleLog).size).toBe(size);
  });

  it('says a missing file is DSEC_FILE_NOT_FOUND', async () => {
    await expect(agent.client.readFile(ID, { path: '/no/such/file' })).rejects.toMatchObject({ code: 'DSEC_FILE_NOT_FOUND' });
  });

  it('stacks the layers read-only under an overlay: writes land in the upper, the layer images stay as they were', async () => {
    const before = layerImageDigests();
    expect(Object.keys(before).length).toBeGreaterThan(0);
    const result = await agent.client.exec(ID, {
      cmd: ['sh', '-c', 'grep " / " /proc/mounts; echo changed > /bin/busybox-note; rm /bin/ls && echo removed; test -e /bin/ls || echo gone'],
    });
    expect(result.stdout).toMatch(/^overlay \/ overlay /m);
    expect(result.stdout).toContain('removed\ngone');
    const blockDevices = await agent.client.exec(ID, { cmd: ['sh', '-c', 'for d in /sys/block/vd*; do echo "$(cat $d/serial) ro=$(cat $d/ro)"; done'] });
    expect(blockDevices.stdout).toMatch(/^dsec-layer-0 ro=1$/m);
    expect(layerImageDigests()).toEqual(before);
  });

  it("hands the guest the store's own EROFS image of a layer where it keeps one, building no copy", async () => {
    const storage = await agent.client.storageStats();
    if (storage.format !== 'erofs') return; // a store of trees: the backend builds images (disk-upper.test.ts)
    expect(existsSync(path.join(agent.root, 'backend-microvm', 'images'))).toBe(false);
  });

  it('pauses to a state file with its qemu gone, and resumes with files and a background process memory intact', async () => {
    // A background process keeps a random value only in its memory, and writes it out on SIGUSR1.
    const started = await agent.client.exec(ID, {
      cmd: ['sh', '-c', `setsid sh -c 'trap "echo \\$V > /tmp/after" USR1; V=$(cat /proc/sys/kernel/random/uuid); echo "$V" > /tmp/before; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & echo $!`],
    });
    const pid = started.stdout.trim();
    // Its trap is set once /tmp/before is there (a USR1 before that would end it).
    const ready = await agent.client.exec(ID, { cmd: ['sh', '-c', 'for i in $(seq 100); do test -s /tmp/before && exit 0; usleep 50000; done; exit 1'] });
    expect(ready.exitCode).toBe(0);
    await agent.client.writeFile(ID, { path: '/tmp/written-before-pause', data: Buffer.from('still here').toString('base64') });
    const qemuPid = pidOfHandle((await agent.client.getSandbox(ID)).handle);

    const paused = await agent.client.pauseSandbox(ID);
    expect(paused.status).toBe('paused');
    const stateFile = path.join(agent.root, 'sandboxes', ID, 'vm.state');
    expect(statSync(stateFile).size).toBeGreaterThan(1024 * 1024);
    expect(isRunning(qemuPid)).toBe(false);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    expect((await agent.client.getSandbox(ID)).status).toBe('paused');

    const resumed = await agent.client.resumeSandbox(ID);
    expect(resumed.status).toBe('running');
    expect(existsSync(stateFile)).toBe(false);
    const clock = await agent.client.exec(ID, { cmd: ['date', '+%s'] });
    expect(Math.abs(Number(clock.stdout) - Date.now() / 1000)).toBeLessThan(5);
    const file = await agent.client.readFile(ID, { path: '/tmp/written-before-pause' });
    expect(Buffer.from(file.data, 'base64').toString()).toBe('still here');
    const check = await agent.client.exec(ID, {
      cmd: ['sh', '-c', `kill -USR1 ${pid} && for i in $(seq 100); do test -s /tmp/after && break; usleep 50000; done; cat /tmp/before /tmp/after`],
    });
    expect(check.stderr).toBe('');
    const [before, after] = check.stdout.trim().split('\n');
    expect(before).toMatch(/^[0-9a-f-]{36}$/);
    expect(after).toBe(before);
  });

  it('reports the qemu process memory and CPU as the node usage', async () => {
    const usage = await agent.client.nodeUsage();
    expect(usage.sandboxes.microvm?.running).toBe(1);
    expect(usage.used.memoryMiB).toBeGreaterThan(32);
    console.log(`microVM node usage: ${JSON.stringify(usage.used)}`);
  });

  it('destroys the VM leaving no qemu process and no file', async () => {
    await agent.client.destroySandbox(ID);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    expect(existsSync(path.join(agent.root, 'sandboxes', ID))).toBe(false);
    expect((await agent.client.destroySandbox(ID)).existed).toBe(false);
  });
});
