/**
 * The pure parts of cluster mode: flag parsing and checks, the bearer-token
 * comparison, and the rate limit on refusal log lines.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAgentArgs } from '../../../core/agent/args.js';
import { clusterDaemonArgs } from '../../../core/agent/cluster-daemon.js';
import { parseEndpoints, parseHostPort, parseLabel, parseLeaseTtl, readTokenFile } from '../../../core/agent/cluster-flags.js';
import { bearerRefusal, RateLimitedLog } from '../../../core/agent/tcp-auth.js';

const tmp = mkdtempSync(path.join(tmpdir(), 'dsec-cluster-flags-'));
const tokenFile = path.join(tmp, 'token');
writeFileSync(tokenFile, '  0123456789abcdef0123  \n');
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('cluster flags', () => {
  it('reads the token trimmed and refuses one shorter than 16 characters, naming the file', () => {
    expect(readTokenFile(tokenFile)).toBe('0123456789abcdef0123');
    const short = path.join(tmp, 'short');
    writeFileSync(short, 'fifteen-chars-x\n');
    expect(() => readTokenFile(short)).toThrow(expect.objectContaining({ code: 'DSEC_USAGE', message: expect.stringContaining(`--token-file ${short}: the token has 15 character(s)`) }));
    expect(() => readTokenFile(path.join(tmp, 'none'))).toThrow(/cannot read it \(ENOENT\)/);
  });

  it('parses HOST:PORT, IPv6 in brackets, and refuses a missing or out-of-range port', () => {
    expect(parseHostPort('--listen', '127.0.0.1:7001')).toEqual({ host: '127.0.0.1', port: 7001 });
    expect(parseHostPort('--listen', '[::1]:7001')).toEqual({ host: '::1', port: 7001 });
    expect(() => parseHostPort('--listen', '127.0.0.1')).toThrow(/--listen "127.0.0.1": expected HOST:PORT/);
    expect(() => parseHostPort('--advertise', 'host:70000')).toThrow(/--advertise/);
  });

  it('parses labels, endpoints and the lease TTL, refusing what is malformed', () => {
    expect(parseLabel('gpu=true')).toEqual(['gpu', 'true']);
    expect(parseLabel('dsec.io/zone=a=b')).toEqual(['dsec.io/zone', 'a=b']);
    expect(() => parseLabel('=x')).toThrow(/--node-label "=x": expected key=value/);
    expect(parseEndpoints('127.0.0.1:2379, http://10.0.0.1:2379')).toEqual(['http://127.0.0.1:2379', 'http://10.0.0.1:2379']);
    expect(() => parseEndpoints(' , ')).toThrow(/at least one etcd endpoint/);
    expect(parseLeaseTtl('5')).toBe(5);
    expect(() => parseLeaseTtl('0')).toThrow(/--lease-ttl "0": expected whole seconds/);
  });
});

describe('the agent daemon arguments', () => {
  const base = ['--root', tmp];

  it('builds the cluster settings with defaults: advertise = listen, TTL 5, prefix /dsec', () => {
    const args = parseAgentArgs([...base, '--listen', '127.0.0.1:7001', '--token-file', tokenFile, '--join', '127.0.0.1:2379', '--node-label', 'gpu=true', '--name', 'n1']);
    expect(args.name).toBe('n1');
    expect(args.cluster).toEqual({
      listen: { host: '127.0.0.1', port: 7001 },
      tokenFile,
      join: { endpoints: ['http://127.0.0.1:2379'], advertise: '127.0.0.1:7001', labels: { gpu: 'true' }, leaseTtlSeconds: 5, prefix: '/dsec' },
    });
    expect(parseAgentArgs(base).cluster).toBeUndefined();
  });

  it('never takes TCP without a token file, nor registration without TCP', () => {
    expect(() => parseAgentArgs([...base, '--listen', '127.0.0.1:7001'])).toThrow(/--listen and --token-file go together/);
    expect(() => parseAgentArgs([...base, '--token-file', tokenFile])).toThrow(/--listen and --token-file go together/);
    expect(() => parseAgentArgs([...base, '--join', 'http://127.0.0.1:2379'])).toThrow(/--join needs --listen and --token-file/);
    expect(() => parseAgentArgs([...base, '--node-label', 'a=b'])).toThrow(/need --join/);
    expect(() => parseAgentArgs([...base, '--listen', '0.0.0.0:7001', '--token-file', tokenFile, '--join', 'http://127.0.0.1:2379'])).toThrow(/give --advertise/);
    expect(() => parseAgentArgs([...base, '--listen', '127.0.0.1:7001', '--token-file', tokenFile, '--join', 'x:1', '--prefix', 'dsec'])).toThrow(/must start with \//);
  });

  it('startClusterAgent passes every flag checked, advertising the listen address by default', () => {
    const { args, address } = clusterDaemonArgs({ root: tmp, etcd: ['127.0.0.1:2379'], listen: '127.0.0.1:7001', tokenFile, labels: { gpu: 'true' }, leaseTtlSeconds: 2 });
    expect(address).toBe('127.0.0.1:7001');
    expect(args).toEqual([
      '--listen', '127.0.0.1:7001', '--token-file', tokenFile, '--join', 'http://127.0.0.1:2379', '--advertise', '127.0.0.1:7001',
      '--node-label', 'gpu=true', '--lease-ttl', '2', '--prefix', '/dsec',
    ]);
    expect(parseAgentArgs(['--root', tmp, ...args]).cluster?.join?.leaseTtlSeconds).toBe(2);
    expect(() => clusterDaemonArgs({ root: tmp, etcd: ['x:1'], listen: '127.0.0.1:7001', tokenFile: path.join(tmp, 'none') })).toThrow(/DSEC_USAGE|cannot read/);
  });
});

describe('the bearer token check', () => {
  const token = '0123456789abcdef0123';

  it('accepts exactly "Bearer <token>" and says why anything else is refused', () => {
    expect(bearerRefusal(`Bearer ${token}`, token)).toBeUndefined();
    expect(bearerRefusal(`bearer   ${token} `, token)).toBeUndefined();
    expect(bearerRefusal(undefined, token)).toBe('no Authorization header');
    expect(bearerRefusal(token, token)).toBe('the Authorization header is not "Bearer <token>"');
    expect(bearerRefusal(`Bearer ${token}x`, token)).toBe('wrong token');
    expect(bearerRefusal(`Bearer ${token.slice(0, -1)}`, token)).toBe('wrong token');
    expect(bearerRefusal('Bearer ', token)).toBe('the Authorization header is not "Bearer <token>"');
  });
});

describe('RateLimitedLog', () => {
  it('writes up to its budget per window, then one line counting what it left out', () => {
    const lines: string[] = [];
    let now = 0;
    const log = new RateLimitedLog({ info: () => {}, debug: () => {}, warn: (line) => lines.push(line) }, { perWindow: 3, windowMs: 1_000, now: () => now });
    for (let i = 0; i < 10; i++) log.warn(`refused ${i}`);
    expect(lines).toEqual(['refused 0', 'refused 1', 'refused 2']);
    now = 1_000;
    log.warn('refused 10');
    expect(lines.slice(3)).toEqual(['7 more line(s) like the above were not logged (over 3 per 1 s)', 'refused 10']);
  });
});
