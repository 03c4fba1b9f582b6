/**
 * The CLI's cluster parts on plain data: `dsec nodes` with health and
 * address, and the token file read as a located config error.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readClusterToken } from '../../../core/cli/context.js';
import { renderNodeUsage } from '../../../core/cli/node-usage.js';
import { colors } from '../../../core/cli/output.js';
import { isDsecError } from '../../../core/errors.js';
import type { NodeInfo, NodeUsage } from '../../../core/live.js';

const usage = (node: string): NodeUsage => ({
  node,
  capacity: { cpu: 2, memoryMiB: 4096 },
  sandboxes: { container: { running: 2 } },
  requested: { cpu: 0.2, memoryMiB: 128 },
  used: { cpu: 0, memoryMiB: 10 },
  host: { memoryMiB: 4096, availableMiB: 2048 },
  memory: {},
  qos: {},
  fleets: [],
} as unknown as NodeUsage);

const info = (name: string, extra: Partial<NodeInfo>): NodeInfo => ({ name, backends: ['container'], capacity: { cpu: 2, memoryMiB: 4096 }, sandboxes: 0, agentVersion: 't', pid: 1, ...extra });

describe('dsec nodes on a cluster', () => {
  it('shows each node with its health and address, and an unhealthy node with its reason', () => {
    const text = renderNodeUsage([usage('a')], colors(false), [
      info('a', { health: 'healthy', address: '127.0.0.1:7001' }),
      info('b', { health: 'unhealthy', healthReason: 'the node agent at 127.0.0.1:7002 is not reachable: connect ECONNREFUSED', address: '127.0.0.1:7002' }),
    ]);
    expect(text).toContain('Node a  healthy, 127.0.0.1:7001');
    expect(text).toContain('Node b  unhealthy (the node agent at 127.0.0.1:7002 is not reachable: connect ECONNREFUSED), 127.0.0.1:7002');
  });

  it('prints the local node as before, without a health column', () => {
    expect(renderNodeUsage([usage('here')], colors(false)).split('\n')[0]).toBe('Node here');
  });
});

describe('the cluster token file', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });
  const locate = () => ({ file: '/p/dsec.yaml', line: 3, col: 40 });

  it('reads and trims the token', () => {
    dir = mkdtempSync(path.join(tmpdir(), 'dsec-token-'));
    writeFileSync(path.join(dir, 't'), '  0123456789abcdef0123\n');
    expect(readClusterToken(path.join(dir, 't'), locate)).toBe('0123456789abcdef0123');
  });

  it('reports a missing or short token file as a config error at provider.cluster.tokenFile', () => {
    dir = mkdtempSync(path.join(tmpdir(), 'dsec-token-'));
    writeFileSync(path.join(dir, 'short'), 'abc\n');
    for (const [file, message] of [
      [path.join(dir, 'missing'), /cannot read the token file .*missing \(ENOENT\)/],
      [path.join(dir, 'short'), /has 3 character\(s\); the agents need at least 16/],
    ] as const) {
      let error: unknown;
      try {
        readClusterToken(file, locate);
      } catch (caught) {
        error = caught;
      }
      expect(isDsecError(error, 'DSEC_CONFIG_INVALID')).toBe(true);
      const [diagnostic] = (error as { diagnostics: { path: string; message: string; location: unknown }[] }).diagnostics;
      expect(diagnostic.path).toBe('/provider/cluster/tokenFile');
      expect(diagnostic.message).toMatch(message);
      expect(diagnostic.location).toEqual({ file: '/p/dsec.yaml', line: 3, col: 40 });
    }
  });
});
