/**
 * exec through the standard QEMU guest agent commands, for guests that run
 * qemu-ga rather than dsec-guest: guest-exec, then guest-exec-status polled
 * with backoff. What qemu-ga lacks is done by a small /bin/sh wrapper: the
 * working directory, the user (setpriv), and a process group of its own
 * (setsid) so a timeout can kill every process the command started.
 */
import { GuestCommandError, type GuestChannel } from './channel.js';
import { AnswerReader } from './answers.js';
import { DEFAULT_EXEC_TIMEOUT_MS, DEFAULT_MAX_OUTPUT_BYTES, EXEC_ANSWER_MARGIN_MS, type GuestExecRequest, type GuestExecResult } from './types.js';

const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Each guest-exec-status call's own timeout. */
const STATUS_CALL_TIMEOUT_MS = 10_000;
/** After the kill, how long the process gets to be reaped before we stop asking. */
const KILL_GRACE_MS = 5_000;

/**
 * $1 the directory, $2 the user, then the command. setsid execs in place (a
 * child of qemu-ga is no group leader), so guest-exec-status still follows
 * the same pid, which now leads its own group.
 */
/** What the wrapper writes (with exit code 126) when the directory or user is not there: DSEC_GUEST_COMMAND_FAILED, as dsec-exec's. */
const SETUP_FAILED = 'dsec-exec-setup: ';

const WRAPPER = [
  'dir=$1; user=$2; shift 2',
  'if [ -n "$dir" ]; then cd -- "$dir" 2>/dev/null || { echo "dsec-exec-setup: failed to change directory to $dir" >&2; exit 126; }; fi',
  'session=; if command -v setsid >/dev/null 2>&1; then session=setsid; fi',
  // HOME as dsec-guest sets it (qemu-ga passes only the env given): the user's home, else /root for root, else /.
  'if [ -z "${HOME+set}" ]; then',
  '  HOME=$(getent passwd "${user%%:*}" 2>/dev/null | cut -d: -f6); [ -n "$HOME" ] || { [ -z "$user" ] && HOME=/root || HOME=/; }; export HOME',
  'fi',
  'if [ -n "$user" ]; then',
  '  case $user in',
  '    *:*) exec $session setpriv --reuid="${user%%:*}" --regid="${user#*:}" --clear-groups -- "$@";;',
  '    *) group=$(id -g -- "$user" 2>/dev/null) || { echo "dsec-exec-setup: no user $user in the guest" >&2; exit 126; }',
  '       exec $session setpriv --reuid="$user" --regid="$group" --init-groups -- "$@";;',
  '  esac',
  'fi',
  'exec $session "$@"',
].join('\n');

export async function execWithQga(channel: GuestChannel, request: GuestExecRequest): Promise<GuestExecResult> {
  const timeoutMs = request.timeoutMs !== undefined && request.timeoutMs > 0 ? request.timeoutMs : DEFAULT_EXEC_TIMEOUT_MS;
  const limit = request.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  const env = { PATH: BASE_PATH, ...request.env };
  const started = performance.now();
  const stdin = request.stdin === undefined ? undefined : Buffer.from(request.stdin);
  const answer = new AnswerReader(channel.sandboxId, 'guest-exec').object(
    await channel.call('guest-exec', {
      path: '/bin/sh',
      arg: ['-c', WRAPPER, 'dsec-exec', request.cwd ?? '', request.user ?? '', request.path, ...(request.args ?? [])],
      env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
      ...(stdin && stdin.length > 0 ? { 'input-data': stdin.toString('base64') } : {}),
      'capture-output': true,
    }, 30_000),
  );
  const pid = new AnswerReader(channel.sandboxId, 'guest-exec').integer(answer.pid, 'pid', 1);
  const deadline = started + timeoutMs;
  let timedOut = false;
  let delay = 5;
  for (;;) {
    const reader = new AnswerReader(channel.sandboxId, 'guest-exec-status');
    const status = reader.object(await channel.call('guest-exec-status', { pid }, STATUS_CALL_TIMEOUT_MS));
    if (reader.boolean(status.exited, 'exited')) {
      const out = reader.bytes(status['out-data'], 'out-data', limit);
      const err = reader.bytes(status['err-data'], 'err-data', limit);
      const exitCode = reader.optionalInteger(status.exitcode, 'exitcode');
      const signal = reader.optionalInteger(status.signal, 'signal');
      const stderr = err.data.toString('utf8');
      if (exitCode === 126 && stderr.startsWith(SETUP_FAILED)) throw new GuestCommandError('guest-exec', 'GenericError', stderr.slice(SETUP_FAILED.length).trim());
      return {
        exitCode: exitCode ?? null,
        ...(signal !== undefined ? { signal } : {}),
        stdout: out.data,
        stderr: err.data,
        truncated: out.cut || err.cut || status['out-truncated'] === true || status['err-truncated'] === true,
        timedOut,
        durationMs: Math.round(performance.now() - started),
      };
    }
    const now = performance.now();
    if (!timedOut && now >= deadline) {
      timedOut = true;
      await killGroup(channel, pid);
    } else if (timedOut && now >= deadline + KILL_GRACE_MS + EXEC_ANSWER_MARGIN_MS) {
      throw reader.invalid(`process ${pid} was killed at its ${timeoutMs} ms timeout but never reported as exited`);
    }
    const wait = timedOut ? 20 : Math.min(delay, Math.max(1, deadline - now));
    await new Promise((resolve) => setTimeout(resolve, wait));
    delay = Math.min(delay * 2, 200);
  }
}

/** SIGKILL the command's process group (and the pid itself, should it not lead one). */
async function killGroup(channel: GuestChannel, pid: number): Promise<void> {
  const answer = await channel.call('guest-exec', {
    path: '/bin/sh',
    arg: ['-c', 'kill -9 -"$1" 2>/dev/null; kill -9 "$1" 2>/dev/null; exit 0', 'dsec-kill', String(pid)],
  }, 30_000);
  // Collect the kill's own status so qemu-ga does not keep it for ever.
  const killer = (answer as { pid?: unknown }).pid;
  if (typeof killer !== 'number') return;
  for (let attempt = 0; attempt < 50; attempt++) {
    const status = await channel.call('guest-exec-status', { pid: killer }, STATUS_CALL_TIMEOUT_MS).catch(() => undefined);
    if ((status as { exited?: unknown } | undefined)?.exited !== false) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
