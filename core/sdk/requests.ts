/**
 * What the SDK's calls take, turned into what the agent takes: the short
 * form of a sandbox spec, a command, a selector of sandboxes, file content.
 * Plain functions, so they can be tested and reused without a connection.
 */
import { randomBytes } from 'node:crypto';
import type { SnapshotRequestBody } from '../agent/client.js';
import { DsecError } from '../errors.js';
import {
  MAX_FILE_BYTES,
  type DensitySettings,
  type DiskImageRef,
  type ExecRequest,
  type LayerRef,
  type SandboxSpec,
  type SandboxTarget,
  type SandboxTtl,
  type WriteFileRequest,
} from '../live.js';
import type { Resources } from '../model.js';

/** What `create` takes: a SandboxSpec with everything but backend and layers optional. */
export interface CreateSandboxInput {
  /** @default `sbx-<random>` */
  readonly id?: string;
  readonly backend: string;
  /** Bottom to top. */
  readonly layers: readonly LayerRef[];
  /** @default cpu 1, memoryMiB 256, pids 256 */
  readonly resources?: Partial<Resources>;
  readonly env?: Readonly<Record<string, string>>;
  readonly labels?: Readonly<Record<string, string>>;
  /** @default "/" */
  readonly workdir?: string;
  /** @default "root" */
  readonly user?: string;
  /** @default "best-effort" */
  readonly qos?: SandboxSpec['qos'];
  /** Lifetime limits the agent's reaper enforces. @default none */
  readonly ttl?: SandboxTtl;
  /** Density switches (memory sharing, reclaim on pause). @default { memorySharing: false, reclaimOnPause: true } */
  readonly density?: DensitySettings;
  /** Options for the backend alone (a microVM's vmm, a VM's display), checked by its plugin. @default none */
  readonly backendOptions?: Readonly<Record<string, unknown>>;
  /** A bootable disk image (absolute path on the node), for backends that boot one (`vm`). @default none */
  readonly image?: DiskImageRef;
}

/** Which sandboxes `pause`/`resume` act on: one id, a list of ids, or `{ ids?, labels? }`. */
export type SandboxSelector = string | readonly string[] | SandboxTarget;

/** The selector as the agent takes it. */
export function sandboxTarget(selector: SandboxSelector): SandboxTarget {
  if (typeof selector === 'string') return { ids: [selector] };
  if (Array.isArray(selector)) return { ids: [...(selector as readonly string[])] };
  return selector as SandboxTarget;
}

/** What `snapshot` takes: `{ as: 'name@version', kind?: 'workspace', exclude?: ['/root/.token'] }`. */
export type SnapshotOptions = SnapshotRequestBody;

export const DEFAULT_SANDBOX_RESOURCES: Resources = Object.freeze({ cpu: 1, memoryMiB: 256, pids: 256 });

/** A full SandboxSpec from the short form, defaults filled. */
export function sandboxSpec(input: CreateSandboxInput): SandboxSpec {
  return {
    id: input.id ?? `sbx-${randomBytes(5).toString('hex')}`,
    backend: input.backend,
    layers: input.layers.map(({ name, version, digest }) => ({ name, version, digest })),
    env: { ...input.env },
    workdir: input.workdir ?? '/',
    user: input.user ?? 'root',
    resources: { ...DEFAULT_SANDBOX_RESOURCES, ...input.resources },
    network: 'none',
    qos: input.qos ?? 'best-effort',
    labels: { ...input.labels },
    ...(input.ttl ? { ttl: { ...input.ttl } } : {}),
    ...(input.density ? { density: { ...input.density } } : {}),
    ...(input.backendOptions ? { backendOptions: { ...input.backendOptions } } : {}),
    ...(input.image ? { image: { path: input.image.path, format: input.image.format } } : {}),
  };
}

/** A string runs through `/bin/sh -c`; an array runs as it is. */
export function execRequest(command: string | readonly string[] | ExecRequest): ExecRequest {
  if (typeof command === 'string') return { cmd: ['/bin/sh', '-c', command] };
  if (Array.isArray(command)) return { cmd: [...(command as readonly string[])] };
  return command as ExecRequest;
}


/** What `writeFile` takes besides the content. */
export interface WriteFileOptions {
  /** Permission bits. @default 0o644 */
  readonly mode?: number;
}

/** A write request from a Buffer or a string (utf-8); content over MAX_FILE_BYTES is DSEC_FILE_TOO_LARGE before anything is sent. */
export function writeFileRequest(id: string, filePath: string, data: Buffer | Uint8Array | string, options: WriteFileOptions = {}): WriteFileRequest {
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.length > MAX_FILE_BYTES) throw new DsecError('DSEC_FILE_TOO_LARGE', { id, path: filePath, size: bytes.length, limit: MAX_FILE_BYTES });
  return { path: filePath, data: bytes.toString('base64'), ...(options.mode !== undefined ? { mode: options.mode } : {}) };
}
