/**
 * dsec-guest is out of reach of the processes it runs: it is not dumpable,
 * so a task running as root in the same pid namespace can neither read its
 * /proc/1/environ or memory nor ptrace it or take its file descriptors (its
 * connection to the host) with pidfd_getfd. The agent runs as in a FnCall
 * worker: PID 1, root with a container sandbox's capabilities (no
 * CAP_SYS_PTRACE, CAP_SYS_ADMIN or CAP_PERFMON, which would override the
 * check), the same its tasks get, so only dumpability stands in the way. What it runs stays an ordinary process: dumpable
 * again after execve, with its own /proc/self readable, as root or as
 * another user.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SANDBOX_CAPABILITIES } from '../../../plugins/backend-container/bundle.js';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { buildGuestAgent, startDsecGuest, type RunningAgent } from './fixture.js';

const agents: RunningAgent[] = [];
const clients: GuestAgentClient[] = [];

beforeAll(() => {
  buildGuestAgent();
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const agent of agents.splice(0)) await agent.stop();
});

async function agentAsPid1(): Promise<GuestAgentClient> {
  const agent = await startDsecGuest({ pidNamespace: true, capabilities: SANDBOX_CAPABILITIES });
  agents.push(agent);
  const client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-isolation', timeoutMs: 10_000 });
  clients.push(client);
  return client;
}

/**
 * Python run by the agent (root, its capabilities): prints one line per attempt on `target` ("name ok" or "name <errno name>"). ctypes
 * calls the system calls directly, so nothing in between retries or hides
 * an error.
 */
const PROBE = String.raw`
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
target = int(sys.argv[1])
def report(name, ok):
    print(name, 'ok' if ok else errno.errorcode[ctypes.get_errno()], flush=True)
def try_open(name, read):
    try:
        with open('/proc/%d/%s' % (target, name), 'rb') as f:
            f.read(16) if read else None
        print(name, 'ok', flush=True)
    except OSError as e:
        print(name, errno.errorcode[e.errno], flush=True)
try_open('environ', True)
try_open('mem', False)  # opening is the check; offset 0 is not mapped
pidfd = os.pidfd_open(target)
report('pidfd_getfd', libc.syscall(438, pidfd, 0, 0) >= 0)
attached = libc.ptrace(16, target, 0, 0) == 0  # PTRACE_ATTACH
report('ptrace', attached)
if attached:
    libc.ptrace(17, target, 0, 0)  # PTRACE_DETACH
`;

async function probe(client: GuestAgentClient, target: string): Promise<Record<string, string>> {
  // 'sibling': a process the same command started, for comparison.
  const script = target === 'sibling' ? `sleep 100 & python3 -c "$0" $!; kill -9 $!` : `python3 -c "$0" ${target}`;
  const result = await client.exec({ path: '/bin/sh', args: ['-c', script, PROBE] });
  expect(result.stderr.toString()).toBe('');
  return Object.fromEntries(
    result.stdout
      .toString()
      .trim()
      .split('\n')
      .map((line) => line.split(' ') as [string, string]),
  );
}

describe('dsec-guest isolation', () => {
  it('keeps a root task without CAP_SYS_PTRACE out of the agent: no /proc/1/environ or mem, no ptrace, no pidfd_getfd', async () => {
    const client = await agentAsPid1();
    const capabilities = await client.exec({ path: '/bin/sh', args: ['-c', 'grep -E "^Cap(Eff|Prm)" /proc/1/status /proc/self/status | cut -f2 | sort -u'] });
    expect(capabilities.stdout.toString().trim().split('\n')).toHaveLength(1); // the task has the agent's capabilities
    expect(await probe(client, '1')).toEqual({ environ: 'EACCES', mem: 'EACCES', pidfd_getfd: 'EPERM', ptrace: 'EPERM' });
  });

  it('lets the same task reach an ordinary process the agent started, so the refusals above are the agent\'s doing', async () => {
    const client = await agentAsPid1();
    expect(await probe(client, 'sibling')).toEqual({ environ: 'ok', mem: 'ok', pidfd_getfd: 'ok', ptrace: 'ok' });
  });

  it('runs commands as ordinary processes: dumpable again after exec, their own /proc/self readable, as root and as another user', async () => {
    const client = await agentAsPid1();
    const script = String.raw`
import ctypes, os
libc = ctypes.CDLL(None)
with open('/proc/self/environ', 'rb') as f:
    environ = f.read()
print(libc.prctl(3, 0, 0, 0, 0), os.getuid(), b'MARK=here' in environ, len(os.listdir('/proc/self/fd')) >= 3, os.readlink('/proc/self/exe').startswith('/'))
`;
    for (const user of [undefined, 'nobody']) {
      const result = await client.exec({ path: 'python3', args: ['-c', script], env: { MARK: 'here' }, ...(user ? { user } : {}) });
      expect(result.stderr.toString()).toBe('');
      expect(result.stdout.toString()).toBe(`1 ${user ? 65534 : 0} True True True\n`); // PR_GET_DUMPABLE: 1
    }
  });
});
