/**
 * The glue between commander and a command's body: build the context from the
 * global options, run the body, turn its result into the exit code, print any
 * error the way users can act on it, and always release connections.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { DsecError } from '../errors.js';
import { durationSeconds } from '../config/units.js';
import { CliContext } from './context.js';
import { printError, wantsColor } from './output.js';

export interface CommonOptions {
  chdir?: string;
  file?: string;
  color?: boolean;
  verbose?: boolean;
  json?: boolean;
}

/** A command body returns its exit code (0 when it returns nothing). */
export type CommandBody<O, A extends unknown[]> = (ctx: CliContext, options: O & CommonOptions, ...args: A) => Promise<number | void>;

export function action<O, A extends unknown[]>(body: CommandBody<O, A>) {
  return async (...raw: unknown[]): Promise<void> => {
    const command = raw[raw.length - 1] as Command;
    const args = raw.slice(0, -2) as A;
    const options = command.optsWithGlobals<O & CommonOptions>();
    const color = wantsColor(options.color);
    let ctx: CliContext | undefined;
    try {
      ctx = new CliContext({ chdir: options.chdir, file: options.file, color, verbose: options.verbose });
      process.exitCode = (await body(ctx, { ...options, color }, ...args)) ?? 0;
    } catch (error) {
      printError(error, { json: Boolean(options.json), color });
      process.exitCode = 1;
    } finally {
      await ctx?.close();
    }
  };
}

/** Parse `--refresh=false` style booleans. */
export function parseBool(value: string): boolean {
  if (/^(true|1|yes)$/i.test(value)) return true;
  if (/^(false|0|no)$/i.test(value)) return false;
  throw new InvalidArgumentError(`expected true or false, got '${value}'`);
}

export function parsePositiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`expected a positive integer, got '${value}'`);
  return n;
}

export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** `--label k=v` / `--env K=V` flags -> a map; undefined when none was given. */
export function parseKeyValues(values: readonly string[] | undefined, flag: string): Record<string, string> | undefined {
  if (!values?.length) return undefined;
  const map: Record<string, string> = {};
  for (const value of values) {
    const eq = value.indexOf('=');
    if (eq < 1) throw new DsecError('DSEC_USAGE', { message: `${flag} expects key=value, got '${value}'` });
    map[value.slice(0, eq)] = value.slice(eq + 1);
  }
  return map;
}

/** `90s`, `30m`, `2h`, `1d` or a number of seconds, as in the config's ttl. */
export function parseDuration(value: string): number {
  const seconds = durationSeconds(/^[0-9]+$/.test(value) ? Number(value) : value);
  if (seconds === undefined || !Number.isInteger(seconds) || seconds < 1) {
    throw new InvalidArgumentError(`expected a duration like 90s, 30m, 2h, 1d or a number of seconds, got '${value}'`);
  }
  return seconds;
}
