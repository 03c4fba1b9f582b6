/**
 * The conformance suite every backend plugin runs (Terraform's
 * statemgr/testing.go, for sandboxes): call `describeBackendConformance`
 * from an integration test with the plugin refs that provide the backend.
 * It starts a real agent daemon with those plugins (and storage-local, or the
 * test layer stand-in) and drives it through its API, as the engine would.
 *
 * What a backend promises:
 * - provision makes a running sandbox from the layers, with the spec's env;
 * - exec runs a command and reports stdout, stderr and the exit code;
 * - files written by one exec are there for the next (state persists);
 * - readFile/writeFile move bytes unchanged (parents created), with
 *   DSEC_FILE_NOT_FOUND and DSEC_FILE_TOO_LARGE, or the backend says by
 *   name that it has no file access (DSEC_BACKEND_UNSUPPORTED);
 * - update changes the limits of a running sandbox in place;
 * - destroy is idempotent and leaves nothing: no mount below the agent's
 *   root, no sandbox folder, nothing the backend's own `leftovers` finds.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxInfo, SandboxSpec } from '../../core/live.js';
import type { PluginRef } from '../../core/model.js';
import { mountPointsUnder, TestAgent } from '../helpers/agent-fixture.js';

export interface BackendConformanceOptions {
  /** What the backend may have left of a destroyed sandbox (e.g. a runtime container, a cgroup); each string is one leftover. */
  readonly leftovers?: (agent: TestAgent, sandbox: SandboxInfo) => Promise<string[]>;
}

