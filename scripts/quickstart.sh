#!/usr/bin/env bash
# The first README command: install what dsec needs, build it, put `dsec` on
# the PATH, and bring the quickstart up on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npm run build --silent
npm link --silent --no-audit --no-fund >/dev/null 2>&1 || echo "quickstart: could not npm link; use $(pwd)/bin/dsec.js as dsec"
repo=$(pwd)
dsec() { node "$repo/bin/dsec.js" "$@"; }

cd examples/quickstart
echo "+ dsec plan"
dsec plan
echo "+ dsec apply --auto-approve"
dsec apply --auto-approve
echo "+ dsec sandbox ls"
dsec sandbox ls
id=$(dsec sandbox ls --fleet workers --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s)[0].id))')
echo "+ dsec sandbox exec $id -- hello"
dsec sandbox exec "$id" -- hello
cat <<MSG

The quickstart is up. From examples/quickstart:
  dsec sandbox ls                      # the running sandboxes
  dsec sandbox exec $id -- sh -c 'uname -a; id'
  dsec destroy --auto-approve          # tear it all down
MSG
