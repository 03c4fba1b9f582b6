/**
 * One SDK for every backend: the same script of calls (create, exec, a
 * streamed exec, a session where the backend has them, writeFile, readFile,
 * pause, a call that wakes it, resume, snapshot where the backend has it,
 * destroy) runs against a container, a microVM and a full VM sandbox on one
 * real node agent, through `connect()`. Where a backend lacks an operation,
 * the call is DSEC_BACKEND_UNSUPPORTED naming the backend, exactly as
 * `capabilities()` said beforehand. A full VM's guest agent (qemu-ga) gives
 * output only at the end, so its streamed exec gets it in one piece then.
 *
 * The microVM and VM boot under TCG here, so each takes seconds; one of each.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DsecError } from '../../../core/errors.js';
import type { DiskImageRef } from '../../../core/live.js';
import { connect, type DsecClient } from '../../../core/sdk/index.js';
import type { CreateSandboxInput } from '../../../core/sdk/requests.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { buildTestVmImage, defaultVmImageCacheDir, killQemuUnder } from '../../helpers/vm-image.js';

let agent: TestAgent;
let dsec: DsecClient;
let image: DiskImageRef;

beforeAll(async () => {
  image = await buildTestVmImage(defaultVmImageCacheDir());
  agent = await TestAgent.start({
    backends: [
      { name: 'backend-container', options: {} },
      { name: 'backend-microvm', options: {} },
      { name: 'backend-vm', options: { bootTimeoutMs: 120_000 } },
    ],
  });
  dsec = await connect({ socket: agent.socket });
}, 240_000);

afterAll(async () => {
  try {
    await dsec?.close();
    await agent?.dispose();
  } finally {
    if (agent) killQemuUnder(agent.tmp);
  }
}, 120_000);

const caught = (work: Promise<unknown>): Promise<DsecError> =>
  work.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (error: DsecError) => error,
  );

/** What the script saw, the same shape for every backend. */
interface Transcript {
  created: string;
  greeting: string;
  /** What a streamed exec's onStdout got, and whether the first part came well before the end. */
  streamed: string;
  streamedAsItCame: boolean;
  /** A session's cwd and variable from one run in the next, or why the backend has none. */
  session: string;
  /** The same session after the pause and resume. */
  sessionAfterPause: string;
  roundTrip: boolean;
  readBack: string;
  missing: string;
  paused: string;
  wokenBy: string;
  afterWake: string;
  keptAcrossPause: boolean;
  snapshot: string;
  destroyed: string;
}

async function script(input: CreateSandboxInput, canSnapshot: boolean, hasSessions: boolean): Promise<Transcript> {
  const box = await dsec.create(input);
  const id = box.id;
  try {
    const greeting = (await dsec.exec(id, 'echo "$GREETING"')).stdout.trim();
    const parts: { at: number; text: string }[] = [];
    await dsec.exec(id, 'echo one; sleep 1; echo two', { onStdout: (chunk) => parts.push({ at: Date.now(), text: chunk.toString() }) });
    const streamed = parts.map((part) => part.text).join('');
    const streamedAsItCame = parts.length > 0 && Date.now() - parts[0]!.at > 700;
    const shell = hasSessions ? await dsec.session(id) : undefined;
    let session: string;
    if (shell) {
      await shell.run('cd /tmp && export KEPT=kept');
      session = (await shell.run('pwd; echo $KEPT')).stdout;
    } else {
      const refused = await caught(dsec.session(id));
      session = `${refused.code}: ${refused.message}`;
    }
    const bytes = Buffer.concat([randomBytes(4096), Buffer.from([0, 255, 10])]);
    await dsec.writeFile(id, '/tmp/sdk/deep/in.bin', bytes);
    const roundTrip = (await dsec.readFile(id, '/tmp/sdk/deep/in.bin')).equals(bytes);
    await dsec.exec(id, 'echo "written inside" > /tmp/sdk/out.txt');
    const readBack = (await dsec.readFile(id, '/tmp/sdk/out.txt')).toString();
    const missing = (await caught(dsec.readFile(id, '/tmp/sdk/no-such-file'))).code;
    const [pausedOutcome] = await dsec.pause(id);
    const paused = pausedOutcome.ok ? (await dsec.get(id)).status : `failed: ${pausedOutcome.error?.code}`;
    // A file call wakes a paused sandbox, whatever the backend.
    const afterWakeContent = (await dsec.readFile(id, '/tmp/sdk/out.txt')).toString();
    const wokenBy = (await dsec.get(id)).status;
    await dsec.pause(id);
    await dsec.resume(id);
    const afterWake = (await dsec.get(id)).status;
    const keptAcrossPause = afterWakeContent === readBack && (await dsec.readFile(id, '/tmp/sdk/deep/in.bin')).equals(bytes);
    const sessionAfterPause = shell ? (await shell.run('pwd; echo $KEPT')).stdout : session;
    await shell?.close();
    const snapshotCall = dsec.snapshot(id, { as: `sdk-${input.backend}@1.0.0` });
    const snapshot = canSnapshot
      ? `${(await snapshotCall).name}`
      : (await caught(snapshotCall)).message;
    await dsec.destroy(id);
    const destroyed = (await caught(dsec.get(id))).code;
    return { created: box.status, greeting, streamed, streamedAsItCame, session, sessionAfterPause, roundTrip, readBack, missing, paused, wokenBy, afterWake, keptAcrossPause, snapshot, destroyed };
  } finally {
    await dsec.destroy(id).catch(() => undefined);
  }
}

