#!/usr/bin/env bash
# bench/workers.sh — several `slate sync` workers on one PostgreSQL database (issue 14): what
# a second and a third worker buy, and what the shared state costs per key.
#
# Parts (BENCH_PARTS, default all three):
#   backfill  BENCH_WORKERS_N objects of BENCH_WORKERS_KIB KiB (default 10,000 × 64 KiB),
#             by BENCH_WORKERS_DST: s3s (default), a bucket on an s3s-fs of the run's own (a
#             Rust S3 server) → another bucket of it, the workers with --no-server-side-copy
#             so that every byte passes through a worker; az, moto → a container on Azurite
#             (one Node process: it bounded an earlier run); s3, moto → another bucket on
#             moto (CopyObject: no byte passes through slate, --bwlimit has nothing to pace);
#             local, moto → a folder (each host's own: never split); by 1, 2 and 3 workers
#             (BENCH_WORKERS_COUNTS) started
#             together on a fresh PostgreSQL database, each capped at --bwlimit
#             BENCH_WORKERS_BWLIMIT (default 6M), so that one worker is bandwidth-bound. Time
#             from the start until `slate pairs` shows the pair reconciled (last sync set) and
#             the replica holds every object; aggregate MiB/s and the ratio against 1 worker;
#             the bytes each worker copied (its slate_bytes_copied_total). Afterwards the
#             replica is compared with the source (key, size, MD5).
#   latency   per rate of BENCH_WORKERS_RATES (100 and 20 a second), new 1 KiB objects for
#             BENCH_WORKERS_SECONDS (30) into a bucket whose S3 notifications go to one SQS
#             queue, followed by 1 and by 3 workers (one PostgreSQL database, that one queue)
#             into a local folder: per object, PUT completion → the file in the replica with its
#             full size. p50 / p99, the ratio 3 vs 1, the keys each worker applied, objects not
#             arrived 60 s after the writer stopped (reported, not fatal: moto may not keep up).
#   ops       one daemon on SQLite, then one on PostgreSQL, each following its own bucket and
#             queue, applying the same burst (BENCH_OPS_KEYS new keys, 2,000, written at
#             BENCH_OPS_RATE/s, 20): slate_state_statements_total and
#             slate_state_transactions_total from /metrics before and after, per key applied
#             (raw, and net of the idle rate measured just before the burst).
# Prints one markdown report on stdout (progress on stderr) and writes it to
# bench/last-workers-run.md. Only 127.0.0.1: moto (S3 + SQS) and PostgreSQL from
# scripts/services.sh (started when they do not answer, stopped at the end if this run started
# them), the backfill's own s3s-fs or Azurite, the workers' listeners (BENCH_WORKERS_PORT, +1, +2). See bench/README.md ("Workers
# benchmark") for the knobs.
set -euo pipefail

BENCH_CMD=""
for v in SLATE_BIN BENCH_PARTS BENCH_DIR BENCH_WORKERS_N BENCH_WORKERS_KIB BENCH_WORKERS_BWLIMIT \
         BENCH_WORKERS_COUNTS BENCH_WORKERS_DST BENCH_WORKERS_RATES BENCH_WORKERS_SECONDS BENCH_WORKERS_LAT_COUNTS \
         BENCH_OPS_KEYS BENCH_OPS_RATE BENCH_WORKERS_PORT BENCH_BACKFILL_TIMEOUT BENCH_REPORT BENCH_KEEP \
         BENCH_S3_THREADS BENCH_AZ_PORT BENCH_S3S_PORT SLATE_MOTO_PORT SLATE_PG_PORT; do
    if [[ -n "${!v+x}" ]]; then BENCH_CMD+="$v=$(printf '%q' "${!v}") "; fi
done
BENCH_CMD+="bench/workers.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

PARTS="${BENCH_PARTS:-backfill latency ops}"
BENCH_DIR="${BENCH_DIR:-/tmp/slate-bench}"
N="${BENCH_WORKERS_N:-10000}"                    # backfill: objects
KIB_EACH="${BENCH_WORKERS_KIB:-64}"              # backfill: KiB an object
BWLIMIT="${BENCH_WORKERS_BWLIMIT:-6M}"           # backfill: each worker's --bwlimit
COUNTS="${BENCH_WORKERS_COUNTS:-1 2 3}"          # backfill: workers per run
FILL_DST="${BENCH_WORKERS_DST:-s3s}"             # backfill: s3s (s3s-fs → s3s-fs), az (moto → Azurite), s3 (moto → moto) or local
RATES="${BENCH_WORKERS_RATES:-100 20}"           # latency: new objects per second, a phase each
SECONDS_LAT="${BENCH_WORKERS_SECONDS:-30}"       # latency: writer duration
LAT_COUNTS="${BENCH_WORKERS_LAT_COUNTS:-1 3}"    # latency: workers per run
OPS_KEYS="${BENCH_OPS_KEYS:-2000}"               # ops: keys in the burst
OPS_RATE="${BENCH_OPS_RATE:-20}"                 # ops: written per second (slow enough that each key goes alone)
PORT_BASE="${BENCH_WORKERS_PORT:-3530}"          # worker i listens on 127.0.0.1:PORT_BASE+i
BACKFILL_TIMEOUT="${BENCH_BACKFILL_TIMEOUT:-900}"
REPORT="${BENCH_REPORT:-$SCRIPT_DIR/last-workers-run.md}"
KEEP="${BENCH_KEEP:-0}"
S3_THREADS="${BENCH_S3_THREADS:-16}"
MOTO_PORT="${SLATE_MOTO_PORT:-5000}"
AZ_PORT="${BENCH_AZ_PORT:-10310}"                # backfill az: this run's own Azurite
S3S_PORT="${BENCH_S3S_PORT:-8320}"               # backfill s3s: this run's own s3s-fs
PG_PORT="${SLATE_PG_PORT:-5440}"

