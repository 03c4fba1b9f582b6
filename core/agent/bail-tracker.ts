/**
 * A bail hook says what the answer was, not who gave it. The agent needs the
 * "who" for `admit` ("refused by density-memory: ..."), so this interceptor
 * wraps every tap and notes, per first argument (the SandboxContext), the
 * name of the tap that answered.
 */
import type { Tap } from 'tapable';

type AnyFn = (...args: unknown[]) => unknown;

interface InterceptableHook {
  intercept(interceptor: { register?: (tap: Tap & { type: string; fn: AnyFn }) => Tap & { type: string; fn: AnyFn } }): void;
}

export function trackBailer(hook: unknown): WeakMap<object, string> {
  const answeredBy = new WeakMap<object, string>();
  const note = (key: unknown, name: string, result: unknown) => {
    if (result !== undefined && typeof key === 'object' && key !== null) answeredBy.set(key, name);
  };
  (hook as InterceptableHook).intercept({
    register(tap) {
      const original = tap.fn;
      let fn: AnyFn;
      if (tap.type === 'promise') {
        fn = async (...args) => {
          const result = await original(...args);
          note(args[0], tap.name, result);
          return result;
        };
      } else if (tap.type === 'async') {
        fn = (...args) => {
          const callback = args.pop() as (error: unknown, result?: unknown) => void;
          return original(...args, (error: unknown, result?: unknown) => {
            if (!error) note(args[0], tap.name, result);
            callback(error, result);
          });
        };
      } else {
        fn = (...args) => {
          const result = original(...args);
          note(args[0], tap.name, result);
          return result;
        };
      }
      return { ...tap, fn };
    },
  });
  return answeredBy;
}
