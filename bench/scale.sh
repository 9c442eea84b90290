#!/usr/bin/env bash
# bench/scale.sh — slate at the seed's scale on the synthetic S3 store (bench/synth), behind the
# latency lab, against rclone in the same run.
#
# One synth-s3 holds the source (BENCH_SCALE_N generated objects, BENCH_SCALE_SHAPE tree|flat,
# BENCH_SCALE_SIZE bytes on average ± half: bytes scaled down so that millions fit the time;
# stated in the table) and the sink (hashes only); slate copies with --no-server-side-copy so
# every byte passes through it. The lab sits in front at BENCH_SCALE_RTT ms (default 40: 20 ms
# each way). Phases, in order (BENCH_SCALE_PHASES, default all):
#   backfill  `slate sync --once` into an empty sink: objects/s, peak RSS, the manifest's size
#   inventory the same backfill from an S3 Inventory report (CSV, gzipped, 8 files) that the
#             store writes of itself into $BENCH_DIR (not timed: the cloud's work), into another
#             sink prefix with its own manifest: the pass from the report, then the listing pass
#   changed   a change set of BENCH_SCALE_CHANGES (40% new, 40% overwritten, 20% deleted), then
#             `slate sync --once`, the same idle (both listed, then --trust-manifest), `slate diff`
#             (listings in spans, then with SLATE_LIST_SPANS=0:
#             one run of pages per listing, as before spans), `slate diff --from-manifest`; rclone `sync`
#             (defaults, and the seed's flags) on the same state, each after its own change set
#   daemon    `slate sync` following the store's own SQS queue: a change set of the same size,
#             the time until /verify says the replica is equal: applied changes/s
# Each phase ends with the store's /verify (the replica checked by its hashes). The synthetic
# store keeps its overlay in memory, so the phases run in one sitting.
# Everything talks to 127.0.0.1 only. Prints a markdown table and writes bench/last-scale-run.md.
#
# Knobs: BENCH_SCALE_N (100000), BENCH_SCALE_SHAPE (tree), BENCH_SCALE_SIZE (1024),
# BENCH_SCALE_RTT (40), BENCH_SCALE_CHANGES (10000), BENCH_SCALE_PHASES ("backfill changed
# daemon"; also "inventory"), BENCH_SCALE_DAEMON_FLAGS (more flags for the daemon, e.g.
# "--transfers 1024"), BENCH_SCALE_DB (the manifest's database: a postgres:// URL of an empty
# database measures PostgreSQL), BENCH_SCALE_RCLONE ("default seed"; empty: no rclone), BENCH_DIR, SLATE_BIN, LAB_BIN,
# SYNTH_BIN.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
N="${BENCH_SCALE_N:-100000}"
SHAPE="${BENCH_SCALE_SHAPE:-tree}"
SIZE="${BENCH_SCALE_SIZE:-1024}"
RTT="${BENCH_SCALE_RTT:-40}"
CHANGES="${BENCH_SCALE_CHANGES:-10000}"
PHASES="${BENCH_SCALE_PHASES:-backfill inventory changed daemon}"
RCLONE_RUNS="${BENCH_SCALE_RCLONE-default seed}"
BENCH_DIR="${BENCH_DIR:-/tmp/slate-bench}"
REPORT="${BENCH_REPORT:-$SCRIPT_DIR/last-scale-run.md}"
S3_PORT=18300 ADMIN_PORT=18301 LAB_PORT=18302

