#!/bin/sh
# The task's repository: a tiny calculator with a bug for the agent to fix.
add() { echo $(( $1 - $2 )); }
add "$@"
