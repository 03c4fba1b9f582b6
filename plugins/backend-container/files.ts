/**
 * readFile / writeFile for container sandboxes without an exec server
 * (made by an older dsec, or whose server does not answer: the exec server
 * reads and writes in the sandbox itself, server-calls.ts). The file is reached through
 * /proc/<init pid>/root, so the sandbox's own mounts (a tmpfs, a bind) are
 * seen as its processes see them, and every lookup is made by the kernel
 * inside that root (the native helper's openat2 RESOLVE_IN_ROOT): a symlink
 * planted inside to /etc/shadow or ../../.. reads the sandbox's own file,
 * never the host's. Files and folders a write creates belong to the
 * sandbox's user (the one its bundle runs as).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import {
  readFileInRoot,
  writeFileInRoot,
  type FileContent,
  type ReadFileRequest,
  type SandboxContext,
  type SandboxRoot,
  type WriteFileRequest,
} from '../../core/plugin-api.js';
import { processStartTime } from './liveness.js';

const DEFAULT_MAX_BYTES = 16 * 1024 * 1024;

export async function readSandboxFile(sandbox: SandboxContext, request: ReadFileRequest): Promise<FileContent> {
  const data = await readFileInRoot(await sandboxRoot(sandbox), request.path, request.maxBytes ?? DEFAULT_MAX_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

export async function writeSandboxFile(sandbox: SandboxContext, request: WriteFileRequest): Promise<true> {
  const owner = await bundleUser(sandbox);
  await writeFileInRoot(await sandboxRoot(sandbox), request.path, Buffer.from(request.data, 'base64'), { mode: request.mode ?? 0o644, ...owner });
  return true;
}

/** The running init's root; its start time is checked so a recycled pid never leads into another process's root. */
async function sandboxRoot(sandbox: SandboxContext): Promise<SandboxRoot> {
  const { initPid, initStart } = sandbox.backend;
  if (typeof initPid !== 'number' || typeof initStart !== 'string') throw new Error('the record has no init pid; the sandbox was not started');
  if ((await processStartTime(initPid)) !== initStart) throw new Error(`its init (pid ${initPid}) is gone`);
  return { id: sandbox.spec.id, root: `/proc/${initPid}/root` };
}

/** The uid and gid the sandbox's processes run as, from its bundle (resolved against its own /etc/passwd at provision). */
async function bundleUser(sandbox: SandboxContext): Promise<{ uid?: number; gid?: number }> {
  try {
    const config = JSON.parse(await readFile(path.join(sandbox.dir, 'config.json'), 'utf8')) as { process?: { user?: { uid?: unknown; gid?: unknown } } };
    const { uid, gid } = config.process?.user ?? {};
    return typeof uid === 'number' && typeof gid === 'number' ? { uid, gid } : {};
  } catch {
    return {};
  }
}
