/**
 * A sandbox whose code works against the host, checked through a real agent
 * (dist/: `npm run build` first), runc and storage-local: what it plants in
 * its writable layer, the files it can reach through /proc, and requests
 * that would make the agent hold more than it can. Each time the host's
 * files stay untouched and the agent keeps answering.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LayerRef, SandboxSpec } from '../../../core/live.js';
import { guestAgentBinaryPath } from '../../../core/guest/binary.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;
let marker: string;

const spec = (id: string, layers: LayerRef[] = [agent.baseLayer]): SandboxSpec =>
  agent.spec(id, { layers, resources: { cpu: 1, memoryMiB: 128, pids: 128 } });

const sh = (id: string, script: string) => agent.client.exec(id, { cmd: ['/bin/sh', '-c', script], timeoutMs: 30_000 });
const sandboxDir = (id: string): string => path.join(agent.root, 'sandboxes', id);
const sha256Of = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

beforeAll(async () => {
  agent = await TestAgent.start({ storage: 'storage-local' });
  marker = path.join(agent.tmp, 'host-marker.txt');
  writeFileSync(marker, 'host secret\n');
});

afterAll(async () => {
  await agent?.dispose();
});

describe('a hostile sandbox', () => {
  it('is destroyed, folder and all, after nesting directories deeper than PATH_MAX in its writable layer', async () => {
    await agent.client.createSandbox(spec('deep'));
    // Each round wraps the tree in one more 200-character directory: 25 rounds make paths of 5000+ bytes.
    const nested = await sh(
      'deep',
      'cd /tmp && n=$(head -c 200 /dev/zero | tr "\\0" d) && mkdir x && i=0 && ' +
        'while [ $i -lt 25 ]; do mkdir w && mv x "w/$n" && mv w x || exit 1; i=$((i+1)); done && echo nested',
    );
    expect(nested).toMatchObject({ exitCode: 0, stdout: 'nested\n' });
    await expect(agent.client.destroySandbox('deep')).resolves.toMatchObject({ id: 'deep', existed: true });
    expect(existsSync(sandboxDir('deep'))).toBe(false);
    await expect(agent.client.getSandbox('deep')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
  });

  it('holds no host file through its init: the exec server is not dumpable, so /proc/1/fd (its FIFOs to the agent) cannot be read or opened', async () => {
    await agent.client.createSandbox(spec('fds'));
    try {
      const initLog = path.join(sandboxDir('fds'), 'init.log');
      const before = existsSync(initLog) ? readFileSync(initLog, 'utf8') : '';
      const fds = await sh(
        'fds',
        'for n in 0 1 2 3 4; do readlink /proc/1/fd/$n || echo "no $n"; done; for n in 1 2 3 4; do (echo planted > /proc/1/fd/$n) 2>/dev/null && echo "wrote $n"; done; (cat /proc/1/fd/3) 2>/dev/null && echo "read 3"; true',
      );
      expect(fds.stdout).toBe('no 0\nno 1\nno 2\nno 3\nno 4\n');
      expect(fds.stdout).not.toContain(agent.root);
      expect(existsSync(initLog) ? readFileSync(initLog, 'utf8') : '').toBe(before);
      // What the server runs holds nothing of the host: its output goes to pipes to the server, never a host file.
      const children = await sh('fds', 'for s in /proc/[0-9]*/stat; do set -- $(cat $s); [ "$4" = 1 ] && readlink ${s%/stat}/fd/1; done; true');
      expect(children.stdout).toMatch(/^(pipe:\[\d+\]\n)+$/);
    } finally {
      await agent.client.destroySandbox('fds');
    }
  });

  it('is snapshotted without the host-side copy following its symlinks, hard links or excluded paths out of the copy', async () => {
    const markerHash = sha256Of(marker);
    await agent.client.createSandbox(spec('planter'));
    try {
      const planted = await sh(
        'planter',
        [
          'mkdir -p /root',
          `ln -s ${marker} /root/to-host-file`,
          `ln -s ${path.dirname(marker)} /root/to-host-dir`,
          'ln -s /etc/shadow /root/shadow',
          'ln /etc/passwd /root/passwd-link',
          'mkfifo /root/fifo',
          'echo mine > /root/mine.txt',
        ].join(' && ') + ' && echo planted',
      );
      expect(planted).toMatchObject({ exitCode: 0, stdout: 'planted\n' });
      // An excluded path through a symlink of the sandbox must never reach the host's folder.
      const record = await agent.client.snapshotSandbox('planter', {
        as: 'planted@1.0.0',
        exclude: [`/root/to-host-dir/${path.basename(marker)}`, '/root/to-host-file'],
      });
      expect(sha256Of(marker)).toBe(markerHash);
      const entries = new Map((await agent.client.layerListing('planted', '1.0.0')).entries.map((entry) => [entry.path, entry]));
      expect(entries.get('root/to-host-dir')).toMatchObject({ type: 'symlink', target: path.dirname(marker) });
      expect(entries.get('root/shadow')).toMatchObject({ type: 'symlink', target: '/etc/shadow', size: 0 });
      expect(entries.has('root/to-host-file')).toBe(false);
      expect(entries.has('root/fifo')).toBe(false);
      expect(entries.get('root/mine.txt')).toMatchObject({ type: 'file', size: 5 });
      // runc's mountpoint for the host busybox is never part of a layer.
      expect([...entries.keys()].filter((entry) => entry === '.dsec' || entry.startsWith('.dsec/'))).toEqual([]);
      // The hard link is the sandbox's own copied-up passwd, never a host file.
      await agent.client.createSandbox(spec('reader', [agent.baseLayer, { name: record.name, version: record.version, digest: record.digest }]));
      const read = await sh('reader', 'cat /root/passwd-link; cat /root/to-host-dir/host-marker.txt 2>&1; true');
      expect(read.stdout).toContain('root:');
      expect(read.stdout).not.toContain('host secret');
    } finally {
      await agent.client.destroySandbox('reader');
      await agent.client.destroySandbox('planter');
    }
  });
});

