/**
 * A counting semaphore: at most `concurrency` of the functions handed to the
 * limiter run at once; the rest wait their turn in order. Apply shares one
 * across every sandbox operation of a plan (Terraform's -parallelism).
 */
export type Limiter = <T>(task: () => Promise<T>) => Promise<T>;

export function createLimiter(concurrency: number): Limiter {
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new RangeError(`parallelism must be a positive integer, got ${concurrency}`);
  }
  let running = 0;
  const waiting: (() => void)[] = [];
  const acquire = (): Promise<void> => {
    if (running < concurrency) {
      running += 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => waiting.push(resolve));
  };
  // The slot passes straight to the next waiter, so a newcomer can never
  // slip in between a release and the waiter waking up.
  const release = (): void => {
    const next = waiting.shift();
    if (next) next();
    else running -= 1;
  };
  return async <T>(task: () => Promise<T>): Promise<T> => {
    await acquire();
    try {
      return await task();
    } finally {
      release();
    }
  };
}
