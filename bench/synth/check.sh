#!/usr/bin/env bash
# Builds synth-s3 and checks it against boto3 (check.py) for both key shapes, on 127.0.0.1.
# boto3 from the test emulators' venv (scripts/services.sh install), or any python with boto3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cargo build --release --quiet
PY=${PYTHON:-${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/venv/bin/python}
[[ -x $PY ]] || PY=python3
rc=0
for shape in tree flat; do
    log=$(mktemp)
    ./target/release/synth-s3 --objects 3000 --shape "$shape" --mean-size 300 --spread 200 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "admin on" "$log" && break; sleep 0.05; done
    s3=$(grep -o 'S3 on http://[0-9.:]*' "$log" | cut -d' ' -f3)
    admin=$(grep -o 'admin on http://[0-9.:]*' "$log" | cut -d' ' -f3)
    "$PY" check.py "$s3" "$admin" "$shape" || rc=1
    kill "$pid"
    rm -f "$log"
done
exit $rc
