/**
 * density-qos: CPU quality of service by a fleet's QoS class.
 *
 *   prepare    (STAGE.DENSITY) best-effort sandboxes get traits.idleCpu
 *              (SCHED_IDLE processes, cpu.idle 1), latency-sensitive ones
 *              traits.coreScheduling where the node supports it; the
 *              container backend applies them
 *   nodeUsage  qos.coreScheduling / qos.idleCpu: what this node can do
 *
 * What the node can do comes from the native helper's probe (cached). A
 * feature it lacks is left off and said once per agent, never faked: on a
 * machine without SMT, core scheduling has nothing to protect and the kernel
 * refuses it (PR_SCHED_CORE: ENODEV).
 */
import { probeNativeSupport, STAGE, type DsecPlugin, type Logger, type SandboxContext } from '../../core/plugin-api.js';
import { parseOptions, PLUGIN_NAME, type DensityQosOptions } from './options.js';
import { decide, qosReport, unsupported, type QosSupport } from './qos.js';

export { PLUGIN_NAME, type DensityQosOptions } from './options.js';

export default function densityQos(options?: DensityQosOptions): DsecPlugin {
  const { enabled } = parseOptions(options);
  // The probe caches its answer; a failed one (helper not built yet) is asked again next time, and said once.
  let probeFailureSaid = false;
  const supportOf = (log: Logger): Promise<QosSupport> =>
    probeNativeSupport().then(
      (found): QosSupport => ({ schedIdle: found.schedIdle, coreScheduling: found.coreScheduling }),
      (error: Error): QosSupport => {
        if (!probeFailureSaid) {
          probeFailureSaid = true;
          log.warn(`${PLUGIN_NAME}: cannot probe the kernel's scheduling features, so sandboxes run without QoS: ${error.message}`);
        }
        return unsupported(`the native probe failed: ${error.message}`);
      },
    );
  const said = new Set<string>();

  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      if (!enabled) return;
      dsec.hooks.agentStarted.tapPromise({ name: PLUGIN_NAME, stage: STAGE.DENSITY }, async (node) => {
        const report = qosReport(await supportOf(node.log));
        node.log.info(`${PLUGIN_NAME}: idle CPU for best-effort ${report.idleCpu}; core scheduling for latency-sensitive ${report.coreScheduling}`);
      });
      dsec.hooks.prepare.tapPromise({ name: PLUGIN_NAME, stage: STAGE.DENSITY }, async (sandbox: SandboxContext) => {
        const { traits, missing } = decide(sandbox.spec.qos, await supportOf(sandbox.node.log));
        sandbox.traits = { ...sandbox.traits, ...traits };
        if (missing && !said.has(missing.trait)) {
          said.add(missing.trait);
          sandbox.node.log.warn(
            `${PLUGIN_NAME}: ${sandbox.spec.qos} sandboxes (first: ${sandbox.spec.id}) run without ${missing.trait}: ${missing.reason}`,
          );
        }
      });
      dsec.hooks.nodeUsage.tapPromise({ name: PLUGIN_NAME, stage: STAGE.DENSITY }, async (node, usage) => {
        Object.assign(usage.qos, qosReport(await supportOf(node.log)));
      });
    },
  };
}
