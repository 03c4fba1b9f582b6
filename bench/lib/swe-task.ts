/**
 * The software-engineering task of the rollouts benchmark: a small Python
 * package (`calc`, in /repo of its workspace layer) whose `median` is wrong
 * for an even number of values, a test suite that catches it, the fixed
 * source (the rollout's patch), and the commands an agent runs around it,
 * each with what its answer must show. Before the patch pytest must fail
 * (the bug is there); after it, pass (the report read back must say so).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { SessionRunResult } from '../../core/live-process.js';

export const REPO = '/repo';
export const PATCHED_FILE = `${REPO}/calc/stats.py`;
export const REPORT_FILE = '/tmp/report.xml';
export const TEST_COUNT = 6;

const STATS_HEAD = `"""Small statistics helpers."""


def mean(values):
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
`;
const STATS_TAIL = `

def spread(values):
    return max(values) - min(values)
`;
const BUGGY_STATS = `${STATS_HEAD}    return ordered[mid]${STATS_TAIL}`;
/** The patch: the even case averages the two middle values. */
export const FIXED_STATS = `${STATS_HEAD}    return (ordered[mid - 1] + ordered[mid]) / 2${STATS_TAIL}`;

const FILES: Record<string, string> = {
  'README.md': '# calc\n\nSmall statistics helpers. Run the tests with `python3 -m pytest tests`.\n',
  'pyproject.toml': '[project]\nname = "calc"\nversion = "0.1.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
  'calc/__init__.py': '"""calc: small statistics helpers."""\n__version__ = "0.1.0"\n',
  'calc/stats.py': BUGGY_STATS,
  'tests/test_stats.py': `import pytest

from calc.stats import mean, median, spread


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_of_nothing():
    with pytest.raises(ValueError):
        mean([])


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_median_of_nothing():
    with pytest.raises(ValueError):
        median([])


def test_spread():
    assert spread([5, 1, 9]) == 8
`,
};

/** The workspace layer's tree: <dir>/repo/... */
export async function writeWorkspace(dir: string): Promise<void> {
  for (const [file, content] of Object.entries(FILES)) {
    const full = path.join(dir, REPO, file);
    await mkdir(path.dirname(full), { recursive: true });
    await writeFile(full, content);
  }
}

/** One command of the session, and what its answer must show (a problem, or undefined when fine). */
export interface Step {
  readonly command: string;
  readonly check?: (result: SessionRunResult) => string | undefined;
}

const exit0 = (result: SessionRunResult) => (result.exitCode === 0 ? undefined : `exited ${result.exitCode}: ${(result.stderr || result.stdout).trim().slice(-300)}`);
const prints = (wanted: string) => (result: SessionRunResult) => exit0(result) ?? (result.stdout.includes(wanted) ? undefined : `printed ${JSON.stringify(result.stdout.slice(0, 200))}, not ${JSON.stringify(wanted)}`);

/** Exploring and reproducing: 14 commands. */
export const BEFORE_PATCH: readonly Step[] = [
  { command: `cd ${REPO}`, check: exit0 },
  { command: 'ls -la', check: prints('pyproject.toml') },
  { command: 'cat README.md', check: prints('# calc') },
  { command: "find . -name '*.py' | sort", check: prints('./calc/stats.py') },
  { command: 'cat calc/stats.py', check: prints('def median') },
  { command: 'grep -rn "def " calc', check: prints('calc/stats.py') },
  { command: 'cat tests/test_stats.py', check: prints('test_median_even') },
  { command: `export PYTHONPATH=${REPO} PYTHONDONTWRITEBYTECODE=1 TASK=calc-median`, check: exit0 },
  { command: "python3 -c 'import calc, sys; print(calc.__version__, sys.version.split()[0])'", check: prints('0.1.0') },
  // The bug is there: the suite fails (pytest exits 1 when a test failed).
  {
    command: 'python3 -m pytest -q -p no:cacheprovider tests',
    check: (result) => (result.exitCode === 1 && result.stdout.includes('1 failed') ? undefined : `pytest before the patch should fail one test; exited ${result.exitCode}: ${result.stdout.trim().slice(-300)}`),
  },
  { command: "python3 -c 'from calc.stats import median; print(median([1, 2, 3, 4]))'", check: prints('3') },
  { command: 'grep -n "mid" calc/stats.py', check: prints('ordered[mid]') },
  { command: 'wc -l calc/*.py tests/*.py', check: prints('total') },
  { command: 'pwd; echo "$TASK $PYTHONPATH"', check: prints(`${REPO}\ncalc-median ${REPO}`) },
];

/** Checking the patch: 6 commands. */
export const AFTER_PATCH: readonly Step[] = [
  { command: 'head -20 calc/stats.py', check: prints('ordered[mid - 1]') },
  { command: "python3 -c 'from calc.stats import median; print(median([1, 2, 3, 4]))'", check: prints('2.5') },
  { command: 'python3 -m py_compile calc/stats.py && echo compiled', check: prints('compiled') },
  { command: 'ls /tmp; true', check: exit0 },
  { command: 'env | grep -c ^PYTHON', check: prints('2') },
  { command: `grep -c "def test_" tests/test_stats.py`, check: prints(String(TEST_COUNT)) },
];

/** The final run, with a JUnit report the rollout reads back. */
export const PYTEST = `python3 -m pytest -q -p no:cacheprovider --junitxml=${REPORT_FILE} tests`;

/** A problem with the JUnit report of the final run, or undefined when every test passed. */
export function checkReport(xml: string): string | undefined {
  const suite = /<testsuite\b[^>]*>/.exec(xml)?.[0];
  if (!suite) return `no <testsuite> in the report: ${xml.slice(0, 200)}`;
  const attribute = (name: string) => Number(new RegExp(`\\b${name}="(\\d+)"`).exec(suite)?.[1] ?? Number.NaN);
  const [tests, failures, errors] = [attribute('tests'), attribute('failures'), attribute('errors')];
  if (tests !== TEST_COUNT || failures !== 0 || errors !== 0) return `the report says tests=${tests} failures=${failures} errors=${errors} (wanted ${TEST_COUNT}, 0, 0)`;
  return undefined;
}
