/**
 * Calls into a container sandbox through its exec server (exec-server.ts).
 * exec, background commands and sessions are the plugin API's guest calls
 * (core/guest/hook-calls.ts, shared with the microVM backend); this file
 * says who and where a command runs (numeric ids resolved on the host at
 * create time, so a sandbox's own /etc/passwd never decides who a command
 * runs as) and maps the file calls.
 */
import {
  DEFAULT_READ_FILE_BYTES,
  type FileContent,
  type GuestCallTarget,
  type GuestPlace,
  type GuestSession,
  type ReadFileRequest,
  type SandboxContext,
  type WriteFileRequest,
} from '../../core/plugin-api.js';
import { DEFAULT_PATH } from './bundle.js';
import type { SandboxUser } from './exec-server.js';

export interface ServerTarget extends GuestCallTarget {
  readonly user: SandboxUser;
}

/** A sandbox's exec server as the guest calls take it. */
export function serverTarget(sandbox: SandboxContext, session: GuestSession, user: SandboxUser, defaultCap: number): ServerTarget {
  return {
    session,
    user,
    defaultCap,
    // The sandbox's user, its environment (PATH by default, HOME from its passwd entry) under the request's, its workdir.
    place: (request): GuestPlace => ({
      uid: user.uid,
      gid: user.gid,
      groups: [...user.groups],
      home: user.home,
      env: { PATH: DEFAULT_PATH, HOME: user.home, ...sandbox.spec.env, ...request.env },
      cwd: request.workdir ?? (sandbox.spec.workdir || '/'),
    }),
  };
}

export async function readThroughServer(target: ServerTarget, request: ReadFileRequest): Promise<FileContent> {
  const data = await target.session.readFile(request.path, request.maxBytes ?? DEFAULT_READ_FILE_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

/** The file and the folders made for it belong to the sandbox's user. */
export async function writeThroughServer(target: ServerTarget, request: WriteFileRequest): Promise<true> {
  await target.session.writeFile(request.path, Buffer.from(request.data, 'base64'), { mode: request.mode ?? 0o644, uid: target.user.uid, gid: target.user.gid });
  return true;
}
