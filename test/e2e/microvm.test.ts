/**
 * A microVM fleet through the real `dsec` binary, as a platform engineer
 * drives it: `dsec apply` boots it (a real qemu guest: TCG on these
 * machines), `dsec plan` then has nothing to do, `dsec sandbox exec`,
 * `write`, `read`, `pause` and `resume` work on it as on a container, `dsec
 * nodes` lists what the backend can do, and `dsec destroy` leaves no qemu.
 * One VM for the whole file: a TCG boot costs seconds.
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Project, type SandboxJson } from './harness.js';

const project = Project.copy();

const CONFIG = `version: 1
layers:
  base:
    kind: base
    version: 1.0.0
    source: { busybox: {} }
environments:
  shell:
    layers: [base]
    env: { GREETING: hello }
fleets:
  vms:
    environment: shell
    backend: microvm
    replicas: 1
    resources: { cpu: 1, memory: 128Mi, pids: 64 }
`;

/** qemu processes whose command line names a path under the project. */
function qemuUnderProject(): string[] {
  try {
    return execFileSync('pgrep', ['-af', 'qemu-system'], { encoding: 'utf8' })
      .split('\n')
      .filter((line) => line.includes(project.dir));
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

let id: string;

beforeAll(async () => {
  project.write('dsec.yaml', CONFIG);
  const apply = await project.run(['apply', '--auto-approve']);
  expect(apply.code, apply.stderr + apply.stdout).toBe(0);
  const listed = await project.json<SandboxJson[]>(['sandbox', 'ls']);
  expect(listed).toHaveLength(1);
  id = listed[0].id;
}, 180_000);

// Destroys what is left, stops the project's agent, removes the folder.
afterAll(() => project.cleanup(), 120_000);

describe('a microVM fleet through the CLI', () => {
  it('is running after apply, and the next plan has nothing to do', async () => {
    const [sandbox] = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    expect(sandbox.status).toBe('running');
    expect(qemuUnderProject()).toHaveLength(1);
    const plan = await project.run(['plan', '-detailed-exitcode']);
    expect(plan.code, plan.stdout + plan.stderr).toBe(0);
  });

  it('runs a command in the guest with the environment, and exits with its code', async () => {
    const ok = await project.run(['sandbox', 'exec', id, '--', 'sh', '-c', 'echo "$GREETING from $(uname -r)"']);
    expect(ok.code, ok.stderr).toBe(0);
    // The guest runs Debian's cloud kernel, not the host's.
    expect(ok.stdout).toMatch(/^hello from .*-cloud-amd64\n$/);
    const failing = await project.run(['sandbox', 'exec', id, '--', 'sh', '-c', 'exit 9']);
    expect(failing.code).toBe(9);
  });

  it('writes and reads a file in the guest, and keeps it across a pause to disk and a resume', async () => {
    const write = await project.run(['sandbox', 'write', id, '/root/notes.txt'], { input: 'kept across pause\n' });
    expect(write.code, write.stderr).toBe(0);
    const pause = await project.run(['sandbox', 'pause', id]);
    expect(pause.code, pause.stderr + pause.stdout).toBe(0);
    const [paused] = await project.json<SandboxJson[]>(['sandbox', 'ls']);
    expect(paused.status).toBe('paused');
    // Paused means saved to a file: no qemu holds the guest's memory.
    expect(qemuUnderProject()).toEqual([]);
    const resume = await project.run(['sandbox', 'resume', id]);
    expect(resume.code, resume.stderr + resume.stdout).toBe(0);
    const read = await project.run(['sandbox', 'read', id, '/root/notes.txt']);
    expect(read.code, read.stderr).toBe(0);
    expect(read.stdout).toBe('kept across pause\n');
  });

  it('lists the backend and what it can do in dsec nodes', async () => {
    const nodes = await project.run(['nodes', '--json']);
    expect(nodes.code, nodes.stderr).toBe(0);
    const [node] = JSON.parse(nodes.stdout) as { capabilities?: Record<string, string[]> }[];
    expect(node.capabilities?.microvm).toEqual(expect.arrayContaining(['exec', 'readFile', 'writeFile', 'pause', 'resume']));
    expect(node.capabilities?.microvm).not.toContain('snapshot');
  });

  it('leaves no qemu after dsec destroy', async () => {
    const destroy = await project.run(['destroy', '--auto-approve']);
    expect(destroy.code, destroy.stderr + destroy.stdout).toBe(0);
    expect(qemuUnderProject()).toEqual([]);
  });
});