log() { printf '[scale %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '\n[scale] ERROR: %s\n' "$*" >&2; exit 1; }
want() { [[ " $PHASES " == *" $1 "* ]]; }
for v in N SIZE RTT CHANGES; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || die "BENCH_SCALE_$v must be a number, got '${!v}'"
done
[[ $SHAPE == tree || $SHAPE == flat ]] || die "BENCH_SCALE_SHAPE: tree or flat, not '$SHAPE'"
[[ -x /usr/bin/time ]] || die "GNU time missing (apt-get install time)"
command -v curl >/dev/null || die "curl missing"

if [[ -z "${SLATE_BIN:-}" || -z "${LAB_BIN:-}" ]]; then
    log "cargo build --release (slate and the lab)"
    (cd "$REPO_ROOT" && cargo build --release --features lab --bin slate --example lab >&2) ||
        die "cargo build failed"
fi
if [[ -z "${SYNTH_BIN:-}" ]]; then
    log "cargo build --release (bench/synth)"
    (cd "$SCRIPT_DIR/synth" && cargo build --release >&2) || die "building bench/synth failed"
fi
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release"
SLATE="${SLATE_BIN:-$TARGET/slate}"
LAB="${LAB_BIN:-$TARGET/examples/lab}"
SYNTH="${SYNTH_BIN:-$SCRIPT_DIR/synth/target/release/synth-s3}"

WORK="$BENCH_DIR/scale"
rm -rf "$WORK" && mkdir -p "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

log "synth-s3: $N objects ($SHAPE, ~$SIZE B), lab at ${RTT} ms RTT"
"$SYNTH" --port "$S3_PORT" --admin-port "$ADMIN_PORT" --objects "$N" --shape "$SHAPE" \
    --mean-size "$SIZE" --spread $((SIZE / 2)) >"$WORK/synth.out" 2>&1 &
SYNTH_PID=$!
PIDS+=("$SYNTH_PID")
"$LAB" --listen "$LAB_PORT" --upstream "127.0.0.1:$S3_PORT" --delay "${RTT}ms" >"$WORK/lab.out" 2>&1 &
LAB_PID=$!
PIDS+=("$LAB_PID")
for f in synth lab; do
    for ((i = 0; ; i++)); do
        grep -qE '^(listening on|synth-s3:)' "$WORK/$f.out" 2>/dev/null && break
        ((i < 100)) || die "$f did not start: $(cat "$WORK/$f.out")"
        sleep 0.1
    done
done
ADMIN="http://127.0.0.1:$ADMIN_PORT"
LAB_URL="http://127.0.0.1:$LAB_PORT"
SRC=s3://synth-src/data DST=s3://synth-sink/replica
SLATE_RUN=(env -u AWS_PROFILE AWS_ENDPOINT_URL="$LAB_URL" AWS_ENDPOINT_URL_SQS="$ADMIN"
    AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
    AWS_ALLOW_HTTP=true SLATE_DB="${BENCH_SCALE_DB:-$WORK/slate.db}" "$SLATE")
export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other \
    RCLONE_CONFIG_S3_ACCESS_KEY_ID=testing RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=testing \
    RCLONE_CONFIG_S3_REGION=us-east-1 RCLONE_CONFIG_S3_FORCE_PATH_STYLE=true \
    RCLONE_CONFIG_S3_ENDPOINT="$LAB_URL" RCLONE_CONFIG_S3_LIST_VERSION=2
RCLONE=(env -u AWS_CA_BUNDLE rclone --config /dev/null)

verify() { # verify SINK_PREFIX: the store's check of the replica, one line of JSON
    curl -sf "$ADMIN/verify?src=data/&sink=$1/"
}
change() { # change SEED: a change set of $CHANGES
    local new=$((CHANGES * 2 / 5)) over=$((CHANGES * 2 / 5)) del=$((CHANGES - CHANGES * 4 / 5))
    curl -sf -XPOST "$ADMIN/change?new=$new&overwrite=$over&delete=$del&seed=$1" >/dev/null
}
# cpu PID: the CPU seconds (user + system) a process has used so far
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
ROWS=()
# timed PHASE TOOL OBJECTS CMD...: runs CMD under GNU time, appends a row.
timed() {
    local phase=$1 tool=$2 objects=$3 rc=0; shift 3
    /usr/bin/time -f '%e %M' -o "$WORK/time.out" "$@" >"$WORK/run.out" 2>&1 || rc=$?
    ((rc == 0 || rc == 1)) || { tail -n 20 "$WORK/run.out" >&2; die "$phase/$tool failed (exit $rc)"; }
    local wall rss
    read -r wall rss < <(tail -n 1 "$WORK/time.out")
    local rate
    rate=$(awk -v o="$objects" -v w="$wall" 'BEGIN { printf "%.0f", (w > 0 ? o / w : 0) }')
    ROWS+=("| $phase | $tool | $wall s | $rate/s | $((rss / 1024)) MiB | $(tail -n 1 "$WORK/run.out" | cut -c1-90) |")
    log "$phase/$tool: $wall s, peak RSS $((rss / 1024)) MiB"
    LAST_WALL=$wall
}

if want backfill; then
    timed backfill "slate sync --once" "$N" "${SLATE_RUN[@]}" sync --once "$SRC" "$DST" --no-server-side-copy
    v=$(verify replica) && log "verify: $v"
    [[ $v == *'"equal":true'* ]] || die "the backfill's replica is not equal: $v"
    if [[ ${BENCH_SCALE_DB:-} == postgres* ]]; then
        # the entries table with its indexes and TOAST, after a VACUUM of what the backfill
        # left behind
        psql -q "$BENCH_SCALE_DB" -c 'VACUUM ANALYZE entries' >/dev/null
        read -r DB_BYTES KEY_BYTES < <(psql -At -F ' ' "$BENCH_SCALE_DB" -c \
            "SELECT pg_total_relation_size('entries'), round(avg(octet_length(key))) FROM entries")
        DB_WHAT="PostgreSQL: the entries table, indexes and TOAST included"
    else
        DB_BYTES=$(du -cb "$WORK"/slate.db* | tail -n 1 | cut -f1)
        KEY_BYTES=$(python3 -c 'import sqlite3,sys; print(round(sqlite3.connect(sys.argv[1]).execute("SELECT avg(length(CAST(key AS BLOB))) FROM entries").fetchone()[0] or 0))' "$WORK/slate.db" 2>/dev/null || echo 0)
        DB_WHAT="SQLite, WAL included"
    fi
    # the target is stated over the key: ≤ 100 bytes per object plus the key's length
    PER=$((DB_BYTES / (N > 0 ? N : 1)))
    ROWS+=("| backfill | manifest | $((DB_BYTES / 1024 / 1024)) MiB | $PER B/object = $((PER - KEY_BYTES)) + key ($KEY_BYTES B mean) | | $DB_WHAT |")
fi

if want inventory; then
    rm -rf "$WORK/inventory"
    report=$(curl -sf -XPOST "$ADMIN/inventory?dir=$WORK/inventory&files=8") || die "the store wrote no report"
    manifest=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["manifest"])' "$report")
    log "inventory report: $report"
    timed "backfill from a report" "slate sync --once --inventory" "$N" "${SLATE_RUN[@]}" sync --once "$SRC" \
        s3://synth-sink/replica-inv --no-server-side-copy --inventory "$manifest" --db "$WORK/inv.db"
    ROWS+=("| backfill from a report | (its first pass) | | | | $(grep -m1 '^sync:' "$WORK/run.out" | cut -c1-90) |")
    v=$(verify replica-inv) && log "verify: $v"
    [[ $v == *'"equal":true'* ]] || die "the replica from the report is not equal: $v"
