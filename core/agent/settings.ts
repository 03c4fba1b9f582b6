/**
 * What may change on a live sandbox without replacing it: its resources
 * (the backend's `update` tap applies them), its TTLs and density switches
 * (recorded in its spec: the reaper and the density taps read them there),
 * and its labels. Each change runs under the sandbox's lock and is persisted.
 * Claims are claim-service.ts's.
 */
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import { RESERVED_LABEL_PREFIX, type SandboxInfo } from '../live.js';
import { backendHook } from './backend-hooks.js';
import { toInfo, type SandboxEntry, type SandboxStore } from './store.js';
import { checkSandboxUpdate } from './validate.js';

export class SandboxSettings {
  constructor(
    private readonly dsec: Dsec,
    private readonly store: SandboxStore,
  ) {}

  /** Apply a `PATCH /v1/sandboxes/:id` body ({resources?, ttl?, density?, labels?}) to a running or paused sandbox. */
  update(id: string, input: unknown): Promise<SandboxInfo> {
    return this.store.withLock(id, async () => {
      const entry = this.live(id);
      const { ctx } = entry;
      const change = checkSandboxUpdate(input, ctx.spec);
      if (change.resources) {
        const done = await backendHook(this.dsec, 'update', ctx.spec.backend).promise(ctx, change.resources);
        if (done !== true) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: ctx.spec.backend, operation: 'update' });
      }
      const { ttl: previousTtl, ...rest } = ctx.spec;
      const ttl = change.ttl ?? previousTtl;
      ctx.spec = {
        ...rest,
        ...(change.resources ? { resources: change.resources } : {}),
        // `ttl: {}` removes the limits.
        ...(ttl !== undefined && Object.keys(ttl).length > 0 ? { ttl } : {}),
        ...(change.density ? { density: change.density } : {}),
        // dsec's own labels (lineage, fleet, spec hash) stay; the rest is the fleet's declaration.
        ...(change.labels ? { labels: { ...change.labels, ...reservedLabels(rest.labels) } } : {}),
      };
      await this.store.persist(entry);
      this.dsec.log.info(`sandbox ${id}: updated ${JSON.stringify(change)}`);
      return toInfo(entry);
    });
  }

  /** A sandbox that is up (running or paused), or why not. */
  private live(id: string): SandboxEntry {
    const entry = this.store.get(id);
    if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    if (entry.ctx.status !== 'running' && entry.ctx.status !== 'paused') {
      throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
    }
    return entry;
  }
}

function reservedLabels(labels: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).filter(([key]) => key.startsWith(RESERVED_LABEL_PREFIX)));
}
