/**
 * Calls into a microVM through its guest agent's session (guest.ts:
 * dsec-guest's async mode over the virtio-serial port). exec, background
 * commands and sessions are the plugin API's guest calls
 * (core/guest/hook-calls.ts, shared with the container backend's exec
 * server); this file says who and where a command runs (the sandbox's
 * environment, PATH by default; its working directory; its user, a name the
 * guest resolves in its own /etc/passwd: the VM's users are its own
 * business) and maps the file calls.
 */
import {
  DEFAULT_READ_FILE_BYTES,
  DsecError,
  type FileContent,
  type GuestCallTarget,
  type GuestPlace,
  type ReadFileRequest,
  type SandboxContext,
  type WriteFileRequest,
} from '../../core/plugin-api.js';
import { DEFAULT_PATH } from './guest-init.js';
import { guestOf } from './vm.js';

/** /etc/passwd is read to give a written file to the sandbox's user: at most this much of it. */
const MAX_PASSWD_BYTES = 1024 * 1024;

/** One sandbox's calls: its VM's guest session, and the exec output cap when a request gives none. */
export interface Target extends GuestCallTarget {
  readonly sandbox: SandboxContext;
}

export async function targetOf(sandbox: SandboxContext, defaultCap: number): Promise<Target> {
  return {
    sandbox,
    session: await guestOf(sandbox),
    defaultCap,
    place: (request): GuestPlace => ({
      user: sandbox.spec.user || 'root',
      env: { PATH: DEFAULT_PATH, ...sandbox.spec.env, ...request.env },
      cwd: request.workdir || sandbox.spec.workdir || '/',
    }),
  };
}

export async function readFileInVm(target: Target, request: ReadFileRequest): Promise<FileContent> {
  const data = await target.session.readFile(request.path, request.maxBytes ?? DEFAULT_READ_FILE_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

/** The file, and the folders made for it, belong to the sandbox's user, as in a container. */
export async function writeFileInVm(target: Target, request: WriteFileRequest): Promise<true> {
  const owner = await ownerOf(target);
  await target.session.writeFile(request.path, Buffer.from(request.data, 'base64'), { mode: request.mode ?? 0o644, ...owner });
  return true;
}

/**
 * The numeric owner of the sandbox's user, resolved as the guest agent
 * resolves a user for exec (native/guest/users.c): `UID:GID` as given, a
 * bare UID with its passwd group (else the UID), a name from the guest's
 * /etc/passwd. Root (or no user) needs no chown: undefined.
 */
async function ownerOf(target: Target): Promise<{ uid: number; gid: number } | undefined> {
  const user = target.sandbox.spec.user;
  if (!user || user === 'root' || user === '0' || user === '0:0') return undefined;
  const numeric = /^(\d+)(?::(\d+))?$/.exec(user);
  if (numeric?.[2] !== undefined) return { uid: Number(numeric[1]), gid: Number(numeric[2]) };
  const passwd = await target.session.readFile('/etc/passwd', MAX_PASSWD_BYTES).catch(() => Buffer.alloc(0));
  for (const line of passwd.toString('utf8').split('\n')) {
    const [name, , uid, gid] = line.split(':');
    if (uid === undefined || gid === undefined || !/^\d+$/.test(uid) || !/^\d+$/.test(gid)) continue;
    if (numeric ? uid === numeric[1] : name === user) return { uid: Number(uid), gid: Number(gid) };
  }
  if (numeric) return { uid: Number(numeric[1]), gid: Number(numeric[1]) };
  throw new DsecError('DSEC_GUEST_COMMAND_FAILED', { id: target.sandbox.spec.id, command: 'dsec-write-file', message: `no user '${user}' in the guest's /etc/passwd to give the file to` });
}
