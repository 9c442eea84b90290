#!/usr/bin/env bash
# The project's one test command: start the local cloud emulators (and install the browser the
# dashboard test drives: `scripts/services.sh browser`), run every cargo test against
# them, then stop the emulators this run started (ones already running before are left alone).
#
#   scripts/test.sh                        all tests
#   scripts/test.sh gcs_                   extra arguments go to `cargo test`
#   scripts/test.sh -p slate -- --nocapture   arguments after `--` go to the test binaries
#
# SLATE_TEST_THREADS (default 4) sets --test-threads; scripts/services.sh lists the other knobs.
# Exits with cargo's status.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# services.sh appends the name of each service it actually starts to this file.
started_file=$(mktemp "${TMPDIR:-/tmp}/slate-test-started.XXXXXX")

# shellcheck disable=SC2317  # called by the traps
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -s $started_file ]]; then
        local started
        mapfile -t started <"$started_file"
        bash scripts/services.sh stop "${started[@]}" || true
    fi
    rm -f "$started_file"
    exit "$rc"
}
# On INT/TERM: pass the signal on to cargo (if it is running), then exit, which runs cleanup.
cargo_pid=
# shellcheck disable=SC2317  # called by the traps
on_signal() {
    if [[ -n $cargo_pid ]]; then
        kill -"$1" "$cargo_pid" 2>/dev/null || true
        wait "$cargo_pid" 2>/dev/null || true
    fi
    exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

SLATE_STARTED_FILE=$started_file bash scripts/services.sh start
# Chromium and playwright-core for tests/dashboard.rs (idempotent; apt as root on first use).
bash scripts/services.sh browser
eval "$(bash scripts/services.sh env)"

# Split "$@" at the first `--`: before it for cargo, after it for the test binaries.
cargo_args=()
test_args=()
seen_separator=0
for arg in "$@"; do
    if ((seen_separator)); then
        test_args+=("$arg")
    elif [[ $arg == -- ]]; then
        seen_separator=1
    else
        cargo_args+=("$arg")
    fi
done

# cargo runs in the background and we `wait` for it, so that a TERM sent to this script is
# handled at once (bash runs traps only between commands, and `wait` counts as between).
# `trap - INT QUIT`: undo bash's ignoring of those in background jobs, so Ctrl-C still works.
(
    trap - INT QUIT
    exec cargo test --all-targets ${cargo_args[@]+"${cargo_args[@]}"} -- \
        --test-threads="${SLATE_TEST_THREADS:-4}" ${test_args[@]+"${test_args[@]}"}
) &
cargo_pid=$!
status=0
wait "$cargo_pid" || status=$?
cargo_pid=
exit "$status"