fi

SLATE_CHANGED=""
if want changed; then
    change 1
    timed changed "slate sync --once" "$CHANGES" "${SLATE_RUN[@]}" sync --once "$SRC" "$DST" --no-server-side-copy
    SLATE_CHANGED=$LAST_WALL
    [[ $(verify replica) == *'"equal":true'* ]] || die "not equal after sync --once"
    # nothing changed since: what a nightly run costs when the night was quiet, both sides
    # listed (the default), then trusting the manifest for the destination
    timed changed "slate sync --once, idle" "$N" "${SLATE_RUN[@]}" sync --once "$SRC" "$DST" --no-server-side-copy
    timed changed "slate sync --once --trust-manifest, idle" "$N" "${SLATE_RUN[@]}" sync --once --trust-manifest "$SRC" "$DST" --no-server-side-copy
    timed changed "slate diff" "$N" "${SLATE_RUN[@]}" diff "$SRC" "$DST"
    DIFF_SPANS=$LAST_WALL
    # the same listings as one run of pages each (as slate listed before spans)
    timed changed "slate diff, one run of pages" "$N" env SLATE_LIST_SPANS=0 "${SLATE_RUN[@]}" diff "$SRC" "$DST"
    DIFF_ONE=$LAST_WALL
    timed changed "slate diff --from-manifest" "$N" "${SLATE_RUN[@]}" diff "$SRC" "$DST" --from-manifest
    for flags in $RCLONE_RUNS; do
        command -v rclone >/dev/null || { log "rclone missing: no rclone rows"; break; }
        # rclone's replica of its own, made once (not timed), then a change set and the timed sync
        if [[ ! -e "$WORK/rclone-seeded" ]]; then
            log "rclone: its own replica first (not timed)"
            "${RCLONE[@]}" sync s3:synth-src/data s3:synth-sink/rclone --transfers 128 --checkers 128 \
                --s3-no-check-bucket --disable Copy >"$WORK/rclone-seed.out" 2>&1 ||
                die "rclone seed failed"
            touch "$WORK/rclone-seeded"
        fi
        change 2
        case $flags in
            default) extra=() ;;
            seed) extra=(--transfers 1024 --checkers 64 --buffer-size 16Mi) ;;
        esac
        # --disable Copy: every byte through rclone, as slate's --no-server-side-copy
        timed changed "rclone sync ($flags)" "$CHANGES" "${RCLONE[@]}" sync s3:synth-src/data \
            s3:synth-sink/rclone --s3-no-check-bucket --disable Copy "${extra[@]}"
        eval "RCLONE_$flags=$LAST_WALL"
    done
