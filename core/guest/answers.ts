/**
 * Reading guest answers defensively: each helper checks the shape of one
 * field and names it in the DSEC_GUEST_UNREACHABLE it throws otherwise, so a
 * broken or hostile guest gives a clear error, never a TypeError.
 */
import { DsecError } from '../errors.js';
import { isObject } from './channel.js';

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

export class AnswerReader {
  constructor(
    private readonly sandboxId: string,
    private readonly command: string,
  ) {}

  invalid(what: string): DsecError {
    return new DsecError('DSEC_GUEST_UNREACHABLE', { id: this.sandboxId, message: `its answer to ${this.command} is not valid: ${what}` });
  }

  object(value: unknown, what = 'the answer'): Record<string, unknown> {
    if (!isObject(value)) throw this.invalid(`${what} is not an object`);
    return value;
  }

  integer(value: unknown, what: string, min = 0): number {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) throw this.invalid(`${what} is not an integer of at least ${min}`);
    return value;
  }

  optionalInteger(value: unknown, what: string): number | undefined {
    return value === undefined || value === null ? undefined : this.integer(value, what, -(2 ** 31));
  }

  boolean(value: unknown, what: string, fallback?: boolean): boolean {
    if (value === undefined && fallback !== undefined) return fallback;
    if (typeof value !== 'boolean') throw this.invalid(`${what} is not a boolean`);
    return value;
  }

  string(value: unknown, what: string): string {
    if (typeof value !== 'string') throw this.invalid(`${what} is not a string`);
    return value;
  }

  /** Base64 bytes (absent: none), at most `limit` kept; `cut` says whether more came. */
  bytes(value: unknown, what: string, limit: number): { data: Buffer; cut: boolean } {
    if (value === undefined || value === null) return { data: Buffer.alloc(0), cut: false };
    if (typeof value !== 'string' || value.length % 4 !== 0 || !BASE64.test(value)) throw this.invalid(`${what} is not base64`);
    const data = Buffer.from(value, 'base64');
    return data.length > limit ? { data: data.subarray(0, limit), cut: true } : { data, cut: false };
  }
}
