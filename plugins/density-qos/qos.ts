/**
 * What density-qos decides, pure: the process traits a sandbox of a QoS class
 * gets on a node that can do what it can, and the node's QoS report.
 */
import type { ProcessTraits, SandboxSpec } from '../../core/plugin-api.js';

/** One kernel feature as the native probe reports it. */
export interface Capability {
  readonly ok: boolean;
  /** Why not, when not: "no SMT siblings on this machine (PR_SCHED_CORE: ENODEV)". */
  readonly reason?: string;
}

/** The part of the native probe QoS looks at. */
export interface QosSupport {
  readonly schedIdle: Capability;
  readonly coreScheduling: Capability;
}

export interface QosDecision {
  /** The traits to add to the sandbox's. */
  readonly traits: ProcessTraits;
  /** A trait the class asks for and the node cannot give, with why (logged once per agent). */
  readonly missing?: { readonly trait: keyof ProcessTraits; readonly reason: string };
}

/**
 * best-effort: idle CPU (SCHED_IDLE and cpu.idle 1), so it only ever gets
 * time nobody else wants. latency-sensitive: its own core-scheduling cookie,
 * so no other sandbox's task shares its core's SMT sibling. A trait the node
 * cannot give is left off (the backend would fail the create), and said.
 */
export function decide(qos: SandboxSpec['qos'], support: QosSupport): QosDecision {
  if (qos === 'best-effort') {
    return support.schedIdle.ok ? { traits: { idleCpu: true } } : { traits: {}, missing: { trait: 'idleCpu', reason: reasonOf(support.schedIdle) } };
  }
  return support.coreScheduling.ok
    ? { traits: { coreScheduling: true } }
    : { traits: {}, missing: { trait: 'coreScheduling', reason: reasonOf(support.coreScheduling) } };
}

/** NodeUsage.qos: `available` or `unavailable: <reason>` per feature. */
export function qosReport(support: QosSupport): { coreScheduling: string; idleCpu: string } {
  const say = (capability: Capability) => (capability.ok ? 'available' : `unavailable: ${reasonOf(capability)}`);
  return { coreScheduling: say(support.coreScheduling), idleCpu: say(support.schedIdle) };
}

/** Nothing works when the probe itself failed (e.g. the native helper is not built): every feature says why. */
export function unsupported(reason: string): QosSupport {
  return { schedIdle: { ok: false, reason }, coreScheduling: { ok: false, reason } };
}

function reasonOf(capability: Capability): string {
  return capability.reason ?? 'not supported here';
}
