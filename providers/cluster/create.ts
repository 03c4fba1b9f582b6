/**
 * Creating one sandbox in the cluster: place it (the `place` hook), record
 * the placement in etcd BEFORE asking the node (so a sandbox on a node that
 * dies right after is still known), then ask the node. A node refusing it
 * (its admission policy) or not taking the request at all is left out and
 * the sandbox placed again, up to `maxRetries` times, and the notice says
 * where it went; then DSEC_PLACEMENT_FAILED lists every refusal.
 */
import { neverDelivered } from '../../core/agent/client.js';
import { placementOf, type Placement } from '../../core/cluster/keys.js';

export { placementOf } from '../../core/cluster/keys.js';
import { DsecError, isDsecError } from '../../core/errors.js';
import type { Hooks } from '../../core/hooks.js';
import { LABEL_FLEET, type NodeInfo, type SandboxInfo, type SandboxSpec } from '../../core/live.js';
import type { ProbedNode } from './nodes.js';

export interface CreateContext {
  readonly hooks: Pick<Hooks, 'place'>;
  readonly maxRetries: number;
  readonly notice?: (message: string) => void;
  /** The healthy nodes (one array per apply, see the place hook), probed. */
  healthyNodes(): Promise<{ readonly infos: readonly NodeInfo[]; readonly byName: ReadonlyMap<string, ProbedNode> }>;
  readPlacement(id: string): Promise<Placement | undefined>;
  writePlacement(placement: Placement): Promise<void>;
  deletePlacement(id: string): Promise<void>;
}

interface Refusal {
  readonly node: string;
  readonly reason: string;
}


/** Why no node was chosen, for DSEC_PLACEMENT_FAILED. */
function noCandidateReason(spec: SandboxSpec, nodes: readonly NodeInfo[], refusals: readonly Refusal[]): string {
  const selector = Object.entries(spec.placement?.nodeSelector ?? {}).map(([key, value]) => `${key}=${value}`);
  const wanted = `backend ${spec.backend}${selector.length > 0 ? ` and labels ${selector.join(', ')}` : ''}`;
  const parts = [
    nodes.length === 0
      ? refusals.length > 0
        ? 'every healthy node refused it'
        : 'no healthy node is registered'
      : `none of the ${nodes.length} healthy node(s) left offers ${wanted}`,
  ];
  if (refusals.length > 0) parts.push(`refused by ${describeRefusals(refusals)}`);
  return parts.join('; ');
}

function describeRefusals(refusals: readonly Refusal[]): string {
  return refusals.map((refusal) => `${refusal.node} (${refusal.reason})`).join(', ');
}

/** What the node said, without the "sandbox X was refused by" the message repeats. */
function refusalReason(error: DsecError): string {
  const reason = (error.params as { reason?: unknown }).reason;
  return typeof reason === 'string' ? reason : error.message;
}

export async function createInCluster(spec: SandboxSpec, context: CreateContext): Promise<SandboxInfo> {
  const healthy = await context.healthyNodes();
  // Idempotent on the id: a sandbox already placed on a healthy node is asked there again.
  const existing = await context.readPlacement(spec.id);
  const known = existing ? healthy.byName.get(existing.node) : undefined;
  if (known?.client) return known.client.createSandbox(spec);

  const refusals: Refusal[] = [];
  let nodes = healthy.infos;
  for (let attempt = 0; attempt <= context.maxRetries; attempt += 1) {
    const chosen = await context.hooks.place.promise(spec, nodes);
    const target = chosen === undefined ? undefined : healthy.byName.get(chosen);
    if (chosen === undefined || !target?.client) {
      if (refusals.length > 0) await context.deletePlacement(spec.id);
      const reason = chosen === undefined ? noCandidateReason(spec, nodes, refusals) : `the place hook chose ${chosen}, which is not a healthy node`;
      throw new DsecError('DSEC_PLACEMENT_FAILED', { id: spec.id, reason });
    }
    await context.writePlacement(placementOf(spec, chosen));
    try {
      const info = await target.client.createSandbox(spec);
      if (refusals.length > 0) context.notice?.(`sandbox ${spec.id}: ${refusals.map((r) => `node ${r.node} refused (${r.reason})`).join('; ')}; placed on ${chosen}`);
      return info;
    } catch (error) {
      const refused = isDsecError(error, 'DSEC_ADMISSION_REFUSED');
      // A node that never got the request can be passed over safely; any other failure may have created something.
      if (!refused && !neverDelivered(error)) throw error;
      refusals.push({ node: chosen, reason: refused ? refusalReason(error as DsecError) : (error as Error).message });
      // The refusing agent keeps a `failed` record of the id; drop it, or the live view would hold the id twice.
      if (refused) await target.client.destroySandbox(spec.id).catch(() => undefined);
      // A new array for the retry, without the nodes that refused (the hook's contract).
      nodes = nodes.filter((node) => !refusals.some((refusal) => refusal.node === node.name));
    }
  }
  await context.deletePlacement(spec.id);
  throw new DsecError('DSEC_PLACEMENT_FAILED', {
    id: spec.id,
    reason: `refused by ${refusals.length} node(s) (${context.maxRetries} retries): ${describeRefusals(refusals)}`,
  });
}
