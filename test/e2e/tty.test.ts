/**
 * What a person at a terminal sees (a real pty through `script`): the
 * confirmation prompt, which takes only `yes`, and the progress bar of a big
 * apply, which must share the screen with the per-resource lines without
 * either garbling the other. Without a terminal there is no bar at all.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { busyboxConfig, Project, runcContainers } from './harness.js';
import { runOnTerminal, screen } from './terminal.js';

const REPLICAS = 24; // over the bar's threshold of 20 operations, small enough to be quick

// `script` is util-linux's (bsdutils, essential on Debian): it is always there.
describe('dsec apply on a terminal', () => {
  const project = Project.copy();
  project.write('dsec.yaml', busyboxConfig({ big: { replicas: REPLICAS } }));
  afterAll(() => project.cleanup());

  it('asks for confirmation and refuses anything but yes', async () => {
    for (const answer of ['no', 'y', 'YES']) {
      const result = await runOnTerminal(project, ['apply'], `${answer}\n`);
      expect(result.code, result.stdout).toBe(1);
      const lines = screen(result.stdout);
      expect(lines).toContain('Do you want to perform these actions?');
      expect(lines).toContain("  Only 'yes' will be accepted to approve.");
      expect(lines).toContain(`  Enter a value: ${answer}`);
      expect(lines.at(-1)).toBe('apply cancelled.');
    }
    expect(runcContainers(project)).toEqual([]);
  });

  it('applies on yes, drawing one progress bar that ends full, with the resource lines above it', async () => {
    const result = await runOnTerminal(project, ['apply', '--parallelism', '4'], 'yes\n');
    expect(result.code, result.stdout).toBe(0);
    expect(result.stdout).toContain('sandboxes ['); // drawn (and redrawn) while it ran
    const lines = screen(result.stdout);
    const tail = lines.slice(lines.indexOf(`  Enter a value: yes`) + 1);
    const bar = `  sandboxes [${'█'.repeat(40)}] ${REPLICAS}/${REPLICAS} (0 failed) 0s left`;
    expect(tail).toEqual(['layer.base@1.0.0: create done', 'fleet.big: create done', bar, '', 'Apply complete! Resources: 2 added, 0 changed, 0 destroyed.']);
    expect(runcContainers(project)).toHaveLength(REPLICAS);
  });

  it('draws no bar when stderr is not a terminal', async () => {
    const result = await project.run(['destroy', '--auto-approve']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).not.toContain('sandboxes [');
    expect(result.stderr.split('\n')).toEqual(['fleet.big: delete done', 'layer.base@1.0.0: delete done', '']);
  });
});
