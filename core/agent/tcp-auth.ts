/**
 * The shared-token check on the agent's TCP API, and the log of refusals.
 *
 * The token is compared through SHA-256 digests with timingSafeEqual: equal
 * lengths whatever was sent, so the time taken says nothing about how much of
 * a guess was right.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../hooks.js';

/** Why `authorization` does not carry `token`, or undefined when it does. */
export function bearerRefusal(authorization: string | undefined, token: string): string | undefined {
  if (!authorization) return 'no Authorization header';
  const match = /^Bearer\s+(.+)$/i.exec(authorization.trim());
  if (!match) return 'the Authorization header is not "Bearer <token>"';
  return sameSecret(match[1].trim(), token) ? undefined : 'wrong token';
}

function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest(given), digest(expected));
}

export interface RateLimitOptions {
  /** Lines written per window; the rest are counted and summed up in one line. @default 20 */
  readonly perWindow?: number;
  /** @default 60000 */
  readonly windowMs?: number;
  readonly now?: () => number;
}

/**
 * Warn lines with a budget per window, so a flood of bad requests cannot
 * fill the disk: past the budget only a count is kept, written as one line
 * when the next window opens.
 */
export class RateLimitedLog {
  private readonly perWindow: number;
  private readonly windowMs: number;
  private readonly now: () => number;
  private windowStart = -Infinity;
  private written = 0;
  private suppressed = 0;

  constructor(
    private readonly log: Logger,
    options: RateLimitOptions = {},
  ) {
    this.perWindow = options.perWindow ?? 20;
    this.windowMs = options.windowMs ?? 60_000;
    this.now = options.now ?? Date.now;
  }

  warn(message: string): void {
    const now = this.now();
    if (now - this.windowStart >= this.windowMs) {
      if (this.suppressed > 0) this.log.warn(`${this.suppressed} more line(s) like the above were not logged (over ${this.perWindow} per ${this.windowMs / 1000} s)`);
      this.windowStart = now;
      this.written = 0;
      this.suppressed = 0;
    }
    if (this.written < this.perWindow) {
      this.written++;
      this.log.warn(message);
    } else {
      this.suppressed++;
    }
  }
}
