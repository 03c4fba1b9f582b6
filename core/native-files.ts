/**
 * One file inside a sandbox through the native helper (`dsec-native
 * file-read` / `file-write`, see native/dsec-native.c): the path is resolved
 * by the kernel inside the sandbox's root (openat2 RESOLVE_IN_ROOT on a
 * dirfd of `root`), never on the host, so a symlink planted inside cannot
 * lead out. For backends whose sandboxes are processes on this host: `root`
 * is `/proc/<the sandbox's init pid>/root`, which also shows the sandbox's
 * own mounts (a tmpfs the host's view of its rootfs lacks).
 */
import { spawn } from 'node:child_process';
import { DsecError } from './errors.js';
import { nativeHelperPath } from './native.js';

/** Who the file is for: the sandbox (named in errors) and where its root is. */
export interface SandboxRoot {
  /** The sandbox id, for the error messages. */
  readonly id: string;
  /** A directory that is the sandbox's root, e.g. `/proc/<init pid>/root`. */
  readonly root: string;
}

export interface WriteInRootOptions {
  /** Permission bits. @default 0o644 */
  readonly mode?: number;
  /** Owner of what is created (the file, missing parents); absent: root. Existing files keep theirs. */
  readonly uid?: number;
  readonly gid?: number;
}

/** The helper's exit statuses (native/dsec-native.c). */
const EXIT_NOT_FOUND = 3;
const EXIT_TOO_LARGE = 4;
const EXIT_INVALID = 5;

/** The file's bytes; DSEC_FILE_NOT_FOUND, DSEC_FILE_TOO_LARGE (over `maxBytes`), DSEC_FILE_INVALID (not a regular file). */
export async function readFileInRoot(target: SandboxRoot, path: string, maxBytes: number): Promise<Buffer> {
  const { code, stdout, stderr } = await runFileHelper(['file-read', '--root', target.root, '--path', path, '--max', String(maxBytes)]);
  if (code !== 0) throw fileError(target.id, path, code, stderr, maxBytes);
  return stdout;
}

/** Create or replace the file (parents created) with `data`. Same errors as readFileInRoot, less TOO_LARGE. */
export async function writeFileInRoot(target: SandboxRoot, path: string, data: Buffer, options: WriteInRootOptions = {}): Promise<void> {
  const args = ['file-write', '--root', target.root, '--path', path, '--mode', (options.mode ?? 0o644).toString(8)];
  if (options.uid !== undefined) args.push('--uid', String(options.uid), '--gid', String(options.gid ?? options.uid));
  const { code, stderr } = await runFileHelper(args, data);
  if (code !== 0) throw fileError(target.id, path, code, stderr, 0);
}

function fileError(id: string, path: string, code: number | null, stderr: string, limit: number): Error {
  const message = stderr.trim().split('\n').pop() ?? '';
  if (code === EXIT_NOT_FOUND) return new DsecError('DSEC_FILE_NOT_FOUND', { id, path });
  if (code === EXIT_TOO_LARGE) {
    const size = /^size (\d+)$/m.exec(stderr)?.[1];
    return new DsecError('DSEC_FILE_TOO_LARGE', { id, path, size: size === undefined ? `more than ${limit}` : Number(size), limit });
  }
  // The helper's words start with the path; the error's template names it already.
  if (code === EXIT_INVALID) return new DsecError('DSEC_FILE_INVALID', { id, path, message: message.startsWith(`${path}: `) ? message.slice(path.length + 2) : message });
  return new Error(`dsec-native file call failed (exit ${code}): ${message || 'no message'}`);
}

function runFileHelper(args: readonly string[], input?: Buffer): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const helper = nativeHelperPath();
  return new Promise((resolve, reject) => {
    const child = spawn(helper, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.length < 64 && err.push(chunk));
    child.on('error', reject);
    // The helper may exit (a refused path) before reading its input: that is its answer, not a failure here.
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? Buffer.alloc(0));
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }));
  });
}