describe('the same SDK script on every backend', () => {
  it('reports each backend\'s capabilities from its taps', async () => {
    const capabilities = await dsec.capabilities();
    for (const backend of ['container', 'microvm', 'vm']) {
      expect(capabilities[backend], backend).toEqual(expect.arrayContaining(['exec', 'readFile', 'writeFile', 'pause', 'resume']));
    }
    expect(capabilities.container).toContain('snapshot');
    for (const backend of ['container', 'microvm']) expect(capabilities[backend], backend).toEqual(expect.arrayContaining(['process', 'session']));
    expect(capabilities.vm).not.toContain('process');
    expect(capabilities.vm).not.toContain('session');
  });

  const cases: [string, () => CreateSandboxInput][] = [
    ['container', () => ({ id: 'one-container', backend: 'container', layers: [agent.baseLayer], env: { GREETING: 'hi container' }, resources: { memoryMiB: 128 } })],
    ['microvm', () => ({ id: 'one-microvm', backend: 'microvm', layers: [agent.baseLayer], env: { GREETING: 'hi microvm' }, resources: { memoryMiB: 256 } })],
    ['vm', () => ({ id: 'one-vm', backend: 'vm', layers: [agent.baseLayer], image, env: { GREETING: 'hi vm' }, resources: { memoryMiB: 256 } })],
  ];

  it.each(cases)('runs the script on a %s sandbox with the same results', async (backend, input) => {
    const capabilities = await dsec.capabilities(backend);
    const canSnapshot = capabilities.includes('snapshot');
    const hasSessions = capabilities.includes('session');
    const transcript = await script(input(), canSnapshot, hasSessions);
    // The full VM's qemu-ga has no sessions: said, as its capabilities say.
    const sessions = backend !== 'vm' ? '/tmp\nkept\n' : `DSEC_BACKEND_UNSUPPORTED: backend ${backend} does not support session`;
    expect(transcript).toEqual({
      created: 'running',
      greeting: `hi ${backend}`,
      streamed: 'one\ntwo\n',
      streamedAsItCame: backend !== 'vm',
      session: sessions,
      sessionAfterPause: sessions,
      roundTrip: true,
      readBack: 'written inside\n',
      missing: 'DSEC_FILE_NOT_FOUND',
      paused: 'paused',
      wokenBy: 'running',
      afterWake: 'running',
      keptAcrossPause: true,
      snapshot: canSnapshot ? `sdk-${backend}` : `backend ${backend} does not support snapshot`,
      destroyed: 'DSEC_SANDBOX_NOT_FOUND',
    });
  }, 300_000);
});
