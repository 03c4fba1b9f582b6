/**
 * dsec-guest --fds as a container sandbox runs it: PID 1 of its own pid
 * namespace, root with only a container sandbox's capabilities
 * (SANDBOX_CAPABILITIES: no CAP_SYS_PTRACE), the FIFO pair as its fds 3
 * and 4. Sandbox code must not be able to stop it with signals (it handles
 * only SIGCHLD, so the kernel drops the rest from inside its namespace),
 * inherit its fds, or open them through /proc/1/fd (it is not dumpable).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SANDBOX_CAPABILITIES } from '../../../plugins/backend-container/bundle.js';
import { GuestSession, openFifoTransport } from '../../../core/guest/index.js';
import { buildGuestAgent, startDsecGuestFifos, type FifoAgent } from './fixture.js';

let agent: FifoAgent;
let session: GuestSession;

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuestFifos({ pidNamespace: true, capabilities: SANDBOX_CAPABILITIES });
  session = await GuestSession.open(await openFifoTransport(agent.inPath, agent.outPath), { id: 'sbx-pid1', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    session?.close();
  } finally {
    await agent?.stop();
  }
});

const sh = (script: string) => session.exec({ path: '/bin/sh', args: ['-c', script] });

describe('dsec-guest --fds as PID 1 of a container', () => {
  it('runs as PID 1 with a container sandbox\'s capabilities', async () => {
    const result = await sh('echo $$; grep -E "^CapEff" /proc/1/status /proc/self/status | cut -f2 | sort -u | wc -l; cat /proc/1/cmdline | tr "\\0" " "');
    const [self, capabilitySets, command] = result.stdout.toString().trim().split('\n');
    expect(Number(self)).toBeGreaterThan(1);
    expect(capabilitySets).toBe('1');
    expect(command).toContain('--fds 3,4');
  });

  it('is not stopped by kill -9 1, kill -TERM 1 or other signals to PID 1 from a child, and answers the next call', async () => {
    const result = await sh('for s in KILL TERM INT HUP QUIT USR1 USR2 STOP; do kill -s $s 1 && echo "sent $s"; done; sleep 0.2; echo alive');
    expect(result.stdout.toString()).toBe('sent KILL\nsent TERM\nsent INT\nsent HUP\nsent QUIT\nsent USR1\nsent USR2\nsent STOP\nalive\n');
    expect((await sh('echo next')).stdout.toString()).toBe('next\n');
    expect(agent.process.exitCode).toBeNull();
  });

  it('survives kill -1 (SIGTERM and SIGKILL to every process) from a child, which does kill its other processes', async () => {
    const victim = await session.spawn({ path: 'sleep', args: ['30'] });
    const shell = await session.openSession();
    await sh('kill -TERM -1; kill -KILL -1; echo unreachable');
    expect((await session.wait(victim.handle, 5_000))?.signal).toBeOneOf([15, 9]);
    expect((await sh('echo still here')).stdout.toString()).toBe('still here\n');
    for (let i = 0; i < 200 && !(await session.sessions()).find((entry) => entry.handle === shell.handle)?.ended; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect((await session.sessions()).find((entry) => entry.handle === shell.handle)).toMatchObject({ ended: true });
    await session.forget(victim.handle);
    await session.closeSession(shell.handle);
  });

  it('gives its children exactly fds 0, 1 and 2: never its FIFOs 3 and 4', async () => {
    expect((await sh('ls /proc/$$/fd')).stdout.toString()).toBe('0\n1\n2\n');
    const shell = await session.openSession();
    // (bash itself holds its saved stdin on fd 10, close-on-exec, while it runs a redirected command: not passed on.)
    expect((await session.runInSession(shell.handle, "sh -c 'ls /proc/$$/fd'")).stdout.toString()).toBe('0\n1\n2\n');
    expect((await session.runInSession(shell.handle, 'ls /proc/self/fd')).stdout.toString()).toBe('0\n1\n2\n3\n'); // 3: ls's own, the directory
    await session.closeSession(shell.handle);
  });

  it('keeps a root child without CAP_SYS_PTRACE out of /proc/1/fd: its FIFOs cannot be opened, listed or read', async () => {
    const probe = String.raw`
import errno, os
def attempt(name, call):
    try:
        call()
        print(name, 'ok')
    except OSError as e:
        print(name, errno.errorcode[e.errno])
attempt('open', lambda: os.close(os.open('/proc/1/fd/3', os.O_RDONLY | os.O_NONBLOCK)))
attempt('open-out', lambda: os.close(os.open('/proc/1/fd/4', os.O_WRONLY | os.O_NONBLOCK)))
attempt('readlink', lambda: os.readlink('/proc/1/fd/3'))
print('names', sorted(os.listdir('/proc/1/fd'), key=int)[:5])
print('uid', os.getuid())
`;
    const result = await session.exec({ path: 'python3', args: ['-c', probe] });
    expect(result.stderr.toString()).toBe('');
    // CAP_DAC_OVERRIDE lets root list the fd numbers; what they are and opening them needs ptrace access, which a non-dumpable PID 1 denies.
    expect(result.stdout.toString()).toBe("open EACCES\nopen-out EACCES\nreadlink EACCES\nnames ['0', '1', '2', '3', '4']\nuid 0\n");
  });
});
