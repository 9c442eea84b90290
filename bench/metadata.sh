#!/usr/bin/env bash
# bench/metadata.sh — what carrying metadata costs: the same copy of BENCH_META_N × 16 KiB local
# files to S3 (s3s-fs on 127.0.0.1) with metadata (slate's default: Content-Type from the
# extension and the modification time as `x-amz-meta-mtime`) and with `--no-metadata` (the
# bytes alone), then back from S3 to a local folder both ways, BENCH_RUNS times each,
# alternating which goes first. Prints one markdown table with the medians, slate's and
# s3s-fs's CPU, and the ratios (target: ≤ 1.05×). Local → S3 also measures the server, which
# keeps each object's metadata in a file of its own; S3 → local is slate's own cost.
#
#   SLATE_BIN       the slate binary (default: target/release/slate, built if missing)
#   BENCH_META_N    files (default 20000)
#   BENCH_RUNS      runs per mode (default 3)
#   SLATE_S3S_PORT  s3s-fs port (default 8015); s3s-fs comes from bench/run.sh's install
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
SLATE_TEST_HOME="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}"
N="${BENCH_META_N:-20000}"
RUNS="${BENCH_RUNS:-3}"
PORT="${SLATE_S3S_PORT:-8015}"
S3S_BIN="$SLATE_TEST_HOME/s3s-fs/bin/s3s-fs"
SLATE="${SLATE_BIN:-$REPO_ROOT/target/release/slate}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/slate-meta-bench.XXXXXX")
log() { printf '[meta-bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '[meta-bench] ERROR: %s\n' "$*" >&2; exit 1; }

[[ -x "$S3S_BIN" ]] || die "no s3s-fs at $S3S_BIN (BENCH_SCENARIOS=small bench/run.sh installs it)"
if [[ ! -x "$SLATE" ]]; then
    log "building slate (release)"
    (cd "$REPO_ROOT" && cargo build --release --quiet)
fi
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/data/bench" "$WORK/src"
"$S3S_BIN" --host 127.0.0.1 --port "$PORT" --access-key testing --secret-key testing \
    "$WORK/data" >"$WORK/s3s.log" 2>&1 &
pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

log "seeding $N × 16 KiB files (.html, .json, .bin) in $WORK/src"
head -c $((N * 16384)) /dev/urandom | (cd "$WORK/src" && split -b 16384 -a 6 -d - f-)
i=0
for f in "$WORK/src"/f-*; do
    case $((i % 3)) in 0) mv "$f" "$f.html" ;; 1) mv "$f" "$f.json" ;; *) mv "$f" "$f.bin" ;; esac
    i=$((i + 1))
done

S=(env -u AWS_PROFILE AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ACCESS_KEY_ID=testing
   AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 "$SLATE")
# CPU seconds s3s-fs has used so far (utime + stime of its process).
server_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$pid/stat"; }
run() { # run MODE RUN: one timed copy into a fresh prefix; appends "wall rss cpu server_cpu"
    local mode=$1 r=$2 extra=() s0 s1
    [[ $mode == off ]] && extra=(--no-metadata)
    s0=$(server_cpu)
    /usr/bin/time -f '%e %M %U %S' -o "$WORK/t" "${S[@]}" copy "$WORK/src" "s3://bench/$mode-$r/" \
        --quiet "${extra[@]}" >"$WORK/out" 2>&1 || { cat "$WORK/out" >&2; die "copy ($mode) failed"; }
    s1=$(server_cpu)
    read -r w m u sy < <(tail -n 1 "$WORK/t")
    echo "$w $m $(awk -v u="$u" -v s="$sy" 'BEGIN {printf "%.2f", u + s}') \
$(awk -v a="$s0" -v b="$s1" 'BEGIN {printf "%.2f", b - a}')" >>"$WORK/res.$mode"
}
for ((r = 1; r <= RUNS; r++)); do
    if ((r % 2)); then order=(on off); else order=(off on); fi
    for m in "${order[@]}"; do log "run $r/$RUNS: local → S3, metadata $m"; run "$m" "$r"; done
