import { defineConfig } from 'vitest/config';

// Unit tests are pure and fast; integration and e2e tests start real node
// agents and OCI containers, so they run one file at a time per worker and get
// generous timeouts (a container start is ~100 ms, an agent start ~300 ms).
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
