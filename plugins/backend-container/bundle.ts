/**
 * The OCI bundle's config.json for one sandbox, as a pure function of what
 * the sandbox asks for. Nothing here touches the machine, so every isolation
 * setting can be read (and unit-tested) in one place.
 */
import type { ContainerShape } from '../../core/plugin-api.js';
import { SECCOMP_PROFILE } from './seccomp.js';

/**
 * The host's static busybox, bind-mounted read-only into every sandbox at
 * SANDBOX_BUSYBOX: the init and the exec wrapper run it, never the sandbox's
 * own /bin/sh or `sleep`, which code inside may replace (and so forge the
 * status and output of every later exec, or break its init). `/.dsec` is
 * also in the read-only paths, so it becomes a mountpoint of its own: a
 * sandbox can neither rename it away (taking the bind along) and plant its
 * own `/.dsec/busybox`, nor add files to it.
 */
export const HOST_BUSYBOX = '/bin/busybox';
export const SANDBOX_PRIVATE_DIR = '/.dsec';
export const SANDBOX_BUSYBOX = `${SANDBOX_PRIVATE_DIR}/busybox`;

/**
 * The sandbox's PID 1. ash's `wait` reaps orphans re-parented to it, and a
 * TERM ends it cleanly; the sleep is only there so the loop does not spin.
 * runc hands the init its own stdio, the host's `init.log`: the init trades
 * it for /dev/null first, or any process inside could write that host file
 * (or learn its path) through /proc/1/fd.
 */
export const SANDBOX_INIT = Object.freeze([
  SANDBOX_BUSYBOX,
  'sh',
  '-c',
  `exec </dev/null >/dev/null 2>&1; trap 'exit 0' TERM; while :; do ${SANDBOX_BUSYBOX} sleep 2147483647 & wait; done`,
]);

/**
 * A shape's own PID 1 (ContainerShape.init), started the same way: busybox
 * trades the host's init.log for /dev/null, then execs the init in its place
 * (same pid), so it never holds a host file either.
 */
export function shapedInit(init: readonly string[]): string[] {
  return [SANDBOX_BUSYBOX, 'sh', '-c', 'exec </dev/null >/dev/null 2>&1; exec "$@"', 'dsec-init', ...init];
}

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Capabilities a sandbox's root keeps: the set container engines built on
 * runc (containerd, Docker) give by default, minus NET_RAW (no network to
 * speak of, and raw sockets are a classic attack surface). No SYS_ADMIN,
 * SYS_PTRACE, SYS_MODULE, NET_ADMIN, DAC_READ_SEARCH...
 */
export const SANDBOX_CAPABILITIES = Object.freeze([
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
]);

/** /proc and /sys entries a sandbox must not read (kpage* crashed a kernel under a recursive grep). */
export const MASKED_PATHS = Object.freeze([
  '/proc/acpi',
  '/proc/asound',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  // RAPL energy counters: a power side channel on other tenants' secrets (PLATYPUS, CVE-2020-8694).
  '/sys/devices/virtual/powercap',
  '/proc/kpagecgroup',
  '/proc/kpageflags',
  '/proc/kpagecount',
]);

export const READONLY_PATHS = Object.freeze(['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger', SANDBOX_PRIVATE_DIR]);

export const CPU_PERIOD_US = 100_000;
const MIB = 1024 * 1024;

export interface BundleUser {
  readonly uid: number;
  readonly gid: number;
  readonly additionalGids?: readonly number[];
  /** Its home directory, from the sandbox's passwd (for HOME in the exec server's commands). */
  readonly home?: string;
}

export interface BundleInput {
  /** Becomes the hostname. */
  readonly sandboxId: string;
  /** Absolute path of the mounted root filesystem. */
  readonly rootfs: string;
  readonly env: Readonly<Record<string, string>>;
  readonly workdir: string;
  readonly user: BundleUser;
  readonly resources: { readonly cpu: number; readonly memoryMiB: number; readonly pids: number };
  /** e.g. `/dsec/<container id>`. */
  readonly cgroupsPath: string;
  /** @default 65536 */
  readonly maxOpenFiles?: number;
  /** The host's static busybox to bind-mount at SANDBOX_BUSYBOX. @default HOST_BUSYBOX */
  readonly hostBusybox?: string;
  /** What a backend built on this one asks for (checked by checkContainerShape first). @default none */
  readonly shape?: ContainerShape;
  /**
   * The exec server (dsec-guest) as PID 1, bound read-only from this host
   * path: it runs as root (it starts each command as `user`), with its two
   * FIFOs as fds 3 and 4 (`runc run --preserve-fds 2`). @default none: the
   * idle init, and exec through the runtime
   */
  readonly execServer?: { readonly binary: string };
}

/**
 * The shape's binds and tmpfs mounts, in the OCI form, after the backend's
 * own. Scratch is world-writable with the sticky bit (like /tmp), so a
 * sandbox whose user is not root can use it, and capped in size.
 */
export function shapeMounts(shape: ContainerShape | undefined) {
  return [
    ...(shape?.binds ?? []).map((bind) => ({
      destination: bind.target,
      type: 'bind',
      source: bind.source,
      options: ['rbind', bind.readonly ? 'ro' : 'rw', 'nosuid', 'nodev'],
    })),
    ...(shape?.tmpfs ?? []).map((tmpfs) => ({
      destination: tmpfs.target,
      type: 'tmpfs',
      source: 'tmpfs',
      options: ['nosuid', 'nodev', 'mode=1777', `size=${tmpfs.sizeMiB}m`],
    })),
  ];
}

