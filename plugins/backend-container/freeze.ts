/**
 * Pause and resume: `runc pause` freezes every process of the container
 * through the freezer cgroup, `runc resume` thaws them. Both are idempotent
 * (pausing a paused sandbox, resuming a running one, is a no-op), and a pause
 * is confirmed from the cgroup itself, so `true` means nothing in it runs.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { SandboxCgroups } from '../../core/plugin-api.js';
import { processStartTime } from './liveness.js';
import { runRuntimeOk, type Runtime } from './runtime.js';

/** The container's init as recorded at provision: pid + start time (tells it from a recycled pid). */
export interface InitProcess {
  readonly pid: unknown;
  readonly start: unknown;
}

/** How long a resume waits for an init that was SIGKILLed while frozen to die, once thawed. */
const DYING_INIT_WAIT_MS = 2_000;

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

export async function resumeContainer(runtime: Runtime, containerId: string, cgroups: SandboxCgroups, init?: InitProcess): Promise<void> {
  const before = freezerState(cgroups);
  if (before === undefined) throw new Error('its cgroup is gone: the sandbox is not running');
  if (before === 'THAWED') return;
  // A frozen process killed from outside dies only once thawed, a moment after `runc resume`
  // returns: wait for that, so whoever probes next sees it stopped rather than running.
  const dying = init && killPending(init.pid);
  await runRuntimeOk(runtime, ['resume', containerId]);
  if (dying) await waitGone(init);
}

/** True when SIGKILL is pending for the process (its own or its thread group's pending set). */
export function killPending(pid: unknown): boolean {
  if (typeof pid !== 'number') return false;
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return false;
  }
  const SIGKILL_BIT = 1n << 8n; // signal 9: bit 8 of the masks
  return [/^SigPnd:\s*([0-9a-f]+)$/m, /^ShdPnd:\s*([0-9a-f]+)$/m].some((pattern) => {
    const mask = pattern.exec(status)?.[1];
    return mask !== undefined && (BigInt(`0x${mask}`) & SIGKILL_BIT) !== 0n;
  });
}

async function waitGone(init: InitProcess): Promise<void> {
  if (typeof init.pid !== 'number' || typeof init.start !== 'string') return;
  for (let waited = 0; waited < DYING_INIT_WAIT_MS; waited += 2) {
    if ((await processStartTime(init.pid)) !== init.start) return;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}
