/**
 * How every benchmark file runs when started directly (`node
 * dist/bench/NAME.js ARGS`), and stays importable otherwise: run it with the
 * command line, exit 1 when it missed its target or failed (the error on
 * stderr, prefixed with its name).
 */
import { pathToFileURL } from 'node:url';

export function runWhenMain(
  moduleUrl: string,
  name: string,
  run: (argv: string[]) => Promise<boolean> | boolean,
  options: { exit?: boolean } = {},
): void {
  if (!process.argv[1] || moduleUrl !== pathToFileURL(process.argv[1]).href) return;
  const finish = (code: number) => {
    // `exit`: leave at once even if a client's socket or timer would keep the process alive.
    if (options.exit) process.exit(code);
    else if (code !== 0) process.exitCode = code;
  };
  Promise.resolve()
    .then(() => run(process.argv.slice(2)))
    .then(
      (ok) => finish(ok ? 0 : 1),
      (error: Error) => {
        process.stderr.write(`${name}: ${error.stack ?? error.message}\n`);
        finish(1);
      },
    );
}
