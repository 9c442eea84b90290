#!/usr/bin/env bash
# bench/wan.sh — slate with no flags against rclone across a slow link, in the same run.
#
# The latency lab (examples/lab.rs: a loopback TCP proxy with a one-way delay each way and a
# shared bandwidth cap) sits in front of the servers, at BENCH_WAN_RTTS (default "20 80" ms).
#   a. large: BENCH_WAN_LARGE_N × BENCH_WAN_LARGE_MB MiB (default 5 × 529), S3 (s3s-fs) → local
#   b. small: BENCH_WAN_SMALL_N objects of 16–512 KiB (default 20,000, mean ≈ 264 KiB),
#             S3 (s3s-fs) → Azure (Azurite, on disk): two stores, so no server-side copy
#   c. kill:  one large object S3 → local, slate killed with -9 once half of it is recorded,
#             then run again: the share of the object the rerun reads (the lab counts)
# Tools: slate with no flags; rclone with its defaults; rclone with the migration's best flags
# (--transfers 512 --multi-thread-streams 512 --multi-thread-cutoff 16Mi --buffer-size 512Mi,
# --checkers 512 for the small case). Each row says what bounds it: the cap (within 10%), a
# server's CPU (≥ 90% of a core over the run), the lab's CPU, or neither (round trips).
# Everything talks to 127.0.0.1 only. Prints a markdown table and writes bench/last-wan-run.md.
#
# Knobs (environment): BENCH_WAN_RTTS, BENCH_WAN_RATE (cap each way, default 200M),
# BENCH_WAN_LARGE_N, BENCH_WAN_LARGE_MB, BENCH_WAN_SMALL_N, BENCH_WAN_SCENARIOS ("large small
# kill"), BENCH_WAN_PEERS ("default best"), BENCH_DIR, SLATE_TEST_HOME, SLATE_BIN, LAB_BIN.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
SLATE_TEST_HOME="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}"
BENCH_DIR="${BENCH_DIR:-/tmp/slate-bench}"
RTTS="${BENCH_WAN_RTTS:-20 80}"
RATE="${BENCH_WAN_RATE:-200M}"
LARGE_N="${BENCH_WAN_LARGE_N:-5}"
LARGE_MB="${BENCH_WAN_LARGE_MB:-529}"
SMALL_N="${BENCH_WAN_SMALL_N:-20000}"
SCENARIOS="${BENCH_WAN_SCENARIOS:-large small kill}"
PEERS="${BENCH_WAN_PEERS:-default best}"
REPORT="${BENCH_REPORT:-$SCRIPT_DIR/last-wan-run.md}"
S3S_PORT="${SLATE_S3S_PORT:-8024}" AZ_PORT="${BENCH_WAN_AZ_PORT:-10024}"
LAB_S3_PORT=8025 LAB_AZ_PORT=10025
S3S_BIN="$SLATE_TEST_HOME/s3s-fs/bin/s3s-fs"
AZURITE_BIN="$SLATE_TEST_HOME/azurite/node_modules/.bin/azurite-blob"
AZ_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

