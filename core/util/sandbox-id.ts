/**
 * Sandbox ids: `<fleet>-<8 random [a-z0-9]>`, made by the engine when it
 * plans creates and by a node agent when its pool makes a sandbox in place
 * of one it handed out.
 */
import { randomBytes } from 'node:crypto';

const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const ID_SUFFIX_LENGTH = 8;
/** Sandbox ids are at most 63 characters: the fleet part is cut to leave room for `-` + suffix. */
const MAX_FLEET_PART = 63 - 1 - ID_SUFFIX_LENGTH;

/** Random bytes drawn 4 KiB at a time: planning 100,000 creates should not make 100,000 syscalls. */
let pool = Buffer.alloc(0);
let poolOffset = 0;
function randomByte(): number {
  if (poolOffset >= pool.length) {
    pool = randomBytes(4096);
    poolOffset = 0;
  }
  return pool[poolOffset++];
}

/**
 * `<fleet>-<8 random [a-z0-9]>`. Pass `taken` (ids live or already planned)
 * to rule out the one-in-10^12 collision, which matters at 100,000 sandboxes.
 */
export function newSandboxId(fleet: string, taken?: Set<string>): string {
  const prefix = fleet.slice(0, MAX_FLEET_PART).replace(/-+$/, '');
  for (;;) {
    let suffix = '';
    while (suffix.length < ID_SUFFIX_LENGTH) {
      const byte = randomByte();
      // 252 = 7 * 36: bytes above it are dropped so every character is equally likely.
      if (byte < 252) suffix += ID_ALPHABET[byte % 36];
    }
    const id = `${prefix}-${suffix}`;
    if (!taken) return id;
    if (!taken.has(id)) {
      taken.add(id);
      return id;
    }
  }
}
