/**
 * The container backend's pure parts: the OCI config a sandbox gets, the
 * overlay options, the exec command line and how exit statuses read.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { bundleConfig, cpuShares, envList, type BundleInput } from '../../../plugins/backend-container/bundle.js';
import { EXEC_WRAPPER, execArgs, exitStatus } from '../../../plugins/backend-container/exec.js';
import backendContainer, { containerId } from '../../../plugins/backend-container/index.js';
import { overlayOptions } from '../../../plugins/backend-container/rootfs.js';
import { DENIED_SYSCALLS } from '../../../plugins/backend-container/seccomp.js';

const input: BundleInput = {
  sandboxId: 'web-0',
  rootfs: '/var/dsec/agent/sandboxes/web-0/rootfs',
  env: { LANG: 'C.UTF-8', APP: 'x' },
  workdir: '/work',
  user: { uid: 0, gid: 0 },
  resources: { cpu: 1.5, memoryMiB: 512, pids: 100 },
  cgroupsPath: '/dsec/dsec-12345678-web-0',
};

describe('bundle config', () => {
  const config = bundleConfig(input);

  it('runs the sandbox init with the spec environment, cwd and hostname', () => {
    expect(config.process.args).toEqual([
      '/.dsec/busybox',
      'sh',
      '-c',
      "exec </dev/null >/dev/null 2>&1; trap 'exit 0' TERM; while :; do /.dsec/busybox sleep 2147483647 & wait; done",
    ]);
    expect(config.process.env).toEqual(['APP=x', 'LANG=C.UTF-8', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin']);
    expect(config.process.cwd).toBe('/work');
    expect(config.process.terminal).toBe(false);
    expect(config.hostname).toBe('web-0');
    expect(config.root).toEqual({ path: input.rootfs, readonly: false });
  });

  it('isolates with fresh pid, network, ipc, uts, mount and cgroup namespaces', () => {
    expect(config.linux.namespaces.map((ns) => ns.type).sort()).toEqual(['cgroup', 'ipc', 'mount', 'network', 'pid', 'uts']);
    expect(config.linux.namespaces.every((ns) => !('path' in ns))).toBe(true);
  });

  it('grants no administrative capability and forbids new privileges', () => {
    expect(config.process.noNewPrivileges).toBe(true);
    for (const set of Object.values(config.process.capabilities)) {
      for (const cap of ['CAP_SYS_ADMIN', 'CAP_SYS_PTRACE', 'CAP_SYS_MODULE', 'CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_DAC_READ_SEARCH', 'CAP_SYS_RESOURCE']) {
        expect(set).not.toContain(cap);
      }
    }
    expect(config.process.capabilities.ambient).toEqual([]);
    expect(config.process.capabilities.inheritable).toEqual([]);
    const nonRoot = bundleConfig({ ...input, user: { uid: 1000, gid: 1000, additionalGids: [27] } });
    expect(nonRoot.process.capabilities.effective).toEqual([]);
    expect(nonRoot.process.user).toEqual({ uid: 1000, gid: 1000, additionalGids: [27] });
  });

  it('bind-mounts nothing of the host but its static busybox, read-only at /.dsec, and mounts /sys read-only', () => {
    const binds = config.mounts.filter((mount) => mount.type === 'bind' || mount.options.includes('bind') || mount.options.includes('rbind'));
    expect(binds).toEqual([{ destination: '/.dsec/busybox', type: 'bind', source: '/bin/busybox', options: ['rbind', 'ro', 'nosuid', 'nodev'] }]);
    expect(bundleConfig({ ...input, hostBusybox: '/opt/busybox' }).mounts.at(-1)?.source).toBe('/opt/busybox');
    expect(config.mounts.find((mount) => mount.destination === '/sys')?.options).toEqual(['nosuid', 'noexec', 'nodev', 'ro']);
    expect(config.mounts.map((mount) => mount.destination)).toEqual([
      '/proc', '/dev', '/dev/pts', '/dev/shm', '/dev/mqueue', '/sys', '/sys/fs/cgroup', '/.dsec/busybox',
    ]);
  });

  it('masks the kpage* files and makes kernel knobs read-only', () => {
    expect(config.linux.maskedPaths).toEqual(expect.arrayContaining(['/proc/kpagecgroup', '/proc/kpageflags', '/proc/kpagecount', '/proc/kcore', '/sys/firmware']));
    // Container root is host root here: the RAPL energy counters would be readable.
    expect(config.linux.maskedPaths).toContain('/sys/devices/virtual/powercap');
    // /.dsec read-only makes it a mountpoint: it cannot be renamed away with the busybox bind inside.
    expect(config.linux.readonlyPaths).toEqual(['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger', '/.dsec']);
  });

  it('sets memory without swap, pids, CPU quota and 1024 shares per core whatever the QoS class, under /dsec', () => {
    expect(config.linux.resources.memory).toEqual({ limit: 512 * 1024 * 1024, swap: 512 * 1024 * 1024 });
    expect(config.linux.resources.pids).toEqual({ limit: 100 });
    expect(config.linux.resources.cpu).toEqual({ quota: 150_000, period: 100_000, shares: 1536 });
    expect(config.linux.resources.devices).toEqual([{ allow: false, access: 'rwm' }]);
    expect(config.linux.cgroupsPath).toBe('/dsec/dsec-12345678-web-0');
    expect(cpuShares(1)).toBe(1024);
    expect(cpuShares(0.25)).toBe(256);
    expect(cpuShares(0.001)).toBe(2);
  });

  it('filters syscalls that would escape or reach the kernel directly', () => {
    const seccomp = config.linux.seccomp;
    expect(seccomp.defaultAction).toBe('SCMP_ACT_ALLOW');
    expect(DENIED_SYSCALLS).toEqual(expect.arrayContaining(['unshare', 'mount', 'setns', 'keyctl', 'bpf', 'io_uring_setup', 'open_by_handle_at']));
    expect(seccomp.syscalls.find((rule) => rule.names.includes('clone3'))?.errnoRet).toBe(38);
    expect(seccomp.syscalls.filter((rule) => rule.names[0] === 'clone')).toHaveLength(7);
  });

  it('is deterministic: the same input gives the same bytes', () => {
    expect(JSON.stringify(bundleConfig(input))).toBe(JSON.stringify(bundleConfig({ ...input, env: { APP: 'x', LANG: 'C.UTF-8' } })));
    expect(envList({ PATH: '/bin' })).toEqual(['PATH=/bin']);
  });
});

describe('overlay options', () => {
  it('lists the top layer first, as overlayfs wants', () => {
    expect(overlayOptions({ lowerDirs: ['/l/base', '/l/workspace', '/l/tools'], upperDir: '/s/upper', workDir: '/s/work', target: '/s/rootfs' })).toBe(
      'lowerdir=/l/tools:/l/workspace:/l/base,upperdir=/s/upper,workdir=/s/work,redirect_dir=off,metacopy=off,index=off',
    );
  });

  it('keeps the upper dir self-contained whatever the host defaults: no metadata-only copy-up, no directory redirects', () => {
    // A snapshot copies the upper dir alone: a metacopy file (no data) or a redirected dir (content left below) would be lost.
    const options = overlayOptions({ lowerDirs: ['/l/base'], upperDir: '/s/upper', workDir: '/s/work', target: '/s/rootfs' }).split(',');
    expect(options).toEqual(expect.arrayContaining(['metacopy=off', 'redirect_dir=off', 'index=off']));
  });

  it('refuses paths that would break the option string, and an empty stack', () => {
    expect(() => overlayOptions({ lowerDirs: ['/l/a:b'], upperDir: '/u', workDir: '/w', target: '/t' })).toThrow(/free of ',' and ':'/);
    expect(() => overlayOptions({ lowerDirs: [], upperDir: '/u', workDir: '/w', target: '/t' })).toThrow(/no layers were resolved/);
  });
});

describe('exec', () => {
  it('runs the command through the output wrapper with env, cwd and a pid file', () => {
    const args = execArgs({ containerId: 'c1', pidFile: '/s/exec.pid', request: { cmd: ['ls', '-l'], env: { A: '1' }, workdir: '/tmp' } });
    expect(args.slice(0, 10)).toEqual(['exec', '--preserve-fds', '2', '--pid-file', '/s/exec.pid', '--env', 'A=1', '--cwd', '/tmp', 'c1']);
    expect(args.slice(10, 13)).toEqual(['/.dsec/busybox', 'sh', '-c']);
    expect(args.slice(14)).toEqual(['dsec-exec', 'ls', '-l']);
  });

  it('runs a bare command name from PATH, not a busybox applet or builtin, and keeps its status and streams apart', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'dsec-exec-wrapper-'));
    try {
      await writeFile(path.join(dir, 'ls'), '#!/bin/busybox sh\necho "path ls $*"; echo oops >&2; exit 5\n', { mode: 0o755 });
      const run = (cmd: string[]) => {
        const result = spawnSync('/bin/busybox', [...EXEC_WRAPPER.slice(1), ...cmd], {
          env: { PATH: `${dir}:/usr/bin:/bin` },
          stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'],
        });
        return { status: result.status, out: String(result.output[3]), err: String(result.output[4]) };
      };
      expect(run(['ls', 'a b', '*'])).toEqual({ status: 5, out: 'path ls a b *\n', err: 'oops\n' });
      expect(run(['false'])).toEqual({ status: 1, out: '', err: '' });
      expect(run(['no-such-command'])).toEqual({ status: 127, out: '', err: 'dsec-exec: no-such-command: not found\n' });
      expect(run(['/bin/sh', '-c', 'exit 3'])).toMatchObject({ status: 3 });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a default output cap over what the agent can hold in memory', () => {
    expect(() => backendContainer({ defaultOutputCapBytes: 32 * 1024 * 1024 })).not.toThrow();
    expect(() => backendContainer({ defaultOutputCapBytes: 64 * 1024 * 1024 })).toThrow(
      expect.objectContaining({ code: 'DSEC_PLUGIN_OPTIONS', message: expect.stringContaining('defaultOutputCapBytes must be a whole number from 0 to 33554432') }),
    );
  });

  it('reads 128+N as death by signal N, and a timeout as SIGKILL', () => {
    expect(exitStatus(0, false)).toEqual({ exitCode: 0, signal: null });
    expect(exitStatus(1, false)).toEqual({ exitCode: 1, signal: null });
    expect(exitStatus(137, false)).toEqual({ exitCode: 137, signal: 'SIGKILL' });
    expect(exitStatus(143, false)).toEqual({ exitCode: 143, signal: 'SIGTERM' });
    expect(exitStatus(0, true)).toEqual({ exitCode: 0, signal: 'SIGKILL' });
  });
});

describe('container id', () => {
  it('is unique per agent root and shows the sandbox id', () => {
    expect(containerId('/a/agent', 'web-0')).toMatch(/^dsec-[0-9a-f]{8}-web-0$/);
    expect(containerId('/a/agent', 'web-0')).toBe(containerId('/a/agent/', 'web-0'));
    expect(containerId('/b/agent', 'web-0')).not.toBe(containerId('/a/agent', 'web-0'));
  });
});