log() { printf '[wan %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '\n[wan] ERROR: %s\n' "$*" >&2; exit 1; }
want() { [[ " $SCENARIOS " == *" $1 "* ]]; }
for v in LARGE_N LARGE_MB SMALL_N; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
for r in $RTTS; do [[ "$r" =~ ^[0-9]+$ ]] || die "BENCH_WAN_RTTS: '$r' is not a number of ms"; done

# --- what it needs ------------------------------------------------------------------------
command -v rclone >/dev/null || die "rclone missing (scripts/services.sh install puts it there)"
[[ -x /usr/bin/time ]] || die "GNU time missing (apt-get install time)"
[[ -x "$S3S_BIN" ]] || die "s3s-fs missing: run scripts/services.sh install (or bench/run.sh once)"
[[ -x "$AZURITE_BIN" ]] || die "Azurite missing: run scripts/services.sh install"
if [[ -z "${SLATE_BIN:-}" || -z "${LAB_BIN:-}" ]]; then
    log "cargo build --release (slate and the lab)"
    (cd "$REPO_ROOT" && cargo build --release --features lab --bin slate --example lab >&2) \
        || die "cargo build failed"
fi
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release"
SLATE="${SLATE_BIN:-$TARGET/slate}"
LAB="${LAB_BIN:-$TARGET/examples/lab}"

mkdir -p "$BENCH_DIR"
WORK="$(mktemp -d "$BENCH_DIR/wan.XXXXXX")"
PIDS=()
cleanup() {
    local rc=$? p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT

# --- servers: s3s-fs and Azurite (on disk), each behind a lab started per RTT --------------
mkdir -p "$WORK/s3data/bench-src" "$WORK/azdata"
env -u RUST_LOG "$S3S_BIN" --host 127.0.0.1 --port "$S3S_PORT" --access-key testing \
    --secret-key testing "$WORK/s3data" >"$WORK/s3s.log" 2>&1 &
S3S_PID=$!; PIDS+=("$S3S_PID")
"$AZURITE_BIN" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" --location "$WORK/azdata" \
    --skipApiVersionCheck --loose --silent --disableTelemetry >"$WORK/azurite.log" 2>&1 &
AZ_PID=$!; PIDS+=("$AZ_PID")
for port in "$S3S_PORT" "$AZ_PORT"; do
    for ((i = 0; ; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        ((i < 300)) || die "nothing listens on $port after 30 s"
        sleep 0.1
    done
done

LAB_PID=""
# start_labs RTT_MS: a lab in front of each server (stop_labs stops them).
start_labs() {
    "$LAB" --listen "$LAB_S3_PORT" --upstream "127.0.0.1:$S3S_PORT" --delay "${1}ms" --rate "$RATE" \
        >"$WORK/lab-s3.out" 2>&1 &
    LAB_PID=$!
    "$LAB" --listen "$LAB_AZ_PORT" --upstream "127.0.0.1:$AZ_PORT" --delay "${1}ms" --rate "$RATE" \
        >"$WORK/lab-az.out" 2>&1 &
    LAB_AZ_PID=$!
    PIDS+=("$LAB_PID" "$LAB_AZ_PID")
    for f in lab-s3 lab-az; do
        for ((i = 0; ; i++)); do
            grep -q '^listening on' "$WORK/$f.out" 2>/dev/null && break
            ((i < 100)) || die "the lab ($f) did not start"
            sleep 0.1
        done
    done
}
# stop_labs: stops both labs (in this shell, which started them: a subshell cannot wait for
# them) and sets LAB_S3_DOWN and LAB_AZ_UP to the bytes they carried.
stop_labs() {
    kill -TERM "$LAB_PID" "$LAB_AZ_PID" 2>/dev/null || true
    wait "$LAB_PID" "$LAB_AZ_PID" 2>/dev/null || true
    LAB_S3_DOWN=$(awk '/^up /{print $4}' "$WORK/lab-s3.out")
    LAB_AZ_UP=$(awk '/^up /{print $2}' "$WORK/lab-az.out")
    LAB_S3_DOWN=${LAB_S3_DOWN:-0} LAB_AZ_UP=${LAB_AZ_UP:-0}
}
cpu_of() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }

export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other \
    RCLONE_CONFIG_S3_ACCESS_KEY_ID=testing RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=testing \
    RCLONE_CONFIG_S3_REGION=us-east-1 RCLONE_CONFIG_S3_FORCE_PATH_STYLE=true
# rclone reaches Azurite through an account SAS on an http://127.0.0.1 URL (its `endpoint`
# option takes a domain suffix, which would send a DNS query off this machine)
AZ_SAS=$(python3 - "$AZ_KEY" <<'EOF'
import base64, hashlib, hmac, sys, urllib.parse
key = base64.b64decode(sys.argv[1])
f = {"sv": "2019-12-12", "ss": "b", "srt": "sco", "sp": "rwdlacup",
     "se": "2035-01-01T00:00:00Z", "spr": "https,http"}
text = "\n".join(["devstoreaccount1", f["sp"], f["ss"], f["srt"], "", f["se"], "", f["spr"], f["sv"], ""])
f["sig"] = base64.b64encode(hmac.new(key, text.encode(), hashlib.sha256).digest()).decode()
print("&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in f.items()))
EOF
)
export RCLONE_CONFIG_AZ_TYPE=azureblob
RCLONE=(env -u AWS_CA_BUNDLE rclone --config /dev/null)
rcl_at() { # rcl_at S3_ENDPOINT AZ_ENDPOINT ARGS...
    local s3=$1 az=$2; shift 2
    RCLONE_CONFIG_S3_ENDPOINT="$s3" RCLONE_CONFIG_AZ_SAS_URL="$az/devstoreaccount1?$AZ_SAS" \
        "${RCLONE[@]}" "$@"
}
DIRECT_S3="http://127.0.0.1:$S3S_PORT" DIRECT_AZ="http://127.0.0.1:$AZ_PORT"
LAB_S3="http://127.0.0.1:$LAB_S3_PORT" LAB_AZ="http://127.0.0.1:$LAB_AZ_PORT"
# the timed commands, through the labs (plain commands: GNU time runs no shell functions)
SLATE_LAB=(env -u AWS_PROFILE AWS_ENDPOINT_URL="$LAB_S3" AWS_ACCESS_KEY_ID=testing
    AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AZURE_STORAGE_USE_EMULATOR=true
    AZURITE_BLOB_STORAGE_URL="$LAB_AZ" SLATE_DB="$WORK/slate.db" "$SLATE")
RCLONE_LAB=(env -u AWS_CA_BUNDLE RCLONE_CONFIG_S3_ENDPOINT="$LAB_S3"
    RCLONE_CONFIG_AZ_SAS_URL="$LAB_AZ/devstoreaccount1?$AZ_SAS" rclone --config /dev/null)

# --- seed --------------------------------------------------------------------------------
rcl_at "$DIRECT_S3" "$DIRECT_AZ" mkdir s3:bench-src >&2
if want large || want kill; then
    log "seeding $LARGE_N × $LARGE_MB MiB into s3://bench-src/large/"
    mkdir -p "$WORK/seed/large"
    for ((i = 1; i <= LARGE_N; i++)); do
        head -c $((LARGE_MB << 20)) /dev/urandom >"$WORK/seed/large/large-$i.bin"
    done
    rcl_at "$DIRECT_S3" "$DIRECT_AZ" copy "$WORK/seed/large" s3:bench-src/large/ --transfers 8 >&2
    cp "$WORK/seed/large/large-1.bin" "$WORK/large-1.ref"
    rm -rf "$WORK/seed/large"
fi
SMALL_BYTES=0
if want small; then
    log "seeding $SMALL_N objects of 16–512 KiB into s3://bench-src/small/"
    mkdir -p "$WORK/seed/small"
    SMALL_BYTES=$(python3 - "$WORK/seed/small" "$SMALL_N" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(13)
total = 0
for i in range(n):
    size = rng.randint(16, 512) * 1024
    d = os.path.join(root, f"d{i // 1000:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"obj-{i:06d}"), "wb") as f:
        f.write(os.urandom(size))
    total += size
print(total)
EOF
)
    rcl_at "$DIRECT_S3" "$DIRECT_AZ" copy "$WORK/seed/small" s3:bench-src/small/ \
        --transfers 32 --checkers 32 >&2
    rm -rf "$WORK/seed/small"
fi

# --- one timed run -------------------------------------------------------------------------
ROWS=()
# timed SCENARIO RTT TOOL BYTES CMD...: runs CMD behind fresh labs, appends a table row.
timed() {
    local sc=$1 rtt=$2 tool=$3 bytes=$4; shift 4
    start_labs "$rtt"
    local s0 a0 l0 tf="$WORK/time.out" rc=0
    s0=$(cpu_of "$S3S_PID"); a0=$(cpu_of "$AZ_PID"); l0=$(cpu_of "$LAB_PID")
    /usr/bin/time -f '%e %M %U %S' -o "$tf" "$@" >"$WORK/run.out" 2>&1 || rc=$?
    local s1 a1 l1 wall rss usr sys
    s1=$(cpu_of "$S3S_PID"); a1=$(cpu_of "$AZ_PID"); l1=$(cpu_of "$LAB_PID")
    stop_labs
    ((rc == 0)) || { tail -n 20 "$WORK/run.out" >&2; die "$sc/$tool at ${rtt} ms failed (exit $rc)"; }
    read -r wall rss usr sys < <(tail -n 1 "$tf")
    local row
    row=$(awk -v sc="$sc" -v rtt="$rtt" -v tool="$tool" -v b="$bytes" -v w="$wall" -v r="$rss" \
        -v c="$usr" -v k="$sys" -v s="$(awk -v a="$s0" -v b="$s1" 'BEGIN{print b-a}')" \
        -v az="$(awk -v a="$a0" -v b="$a1" 'BEGIN{print b-a}')" \
        -v lab="$(awk -v a="$l0" -v b="$l1" 'BEGIN{print b-a}')" -v cap="$CAP_BYTES" 'BEGIN {
        if (w < 0.01) w = 0.01; mbs = b / w / 1048576; pc = 100 * b / w / cap
        bound = "round trips"
        if (pc >= 90) bound = "the cap"
        else if (s / w >= 0.9) bound = "s3s-fs CPU"
        else if (az / w >= 0.9) bound = "Azurite CPU"
        else if (lab / w >= 0.9) bound = "lab CPU"
        else if ((c + k) / w >= 1.8) bound = "client CPU (2 cores)"
        printf "| %s | %d ms | %s | %.1f s | %.1f MiB/s (%.0f%% of cap) | %.0f MiB | %.1f s | %.1f / %.1f / %.1f s | %s |",
            sc, rtt, tool, w, mbs, pc, r / 1024, c + k, s, az, lab, bound }')
    ROWS+=("$row")
    log "$row"
    WALL["$sc/$rtt/$tool"]=$wall
    RSS["$sc/$rtt/$tool"]=$rss
}
declare -A WALL RSS
CAP_BYTES=$(python3 -c "
import re,sys
s=sys.argv[1].strip(); m=re.fullmatch(r'(\d+(?:\.\d+)?)([KkMmGg]?)(i?[Bb]?)', s)
mult={'':1,'k':1024,'m':1<<20,'g':1<<30}[m.group(2).lower()]
print(int(float(m.group(1))*mult))" "$RATE")

BEST=(--transfers 512 --multi-thread-streams 512 --multi-thread-cutoff 16Mi --buffer-size 512Mi)
LARGE_BYTES=$((LARGE_N * (LARGE_MB << 20)))
for rtt in $RTTS; do
    if want large; then
        for tool in slate $PEERS; do
            rm -rf "$WORK/dst"; mkdir -p "$WORK/dst"; sync
            case $tool in
                slate) timed large "$rtt" "slate (no flags)" "$LARGE_BYTES" \
                    "${SLATE_LAB[@]}" copy s3://bench-src/large/ "$WORK/dst" --quiet ;;
                default) timed large "$rtt" "rclone defaults" "$LARGE_BYTES" \
                    "${RCLONE_LAB[@]}" copy s3:bench-src/large/ "$WORK/dst" ;;
                best) timed large "$rtt" "rclone best flags" "$LARGE_BYTES" \
                    "${RCLONE_LAB[@]}" copy s3:bench-src/large/ "$WORK/dst" "${BEST[@]}" ;;
            esac
            cmp -s "$WORK/dst/large-1.bin" "$WORK/large-1.ref" || die "large/$tool: large-1.bin differs"
        done
        rm -rf "$WORK/dst"
    fi
    if want small; then
        for tool in slate $PEERS; do
            c="small-$rtt-$tool"
            rcl_at "$DIRECT_S3" "$DIRECT_AZ" mkdir "az:$c" >&2
            case $tool in
                slate) timed small "$rtt" "slate (no flags)" "$SMALL_BYTES" \
                    "${SLATE_LAB[@]}" copy s3://bench-src/small/ "az://$c/" --quiet ;;
                default) timed small "$rtt" "rclone defaults" "$SMALL_BYTES" \
                    "${RCLONE_LAB[@]}" copy s3:bench-src/small/ "az:$c/" ;;
                best) timed small "$rtt" "rclone best flags" "$SMALL_BYTES" \
                    "${RCLONE_LAB[@]}" copy s3:bench-src/small/ "az:$c/" "${BEST[@]}" --checkers 512 ;;
            esac
            got=$(rcl_at "$DIRECT_S3" "$DIRECT_AZ" size --json "az:$c/")
            [[ "$got" == *"\"count\":$SMALL_N,"* && "$got" == *"\"bytes\":$SMALL_BYTES"[,}]* ]] \
                || die "small/$tool: want $SMALL_N objects / $SMALL_BYTES bytes, got $got"
            rcl_at "$DIRECT_S3" "$DIRECT_AZ" purge "az:$c" >&2
        done
    fi
    if want kill; then
        # slate killed with -9 once half of large-1.bin is recorded, then run again
        rm -rf "$WORK/dst"; mkdir -p "$WORK/dst"
        start_labs "$rtt"
        "${SLATE_LAB[@]}" copy s3://bench-src/large/large-1.bin "$WORK/dst/" --quiet \
            >"$WORK/kill.out" 2>&1 &
        victim=$!
        half=$(((LARGE_MB << 20) / 2 / 1048576))
        for ((i = 0; ; i++)); do
            kill -0 "$victim" 2>/dev/null || die "the copy ended before half of it was written"
            got=$(python3 -c "
import sqlite3,sys
try:
    c=sqlite3.connect('file:$WORK/slate.db?mode=ro', uri=True)
    print(c.execute('SELECT COALESCE(SUM(length(digests)),0)/16 FROM upload_parts').fetchone()[0])
except Exception: print(0)")
            ((got >= half)) && break
            ((i < 6000)) || die "half of the object was not written in 10 minutes"
            sleep 0.1
        done
        kill -9 "$victim"; wait "$victim" 2>/dev/null || true
        sleep 1 # what the lab still carries of the killed connections is not the rerun's
        stop_labs
        first=$LAB_S3_DOWN
        start_labs "$rtt"
        "${SLATE_LAB[@]}" copy s3://bench-src/large/large-1.bin "$WORK/dst/" --quiet \
            >"$WORK/rerun.out" 2>&1 || die "the rerun failed: $(tail -n 5 "$WORK/rerun.out")"
        stop_labs
        again=$LAB_S3_DOWN
        cmp -s "$WORK/dst/large-1.bin" "$WORK/large-1.ref" || die "kill: the result differs"
        ROWS+=("$(awk -v rtt="$rtt" -v a="$first" -v b="$again" -v s=$((LARGE_MB << 20)) 'BEGIN {
            printf "| kill at 50%% | %d ms | slate (no flags) | first run read %.0f%%, rerun %.0f%% of the object | | | | | the rerun reads what was not written |",
            rtt, 100 * a / s, 100 * b / s }')")
        log "${ROWS[-1]}"
        rm -rf "$WORK/dst"
    fi
done

# ratios of slate with no flags to each peer, from this run: time (>1: slate faster) and RSS
RATIOS=()
for rtt in $RTTS; do
    for sc in large small; do
        want "$sc" || continue
        me="$sc/$rtt/slate (no flags)"
        for peer in "rclone defaults" "rclone best flags"; do
            [[ -n "${WALL[$sc/$rtt/$peer]:-}" ]] || continue
            RATIOS+=("$(awk -v sc="$sc" -v rtt="$rtt" -v p="$peer" -v a="${WALL[$me]}" -v b="${WALL[$sc/$rtt/$peer]}" \
                -v ra="${RSS[$me]}" -v rb="${RSS[$sc/$rtt/$peer]}" 'BEGIN {
                printf "| %s | %d ms | %s | %.2f× | %.2f× (%.0f vs %.0f MiB) |", sc, rtt, p, b / a, rb / ra, ra / 1024, rb / 1024 }')")
        done
    done
done

{
    echo "## bench/wan.sh, $(date -u +%Y-%m-%d) ($(nproc) cores; cap $RATE each way)"
    echo
    echo "large: $LARGE_N × $LARGE_MB MiB S3 → local; small: $SMALL_N objects of 16–512 KiB" \
        "($((SMALL_BYTES >> 20)) MiB) S3 → Azure; servers s3s-fs and Azurite behind the lab."
    echo
    echo "| case | RTT | tool | wall | throughput | peak RSS | client CPU | s3s-fs / Azurite / lab CPU | bound by |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    if ((${#RATIOS[@]} > 0)); then
        echo
        echo "| case | RTT | slate (no flags) against | speed (peer time / slate time) | peak RSS (peer / slate) |"
        echo "|---|---|---|---|---|"
        printf '%s\n' "${RATIOS[@]}"
    fi
} | tee "$REPORT"
