/**
 * A worker's guest agent connection: core/guest's GuestAgentClient, seen as
 * the few calls the pool makes (run-task.ts WorkerChannel). A worker needs
 * dsec-guest, not a plain QEMU guest agent: dsec-exec kills a timed-out
 * task's whole process group and dsec-reset cleans the worker between tasks.
 */
import { DsecError, GuestAgentClient } from '../../core/plugin-api.js';
import type { WorkerChannel, WorkerExecRequest, WorkerExecResult } from './run-task.js';

export async function connectWorker(socketPath: string, id: string, timeoutMs: number): Promise<WorkerChannel> {
  const client = await GuestAgentClient.connect(socketPath, { timeoutMs, id });
  const info = await client.info().catch((error: Error) => {
    client.close();
    throw error;
  });
  if (!info.dsec) {
    client.close();
    throw new DsecError('DSEC_GUEST_UNREACHABLE', { id, message: `the agent on ${socketPath} is ${info.version}, not dsec-guest (a worker needs dsec-exec and dsec-reset)` });
  }
  return new GuestWorkerChannel(client);
}

class GuestWorkerChannel implements WorkerChannel {
  constructor(private readonly client: GuestAgentClient) {}

  get isClosed(): boolean {
    return this.client.closed;
  }

  async exec(request: WorkerExecRequest): Promise<WorkerExecResult> {
    const result = await this.client.exec({
      path: request.path,
      args: request.args,
      env: request.env,
      cwd: request.cwd,
      ...(request.stdin ? { stdin: request.stdin } : {}),
      timeoutMs: request.timeoutMs,
      maxOutputBytes: request.maxOutputBytes,
    });
    return {
      exitCode: result.exitCode,
      stdout: result.stdout,
      stderr: result.stderr,
      truncated: result.truncated,
      timedOut: result.timedOut,
      durationMs: result.durationMs,
    };
  }

  writeFile(path: string, data: Buffer, mode: number): Promise<void> {
    return this.client.writeFile(path, data, mode);
  }

  /** dsec-guest answers a read of at most 0 bytes from its stat of the path (symlinks followed), without opening it. */
  async stat(path: string): Promise<'file' | 'dir' | 'other' | 'missing'> {
    try {
      await this.client.readFile(path, 0);
      return 'file';
    } catch (error) {
      if (!(error instanceof DsecError)) throw error;
      if (error.code === 'DSEC_FILE_TOO_LARGE') return 'file';
      if (error.code === 'DSEC_FILE_NOT_FOUND') return 'missing';
      if (error.code === 'DSEC_FILE_INVALID') return /directory/.test(error.message) ? 'dir' : 'other';
      throw error;
    }
  }

  async reset(paths: readonly string[]): Promise<number> {
    return (await this.client.reset(paths)).killed;
  }

  close(): void {
    this.client.close();
  }
}
