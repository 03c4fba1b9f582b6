#!/usr/bin/env bash
# The test command (README, second line; .ci/run calls it). Installs what the
# tests need, builds, type-checks the tests, runs vitest with a JSON report
# and prints the plain summary line `N passed, N failed` from that report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npm run build
# vitest strips the tests' types without checking them: a type error in a
# test fails here, like one in the source fails the build. Incremental (the
# build info is under node_modules/.cache), so a run after a small change
# re-checks only what it touches.
npm run typecheck:tests
mkdir -p test-results
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json=test-results/vitest.json "$@" || status=$?
node scripts/summary.mjs test-results/vitest.json
exit $status
