/**
 * The exec server's channel under attack from inside its sandbox, and after
 * the agent dies: no process of the sandbox can reach the channel (ptrace,
 * its memory, its fds), a flood of output in the sandbox does not slow the
 * other calls, killing or replacing things inside never makes a call hang
 * or lie, an agent SIGKILLed mid-call comes back to a fresh session (the
 * foreground command nobody waits for is killed, background commands and
 * sessions are still there), and a sandbox whose server cannot be reached
 * falls back to runc exec.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type DsecClient } from '../../../core/sdk/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;
let dsec: DsecClient;
let scratch: string;
let probe: Buffer;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  scratch = mkdtempSync(path.join(tmpdir(), 'dsec-channel-'));
  // The sandbox's busybox has no ptrace tool: the attack brings its own.
  execFileSync('gcc', ['-static', '-Os', '-s', '-o', path.join(scratch, 'channel-probe'), new URL('./channel-probe.c', import.meta.url).pathname]);
  probe = readFileSync(path.join(scratch, 'channel-probe'));
  agent = await TestAgent.start();
  dsec = await connect({ socket: agent.socket });
}, 60_000);

afterAll(async () => {
  await dsec?.close();
  await agent?.dispose();
  rmSync(scratch, { recursive: true, force: true });
});

describe('the exec channel under attack from inside', () => {
  it('cannot be ptraced, read, or taken: PID 1 is not dumpable and the sandbox has no CAP_SYS_PTRACE', async () => {
    await agent.client.createSandbox(agent.spec('ch-probe'));
    await dsec.writeFile('ch-probe', '/root/probe', probe, { mode: 0o755 });
    const result = await dsec.exec('ch-probe', ['/root/probe']);
    expect(result.exitCode).toBe(0);
    const outcomes = Object.fromEntries(result.stdout.trim().split('\n').map((line) => line.split(' ') as [string, string]));
    expect(outcomes).toEqual({
      'ptrace-attach': 'EPERM',
      'open-mem': 'EACCES',
      'vm-readv': 'EPERM',
      'pidfd-open': 'ok',
      'getfd-3': 'EPERM',
      'open-fd-3-read': 'EACCES',
      'open-fd-3-write': 'EACCES',
      'getfd-4': 'EPERM',
      'open-fd-4-read': 'EACCES',
      'open-fd-4-write': 'EACCES',
    });
    // Nothing in the sandbox's filesystem leads to the channel: the FIFOs are in its host folder only.
    const found = await dsec.exec('ch-probe', ['sh', '-c', 'find / -xdev \\( -type p -o -type s \\) 2>/dev/null; true']);
    expect(found.stdout).toBe('');
    await agent.client.destroySandbox('ch-probe');
  });

  it('keeps answering other calls quickly while the sandbox floods its own output', async () => {
    await agent.client.createSandbox(agent.spec('ch-flood', { resources: { cpu: 0.5, memoryMiB: 96, pids: 64 } }));
    const floods = await Promise.all([
      dsec.exec('ch-flood', ['yes'], { background: true, maxOutputBytes: 65536 }),
      dsec.exec('ch-flood', ['sh', '-c', 'yes > /dev/null'], { background: true }),
    ]);
    // A streamed flood that never ends by itself: the calls below must be answered while it runs, not after it.
    const giveUp = new AbortController();
    let streamedBytes = 0;
    let settled = false;
    const streamed = dsec
      .exec('ch-flood', ['yes'], { onStdout: (chunk) => (streamedBytes += chunk.length), maxOutputBytes: 32 * 1024 * 1024, signal: giveUp.signal })
      .then(
        () => 'ended',
        () => 'aborted',
      )
      .finally(() => (settled = true));
    while (streamedBytes < 1_000_000) await sleep(20);
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      expect((await dsec.exec('ch-flood', ['true'])).exitCode).toBe(0);
      times.push(performance.now() - started);
    }
    expect(settled).toBe(false);
    giveUp.abort();
    expect(await streamed).toBe('aborted');
    times.sort((a, b) => a - b);
    // Not a benchmark (bench/exec.ts is): a call queued behind the flood would take seconds, not this.
    expect(times[10]!).toBeLessThan(1000);
    for (const flood of floods) await flood.forget();
    await agent.client.destroySandbox('ch-flood');
  }, 60_000);

  it('never hangs or lies when code inside replaces /bin/sh, kills every process it can, or exits the shell running it', async () => {
    await agent.client.createSandbox(agent.spec('ch-kill'));
    await dsec.exec('ch-kill', ['/bin/busybox', 'sh', '-c', 'kill -9 -1; kill -9 1; kill -TERM 1; true']);
    await expect(dsec.exec('ch-kill', ['sh', '-c', 'exit 7'])).resolves.toMatchObject({ exitCode: 7 });
    await dsec.exec('ch-kill', ['/bin/busybox', 'sh', '-c', "rm /bin/sh && printf '#!/bin/busybox sh\\necho forged; exit 0\\n' > /bin/sh && chmod 755 /bin/sh"]);
    // The sandbox's own shell is now the forger's, and says so; the server's report of a command that is not the shell stays true.
    await expect(dsec.exec('ch-kill', ['sh', '-c', 'exit 7'])).resolves.toMatchObject({ exitCode: 0, stdout: 'forged\n' });
    await expect(dsec.exec('ch-kill', ['false'])).resolves.toMatchObject({ exitCode: 1, stdout: '' });
    await agent.client.destroySandbox('ch-kill');
  });
});

describe('the channel after the agent dies', () => {
  it('comes back with a fresh session: the orphaned foreground command is killed, background commands and sessions are still there', async () => {
    await agent.client.createSandbox(agent.spec('ch-restart'));
    const background = await dsec.exec('ch-restart', ['sh', '-c', 'echo bg-start; sleep 3; echo bg-end'], { background: true });
    const sh = await dsec.session('ch-restart');
    await sh.run('cd /tmp && export KEPT=yes');
    const orphan = dsec.exec('ch-restart', ['sh', '-c', 'echo $$ > /tmp/orphan.pid; exec sleep 300']).catch((error: unknown) => error);
    await sleep(500);
    await agent.kill();
    await orphan;
    await agent.startDaemon();
    await dsec.close();
    dsec = await connect({ socket: agent.socket });

    // The first call opens a new session; the server killed the foreground command its last agent was waiting for.
    const gone = await dsec.exec('ch-restart', ['sh', '-c', 'kill -0 $(cat /tmp/orphan.pid) 2>/dev/null && echo alive || echo gone']);
    expect(gone.stdout).toBe('gone\n');
    const listed = await dsec.processes('ch-restart');
    expect(listed.find((entry) => entry.handle === background.handle)).toBeDefined();
    const waited = await new ProcessWait(dsec, 'ch-restart', background.handle).result();
    expect(waited).toMatchObject({ exitCode: 0, stdout: 'bg-start\nbg-end\n' });
    const sessions = await dsec.sessions('ch-restart');
    expect(sessions.map((entry) => entry.id)).toContain(sh.id);
    await agent.client.destroySandbox('ch-restart');
  }, 60_000);

  it('falls back to runc exec when the sandbox\'s exec server cannot be reached, and says so for what only it can do', async () => {
    await agent.client.createSandbox(agent.spec('ch-fallback'));
    expect((await dsec.exec('ch-fallback', ['sh', '-c', 'echo $PPID'])).stdout).toBe('1\n');
    // Break the channel from the host: the FIFOs go, and the agent starts again with no session open.
    const dir = path.join(agent.root, 'sandboxes', 'ch-fallback');
    await agent.stop();
    await Promise.all([unlink(path.join(dir, 'guest.in')), unlink(path.join(dir, 'guest.out'))]);
    await agent.startDaemon();
    await dsec.close();
    dsec = await connect({ socket: agent.socket });
    const fallback = await dsec.exec('ch-fallback', ['sh', '-c', 'echo fell back; echo $PPID']);
    expect(fallback.exitCode).toBe(0);
    // Under runc exec the command's parent is runc's wrapper shell, not the exec server (PID 1).
    expect(fallback.stdout.split('\n')[0]).toBe('fell back');
    expect(fallback.stdout.split('\n')[1]).not.toBe('1');
    await expect(dsec.session('ch-fallback')).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE' });
    // Files still work (the native helper in the sandbox's root).
    await dsec.writeFile('ch-fallback', '/root/f', 'x');
    expect((await dsec.readFile('ch-fallback', '/root/f')).toString()).toBe('x');
    await agent.client.destroySandbox('ch-fallback');
  }, 60_000);
});

/** Wait for a background command by handle, through a fresh client (as a trainer that restarted would). */
class ProcessWait {
  constructor(
    private readonly client: DsecClient,
    private readonly id: string,
    private readonly handle: string,
  ) {}

  async result() {
    const { ProcessClient } = await import('../../../core/agent/client-processes.js');
    const { AgentClient } = await import('../../../core/agent/client.js');
    const agentClient = new AgentClient(agent.socket);
    try {
      return await new ProcessClient(agentClient).wait(this.id, this.handle, { timeoutMs: 20_000 });
    } finally {
      agentClient.close();
      void this.client;
    }
  }
}
