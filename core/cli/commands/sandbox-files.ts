/**
 * `dsec sandbox read ID PATH` and `dsec sandbox write ID PATH`: one file out
 * of or into a sandbox, whatever its backend (a backend without file access
 * says so: DSEC_BACKEND_UNSUPPORTED). Bytes go through unchanged: read
 * writes them to stdout or `--out FILE`, write takes them from `--from FILE`
 * or stdin.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { DEFAULT_READ_FILE_BYTES, MAX_FILE_BYTES } from '../../live.js';
import { writeFileRequest } from '../../sdk/requests.js';
import { action } from '../command.js';
import { printJson } from '../output.js';

export function registerSandboxFileCommands(sandbox: Command): void {
  sandbox
    .command('read')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .argument('<path>', 'an absolute path inside the sandbox')
    .description('Print a file from inside a sandbox (bytes as they are), or save it with --out. A paused sandbox is resumed first.')
    .option('-o, --out <file>', 'write the content to this local file instead of stdout')
    .option('--max-bytes <n>', `refuse a file bigger than this (at most ${MAX_FILE_BYTES})`, parseByteCount, DEFAULT_READ_FILE_BYTES)
    .option('--json', 'print {path, size, data (base64)} as JSON')
    .action(
      action<{ out?: string; maxBytes: number; json?: boolean }, [string, string]>(async (ctx, flags, id, filePath) => {
        const provider = await ctx.connect();
        const content = await provider.readFile(id, { path: filePath, maxBytes: flags.maxBytes });
        if (flags.json) printJson(content);
        else if (flags.out) {
          await writeFile(flags.out, Buffer.from(content.data, 'base64'));
          process.stderr.write(`Saved ${content.size} bytes of ${filePath} from sandbox ${id} to ${flags.out}.\n`);
        } else await writeOut(Buffer.from(content.data, 'base64'));
        return 0;
      }),
    );

  sandbox
    .command('write')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .argument('<path>', 'an absolute path inside the sandbox (missing folders are created)')
    .description('Create or replace a file inside a sandbox with the content of --from FILE, or of stdin. A paused sandbox is resumed first.')
    .option('--from <file>', 'the local file to copy in (default: stdin)')
    .option('--mode <octal>', 'permission bits of the file', parseMode, 0o644)
    .option('--json', 'print {path, size} as JSON')
    .action(
      action<{ from?: string; mode: number; json?: boolean }, [string, string]>(async (ctx, flags, id, filePath) => {
        const data = flags.from === undefined ? await readAll(process.stdin) : await readFile(flags.from);
        const request = writeFileRequest(id, filePath, data, { mode: flags.mode });
        const provider = await ctx.connect();
        await provider.writeFile(id, request);
        if (flags.json) printJson({ path: filePath, size: data.length });
        else process.stderr.write(`Wrote ${data.length} bytes to ${filePath} in sandbox ${id}.\n`);
        return 0;
      }),
    );
}

function parseByteCount(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > MAX_FILE_BYTES) throw new InvalidArgumentError(`expected a number of bytes from 0 to ${MAX_FILE_BYTES}, got '${value}'`);
  return n;
}

/** `644`, `0644` or `0o644`. */
export function parseMode(value: string): number {
  const digits = value.replace(/^0o/i, '');
  if (!/^[0-7]{1,4}$/.test(digits)) throw new InvalidArgumentError(`expected permission bits in octal like 644 or 0755, got '${value}'`);
  return Number.parseInt(digits, 8);
}

export async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks);
}

/** Write and wait until stdout took it (a large file to a pipe must not be cut off by the exit). */
function writeOut(bytes: Buffer): Promise<void> {
  return new Promise((resolve, reject) => process.stdout.write(bytes, (error) => (error ? reject(error) : resolve())));
}
