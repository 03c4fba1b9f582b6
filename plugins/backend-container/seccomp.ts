/**
 * A deny-list seccomp filter for sandboxes. Capabilities already keep root in
 * a sandbox away from mount, modules and raw devices; this closes the doors
 * capabilities do not: creating user namespaces (which hand back a full
 * capability set inside them), keyrings, BPF, perf, io_uring and the
 * new-mount API. Everything else is allowed, so ordinary tools (compilers,
 * package managers, debuggers) keep working.
 */

const EPERM = 1;
const ENOSYS = 38;

/** Syscalls a sandbox never needs, refused with EPERM. */
export const DENIED_SYSCALLS = Object.freeze([
  'acct',
  'add_key',
  'bpf',
  'delete_module',
  'finit_module',
  'fsconfig',
  'fsmount',
  'fsopen',
  'fspick',
  'init_module',
  'io_uring_enter',
  'io_uring_register',
  'io_uring_setup',
  'ioperm',
  'iopl',
  'kexec_file_load',
  'kexec_load',
  'keyctl',
  'lookup_dcookie',
  'mount',
  'mount_setattr',
  'move_mount',
  'name_to_handle_at',
  'open_by_handle_at',
  'open_tree',
  'perf_event_open',
  'pivot_root',
  'quotactl',
  'reboot',
  'request_key',
  'setns',
  'swapoff',
  'swapon',
  'syslog',
  'umount2',
  'unshare',
  'userfaultfd',
]);

/** clone() flags that create namespaces; each is refused on its own rule (seccomp compares, it cannot test "any bit"). */
const NAMESPACE_CLONE_FLAGS = Object.freeze({
  CLONE_NEWNS: 0x00020000,
  CLONE_NEWCGROUP: 0x02000000,
  CLONE_NEWUTS: 0x04000000,
  CLONE_NEWIPC: 0x08000000,
  CLONE_NEWUSER: 0x10000000,
  CLONE_NEWPID: 0x20000000,
  CLONE_NEWNET: 0x40000000,
});

function architectures(arch: string): string[] {
  if (arch === 'x64') return ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'];
  if (arch === 'arm64') return ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'];
  return []; // the native architecture only
}

export function seccompProfile(arch: string = process.arch) {
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: architectures(arch),
    syscalls: [
      { names: [...DENIED_SYSCALLS], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      // clone3 passes its flags in memory, out of seccomp's sight: ENOSYS makes
      // libc fall back to clone(), whose flags the rules below can see.
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      ...Object.values(NAMESPACE_CLONE_FLAGS).map((flag) => ({
        names: ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
      })),
    ],
  };
}

export const SECCOMP_PROFILE = seccompProfile();