describe('a sandbox that replaces its own shell', () => {
  it('cannot forge the status or output of a later exec, nor write, move or unmount the host binaries of its exec server and wrapper', async () => {
    const busyboxHash = sha256Of('/bin/busybox');
    const serverHash = sha256Of(guestAgentBinaryPath());
    await agent.client.createSandbox(spec('forger'));
    try {
      // rm first: /bin/sh is a symlink to the sandbox's busybox, which `false` still needs.
      const planted = await sh('forger', "rm /bin/sh && printf '#!/bin/busybox sh\\necho forged\\nexit 0\\n' > /bin/sh && chmod 755 /bin/sh && echo planted");
      expect(planted).toMatchObject({ exitCode: 0, stdout: 'planted\n' });
      // The user's command is still the sandbox's own: its /bin/sh is now the forger.
      await expect(sh('forger', 'exit 3')).resolves.toMatchObject({ exitCode: 0, stdout: 'forged\n' });

      const falseResult = await agent.client.exec('forger', { cmd: ['false'], timeoutMs: 30_000 });
      expect(falseResult.exitCode).toBe(1);
      expect(falseResult.stdout).not.toContain('forged');

      const attempts = [
        'echo x > /.dsec/busybox',
        'rm -f /.dsec/busybox',
        'echo x > /.dsec/guest',
        'rm -f /.dsec/guest',
        'mv /.dsec /moved',
        'touch /.dsec/planted',
        'chmod 777 /.dsec/busybox',
        'chmod 777 /.dsec/guest',
        'umount /.dsec/busybox',
        'umount /.dsec/guest',
        'umount -l /.dsec',
        'kill -9 1',
      ];
      // `kill -9 1` and `kill -9 -1` succeed as calls (the signal is sent) and do nothing to PID 1: they are tried, not counted.
      const script = `for t in ${attempts.map((attempt) => `'${attempt}'`).join(' ')}; do case "$t" in kill*) (eval "$t") 2>/dev/null; continue;; esac; if (eval "$t") 2>/dev/null; then echo "allowed: $t"; fi; done; sleep 0.2; tr '\\0' ' ' < /proc/1/cmdline`;
      const probed = await agent.client.exec('forger', { cmd: ['/bin/busybox', 'sh', '-c', script], timeoutMs: 30_000 });
      expect(probed.exitCode).toBe(0);
      expect(probed.stdout).not.toContain('allowed:');
      // kill from inside reaches no PID 1: it is still the exec server.
      expect(probed.stdout.split('\n').at(-1)).toBe('/.dsec/guest --fds 3,4 ');
      expect(sha256Of('/bin/busybox')).toBe(busyboxHash);
      expect(sha256Of(guestAgentBinaryPath())).toBe(serverHash);
      // Killing every process it may (all but PID 1 and itself) leaves the server serving.
      await expect(sh('forger', 'kill -9 -1; echo survived')).resolves.toMatchObject({ stdout: 'forged\n' });
      await expect(agent.client.exec('forger', { cmd: ['/bin/busybox', 'sh', '-c', 'kill -9 -1; echo survived'] })).resolves.toMatchObject({ exitCode: 0, stdout: 'survived\n' });
      // The init is alive and the server still reports true statuses.
      await expect(agent.client.exec('forger', { cmd: ['true'] })).resolves.toMatchObject({ exitCode: 0, stdout: '' });
      await expect(agent.client.getSandbox('forger')).resolves.toMatchObject({ status: 'running' });
    } finally {
      await agent.client.destroySandbox('forger');
    }
  });
});

describe('requests the agent cannot hold', () => {
  it('refuses an exec asking to capture more output than the agent keeps in memory, and keeps answering', async () => {
    await agent.client.createSandbox(spec('greedy'));
    try {
      const started = Date.now();
      const refused = await agent.client
        .exec('greedy', { cmd: ['/bin/sh', '-c', 'head -c 600m /dev/zero'], maxOutputBytes: 700 * 1024 * 1024 })
        .catch((error: unknown) => error);
      expect(refused).toMatchObject({ code: 'DSEC_AGENT_REQUEST' });
      expect((refused as Error).message).toContain('maxOutputBytes must be at most 33554432');
      expect(Date.now() - started).toBeLessThan(5_000);
      await expect(agent.client.exec('greedy', { cmd: ['echo', 'fine'] })).resolves.toMatchObject({ exitCode: 0, stdout: 'fine\n' });
    } finally {
      await agent.client.destroySandbox('greedy');
    }
  });
});
