/**
 * A real agent with the container and FnCall backends, and fleets of FnCall
 * workers on it (sandboxes labelled with the fleet, as apply makes them).
 */
import { LABEL_FLEET, type FunctionResult, type FunctionTask, type SandboxInfo } from '../../../core/live.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

export const FNCALL_PLUGINS = [
  { name: 'backend-container', options: {} },
  { name: 'backend-fncall', options: {} },
];

export function startFncallAgent(): Promise<TestAgent> {
  return TestAgent.start({ backends: FNCALL_PLUGINS });
}

/** `count` workers of `fleet` (ids `<fleet>-<i>`), created the way apply does, in parallel. */
export async function createFleet(agent: TestAgent, fleet: string, count: number, backendOptions?: Record<string, unknown>): Promise<SandboxInfo[]> {
  return Promise.all(
    Array.from({ length: count }, (_, index) =>
      agent.client.createSandbox(
        agent.spec(`${fleet}-${index}`, {
          backend: 'fncall',
          labels: { [LABEL_FLEET]: fleet },
          resources: { cpu: 0.5, memoryMiB: 128, pids: 64 },
          ...(backendOptions ? { backendOptions } : {}),
        }),
      ),
    ),
  );
}

export function invoke(agent: TestAgent, fleet: string, task: FunctionTask): Promise<FunctionResult> {
  return agent.client.invokeFunction(fleet, task);
}

/** The error a call rejected with (fails the test if it resolved). */
export async function rejection(work: Promise<unknown>): Promise<{ code?: string; message: string }> {
  try {
    await work;
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('the call succeeded');
}

/** Wait until `check` holds, polling; fails with `what` after `timeoutMs`. */
export async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