fi

if want daemon; then
    # the replica made equal (not timed: rclone's change sets went by without slate), then the
    # queue emptied, so that the daemon is timed on this phase's changes alone
    "${SLATE_RUN[@]}" sync --once "$SRC" "$DST" --no-server-side-copy >"$WORK/presync.out" 2>&1 ||
        die "sync --once before the daemon failed: $(tail -n 3 "$WORK/presync.out")"
    log "daemon: following the store's queue (emptied first: the changes above were told too)"
    curl -sf -XPOST -H 'X-Amz-Target: AmazonSQS.PurgeQueue' -d '{}' "$ADMIN/" >/dev/null
    "${SLATE_RUN[@]}" sync "$SRC" "$DST" --no-server-side-copy --events sqs://synth-events \
        --delete-brake off ${BENCH_SCALE_DAEMON_FLAGS:-} >"$WORK/daemon.out" 2>&1 &
    DAEMON_PID=$!
    PIDS+=("$DAEMON_PID")
    for ((i = 0; ; i++)); do
        grep -q 'following changes' "$WORK/daemon.out" && break
        ((i < 6000)) || die "the daemon did not start: $(tail -n 5 "$WORK/daemon.out")"
        sleep 0.1
    done
    t0=$(date +%s.%N)
    c0=("$(cpu "$DAEMON_PID")" "$(cpu "$SYNTH_PID")" "$(cpu "$LAB_PID")")
    change 3
    until [[ $(verify replica) == *'"equal":true'* ]]; do
        (($(date +%s) - ${t0%.*} < 3600)) || die "the daemon did not make the replica equal in an hour"
        sleep 0.2
    done
    t1=$(date +%s.%N)
    c1=("$(cpu "$DAEMON_PID")" "$(cpu "$SYNTH_PID")" "$(cpu "$LAB_PID")")
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    rss=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$DAEMON_PID/status")
    rate=$(awk -v c="$CHANGES" -v w="$wall" 'BEGIN { printf "%.0f", c / w }')
    ROWS+=("| daemon | slate sync (events) | $wall s | $rate changes/s | $rss MiB | $CHANGES changes, queue to equal replica |")
    # where the CPU went meanwhile: are the machine's cores the bound?
    cpus=$(awk -v w="$wall" -v c="$CHANGES" -v s0="${c0[0]}" -v s1="${c1[0]}" -v y0="${c0[1]}" \
        -v y1="${c1[1]}" -v l0="${c0[2]}" -v l1="${c1[2]}" -v n="$(nproc)" 'BEGIN {
        s = s1 - s0; y = y1 - y0; l = l1 - l0
        printf "slate %.1f s (%.2f ms/change), store %.1f s, lab %.1f s: %.0f%% of %d cores", s, 1000 * s / c, y, l, 100 * (s + y + l) / (w * n), n }')
    ROWS+=("| daemon | CPU while it applied them | | | | $cpus |")
    log "daemon CPU: $cpus"
    kill "$DAEMON_PID" 2>/dev/null || true
fi

{
    echo "## Scale: $N objects ($SHAPE keys, ~$SIZE B each: bytes scaled down), ${RTT} ms RTT, $(date -u +%Y-%m-%d)"
    echo
    echo "synth-s3 as source and sink (one instance, --no-server-side-copy: every byte through slate), behind the latency lab; $(nproc) cores."
    echo
    echo "| phase | tool | wall | rate | peak RSS | last line |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    if [[ -n $SLATE_CHANGED && -n ${RCLONE_seed:-} ]]; then
        echo
        awk -v s="$SLATE_CHANGED" -v r="${RCLONE_seed}" -v d="${RCLONE_default:-0}" 'BEGIN {
            printf "changed sync: slate %.1f× faster than rclone with the seed'"'"'s flags", r / s
            if (d > 0) printf ", %.1f× faster than rclone'"'"'s defaults", d / s
            print "" }'
    fi
    if [[ -n ${DIFF_SPANS:-} ]]; then
        echo
        awk -v s="$DIFF_SPANS" -v o="$DIFF_ONE" 'BEGIN {
            printf "listing in spans: diff %.1f× faster than with one run of pages per listing\n", o / s }'
    fi
    echo
    echo "requests served: $(curl -sf "$ADMIN/counts")"
} | tee "$REPORT"