/** The cgroup limits for a sandbox's resources, in the OCI `linux.resources` shape. */
export function linuxResources(resources: BundleInput['resources']) {
  const memoryBytes = Math.round(resources.memoryMiB * MIB);
  return {
    devices: [{ allow: false, access: 'rwm' }],
    // swap == limit: memory.memsw caps memory + swap together, so no swap at all.
    memory: { limit: memoryBytes, swap: memoryBytes },
    pids: { limit: resources.pids },
    cpu: {
      quota: Math.max(1000, Math.round(resources.cpu * CPU_PERIOD_US)),
      period: CPU_PERIOD_US,
      shares: cpuShares(resources.cpu),
    },
  };
}

/**
 * The CPU weight: 1024 per core asked for, whatever the QoS class. Lowering
 * best-effort sandboxes is the density-qos plugin's job, through the idleCpu
 * trait (cpu.idle, the lowest weight there is), not a fixed cut here.
 */
export function cpuShares(cpu: number): number {
  return Math.max(2, Math.round(cpu * 1024));
}

/** `KEY=value` lines with a PATH default; sorted so the same spec gives the same bytes. */
export function envList(env: Readonly<Record<string, string>>): string[] {
  const merged: Record<string, string> = { PATH: DEFAULT_PATH, ...env };
  return Object.keys(merged)
    .sort()
    .map((key) => `${key}=${merged[key]}`);
}

/** Where the exec server is bound in the sandbox, and how it is started (exec-server.ts). */
export const EXEC_SERVER_IN_SANDBOX = `${SANDBOX_PRIVATE_DIR}/guest`;
export const EXEC_SERVER_ARGS = Object.freeze([EXEC_SERVER_IN_SANDBOX, '--fds', '3,4']);
const ROOT_USER: BundleUser = { uid: 0, gid: 0 };

export function bundleConfig(input: BundleInput) {
  // The exec server starts every command as the sandbox's user, so it is root itself.
  const initUser = input.execServer ? ROOT_USER : input.user;
  const isRoot = initUser.uid === 0;
  const capabilities = [...SANDBOX_CAPABILITIES];
  const readonlyRoot = input.shape?.readonlyRoot === true;
  const args = input.shape?.init ? shapedInit(input.shape.init) : input.execServer ? shapedInit(EXEC_SERVER_ARGS) : [...SANDBOX_INIT];
  return {
    ociVersion: '1.0.2-dev',
    process: {
      terminal: false,
      user: {
        uid: initUser.uid,
        gid: initUser.gid,
        ...(initUser.additionalGids?.length ? { additionalGids: [...initUser.additionalGids] } : {}),
      },
      args,
      env: envList(input.env),
      cwd: input.workdir,
      // A non-root user keeps the bounding set only (as with any setuid-free
      // login); inheritable and ambient stay empty (CVE-2022-24769).
      capabilities: {
        bounding: capabilities,
        effective: isRoot ? capabilities : [],
        permitted: isRoot ? capabilities : [],
        inheritable: [],
        ambient: [],
      },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: input.maxOpenFiles ?? 65536, soft: input.maxOpenFiles ?? 65536 }],
      noNewPrivileges: true,
    },
    // A read-only root is also mounted read-only (an overlay without upper dir, rootfs.ts); this keeps it so in the sandbox.
    root: { path: input.rootfs, readonly: readonlyRoot },
    hostname: input.sandboxId,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      {
        destination: '/dev/pts',
        type: 'devpts',
        source: 'devpts',
        options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'],
      },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      // The sandbox's own cgroup, read-only (cgroup namespace): lets tools see their limits.
      { destination: '/sys/fs/cgroup', type: 'cgroup', source: 'cgroup', options: ['nosuid', 'noexec', 'nodev', 'relatime', 'ro'] },
      // runc creates the mountpoint (and /.dsec) in the upper layer; snapshots leave /.dsec out.
      { destination: SANDBOX_BUSYBOX, type: 'bind', source: input.hostBusybox ?? HOST_BUSYBOX, options: ['rbind', 'ro', 'nosuid', 'nodev'] },
      ...(input.execServer
        ? [{ destination: EXEC_SERVER_IN_SANDBOX, type: 'bind', source: input.execServer.binary, options: ['rbind', 'ro', 'nosuid', 'nodev'] }]
        : []),
      ...shapeMounts(input.shape),
    ],
    linux: {
      resources: linuxResources(input.resources),
      cgroupsPath: input.cgroupsPath,
      namespaces: [
        { type: 'pid' },
        // A fresh network namespace holds only a loopback interface.
        { type: 'network' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'cgroup' },
      ],
      seccomp: SECCOMP_PROFILE,
      maskedPaths: [...MASKED_PATHS],
      // A read-only root leaves /dev's tmpfs read-only too (its devices still work), so writes
      // go only to the shape's scratch and /dev/shm; the mounts below /dev stay as they are.
      readonlyPaths: readonlyRoot ? [...READONLY_PATHS, '/dev'] : [...READONLY_PATHS],
    },
  };
}

export type BundleConfig = ReturnType<typeof bundleConfig>;
