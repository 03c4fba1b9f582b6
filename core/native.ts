/**
 * The TypeScript face of dsec-native (native/dsec-native.c), the small C
 * helper for the kernel calls Node cannot make: process attributes that must
 * be set before a sandbox's first process starts (KSM merging, SCHED_IDLE, a
 * core-scheduling cookie), and process_madvise to read a resumed sandbox's
 * memory back in. `npm run build` compiles it into dist/native/dsec-native.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DsecError } from './errors.js';
import type { ProcessTraits } from './hooks.js';

/** Whether the node can give processes one attribute, and why not when it cannot. */
export interface NativeCapability {
  readonly ok: boolean;
  /** Set when `ok` is false: the kernel's answer in words (e.g. "kernel without CONFIG_SCHED_CORE"). */
  readonly reason?: string;
}

/** What `dsec-native probe` found this kernel and machine allow. */
export interface NativeSupport {
  /** prctl(PR_SET_MEMORY_MERGE): ProcessTraits.memoryMerge. */
  readonly memoryMerge: NativeCapability;
  /** sched_setscheduler(SCHED_IDLE): ProcessTraits.idleCpu. */
  readonly schedIdle: NativeCapability;
  /** prctl(PR_SCHED_CORE): ProcessTraits.coreScheduling. */
  readonly coreScheduling: NativeCapability;
}

export interface PrefetchResult {
  /** Bytes of mappings the kernel accepted the advice for (not bytes read: that happens in the background). */
  readonly advisedBytes: number;
  /** Ranges or processes it could not advise (a process that exited, a range unmapped meanwhile). */
  readonly errors: readonly string[];
}

const HELPER_NAME = 'dsec-native';

/**
 * Where the helper is: dist/native/ beside the compiled core (this module at
 * dist/core/native.js), or the repository's dist/native/ when dsec runs
 * from its TypeScript sources (this module at core/native.ts, tests and tsx).
 */
const CANDIDATES = [new URL(`../native/${HELPER_NAME}`, import.meta.url), new URL(`../dist/native/${HELPER_NAME}`, import.meta.url)].map(
  (url) => fileURLToPath(url),
);

let foundHelper: string | undefined;

/** The helper binary's absolute path; DSEC_NATIVE_HELPER when it was not built (or is not executable). */
export function nativeHelperPath(): string {
  if (foundHelper) return foundHelper;
  const present = CANDIDATES.find((candidate) => existsSync(candidate));
  // The first candidate when none exists: the compiled layout, which is where an installed dsec keeps it.
  if (!present) throw new DsecError('DSEC_NATIVE_HELPER', { path: CANDIDATES[0], problem: 'is missing' });
  try {
    accessSync(present, constants.X_OK);
  } catch {
    throw new DsecError('DSEC_NATIVE_HELPER', { path: present, problem: 'is not executable' });
  }
  foundHelper = present;
  return present;
}

/**
 * The words to put before a command (`runc run ...`) so that it, and every
 * process it starts, has the traits: `[helper, 'spawn', flags..., '--']`, or
 * `[]` when no trait is set (the command then runs as it is, with no helper
 * process). Throws DSEC_NATIVE_HELPER when a trait is set and the helper was
 * not built.
 */
export function spawnPrefix(traits: ProcessTraits): string[] {
  const flags = [
    ...(traits.memoryMerge ? ['--merge'] : []),
    ...(traits.idleCpu ? ['--sched-idle'] : []),
    ...(traits.coreScheduling ? ['--core-sched'] : []),
  ];
  return flags.length === 0 ? [] : [nativeHelperPath(), 'spawn', ...flags, '--'];
}

let support: Promise<NativeSupport> | undefined;

/** What the node supports, asked once per process (the kernel and CPU do not change under a running agent). */
export function probeNativeSupport(): Promise<NativeSupport> {
  support ??= runHelper(['probe']).then((stdout) => parseSupport(stdout));
  // A failed probe (helper not built yet) is asked again next time.
  support.catch(() => (support = undefined));
  return support;
}

/**
 * Ask the kernel to read every mapping of these processes back into memory
 * (process_madvise MADV_WILLNEED): swapped-out pages come back from swap,
 * dropped file pages from their files, in the background. A resumed sandbox
 * then does not fault page by page on its first request.
 */
export async function prefetchProcesses(pids: readonly number[]): Promise<PrefetchResult> {
  const wanted = pids.filter((pid) => Number.isInteger(pid) && pid > 0);
  if (wanted.length === 0) return { advisedBytes: 0, errors: [] };
  const stdout = await runHelper(['prefetch', ...wanted.map(String)]);
  const parsed = parseJson(stdout) as { advisedBytes?: unknown; errors?: unknown };
  if (typeof parsed.advisedBytes !== 'number' || !Array.isArray(parsed.errors)) throw helperFailed(`answered ${stdout.trim()}`);
  return { advisedBytes: parsed.advisedBytes, errors: parsed.errors.map(String) };
}

function parseSupport(stdout: string): NativeSupport {
  const parsed = parseJson(stdout) as Record<string, unknown>;
  const capability = (key: keyof NativeSupport): NativeCapability => {
    const value = parsed[key] as { ok?: unknown; reason?: unknown } | undefined;
    if (typeof value?.ok !== 'boolean') throw helperFailed(`answered ${stdout.trim()}`);
    return value.ok ? { ok: true } : { ok: false, reason: String(value.reason ?? 'unknown') };
  };
  return { memoryMerge: capability('memoryMerge'), schedIdle: capability('schedIdle'), coreScheduling: capability('coreScheduling') };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw helperFailed(`answered ${text.trim() || '(nothing)'}`);
  }
}

function runHelper(args: readonly string[]): Promise<string> {
  const helper = nativeHelperPath();
  return new Promise((resolve, reject) => {
    execFile(helper, args, { encoding: 'utf8', maxBuffer: 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) reject(helperFailed(`failed (${error.code ?? error.signal}): ${stderr.trim() || error.message}`, error));
      else resolve(stdout);
    });
  });
}

function helperFailed(problem: string, cause?: unknown): DsecError {
  return new DsecError('DSEC_NATIVE_HELPER', { path: foundHelper ?? CANDIDATES[0], problem }, { cause });
}
