/**
 * Which accelerator a VM gets: KVM when it can really boot a guest here,
 * else TCG (emulation), with the reason. `/dev/kvm` existing is not enough:
 * some hosts (a paravirtual KVM inside a microVM) give a /dev/kvm that only
 * runs specially built guests, and an ordinary kernel hangs on it without a
 * word. So the probe boots the guest kernel for real under `-accel kvm`,
 * with an initramfs whose /init prints a marker on the serial port, and
 * waits a few seconds for it.
 *
 * The answer is kept per process and in `<cacheDir>/accel.json`, keyed by
 * the host kernel, the qemu version and the guest kernel, so a node probes
 * once, not at every agent start.
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { QemuBinary } from './binary.js';
import type { GuestKernel } from './guest-kernel.js';
import { buildInitramfs } from './initramfs.js';

export type Accel = 'kvm' | 'tcg';
/** What a backend option may ask for: probe (`auto`), or one accelerator without probing. */
export type AccelRequest = Accel | 'auto';

export interface AccelChoice {
  readonly accel: Accel;
  /** In words, for logs and `dsec nodes`: why this one. */
  readonly reason: string;
  /** `probe`: booted a test guest now; `cache`: an earlier probe's answer; `forced`: asked for. */
  readonly source: 'probe' | 'cache' | 'forced';
}

export interface AccelOptions {
  readonly qemu: QemuBinary;
  readonly kernel: GuestKernel;
  /** A folder of the agent's (the probe's initramfs and accel.json go there). */
  readonly cacheDir: string;
  /** @default 'auto' */
  readonly request?: AccelRequest;
  /** How long the test guest has to print its marker under KVM. @default 3000 */
  readonly timeoutMs?: number;
  /** Where the probe's busybox comes from. @default /bin/busybox */
  readonly busybox?: string;
  readonly kvmDevice?: string;
}

export const PROBE_MARKER = 'DSEC-KVM-PROBE-OK';
const CACHE_FILE = 'accel.json';

const chosen = new Map<string, Promise<AccelChoice>>();

/** The accelerator to use; never throws: a probe that cannot run is a TCG answer with its reason. */
export function chooseAccel(options: AccelOptions): Promise<AccelChoice> {
  const request = options.request ?? 'auto';
  if (request !== 'auto') return Promise.resolve({ accel: request, reason: `accel: ${request} was asked for`, source: 'forced' });
  const key = cacheKey(options);
  let pending = chosen.get(key);
  if (!pending) {
    pending = cachedOrProbe(options, key);
    chosen.set(key, pending);
  }
  return pending;
}

function cacheKey(options: AccelOptions): string {
  return `host ${os.release()}; qemu ${options.qemu.version}; guest ${options.kernel.version}`;
}

async function cachedOrProbe(options: AccelOptions, key: string): Promise<AccelChoice> {
  const file = path.join(options.cacheDir, CACHE_FILE);
  try {
    const saved = JSON.parse(await readFile(file, 'utf8')) as { key?: string; accel?: Accel; reason?: string };
    if (saved.key === key && (saved.accel === 'kvm' || saved.accel === 'tcg') && typeof saved.reason === 'string') {
      return { accel: saved.accel, reason: saved.reason, source: 'cache' };
    }
  } catch {
    // no answer kept yet (or an unreadable one): probe
  }
  const answer = await probeKvm(options);
  try {
    await mkdir(options.cacheDir, { recursive: true });
    const partial = `${file}.${process.pid}.tmp`;
    await writeFile(partial, `${JSON.stringify({ key, ...answer, probedAt: new Date().toISOString() }, null, 2)}\n`);
    await rename(partial, file);
  } catch {
    // not kept: the next process probes again
  }
  return { ...answer, source: 'probe' };
}

/** Boot the guest kernel under KVM and look for the marker. */
export async function probeKvm(options: AccelOptions): Promise<{ accel: Accel; reason: string }> {
  const device = options.kvmDevice ?? '/dev/kvm';
  try {
    await access(device, constants.R_OK | constants.W_OK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return { accel: 'tcg', reason: code === 'ENOENT' ? `no ${device}: emulating with TCG` : `cannot open ${device} (${code}): emulating with TCG` };
  }
  const timeoutMs = options.timeoutMs ?? 3000;
  let initrd: string;
  try {
    initrd = (await buildInitramfs(probeInitramfs(options.busybox ?? '/bin/busybox'), options.cacheDir)).path;
  } catch (error) {
    return { accel: 'tcg', reason: `could not build the KVM probe's initramfs (${(error as Error).message}): emulating with TCG` };
  }
  const args = [
    '-M', 'microvm,acpi=on', '-accel', 'kvm', '-cpu', 'host', '-m', '128', '-smp', '1',
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    '-serial', 'stdio',
    '-kernel', options.kernel.vmlinuz, '-initrd', initrd,
    '-append', 'console=ttyS0 quiet panic=-1',
  ];
  const outcome = await runUntilMarker(options.qemu.path, args, timeoutMs);
  if (outcome.seen) return { accel: 'kvm', reason: `KVM booted a test guest in ${outcome.ms} ms` };
  const said = outcome.output.split('\n').map((line) => line.trim()).filter(Boolean).slice(-2).join(' | ');
  return {
    accel: 'tcg',
    reason: `${device} is there but KVM did not boot a test guest within ${timeoutMs} ms${said ? ` (qemu: ${said})` : ''}: emulating with TCG`,
  };
}

function probeInitramfs(busybox: string) {
  const init = `#!/bin/busybox sh\n/bin/busybox echo ${PROBE_MARKER}\n/bin/busybox poweroff -f\n`;
  return { files: [{ target: '/bin/busybox', source: busybox }, { target: '/init', content: init, mode: 0o755 }] };
}

function runUntilMarker(qemu: string, args: readonly string[], timeoutMs: number): Promise<{ seen: boolean; ms: number; output: string }> {
  const started = Date.now();
  return new Promise((resolve) => {
    let output = '';
    let settled = false;
    const child = spawn(qemu, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const finish = (seen: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      resolve({ seen, ms: Date.now() - started, output: output.slice(-4096) });
    };
    const onOutput = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (output.length > 65536) output = output.slice(-8192);
      if (output.includes(PROBE_MARKER)) finish(true);
    };
    child.stdout.on('data', onOutput);
    child.stderr.on('data', onOutput);
    child.once('error', (error) => {
      output += error.message;
      finish(false);
    });
    child.once('exit', () => finish(output.includes(PROBE_MARKER)));
    const timer = setTimeout(() => finish(false), timeoutMs);
  });
}
