/**
 * A process tree in its own memory and freezer cgroups, holding anonymous
 * memory (a big string in busybox awk) and page cache (a file it read), for
 * the reclaim tests that need no agent. `dispose` kills it, thaws and removes
 * the cgroups and its temp folder, whatever state the test left.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const MIB = 1024 * 1024;

export class MemoryHolder {
  private constructor(
    readonly memory: string,
    readonly freezer: string,
    readonly tmp: string,
    private readonly child: ChildProcess,
  ) {}

  static async start(options: { anonMiB: number; cacheMiB: number; limitMiB: number }): Promise<MemoryHolder> {
    const name = `dsec-test-reclaim-${process.pid}-${randomBytes(3).toString('hex')}`;
    const memory = path.join('/sys/fs/cgroup/memory', name);
    const freezer = path.join('/sys/fs/cgroup/freezer', name);
    mkdirSync(memory);
    mkdirSync(freezer);
    const tmp = mkdtempSync(path.join(tmpdir(), 'dsec-reclaim-'));
    const limit = String(options.limitMiB * MIB);
    writeFileSync(path.join(memory, 'memory.limit_in_bytes'), limit);
    writeFileSync(path.join(memory, 'memory.memsw.limit_in_bytes'), limit);
    // Joins both cgroups before it allocates anything, and writes its file itself: a page is
    // charged to the cgroup that first brought it into the page cache.
    const script = [
      `echo $$ > ${memory}/cgroup.procs`,
      `echo $$ > ${freezer}/cgroup.procs`,
      `head -c ${options.cacheMiB * MIB} /dev/urandom > ${tmp}/cache`,
      `exec /bin/busybox awk 'BEGIN { s = "0123456789abcdef"; while (length(s) < ${options.anonMiB * MIB}) s = s s; print "ready"; fflush(); while (1) system("sleep 3600") }'`,
    ].join('; ');
    const child = spawn('/bin/busybox', ['sh', '-c', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const holder = new MemoryHolder(memory, freezer, tmp, child);
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('ready') && resolve());
        child.once('exit', (code) => reject(new Error(`the holder exited (${code}) before it was ready`)));
        setTimeout(() => reject(new Error('the holder was not ready in 20 s')), 20_000);
      });
    } catch (error) {
      holder.dispose();
      throw error;
    }
    return holder;
  }

  pids(): number[] {
    return readFileSync(path.join(this.memory, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  }

  freeze(): void {
    writeFileSync(path.join(this.freezer, 'freezer.state'), 'FROZEN');
    for (let i = 0; i < 100 && readFileSync(path.join(this.freezer, 'freezer.state'), 'utf8').trim() !== 'FROZEN'; i++) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
  }

  thaw(): void {
    writeFileSync(path.join(this.freezer, 'freezer.state'), 'THAWED');
  }

  /** The awk process is alive and answers signals (0). */
  alive(): boolean {
    return this.pids().length > 0;
  }

  dispose(): void {
    const pids = existsSync(this.memory) ? this.pids() : [];
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    try {
      if (existsSync(this.freezer)) this.thaw();
    } catch {
      // nothing to thaw
    }
    for (let i = 0; i < 200 && existsSync(this.memory) && this.pids().length > 0; i++) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    for (const dir of [this.memory, this.freezer]) {
      try {
        rmdirSync(dir);
      } catch {
        // already gone
      }
    }
    rmSync(this.tmp, { recursive: true, force: true });
  }
}
