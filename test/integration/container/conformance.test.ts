/**
 * The container backend passes the backend conformance suite, and leaves no
 * runc container and no cgroup directory behind.
 */
import { execFileSync } from 'node:child_process';
import { existingCgroupDirs } from '../../../plugins/backend-container/cgroups.js';
import { cgroupsPathOf } from '../../../plugins/backend-container/index.js';
import { describeBackendConformance } from '../../conformance/backend.js';

function runcKnows(id: string): boolean {
  try {
    execFileSync('runc', ['state', id], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describeBackendConformance('container', () => [{ name: 'backend-container', options: {} }], {
  async leftovers(agent, sandbox) {
    const cid = agent.containerId(sandbox.id);
    const found: string[] = [];
    if (runcKnows(cid)) found.push(`runc container ${cid}`);
    for (const dir of await existingCgroupDirs(cgroupsPathOf(cid))) found.push(`cgroup ${dir}`);
    return found;
  },
});