done
# S3 → local: the objects written with metadata, read back into a fresh folder; the store
# stores nothing more here, so the difference is slate's own (parsing, the mtime it sets)
back() { # back MODE RUN
    local mode=$1 r=$2 extra=() s0 s1
    [[ $mode == off ]] && extra=(--no-metadata)
    rm -rf "$WORK/back"
    s0=$(server_cpu)
    /usr/bin/time -f '%e %M %U %S' -o "$WORK/t" "${S[@]}" copy "s3://bench/on-1/" "$WORK/back" \
        --quiet "${extra[@]}" >"$WORK/out" 2>&1 || { cat "$WORK/out" >&2; die "copy back ($mode) failed"; }
    s1=$(server_cpu)
    read -r w m u sy < <(tail -n 1 "$WORK/t")
    echo "$w $m $(awk -v u="$u" -v s="$sy" 'BEGIN {printf "%.2f", u + s}') \
$(awk -v a="$s0" -v b="$s1" 'BEGIN {printf "%.2f", b - a}')" >>"$WORK/res.back-$mode"
}
for ((r = 1; r <= RUNS; r++)); do
    if ((r % 2)); then order=(on off); else order=(off on); fi
    for m in "${order[@]}"; do log "run $r/$RUNS: S3 → local, metadata $m"; back "$m" "$r"; done
done
rm -rf "$WORK/back"
# the objects with metadata carry it (rclone reads the mtime back: the file's, not the copy's)
want=$(date -u -r "$WORK/src/f-000000.html" '+%Y-%m-%d %H:%M:%S')
got=$(env -u AWS_CA_BUNDLE RCLONE_CONFIG_B_TYPE=s3 RCLONE_CONFIG_B_PROVIDER=Other \
    RCLONE_CONFIG_B_ENDPOINT="http://127.0.0.1:$PORT" RCLONE_CONFIG_B_ACCESS_KEY_ID=testing \
    RCLONE_CONFIG_B_SECRET_ACCESS_KEY=testing RCLONE_CONFIG_B_FORCE_PATH_STYLE=true \
    rclone --config /dev/null lsl "b:bench/on-1/f-000000.html" 2>/dev/null | awk '{print $2, substr($3, 1, 8)}')
[[ "$got" == "$want" ]] || die "the copy with metadata did not keep the mtime: rclone says '$got', want '$want'"

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() { awk -v c="$2" '{print $c}' "$WORK/res.$1" | median; }
awk -v n="$N" -v runs="$RUNS" \
    -v ow="$(col on 1)" -v fw="$(col off 1)" -v orr="$(col on 2)" -v fr="$(col off 2)" \
    -v oc="$(col on 3)" -v fc="$(col off 3)" -v os="$(col on 4)" -v fs="$(col off 4)" 'BEGIN {
    print "| copy of " n " × 16 KiB local → S3 (s3s-fs), median of " runs " | wall | objects/s | slate CPU | s3s-fs CPU | peak RSS |"
    print "|---|---|---|---|---|---|"
    printf "| with metadata (default: Content-Type, mtime) | %.2f s | %.0f | %.2f s | %.2f s | %.1f MiB |\n", ow, n / ow, oc, os, orr / 1024
    printf "| `--no-metadata` (bytes alone) | %.2f s | %.0f | %.2f s | %.2f s | %.1f MiB |\n", fw, n / fw, fc, fs, fr / 1024
    wr = ow / fw; cr = oc / fc; sr = os / fs
    printf "| cost of metadata, local → S3 (with / without) | %.3f× | | %.3f× | %.3f× | |\n", wr, cr, sr
}'
awk -v n="$N" -v runs="$RUNS" \
    -v ow="$(col back-on 1)" -v fw="$(col back-off 1)" -v orr="$(col back-on 2)" -v fr="$(col back-off 2)" \
    -v oc="$(col back-on 3)" -v fc="$(col back-off 3)" -v os="$(col back-on 4)" -v fs="$(col back-off 4)" 'BEGIN {
    printf "| S3 → local, with metadata (the files take the recorded mtime) | %.2f s | %.0f | %.2f s | %.2f s | %.1f MiB |\n", ow, n / ow, oc, os, orr / 1024
    printf "| S3 → local, `--no-metadata` | %.2f s | %.0f | %.2f s | %.2f s | %.1f MiB |\n", fw, n / fw, fc, fs, fr / 1024
    wr = ow / fw
    printf "| cost of metadata, S3 → local (with / without) | %.3f× (target ≤ 1.05×: %s) | | %.3f× | %.3f× | |\n", wr, wr <= 1.05 ? "met" : "**MISSED**", oc / fc, os / fs
}'
