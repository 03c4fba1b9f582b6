#!/bin/sh
# The grader's test: passes once calc.sh adds.
[ "$(sh /workspace/repo/calc.sh 2 3)" = 5 ] && echo PASS || { echo FAIL; exit 1; }
