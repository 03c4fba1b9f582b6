/**
 * The values a cluster agent is started with, checked the same way by the
 * daemon (main.ts) and by whoever spawns it (startClusterAgent, the CLI), so a
 * bad flag is refused before anything is listening.
 */
import { readFileSync, statSync } from 'node:fs';
import { DsecError } from '../errors.js';

/** A shorter shared token is refused: it could be guessed over the network. */
export const MIN_TOKEN_LENGTH = 16;
export const DEFAULT_LEASE_TTL_SECONDS = 5;

/** The token in `file`, trimmed; DSEC_USAGE when it cannot be read or is too short. */
export function readTokenFile(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new DsecError('DSEC_USAGE', { message: `--token-file ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})` });
  }
  const token = text.trim();
  if (token.length < MIN_TOKEN_LENGTH) {
    throw new DsecError('DSEC_USAGE', {
      message:
        `--token-file ${file}: the token has ${token.length} character(s) after trimming; at least ${MIN_TOKEN_LENGTH} are needed ` +
        `(e.g. openssl rand -hex 32 > ${file})`,
    });
  }
  return token;
}

/** True when others than the owner may read the token file (worth a warning, not a refusal). */
export function tokenFileIsShared(file: string): boolean {
  try {
    return (statSync(file).mode & 0o077) !== 0;
  } catch {
    return false;
  }
}

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** `HOST:PORT` or `[v6]:PORT` -> {host, port}; DSEC_USAGE naming the flag otherwise. */
export function parseHostPort(flag: string, text: string): HostPort {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text.trim());
  const port = match ? Number(match[3]) : NaN;
  if (!match || !(port >= 1 && port <= 65535)) {
    throw new DsecError('DSEC_USAGE', { message: `${flag} ${JSON.stringify(text)}: expected HOST:PORT (e.g. 10.0.0.5:7001), port 1-65535` });
  }
  return { host: match[1] ?? match[2], port };
}

export function formatHostPort({ host, port }: HostPort): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** `k=v` -> [k, v]; keys as Kubernetes-style label keys, values any text without newlines. */
export function parseLabel(text: string): [string, string] {
  const eq = text.indexOf('=');
  const key = eq > 0 ? text.slice(0, eq) : '';
  if (!/^[A-Za-z0-9]([A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?$/.test(key) || /[\r\n]/.test(text)) {
    throw new DsecError('DSEC_USAGE', { message: `--node-label ${JSON.stringify(text)}: expected key=value (e.g. gpu=true)` });
  }
  return [key, text.slice(eq + 1)];
}

/** `--join a,b` -> ['http://a', 'http://b'] (a bare host:port gets http://). */
export function parseEndpoints(text: string): string[] {
  const endpoints = text
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)
    .map((entry) => (/^https?:\/\//.test(entry) ? entry : `http://${entry}`));
  if (endpoints.length === 0) throw new DsecError('DSEC_USAGE', { message: '--join needs at least one etcd endpoint URL' });
  for (const endpoint of endpoints) {
    try {
      new URL(endpoint);
    } catch {
      throw new DsecError('DSEC_USAGE', { message: `--join: ${JSON.stringify(endpoint)} is not a URL` });
    }
  }
  return endpoints;
}

export function parseLeaseTtl(text: string): number {
  const seconds = Number(text);
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > 3600) {
    throw new DsecError('DSEC_USAGE', { message: `--lease-ttl ${JSON.stringify(text)}: expected whole seconds, 1-3600` });
  }
  return seconds;
}