export function describeBackendConformance(
  kind: string,
  makePlugins: () => readonly PluginRef[],
  options: BackendConformanceOptions = {},
): void {
  describe(`backend conformance: ${kind}`, () => {
    let agent: TestAgent;
    const spec = (id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec => ({
      id,
      backend: kind,
      layers: [agent.baseLayer],
      env: { CONFORMANCE: 'yes' },
      workdir: '/',
      user: 'root',
      resources: { cpu: 0.5, memoryMiB: 128, pids: 128 },
      network: 'none',
      qos: 'best-effort',
      labels: { suite: 'conformance' },
      ...extra,
    });

    beforeAll(async () => {
      agent = await TestAgent.start({ backends: makePlugins() });
    });
    afterAll(async () => {
      await agent?.dispose();
    });

    it('advertises the backend kind in the node info', async () => {
      expect((await agent.client.node()).backends).toContain(kind);
    });

    it('creates a running sandbox, idempotently on its id', async () => {
      const first = await agent.client.createSandbox(spec('conf-create'));
      expect(first).toMatchObject({ id: 'conf-create', backend: kind, status: 'running', labels: { suite: 'conformance' } });
      const again = await agent.client.createSandbox(spec('conf-create'));
      expect(again.createdAt).toBe(first.createdAt);
      expect(await agent.client.listSandboxes({ suite: 'conformance' })).toEqual([expect.objectContaining({ id: 'conf-create' })]);
      await agent.client.destroySandbox('conf-create');
    });

    it('runs commands with the spec environment and reports output and exit codes', async () => {
      await agent.client.createSandbox(spec('conf-exec'));
      try {
        const ok = await agent.client.exec('conf-exec', { cmd: ['/bin/sh', '-c', 'echo "$CONFORMANCE"; echo oops >&2; exit 3'] });
        expect(ok).toMatchObject({ exitCode: 3, stdout: 'yes\n', stderr: 'oops\n', truncated: false, timedOut: false });
        const input = await agent.client.exec('conf-exec', { cmd: ['/bin/sh', '-c', 'cat'], stdin: 'from stdin' });
        expect(input.stdout).toBe('from stdin');
        const extraEnv = await agent.client.exec('conf-exec', { cmd: ['/bin/sh', '-c', 'echo $EXTRA; pwd'], env: { EXTRA: 'e' }, workdir: '/tmp' });
        expect(extraEnv.stdout).toBe('e\n/tmp\n');
      } finally {
        await agent.client.destroySandbox('conf-exec');
      }
    });

    it('keeps files written by one command for the next', async () => {
      await agent.client.createSandbox(spec('conf-files'));
      try {
        const write = await agent.client.exec('conf-files', { cmd: ['/bin/sh', '-c', 'mkdir -p /work && printf "state 1" > /work/notes.txt'] });
        expect(write.exitCode).toBe(0);
        const read = await agent.client.exec('conf-files', { cmd: ['cat', '/work/notes.txt'] });
        expect(read).toMatchObject({ exitCode: 0, stdout: 'state 1' });
      } finally {
        await agent.client.destroySandbox('conf-files');
      }
    });

    it('reads and writes files inside the sandbox, or says by name that it cannot', async () => {
      await agent.client.createSandbox(spec('conf-rw'));
      try {
        const can = (await agent.client.node()).capabilities?.[kind] ?? [];
        const data = Buffer.from([0, 1, 2, 253, 254, 255, 10]).toString('base64');
        if (!can.includes('writeFile') || !can.includes('readFile')) {
          await expect(agent.client.writeFile('conf-rw', { path: '/tmp/x', data })).rejects.toMatchObject({ code: 'DSEC_BACKEND_UNSUPPORTED' });
          await expect(agent.client.readFile('conf-rw', { path: '/tmp/x' })).rejects.toThrow(`backend ${kind} does not support readFile`);
          return;
        }
        await agent.client.writeFile('conf-rw', { path: '/tmp/conformance/deep/file.bin', data, mode: 0o600 });
        expect(await agent.client.readFile('conf-rw', { path: '/tmp/conformance/deep/file.bin' })).toEqual({ path: '/tmp/conformance/deep/file.bin', data, size: 7 });
        expect((await agent.client.exec('conf-rw', { cmd: ['/bin/sh', '-c', 'echo inside > /tmp/conformance/from-exec'] })).exitCode).toBe(0);
        const fromExec = await agent.client.readFile('conf-rw', { path: '/tmp/conformance/from-exec' });
        expect(Buffer.from(fromExec.data, 'base64').toString()).toBe('inside\n');
        await expect(agent.client.readFile('conf-rw', { path: '/tmp/conformance/none' })).rejects.toMatchObject({ code: 'DSEC_FILE_NOT_FOUND' });
        await expect(agent.client.readFile('conf-rw', { path: '/tmp/conformance/deep/file.bin', maxBytes: 3 })).rejects.toMatchObject({ code: 'DSEC_FILE_TOO_LARGE' });
      } finally {
        await agent.client.destroySandbox('conf-rw');
      }
    });

    it('updates the limits of a running sandbox in place', async () => {
      await agent.client.createSandbox(spec('conf-update'));
      try {
        const updated = await agent.client.updateSandbox('conf-update', { memoryMiB: 192, pids: 64 });
        expect(updated.resources).toEqual({ cpu: 0.5, memoryMiB: 192, pids: 64 });
        expect((await agent.client.getSandbox('conf-update')).resources.memoryMiB).toBe(192);
        expect((await agent.client.exec('conf-update', { cmd: ['true'] })).exitCode).toBe(0);
      } finally {
        await agent.client.destroySandbox('conf-update');
      }
    });

    it('destroys idempotently and leaves nothing behind', async () => {
      const info = await agent.client.createSandbox(spec('conf-destroy'));
      await agent.client.exec('conf-destroy', { cmd: ['/bin/sh', '-c', 'sleep 1000 & echo started'] });
      expect(await agent.client.destroySandbox('conf-destroy')).toEqual({ id: 'conf-destroy', existed: true });
      expect(await agent.client.destroySandbox('conf-destroy')).toEqual({ id: 'conf-destroy', existed: false });

      await expect(agent.client.getSandbox('conf-destroy')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
      expect(existsSync(path.join(agent.root, 'sandboxes', 'conf-destroy'))).toBe(false);
      expect(mountPointsUnder(path.join(agent.root, 'sandboxes'))).toEqual([]);
      expect(await (options.leftovers?.(agent, info) ?? Promise.resolve([]))).toEqual([]);
    });
  });
}
