/**
 * Pause and resume: `runc pause` freezes every process of the container
 * through the freezer cgroup, `runc resume` thaws them. Both are idempotent
 * (pausing a paused sandbox, resuming a running one, is a no-op), and a pause
 * is confirmed from the cgroup itself, so `true` means nothing in it runs.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { SandboxCgroups } from '../../core/plugin-api.js';
import { runRuntimeOk, type Runtime } from './runtime.js';

/** FROZEN, FREEZING, THAWED (v1), or frozen/thawed from cgroup.events (v2); undefined when the cgroup is gone. */
export function freezerState(cgroups: SandboxCgroups): 'FROZEN' | 'FREEZING' | 'THAWED' | undefined {
  try {
    if (cgroups.freezer) return readFileSync(path.join(cgroups.freezer, 'freezer.state'), 'utf8').trim() as 'FROZEN' | 'FREEZING' | 'THAWED';
    if (cgroups.unified) {
      const events = readFileSync(path.join(cgroups.unified, 'cgroup.events'), 'utf8');
      return /^frozen 1$/m.test(events) ? 'FROZEN' : 'THAWED';
    }
  } catch {
    return undefined;
  }
  return undefined;
}

export async function pauseContainer(runtime: Runtime, containerId: string, cgroups: SandboxCgroups): Promise<void> {
  const before = freezerState(cgroups);
  if (before === undefined) throw new Error('its cgroup is gone: the sandbox is not running');
  if (before === 'FROZEN') return;
  // runc waits until the freezer reports FROZEN (it retries a freeze a task keeps escaping).
  await runRuntimeOk(runtime, ['pause', containerId]);
  const after = freezerState(cgroups);
  if (after !== 'FROZEN') throw new Error(`runc pause returned, but the freezer cgroup says ${after ?? 'nothing (it is gone)'}`);
}

export async function resumeContainer(runtime: Runtime, containerId: string, cgroups: SandboxCgroups): Promise<void> {
  const before = freezerState(cgroups);
  if (before === undefined) throw new Error('its cgroup is gone: the sandbox is not running');
  if (before === 'THAWED') return;
  await runRuntimeOk(runtime, ['resume', containerId]);
}
