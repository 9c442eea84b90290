#!/usr/bin/env bash
# bench/rerun.sh — a copy killed halfway, then the same command again: what the re-run costs
# with slate and with rclone, in the same run.
#
# BENCH_N files of BENCH_KB KiB in a local folder are copied to an S3 bucket (s3s-fs on
# 127.0.0.1, as bench/run.sh uses). Each tool's first copy is killed with SIGKILL once about
# half the bytes have landed; the same command is then run again to its end. Reported per
# tool: what the first run had landed, the re-run's time, the bytes it moved (the tool's own
# count) and the requests the server saw (s3s-fs's log is not kept: slate's count comes from
# its summary, rclone's from --stats). Prints a markdown table on stdout and writes it to
# bench/last-rerun-run.md. Talks to 127.0.0.1 only.
set -euo pipefail
# Every S3 path ends in "/": s3s-fs answers a HEAD of a "folder" key with 500 (real S3: 404),
# which rclone retries for ~90 s; both tools skip that probe for a path ending in "/" (see
# bench/run.sh).

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
SLATE_TEST_HOME="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}"
N="${BENCH_N:-2000}"
KB="${BENCH_KB:-256}"
PORT="${SLATE_S3S_PORT:-8015}"
REPORT="${BENCH_REPORT:-$SCRIPT_DIR/last-rerun-run.md}"
S3S_VERSION=0.14.1
S3S_BIN="$SLATE_TEST_HOME/s3s-fs/bin/s3s-fs"
ENDPOINT="http://127.0.0.1:$PORT"

log() { printf '[rerun %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '[rerun] ERROR: %s\n' "$*" >&2; exit 1; }

command -v rclone >/dev/null || die "rclone is not installed (apt-get install rclone)"
if ! [[ -x "$S3S_BIN" ]]; then
    log "installing s3s-fs $S3S_VERSION (once)"
    cargo install s3s-fs --version "$S3S_VERSION" --features binary --locked \
        --root "$SLATE_TEST_HOME/s3s-fs" >&2 || die "cargo install s3s-fs failed"
fi
if [[ -n "${SLATE_BIN:-}" ]]; then
    SLATE="$SLATE_BIN"
else
    (cd "$REPO_ROOT" && cargo build --release --bin slate >&2) || die "cargo build --release failed"
    SLATE="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/slate"
fi
[[ -x "$SLATE" ]] || die "no slate binary at $SLATE"

WORK="$(mktemp -d /tmp/slate-rerun.XXXXXX)"
S3S_PID=""
cleanup() {
    [[ -n "$S3S_PID" ]] && kill "$S3S_PID" 2>/dev/null && wait "$S3S_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/s3/bench-dst" "$WORK/src"
log "writing $N files of $KB KiB"
python3 - "$WORK/src" "$N" "$KB" <<'EOF'
import os, sys
root, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, f"d{i % 20:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
        f.write(os.urandom(kb * 1024))
EOF
TOTAL=$((N * KB * 1024))

"$S3S_BIN" --host 127.0.0.1 --port "$PORT" --access-key testing --secret-key testing \
    "$WORK/s3" >"$WORK/s3s.log" 2>&1 &
S3S_PID=$!
deadline=$((SECONDS + 30))
until curl -s -o /dev/null "$ENDPOINT/"; do
    ((SECONDS < deadline)) || die "s3s-fs did not start: $(tail -3 "$WORK/s3s.log")"
    sleep 0.1
done

export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="$ENDPOINT"
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other \
    RCLONE_CONFIG_BENCH_ENDPOINT="$ENDPOINT" RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=testing \
    RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=testing RCLONE_CONFIG_BENCH_REGION=us-east-1 \
    RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true

landed() { du -sb "$WORK/s3/bench-dst/$1" 2>/dev/null | awk '{print $1}' || echo 0; }
now() { date +%s.%N; }

# run_tool NAME PREFIX CMD...: the first run killed at half the bytes, the re-run timed
run_tool() {
    local name=$1 prefix=$2
    shift 2
    log "$name: first copy, killed at ~50% of $TOTAL bytes"
    "$@" >"$WORK/$name.1.out" 2>&1 &
    local pid=$! deadline=$((SECONDS + 600))
    while kill -0 "$pid" 2>/dev/null; do
        (($(landed "$prefix") >= TOTAL / 2)) && break
        ((SECONDS < deadline)) || die "$name: the first copy did not reach half in 600 s"
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || die "$name: finished before it could be killed (raise BENCH_N)"
    wait "$pid" 2>/dev/null || true
    local first
    first=$(landed "$prefix")
    log "$name: re-run"
    local t0 t1
    t0=$(now)
    "$@" >"$WORK/$name.2.out" 2>&1 || die "$name: the re-run failed: $(tail -5 "$WORK/$name.2.out")"
    t1=$(now)
    local total
    total=$(landed "$prefix")
    echo "$first $(echo "$t1 - $t0" | bc) $total"
}

read -r s_first s_secs s_total < <(run_tool slate slate \
    "$SLATE" copy "$WORK/src/" "s3://bench-dst/slate/" --db "$WORK/slate.db")
s_moved=$(grep -a '^copy: ' "$WORK/slate.2.out" | tail -1)
read -r r_first r_secs r_total < <(run_tool rclone rclone \
    env -u AWS_CA_BUNDLE rclone --config /dev/null copy "$WORK/src/" bench:bench-dst/rclone/ \
    --transfers 16 --stats 1h -v)
# rclone's closing stats: "Transferred: 250 MiB / 250 MiB, …", "Checks: N / N, …",
# "Transferred: n / n, …"
r_moved=$({ grep -a 'Transferred:.*B /' "$WORK/rclone.2.out" || true; } | tail -1 | sed 's/.*Transferred:[[:space:]]*//; s/,.*//')
r_files=$({ grep -a 'Transferred:' "$WORK/rclone.2.out" || true; } | { grep -v 'B /' || true; } | tail -1 | sed 's/.*Transferred:[[:space:]]*//; s/,.*//')
r_checks=$({ grep -a 'Checks:' "$WORK/rclone.2.out" || true; } | tail -1 | sed 's/.*Checks:[[:space:]]*//; s/,.*//')

# the re-run's copies, by each tool's count (slate: its summary; rclone: its stats)
ratio=$(echo "scale=1; $r_secs / $s_secs" | bc)
{
    echo "# A copy killed halfway, run again"
    echo
    echo "$N files × $KB KiB ($(echo "scale=1; $TOTAL / 1048576" | bc) MiB), local folder → S3 (s3s-fs on 127.0.0.1), $(nproc) cores, $(date -u +%Y-%m-%d)."
    echo "Each first copy killed with SIGKILL at ~50% of the bytes landed; the same command run again."
    echo
    echo "| tool | landed before the kill | re-run time | the re-run's own count |"
    echo "|---|---|---|---|"
    echo "| slate copy | $((s_first / 1048576)) MiB | $(printf '%.2f' "$s_secs") s | ${s_moved#copy: } |"
    echo "| rclone copy --transfers 16 | $((r_first / 1048576)) MiB | $(printf '%.2f' "$r_secs") s | transferred ${r_files:-0} files, ${r_moved:-0 B}; checks ${r_checks:-0} |"
    echo
    echo "rclone / slate re-run time: **${ratio}×**. Both destinations complete afterwards: slate $((s_total / 1048576)) MiB, rclone $((r_total / 1048576)) MiB."
    echo
    echo "Command: \`BENCH_N=$N BENCH_KB=$KB bench/rerun.sh\`"
} | tee "$REPORT"