PER_FOLDER=1000      # backfill objects per "folder"
LAT_FOLDERS=10       # latency objects go to lat-R/d000 … d009
WRITERS=32           # latency / ops writer threads
LAT_GRACE=60         # s: latency objects not arrived this long after the writer count as missing
OPS_GRACE=600        # s: the ops burst must be applied (and the inbox empty) within this
IDLE=10              # s: the idle reading of the state counters before a phase

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '\n[bench] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    sed -n '2,35p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
[[ $# -eq 0 ]] || die "no arguments expected (configure with BENCH_* environment variables)"
for v in N KIB_EACH SECONDS_LAT OPS_KEYS OPS_RATE PORT_BASE BACKFILL_TIMEOUT S3_THREADS MOTO_PORT AZ_PORT PG_PORT; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
for p in $PARTS; do
    [[ "$p" == backfill || "$p" == latency || "$p" == ops ]] || die "BENCH_PARTS: unknown part '$p' (backfill, latency, ops)"
done
for r in $RATES; do [[ "$r" =~ ^[1-9][0-9]*$ ]] || die "BENCH_WORKERS_RATES: '$r' is not a positive integer"; done
[[ -z "$(tr ' ' '\n' <<<"$RATES" | sed '/^$/d' | sort | uniq -d)" ]] || die "BENCH_WORKERS_RATES: each rate at most once"
for c in $COUNTS $LAT_COUNTS; do
    [[ "$c" =~ ^[1-9]$ ]] || die "worker counts are 1 to 9, got '$c'"
done
((OPS_KEYS % OPS_RATE == 0)) || die "BENCH_OPS_KEYS ($OPS_KEYS) must be a multiple of BENCH_OPS_RATE ($OPS_RATE)"
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
[[ "$FILL_DST" =~ ^(s3s|az|s3|local)$ ]] || die "BENCH_WORKERS_DST: s3s, az, s3 or local, got '$FILL_DST'"
NEED_AZ=0 NEED_S3S=0
if has_part backfill && [[ "$FILL_DST" == az ]]; then NEED_AZ=1; fi
if has_part backfill && [[ "$FILL_DST" == s3s ]]; then NEED_S3S=1; fi

# ---------------------------------------------------------------------------------------
# Tools, the build
# ---------------------------------------------------------------------------------------
command -v curl >/dev/null || die "curl not found"
[[ -n "${EPOCHREALTIME:-}" ]] || die "bash ≥ 5 needed (EPOCHREALTIME)"
PSQL=$(command -v psql || printf '%s\n' /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1)
[[ -x "$PSQL" ]] || die "psql not found (Debian's postgresql-client; scripts/services.sh installs postgresql)"
VENV_PYTHON="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/venv/bin/python"
HELPER="$SCRIPT_DIR/workers_bench.py"
[[ -r "$HELPER" && -r "$SCRIPT_DIR/daemon_bench.py" ]] || die "$HELPER or daemon_bench.py missing"

if [[ -n "${SLATE_BIN:-}" ]]; then
    SLATE="$SLATE_BIN"
else
    log "cargo build --release in $REPO_ROOT${CARGO_TARGET_DIR:+ (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)}"
    (cd "$REPO_ROOT" && cargo build --release >&2) || die "cargo build --release failed"
    SLATE="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/slate"
fi
[[ -x "$SLATE" ]] || die "slate binary not found or not executable: $SLATE"
"$SLATE" sync --help 2>/dev/null | grep -q -- '--claim-secs' || die "'$SLATE sync' has no --claim-secs (a slate without workers?)"

# ---------------------------------------------------------------------------------------
# Scratch, endpoints, cleanup
# ---------------------------------------------------------------------------------------
mkdir -p "$BENCH_DIR"
WORK="$(mktemp -d "$BENCH_DIR/workers.XXXXXX")"
S3_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
AZ_URL="http://127.0.0.1:$AZ_PORT"
S3S_URL="http://127.0.0.1:$S3S_PORT"
PG_BASE="postgres://postgres@127.0.0.1:$PG_PORT"
# Nothing of the user's AWS or Azure setup leaks in: only moto and Azurite on 127.0.0.1,
# testing/testing for moto, Azurite's emulator account.
S3ENV=(env -u AWS_CA_BUNDLE -u AWS_PROFILE -u AWS_DEFAULT_PROFILE -u AWS_SESSION_TOKEN
       -u AWS_ENDPOINT_URL_S3 -u AWS_ENDPOINT_URL_SQS -u AWS_VIRTUAL_HOSTED_STYLE_REQUEST
       -u AWS_DEFAULT_REGION -u SLATE_DB -u PGPASSWORD -u PGPASSFILE
       -u AZURE_STORAGE_CONNECTION_STRING -u AZURE_STORAGE_ACCOUNT_NAME -u AZURE_STORAGE_ACCOUNT_KEY
       -u AZURE_STORAGE_SAS_KEY -u AZURE_STORAGE_SAS_URL -u AZURE_CLIENT_ID -u AZURE_CLIENT_SECRET
       -u AZURE_TENANT_ID -u AZURE_FEDERATED_TOKEN_FILE -u AZURE_USE_AZURE_CLI
       AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL="$AZ_URL" BENCH_AZ_URL="$AZ_URL"
       AWS_ENDPOINT_URL="$S3_ENDPOINT" AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
       AWS_REGION=us-east-1 NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 XDG_CONFIG_HOME="$WORK/no-config"
       BENCH_S3_ENDPOINT="$S3_ENDPOINT" BENCH_S3_THREADS="$S3_THREADS")
py() { "${S3ENV[@]}" "$VENV_PYTHON" "$HELPER" "$@"; }
# The backfill's S3 (FILL_ENV): moto's, or for an s3s backfill this run's s3s-fs (the SQS queue
# the workers need stays on moto: AWS_ENDPOINT_URL_S3 moves S3 alone)
FILL_ENV=()
if ((NEED_S3S)); then FILL_ENV=(AWS_ENDPOINT_URL_S3="$S3S_URL" BENCH_S3_ENDPOINT="$S3S_URL"); fi
py_fill() { "${S3ENV[@]}" "${FILL_ENV[@]}" "$VENV_PYTHON" "$HELPER" "$@"; }

PIDS=()              # the running workers
PID_LOGS=()
STARTED=()           # services this run started (stopped at the end)
BUCKETS=()           # buckets and queues this run made (removed at the end)
QUEUES=()
DATABASES=()         # PostgreSQL databases this run made (dropped at the end)
TAG="$(date +%s)-$$"

# stop_workers: SIGTERM every running worker, up to 30 s, then SIGKILL; STOP_RCS their exit codes
stop_workers() {
    STOP_RCS=""
    local p i rc
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for ((i = 0; i < 300; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            log "worker $p still running 30 s after SIGTERM: SIGKILL"
            kill -KILL "$p" 2>/dev/null || true
        fi
        rc=0
        wait "$p" 2>/dev/null || rc=$?
        STOP_RCS+="$rc "
    done
    STOP_RCS="${STOP_RCS% }"
    PIDS=()
}

pg_sql() { "$PSQL" "$PG_BASE/postgres" -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }

cleanup() {
    local rc=$?
    trap - EXIT
    stop_workers || true
    az_stop || true
    s3s_stop || true
    if [[ "$KEEP" == 1 ]]; then
        log "kept: scratch $WORK, buckets ${BUCKETS[*]:-none}, queues ${QUEUES[*]:-none}, databases ${DATABASES[*]:-none}"
    else
        if ((${#BUCKETS[@]} + ${#QUEUES[@]} > 0)); then
            log "removing the run's buckets and queues from moto"
            local b q
            b=$(IFS=,; echo "${BUCKETS[*]:-}"); q=$(IFS=,; echo "${QUEUES[*]:-}")
            timeout 600 "${S3ENV[@]}" "$VENV_PYTHON" "$HELPER" teardown "${b:--}" "${q:--}" >&2 \
                || log "WARNING: removing them failed (moto keeps them until it stops)"
        fi
        local d
        for d in "${DATABASES[@]}"; do pg_sql "DROP DATABASE IF EXISTS $d WITH (FORCE)" || log "WARNING: dropping $d failed"; done
        rm -rf "$WORK"
    fi
    if ((${#STARTED[@]} > 0)); then
        if [[ "$KEEP" == 1 ]]; then
            log "services started by this run left running: scripts/services.sh stop ${STARTED[*]}"
        else
            log "stopping the services this run started: ${STARTED[*]}"
            "$REPO_ROOT/scripts/services.sh" stop "${STARTED[@]}" >&2 || log "WARNING: scripts/services.sh stop ${STARTED[*]} failed"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------
# Services: moto and PostgreSQL (scripts/services.sh's; used as they are when they answer);
# for an az backfill, an Azurite blob service of this run's own per backfill (az_start)
# ---------------------------------------------------------------------------------------
moto_up() { curl -sf --noproxy '*' --max-time 2 -o /dev/null "$S3_ENDPOINT/moto-api/"; }
pg_up() { "$PSQL" "$PG_BASE/postgres" -X -tAc 'SELECT 1' >/dev/null 2>&1; }
if moto_up && pg_up; then
    log "moto ($S3_ENDPOINT) and PostgreSQL (127.0.0.1:$PG_PORT) answer: using them (and leaving them running)"
else
    log "moto or PostgreSQL not answering: scripts/services.sh start (SLATE_MOTO_PORT=$MOTO_PORT SLATE_PG_PORT=$PG_PORT)"
    started_file="$WORK/services.started"
    : >"$started_file"
    SLATE_STARTED_FILE="$started_file" SLATE_MOTO_PORT="$MOTO_PORT" SLATE_PG_PORT="$PG_PORT" \
        "$REPO_ROOT/scripts/services.sh" start >&2 || die "scripts/services.sh start failed"
    others=()
    while read -r svc; do
        if [[ "$svc" == moto || "$svc" == postgres ]]; then STARTED+=("$svc"); elif [[ -n "$svc" ]]; then others+=("$svc"); fi
    done <"$started_file"
    if ((${#others[@]} > 0)); then
        log "stopping the other services this run started: ${others[*]}"
        "$REPO_ROOT/scripts/services.sh" stop "${others[@]}" >&2 || log "WARNING: stopping ${others[*]} failed"
    fi
    moto_up || die "moto does not answer on $S3_ENDPOINT after scripts/services.sh start"
    pg_up || die "PostgreSQL does not answer on 127.0.0.1:$PG_PORT after scripts/services.sh start"
fi
AZ_BIN="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/azurite/node_modules/.bin/azurite-blob"
if ((NEED_AZ)); then
    [[ -x "$AZ_BIN" ]] || die "$AZ_BIN not found (scripts/services.sh install)"
    ! (exec 3<>"/dev/tcp/127.0.0.1/$AZ_PORT") 2>/dev/null || die "port $AZ_PORT on 127.0.0.1 is taken (BENCH_AZ_PORT)"
fi
S3S_BIN="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/s3s-fs/bin/s3s-fs"
if ((NEED_S3S)); then
    [[ -x "$S3S_BIN" ]] || die "$S3S_BIN not found (scripts/services.sh install)"
    ! (exec 3<>"/dev/tcp/127.0.0.1/$S3S_PORT") 2>/dev/null || die "port $S3S_PORT on 127.0.0.1 is taken (BENCH_S3S_PORT)"
fi
[[ -x "$VENV_PYTHON" ]] && "$VENV_PYTHON" -c 'import boto3, azure.storage.blob' 2>/dev/null \
    || die "$VENV_PYTHON has no boto3 or azure-storage-blob (scripts/services.sh install)"
for ((i = 0; i < 9; i++)); do
    ! (exec 3<>"/dev/tcp/127.0.0.1/$((PORT_BASE + i))") 2>/dev/null || die "port $((PORT_BASE + i)) on 127.0.0.1 is taken (BENCH_WORKERS_PORT)"
done

# new_db NAME: a fresh PostgreSQL database (dropped at the end); prints its URL
new_db() {
    local name="slate_wb_$1_${TAG//-/_}"
    pg_sql "CREATE DATABASE $name" || die "CREATE DATABASE $name failed"
    DATABASES+=("$name")
    NEW_DB="$PG_BASE/$name"
}

# drop_bucket BUCKET QUEUE: remove a part's bucket and queue from moto now (it keeps every
# object in memory, and a deep queue makes its receives slow), and from the cleanup's lists
drop_bucket() {
    py teardown "$1" "$2" 2>/dev/null || log "WARNING: removing $1 / $2 failed (removed at the end)"
    local keep=() x
    for x in "${BUCKETS[@]}"; do [[ "$x" == "$1" ]] || keep+=("$x"); done
    BUCKETS=("${keep[@]}")
    keep=()
    for x in "${QUEUES[@]}"; do [[ "$x" == "$2" ]] || keep+=("$x"); done
    QUEUES=("${keep[@]}")
}

# start_workers COUNT DB SRC DST QUEUE NAME [FLAG...]: COUNT `slate sync` daemons started
# together (PIDS, PID_LOGS, URLS: their /metrics), each listening on PORT_BASE+i
start_workers() {
    local count=$1 dbloc=$2 src=$3 dst=$4 queue=$5 name=$6 i logf
    shift 6
    PIDS=(); PID_LOGS=(); URLS=""
    for ((i = 0; i < count; i++)); do
        logf="$WORK/$name-w$i.log"
        : >"$logf"   # exists before the first grep (the worker's redirection runs in the child)
        "${S3ENV[@]}" "${FILL_ENV[@]}" "$SLATE" sync "$src" "$dst" --events "sqs://$queue" --db "$dbloc" --drift-check-secs 0 --quiet \
            --listen "127.0.0.1:$((PORT_BASE + i))" "$@" >"$logf" 2>&1 &
        PIDS+=($!)
        PID_LOGS+=("$logf")
        URLS+="${URLS:+,}http://127.0.0.1:$((PORT_BASE + i))/metrics"
    done
}

workers_alive() {
    local i
    for i in "${!PIDS[@]}"; do
        if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
            tail -n 20 "${PID_LOGS[$i]}" >&2 || true
            die "worker $i (pid ${PIDS[$i]}) exited ($1); its log is above"
        fi
    done
}

# wait_following TIMEOUT: every worker printed `slate: following changes of`
wait_following() {
    local i t
    for ((t = 0; t < $1 * 10; t++)); do
        workers_alive "before following its events"
        local all=1
        for i in "${!PIDS[@]}"; do grep -q 'slate: following changes of' "${PID_LOGS[$i]}" || all=0; done
        ((all)) && return 0
        sleep 0.1
    done
    die "the workers did not all follow their events within $1 s"
}

# finish_workers WHAT: stop the workers; each must exit 0; WARNS: their warn / error lines
finish_workers() {
    stop_workers
    local rc
    for rc in $STOP_RCS; do [[ "$rc" == 0 ]] || die "$1: a worker exited with status $rc on SIGTERM (want 0); exit codes: $STOP_RCS"; done
    WARNS=$(cat "${PID_LOGS[@]}" | grep -ciE 'warn|error' || true)
    WARN_TOTAL=$((WARN_TOTAL + WARNS))
    if ((WARNS > 0)); then
        WARN_LINES+=$(cat "${PID_LOGS[@]}" | grep -iE 'warn|error' | head -n 3 || true)$'\n'
    fi
}
WARN_TOTAL=0
WARN_LINES=""

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "—"}'; }
now_s() { printf '%s' "$EPOCHREALTIME"; }
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# Where the CPU went over a run: the machine's busy time (every core, /proc/stat), the
# workers', moto's and PostgreSQL's (the postmaster, its live children, and the children it
# reaped: the backends of closed connections), the python helper's (its writer, poller and
# `slate pairs` polls: it reports its own); "other" is the rest of the machine's busy time
# (whatever else ran on the machine).
CLK_TCK=$(getconf CLK_TCK)
port_pid() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1; }
# jiffies PID [REAPED]: user+sys of PID (REAPED=1: plus its reaped children's); 0 if gone
jiffies() { awk -v c="${2:-0}" '{sub(/^.*\) /, ""); print $12 + $13 + (c ? $14 + $15 : 0)}' "/proc/$1/stat" 2>/dev/null || echo 0; }
cpu_now() {   # "machine_busy machine_total workers moto postgres azurite" in jiffies
    local w=0 p pg=0
    for p in "${PIDS[@]}"; do w=$((w + $(jiffies "$p"))); done
    if [[ -n "$PG_PID" ]]; then
        pg=$(jiffies "$PG_PID" 1)
        for p in $(pgrep -P "$PG_PID" 2>/dev/null); do pg=$((pg + $(jiffies "$p" 1))); done
    fi
    printf '%s %s %s %s %s\n' "$(awk '/^cpu / {b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6}' /proc/stat)" \
        "$w" "$([[ -n "$MOTO_PID" ]] && jiffies "$MOTO_PID" || echo 0)" "$pg" \
        "$(if [[ -n "$AZ_PID" ]]; then jiffies "$AZ_PID"; elif [[ -n "$S3S_PID" ]]; then jiffies "$S3S_PID"; else echo 0; fi)"
}
cpu_mark() { CPU_MARK=$(cpu_now); }
# cpu_since HELPER_S: "busy% worker_s moto_s pg_s helper_s other_s azurite_s" since cpu_mark (busy: of
# all cores; HELPER_S: the CPU of the python helper that ran the part, its writer and poller)
cpu_since() {
    awk -v t="$CLK_TCK" -v a="$CPU_MARK" -v b="$(cpu_now)" -v h="$1" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        busy = y[1] - x[1]; all = y[2] - x[2]; w = y[3] - x[3]; m = y[4] - x[4]; p = y[5] - x[5]; a = y[6] - x[6]
        o = busy - w - m - p - a - h * t; if (o < 0) o = 0
        printf "%.0f %.1f %.1f %.1f %.1f %.1f %.1f", (all > 0 ? 100 * busy / all : 0), w / t, m / t, p / t, h, o / t, a / t }'
}
# cpu_cell BUSY W M P H O: the report's CPU cell
cpu_cell() {   # BUSY W M P H O A: the backfill's own store server's (Azurite or s3s-fs) only when one ran
    printf '%s%% busy; slate %s s, moto %s s, PostgreSQL %s s' "$1" "$2" "$3" "$4"
    if [[ "${7:-0}" != 0 && "${7:-0}" != 0.0 ]]; then printf ', %s %s s' "$(if ((NEED_S3S)); then echo s3s-fs; else echo Azurite; fi)" "$7"; fi
    printf ', bench helper %s s, other %s s' "$5" "$6"
}
command -v ss >/dev/null || die "ss not found (iproute2): needed to find moto's and PostgreSQL's processes"
MOTO_PID=$(port_pid "$MOTO_PORT")
PG_PID=$(port_pid "$PG_PORT")
AZ_PID=""   # this run's own Azurite while a backfill writes to it (az_start)
S3S_PID=""  # this run's own s3s-fs during an s3s backfill (s3s_start)

# Azurite answers an unsigned list request with 403, but with its x-ms-request-id header
az_up() { [[ "$(curl -s --noproxy '*' --max-time 2 -D - -o /dev/null "$AZ_URL/devstoreaccount1?comp=list" 2>/dev/null)" == *[Xx]-[Mm][Ss]-[Rr]equest-[Ii]d* ]]; }
# az_start DIR: a fresh Azurite blob service on AZ_PORT (blobs in memory; DIR holds its log),
# one per backfill: next to the earlier runs' blobs its Node heap grew past 1.5 GiB
# and its collections stalled it for tens of seconds (the 2- and 3-worker runs came out slower
# than one worker's, Azurite at 93% of a core); with its blobs on disk each PUT cost it ~6 ms
# of CPU instead of ~3.5 and its PUTs slowed as the container grew
az_start() {
    mkdir -p "$1"
    setsid "$AZ_BIN" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" --inMemoryPersistence \
        --extentMemoryLimit 6144 --skipApiVersionCheck \
        --loose --disableTelemetry --silent >"$1.log" 2>&1 &
    AZ_PID=$!
    local i
    for ((i = 0; i < 300; i++)); do az_up && return 0; kill -0 "$AZ_PID" 2>/dev/null || break; sleep 0.1; done
    die "Azurite did not answer on $AZ_URL: $(tail -n 3 "$1.log" 2>/dev/null)"
}
az_stop() {
    [[ -n "$AZ_PID" ]] || return 0
    kill -TERM -- "-$AZ_PID" 2>/dev/null || kill -TERM "$AZ_PID" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do kill -0 "$AZ_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$AZ_PID" 2>/dev/null || true
    wait "$AZ_PID" 2>/dev/null || true
    AZ_PID=""
}
# s3s_start DIR: an s3s-fs over the folder DIR on S3S_PORT (testing/testing, as moto's), for the
# whole backfill: the source bucket and each run's replica bucket
s3s_start() {
    mkdir -p "$1"
    setsid env -u RUST_LOG "$S3S_BIN" --host 127.0.0.1 --port "$S3S_PORT" --access-key testing \
        --secret-key testing "$1" >"$1.log" 2>&1 &
    S3S_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$S3S_PORT") 2>/dev/null && return 0
        kill -0 "$S3S_PID" 2>/dev/null || break
        sleep 0.1
    done
    die "s3s-fs did not listen on $S3S_URL: $(tail -n 3 "$1.log" 2>/dev/null)"
}
s3s_stop() {
    [[ -n "$S3S_PID" ]] || return 0
    kill -TERM -- "-$S3S_PID" 2>/dev/null || kill -TERM "$S3S_PID" 2>/dev/null || true
    wait "$S3S_PID" 2>/dev/null || true
    S3S_PID=""
}
[[ -n "$MOTO_PID" && -n "$PG_PID" ]] || log "WARNING: moto's or PostgreSQL's process not found by its port: their CPU is reported as 0"

# ---------------------------------------------------------------------------------------
# a. Backfill by 1, 2, 3 workers
# ---------------------------------------------------------------------------------------
: >"$WORK/res.backfill"
if has_part backfill; then
    B_FILL="slate-wb-fill-$TAG"
    if ((NEED_S3S)); then
        s3s_start "$WORK/s3s"   # removed with $WORK
        SRC_TEXT="s3s-fs"
    else
        BUCKETS+=("$B_FILL")
        SRC_TEXT="moto"
    fi
    log "seeding $N × $KIB_EACH KiB random objects → s3://$B_FILL/data on $SRC_TEXT ($S3_THREADS threads)"
    out=$(py_fill seed-backfill "$B_FILL" "$N" "$KIB_EACH" "$PER_FOLDER") || die "seeding failed"
    read -r _ FILL_BYTES FILL_SEED_S <<<"$out"
    log "  seeded $FILL_BYTES bytes in $FILL_SEED_S s"
    for w in $COUNTS; do
        q="slate-wb-fq$w-$TAG"
        QUEUES+=("$q")
        py queue-create "$q" >/dev/null || die "creating queue $q failed"
        new_db "fill$w"
        EXTRA=()
        if [[ "$FILL_DST" == s3s ]]; then
            # another bucket of this run's s3s-fs, every byte through a worker: the store's
            # own copy (CopyObject) would bypass the worker and its --bwlimit
            py_fill bucket-create "$B_FILL-dst$w" >/dev/null || die "creating bucket $B_FILL-dst$w on s3s-fs failed"
            dst="s3://$B_FILL-dst$w/replica"
            EXTRA=(--no-server-side-copy)
        elif [[ "$FILL_DST" == az ]]; then
            # a container on Azurite: workers split only pairs of two stores (a local folder is
            # each host's own), and between two stores every byte passes through a worker, so
            # each worker's --bwlimit is its link (two buckets of moto would be CopyObject)
            az_start "$WORK/azurite$w"
            py container-create "$B_FILL-dst$w" >/dev/null || die "creating container $B_FILL-dst$w failed"
            dst="az://$B_FILL-dst$w/replica"
        elif [[ "$FILL_DST" == s3 ]]; then
            BUCKETS+=("$B_FILL-dst$w")
            py bucket-create "$B_FILL-dst$w" >/dev/null || die "creating bucket $B_FILL-dst$w failed"
            dst="s3://$B_FILL-dst$w/replica"
        else
            dst="$WORK/fill$w"
        fi
        load0=$(cut -d' ' -f1 /proc/loadavg)
        log "backfill by $w worker(s), --bwlimit $BWLIMIT each: s3://$B_FILL/data → $dst, --db ${NEW_DB##*/}"
        t0=$(now_s)
        cpu_mark
        start_workers "$w" "$NEW_DB" "s3://$B_FILL/data" "$dst" "$q" "fill$w" --bwlimit "$BWLIMIT" "${EXTRA[@]}"
        out=$(py_fill backfill-wait "$SLATE" "$NEW_DB" "$B_FILL" "$dst" "$BACKFILL_TIMEOUT" "$URLS") \
            || { workers_alive "during the backfill"; die "the backfill by $w worker(s) did not finish"; }
        read -r t_sync t_equal per_worker hcpu <<<"$out"
        cpu=$(cpu_since "$hcpu")
        load1=$(cut -d' ' -f1 /proc/loadavg)
        secs=$(awk -v a="$t0" -v b="$t_sync" -v c="$t_equal" 'BEGIN {e = (b > c ? b : c); printf "%.1f", e - a}')
        log "  $w worker(s): reconciled and equal after $secs s (bytes copied per worker: $per_worker); checking every object (size, MD5)"
        wait_following 60
        cb=$(py_fill same-local "$B_FILL" "$dst") || die "the replica of the $w-worker backfill differs from the source"
        finish_workers "backfill by $w worker(s)"
        echo "$w $secs $per_worker $load0 $load1 $cpu $WARNS" >>"$WORK/res.backfill"
        case "$FILL_DST" in
            az) az_stop; rm -rf "$WORK/azurite$w" ;;
            s3s | s3) ;;   # s3s-fs's folder goes with $WORK; moto's bucket at the end
            *) rm -rf "$dst" ;;
        esac
        drop_bucket - "$q"
    done
    if ((NEED_S3S)); then
        s3s_stop
        FILL_ENV=()   # the latency and ops parts' S3 is moto's
    else
        drop_bucket "$B_FILL" -
    fi
fi

# ---------------------------------------------------------------------------------------
# b. Latency with 1 and 3 workers on one PostgreSQL and one SQS queue
# ---------------------------------------------------------------------------------------
: >"$WORK/res.latency"
LAT_MISSING=0
if has_part latency; then
    for r in $RATES; do
        for w in $LAT_COUNTS; do
            b="slate-wb-lat$r-$w-$TAG"; q="slate-wb-lq$r-$w-$TAG"
            BUCKETS+=("$b"); QUEUES+=("$q")
            py event-bucket "$b" "$q" 10 >/dev/null || die "making bucket $b and queue $q failed"
            new_db "lat${r}_$w"
            dst="$WORK/lat$r-$w"
            log "latency with $w worker(s): $r new 1 KiB objects/s for $SECONDS_LAT s → s3://$b/data (events: sqs://$q) → $dst"
            start_workers "$w" "$NEW_DB" "s3://$b/data" "$dst" "$q" "lat$r-$w"
            wait_following 120
            load0=$(cut -d' ' -f1 /proc/loadavg)
            cpu_mark
            out=$(py phase "$b" "$q" "$dst" "$NEW_DB" "$PSQL" "$r" "$SECONDS_LAT" "$LAT_FOLDERS" "$LAT_GRACE" "$WRITERS" "$IDLE" "$URLS" postgres) \
                || { workers_alive "during the latency phase"; die "the latency phase at $r/s with $w worker(s) failed"; }
            hcpu=${out##* }; out=${out% *}
            cpu=$(cpu_since "$hcpu")
            load1=$(cut -d' ' -f1 /proc/loadavg)
            read -r total missing p50 p99 pmax mean achieved behind during backlog rest <<<"$out"
            log "  $r/s, $w worker(s): p50 $p50 ms, p99 $p99 ms, max $pmax ms; $missing of $total not arrived $LAT_GRACE s after the writer; writer $achieved/s; queue backlog $backlog when the writer stopped; applied per worker ${out##* }; CPU $(cpu_cell $cpu)"
            workers_alive "after the latency phase"
            if ((missing == 0)); then
                py same-local "$b" "$dst" >/dev/null || die "the replica of the $r/s run with $w worker(s) differs from the source"
            else
                LAT_MISSING=1
                log "  $missing objects had not arrived $LAT_GRACE s after the writer stopped: reported (the replica is not compared)"
            fi
            finish_workers "latency at $r/s with $w worker(s)"
            echo "$r $w $out $load0 $load1 $cpu $WARNS" >>"$WORK/res.latency"
            drop_bucket "$b" "$q"
            rm -rf "$dst"
        done
    done
fi

# ---------------------------------------------------------------------------------------
# c. State operations per applied key: SQLite and PostgreSQL
# ---------------------------------------------------------------------------------------
: >"$WORK/res.ops"
if has_part ops; then
    OPS_SECONDS=$((OPS_KEYS / OPS_RATE))
    for backend in sqlite postgres; do
        b="slate-wb-ops-$backend-$TAG"; q="slate-wb-oq-$backend-$TAG"
        BUCKETS+=("$b"); QUEUES+=("$q")
        py event-bucket "$b" "$q" 10 >/dev/null || die "making bucket $b and queue $q failed"
        if [[ "$backend" == sqlite ]]; then dbloc="$WORK/ops.db"; else new_db ops; dbloc="$NEW_DB"; fi
        dst="$WORK/ops-$backend"
        log "state operations on $backend: $OPS_KEYS new keys at $OPS_RATE/s → s3://$b/data → $dst (one daemon)"
        start_workers 1 "$dbloc" "s3://$b/data" "$dst" "$q" "ops-$backend"
        wait_following 120
        cpu_mark
        out=$(py phase "$b" "$q" "$dst" "$dbloc" "$PSQL" "$OPS_RATE" "$OPS_SECONDS" "$LAT_FOLDERS" "$OPS_GRACE" "$WRITERS" "$IDLE" "$URLS" "$backend") \
            || { workers_alive "during the burst"; die "the burst on $backend failed"; }
        hcpu=${out##* }; out=${out% *}
        cpu=$(cpu_since "$hcpu")
        read -r total missing _ _ _ _ _ _ _ _ t_phase t_idle is iw ir ps pw pr per_worker <<<"$out"
        log "  $backend: $ps statements, $pw write transactions, $pr read calls in $t_phase s for $total keys (idle $t_idle s: $is / $iw / $ir); applied $per_worker"
        ((missing == 0)) || die "$missing of $total objects had not arrived $OPS_GRACE s after the writer stopped ($backend)"
        applied_sum=$(tr ',' '\n' <<<"$per_worker" | awk '{s += $1} END {print s + 0}')
        ((applied_sum >= total)) || die "$backend: the daemon counted $applied_sum keys applied, want $total"
        py same-local "$b" "$dst" >/dev/null || die "the replica of the $backend burst differs from the source"
        finish_workers "the $backend daemon"
        echo "$backend $out $cpu $WARNS" >>"$WORK/res.ops"
        drop_bucket "$b" "$q"
        rm -rf "$dst"
    done
fi

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
slate_rev=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [[ -n "$(git -C "$REPO_ROOT" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null)" ]]; then slate_rev+="+dirty"; fi
# shellcheck source=/dev/null
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || os=$(uname -s)
pg_version=$("$PSQL" "$PG_BASE/postgres" -X -tAc 'SHOW server_version' 2>/dev/null || echo '?')
moto_version=$("$VENV_PYTHON" -c 'import moto; print(moto.__version__)' 2>/dev/null || echo '?')
{
    echo "## slate workers benchmark (issue 14)"
    echo
    echo "- Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $os; $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Cores and load: $(nproc) cores; load average (1, 5, 15 min) $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end. moto, PostgreSQL, the workers, the writer and the poller all share these cores with whatever else the machine runs.${BENCH_NOTE:+ $BENCH_NOTE}"
    echo "- slate: $SLATE (git $slate_rev); moto $moto_version on $S3_ENDPOINT (S3 + SQS, one Python process); PostgreSQL $pg_version on 127.0.0.1:$PG_PORT (one fresh database per run)"
    echo "- Command: \`$BENCH_CMD\`"
    echo
    if [[ -s "$WORK/res.backfill" ]]; then
        mib=$(awk -v b="$FILL_BYTES" 'BEGIN {printf "%.0f", b / 1048576}')
        case "$FILL_DST" in
            s3s) dst_text="another bucket of it, \`--no-server-side-copy\` (every byte through a worker)"; dst_run="an empty bucket on the s3s-fs" ;;
            az) dst_text="Azure Blob (Azurite, one Node process)"; dst_run="an empty container on Azurite" ;;
            s3) dst_text="another bucket on moto (CopyObject: no byte through slate, --bwlimit paces nothing)"; dst_run="an empty bucket on moto" ;;
            *) dst_text="a local folder (never split: one worker copies all)"; dst_run="an empty local folder" ;;
        esac
        echo "### Backfill: $N × $KIB_EACH KiB ($mib MiB), S3 ($SRC_TEXT) → $dst_text, each worker \`--bwlimit $BWLIMIT\`"
        echo
        echo "| workers | time to reconciled and equal | aggregate MiB/s | vs 1 worker | MiB copied by each worker | CPU over the run ($(nproc) cores) | load (1 min) before → after |"
        echo "|---|---|---|---|---|---|---|"
        one=""
        while read -r w secs per_worker l0 l1 cb cw cm cp ch co ca _warns; do
            rate=$(awk -v b="$FILL_BYTES" -v s="$secs" 'BEGIN {printf "%.2f", b / 1048576 / s}')
            [[ -n "$one" ]] || one=$rate
            split=$(tr ',' '\n' <<<"$per_worker" | awk '{printf "%s%.0f", (NR > 1 ? " / " : ""), $1 / 1048576}')
            printf '| %d | %s s | %s | %s× | %s | %s | %s → %s |\n' "$w" "$secs" "$rate" "$(ratio "$rate" "$one")" "$split" \
                "$(cpu_cell "$cb" "$cw" "$cm" "$cp" "$ch" "$co" "$ca")" "$l0" "$l1"
        done <"$WORK/res.backfill"
        echo
        echo "Seeding took $FILL_SEED_S s (untimed). Per run: a fresh PostgreSQL database and $dst_run; the workers (\`slate sync s3://SRC/data DST --events sqs://Q --db postgres://… --drift-check-secs 0 --quiet --listen 127.0.0.1:PORT --bwlimit $BWLIMIT${EXTRA[*]:+ ${EXTRA[*]}}\`, the queue (on moto) empty: the source sends no events) start together; the time runs from their start until \`slate pairs --db …\` shows the pair's last sync set (polled every 2 s) and the replica holds every object with its size; then every object is compared with the source (size, and its MD5: against the source's ETag, or$(if [[ "$FILL_DST" == s3s ]]; then echo ", s3s-fs listing no ETags,"; fi) both objects read and hashed). MiB copied per worker: each one's \`slate_bytes_copied_total\`."
        echo
    fi
    if [[ -s "$WORK/res.latency" ]]; then
        echo "### Daemon latency: new 1 KiB objects at a fixed rate for $SECONDS_LAT s, S3 (moto) + one SQS queue → local folder, workers on one PostgreSQL"
        echo
        echo "| rate | workers | p50 | p99 | max | writer achieved | arrived within $LAT_GRACE s of the writer's end | SQS backlog when the writer stopped | keys applied by each worker | statements / key (all workers) | CPU over the phase ($(nproc) cores) | load (1 min) before → after |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
        : >"$WORK/res.lat.short"
        while read -r r w total missing p50 p99 pmax mean achieved behind during backlog t_phase t_idle is iw ir ps pw pr per_worker l0 l1 cb cw cm cp ch co ca _warns; do
            n_applied=$(tr ',' '\n' <<<"$per_worker" | awk '{s += $1} END {print s + 0}')
            spk=$(awk -v p="$ps" -v i="$is" -v ti="$t_idle" -v t="$t_phase" -v n="$n_applied" \
                'BEGIN {if (n > 0) printf "%.1f (net of idle %.1f)", p / n, (p - i / ti * t) / n; else print "—"}')
            printf '| %d/s | %d | %.0f ms | %.0f ms | %.0f ms | %.0f/s | %d of %d%s | %d | %s | %s | %s | %s → %s |\n' \
                "$r" "$w" "$p50" "$p99" "$pmax" "$achieved" "$((total - missing))" "$total" "$( ((missing == 0)) || echo " (**$missing not**)")" \
                "$backlog" "${per_worker//,/ / }" "$spk" "$(cpu_cell "$cb" "$cw" "$cm" "$cp" "$ch" "$co" "$ca")" "$l0" "$l1"
            echo "$r $w $p50 $p99 $missing $achieved" >>"$WORK/res.lat.short"
        done <"$WORK/res.latency"
        echo
        for r in $RATES; do
            read -r _ _ p50_1 p99_1 m1 a1 < <(awk -v r="$r" '$1 == r && $2 == 1' "$WORK/res.lat.short") || true
            read -r _ _ p50_3 p99_3 m3 a3 < <(awk -v r="$r" '$1 == r && $2 == 3' "$WORK/res.lat.short") || true
            if [[ -n "${p50_1:-}" && -n "${p50_3:-}" ]]; then
                caveat=""
                if ((m1 + m3 > 0)); then caveat+="; objects were missing, so these percentiles are of those that arrived"; fi
                if awk -v a="$a1" -v b="$a3" 'BEGIN {exit !(a < 0.9 * b || b < 0.9 * a)}'; then
                    caveat+=$(printf '; **not like for like**: the writer reached %.0f/s with 1 worker and %.0f/s with 3 (moto took the PUTs at that rate)' "$a1" "$a3")
                fi
                echo "- $r/s asked, 3 workers vs 1: p50 $(ratio "$p50_3" "$p50_1")×, p99 $(ratio "$p99_3" "$p99_1")× (below 1: faster with 3)$caveat."
            fi
            unset p50_1 p50_3
        done
        echo
        echo "Per run: a fresh bucket (10 seed objects, then its ObjectCreated/ObjectRemoved notifications to a fresh SQS queue), a fresh PostgreSQL database, the workers (\`slate sync s3://SRC/data DST --events sqs://Q --db postgres://… --drift-check-secs 0 --quiet --listen 127.0.0.1:PORT\`) started together and following; $WRITERS writer threads PUT object i at t0 + i/rate and record its completion; a forked poller stats each due object in the local replica every ~2 ms (~20 ms while more than 64 wait; a folder listing when more than 32 wait in a folder) and records when it is there with its full size. Latency = arrival − PUT completion. The poller waits up to $LAT_GRACE s after the writer's end; when everything arrived, the inbox must then empty (read in PostgreSQL) and the replica equal the bucket. Statements / key: the sum of the workers' \`slate_state_statements_total{backend=\"postgres\"}\` over the phase divided by the keys they applied, and net of the idle rate read over $IDLE s just before. Each run's bucket and queue are removed from moto before the next."
        echo
    fi
    if [[ -s "$WORK/res.ops" ]]; then
        echo "### State operations per applied key: $OPS_KEYS new keys at $OPS_RATE/s, one daemon, S3 (moto) + SQS → local folder"
        echo
        echo "| state database | statements / key | write transactions / key | read calls / key | idle (before the burst) | p50 / p99 latency | CPU over the burst ($(nproc) cores) |"
        echo "|---|---|---|---|---|---|---|"
        while read -r backend total missing p50 p99 _pmax _mean _ach _beh _dur _bl t_phase t_idle is iw ir ps pw pr per_worker cb cw cm cp ch co ca _warns; do
            if [[ "$backend" == postgres ]]; then
                PG_TRIPS=$(awk -v n="$total" -v ps="$ps" -v pw="$pw" -v pr="$pr" 'BEGIN {printf "%.1f", (ps + 2 * pw) / n}')
            fi
            awk -v cpu="$(cpu_cell "$cb" "$cw" "$cm" "$cp" "$ch" "$co" "$ca")" -v b="$backend" -v n="$total" -v t="$t_phase" -v ti="$t_idle" -v is="$is" -v iw="$iw" -v ir="$ir" \
                -v ps="$ps" -v pw="$pw" -v pr="$pr" -v p50="$p50" -v p99="$p99" 'BEGIN {
                    printf "| %s | %.2f (net %.2f) | %.2f (net %.2f) | %.2f (net %.2f) | %.1f statements/s, %.1f writes/s, %.1f reads/s | %.0f / %.0f ms | %s |\n",
                        (b == "sqlite" ? "SQLite" : "PostgreSQL"),
                        ps / n, (ps - is / ti * t) / n, pw / n, (pw - iw / ti * t) / n, pr / n, (pr - ir / ti * t) / n,
                        is / ti, iw / ti, ir / ti, p50, p99, cpu }'
        done <"$WORK/res.ops"
        echo
        echo "Counted by slate itself (\`slate_state_statements_total\`, \`slate_state_transactions_total\` of its /metrics, read before and after; a statement is one SQL statement or batch the state runs, BEGIN / COMMIT not included; write transactions count each attempt, reads each connection taken for reads). \"net\": minus the idle rate (the same counters over $IDLE s before the burst: the pair's loop looking for keys every 250 ms, the jobs queue every 2 s, and one /metrics scrape) times the phase's length. Each run: a fresh bucket and queue, a fresh database (a SQLite file, or a PostgreSQL database), one daemon; the burst ends when every key is in the replica, the inbox is empty and the daemon counted $OPS_KEYS keys applied. The ratio of keys to transactions depends on how many keys wait together (a receive stores up to 10 messages in one transaction; claims take many keys at once), so both backends get the same burst at the same rate.${PG_TRIPS:+ On PostgreSQL every statement, BEGIN and COMMIT is a round trip to the server: ~$PG_TRIPS round trips per key here (statements + 2 × write transactions).}"
        echo
    fi
    echo "- Every worker exited 0 on SIGTERM; $WARN_TOTAL log lines with warn/error across all workers."
    if [[ -n "$WARN_LINES" ]]; then
        echo "- The first of them (up to 3 a run):"
        while IFS= read -r line; do [[ -z "$line" ]] || printf "  - \`%s\`\n" "${line:0:300}"; done <<<"$WARN_LINES"
    fi
} >"$WORK/report.md"
mkdir -p "$(dirname "$REPORT")"
cp "$WORK/report.md" "$REPORT"
cat "$WORK/report.md"
log "report written to $REPORT"
