/**
 * The uncompressed kernel (vmlinux, an ELF with a PVH entry note) out of a
 * bzImage, for qemu to load directly (`-kernel vmlinux`, booted through
 * PVH). A bzImage decompresses itself inside the guest: under TCG that is
 * slow, and it leaves the guest's decompression buffer (about 50 MB for
 * Debian's cloud kernel: its `init_size`) written, so qemu holds those
 * pages for the VM's whole life. Loaded as an ELF, only the kernel's own
 * segments are written. Debian compresses with LZ4 (the legacy frame
 * format), decoded here; another compression, or a kernel without the PVH
 * note, leaves the bzImage in use.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

const LZ4_LEGACY_MAGIC = 0x184c2102;
const LZ4_LEGACY_BLOCK_BYTES = 8 * 1024 * 1024;
const XEN_ELFNOTE_PHYS32_ENTRY = 18;

/**
 * A vmlinux of `bzImage` in `cacheDir` (extracted once, named by the
 * bzImage's digest), or undefined when it cannot be had (the reason is
 * returned beside for logs).
 */
export async function extractVmlinux(bzImage: string, cacheDir: string): Promise<{ path?: string; reason?: string }> {
  const image = await readFile(bzImage);
  const digest = createHash('sha256').update(image).digest('hex').slice(0, 24);
  const target = path.join(cacheDir, `vmlinux-${digest}`);
  if ((await stat(target).catch(() => undefined))?.isFile()) return { path: target };
  let elf: Buffer;
  try {
    elf = decompressPayload(bzImagePayload(image));
  } catch (error) {
    return { reason: (error as Error).message };
  }
  if (!hasPvhNote(elf)) return { reason: 'the kernel has no PVH entry note (CONFIG_PVH)' };
  await mkdir(cacheDir, { recursive: true });
  const partial = `${target}.${process.pid}.tmp`;
  await writeFile(partial, elf);
  await rename(partial, target);
  return { path: target };
}

/** The compressed kernel inside a bzImage (boot protocol >= 2.08: payload_offset, payload_length). */
export function bzImagePayload(image: Buffer): Buffer {
  if (image.length < 0x270 || image.readUInt32LE(0x202) !== 0x53726448 /* HdrS */) throw new Error('not a bzImage (no HdrS header)');
  if (image.readUInt16LE(0x206) < 0x208) throw new Error('bzImage boot protocol older than 2.08 (no payload fields)');
  const setupSectors = image[0x1f1] || 4;
  const start = (setupSectors + 1) * 512 + image.readUInt32LE(0x248);
  const length = image.readUInt32LE(0x24c);
  if (start + length > image.length) throw new Error('bzImage payload runs past the end of the file');
  return image.subarray(start, start + length);
}

function decompressPayload(payload: Buffer): Buffer {
  if (payload.length >= 4 && payload.readUInt32LE(0) === LZ4_LEGACY_MAGIC) return lz4Legacy(payload);
  throw new Error(`the kernel payload is not LZ4 (starts ${payload.subarray(0, 4).toString('hex')}); only LZ4 kernels are unpacked`);
}

/** LZ4's legacy frame: the magic, then blocks of (u32 compressed size, block), each at most 8 MiB decoded. */
export function lz4Legacy(frame: Buffer): Buffer {
  const blocks: Buffer[] = [];
  let at = 4;
  while (at + 4 <= frame.length) {
    const size = frame.readUInt32LE(at);
    // The kernel appends the decoded size after the last block; it reads as a block too big to be one.
    if (size === LZ4_LEGACY_MAGIC) {
      at += 4;
      continue;
    }
    if (size === 0 || at + 4 + size > frame.length) break;
    blocks.push(lz4Block(frame.subarray(at + 4, at + 4 + size), LZ4_LEGACY_BLOCK_BYTES));
    at += 4 + size;
  }
  if (blocks.length === 0) throw new Error('the LZ4 frame holds no block');
  return Buffer.concat(blocks);
}

/** One LZ4 block (sequences of literals and back references). */
export function lz4Block(source: Buffer, maxOutput: number): Buffer {
  const out = Buffer.allocUnsafe(maxOutput);
  let ip = 0;
  let op = 0;
  const readLength = (base: number) => {
    let length = base;
    if (base === 15) {
      let byte: number;
      do {
        if (ip >= source.length) throw new Error('LZ4 block truncated in a length');
        byte = source[ip++]!;
        length += byte;
      } while (byte === 255);
    }
    return length;
  };
  while (ip < source.length) {
    const token = source[ip++]!;
    const literals = readLength(token >> 4);
    if (ip + literals > source.length || op + literals > maxOutput) throw new Error('LZ4 block literals run past the end');
    source.copy(out, op, ip, ip + literals);
    ip += literals;
    op += literals;
    if (ip >= source.length) break; // the last sequence has literals only
    const offset = source[ip]! | (source[ip + 1]! << 8);
    ip += 2;
    if (offset === 0 || offset > op) throw new Error('LZ4 block references data before its start');
    const matchLength = readLength(token & 15) + 4;
    if (op + matchLength > maxOutput) throw new Error('LZ4 block decodes past its maximum size');
    let from = op - offset;
    if (offset >= matchLength) {
      out.copy(out, op, from, from + matchLength);
      op += matchLength;
    } else {
      for (let left = matchLength; left > 0; left--) out[op++] = out[from++]!;
    }
  }
  return Buffer.from(out.subarray(0, op));
}

/** Whether an ELF64 file carries Xen's PHYS32_ENTRY note (the PVH entry qemu boots it through). */
export function hasPvhNote(elf: Buffer): boolean {
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2) return false;
  const phoff = Number(elf.readBigUInt64LE(0x20));
  const phentsize = elf.readUInt16LE(0x36);
  const phnum = elf.readUInt16LE(0x38);
  for (let index = 0; index < phnum; index++) {
    const header = phoff + index * phentsize;
    if (header + 56 > elf.length || elf.readUInt32LE(header) !== 4 /* PT_NOTE */) continue;
    const offset = Number(elf.readBigUInt64LE(header + 8));
    const end = offset + Number(elf.readBigUInt64LE(header + 32));
    for (let note = offset; note + 12 <= Math.min(end, elf.length); ) {
      const nameSize = elf.readUInt32LE(note);
      const descSize = elf.readUInt32LE(note + 4);
      const type = elf.readUInt32LE(note + 8);
      const name = elf.toString('latin1', note + 12, note + 12 + Math.max(0, nameSize - 1));
      if (name === 'Xen' && type === XEN_ELFNOTE_PHYS32_ENTRY) return true;
      note += 12 + align4(nameSize) + align4(descSize);
    }
  }
  return false;
}

function align4(value: number): number {
  return (value + 3) & ~3;
}
