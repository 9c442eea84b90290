#!/usr/bin/env bash
# bench/daemon.sh — the slate daemon (`slate sync SRC DST` without --once: a local folder
# followed through inotify) against rclone sync, local folder → local folder, same machine.
#
# Scenarios:
#   1. time-to-equal: SRC holds BENCH_DAEMON_N files of 1 KiB (folders of 1,000). The daemon
#      backfills DST_slate, one untimed `rclone sync` fills DST_rclone. Then, BENCH_RUNS times,
#      100 changes hit SRC (50 overwrites with new content and size, 30 new files, 20 deletes,
#      spread across folders). slate: time from the last change until DST_slate holds all 100
#      (polled every few ms; the daemon keeps running). rclone: the time of `rclone sync SRC
#      DST_rclone` after the same changes. Medians, ratio rclone / slate (target ≥ 200×).
#   2. latency: with the daemon still running, per rate R of BENCH_RATES, a writer creates new
#      1 KiB files at R per second for BENCH_SECONDS; a poller records when each one appears
#      in DST_slate with its full size. p50 / p99 / max latency, files that had not arrived
#      30 s after the writer stopped (must be 0), the daemon's peak RSS (VmHWM).
# Prints one markdown table on stdout (progress goes to stderr) and writes the same report
# to bench/last-daemon-run.md (other modes: last-daemon-MODE-run.md). Nothing leaves the machine.
#
# BENCH_DAEMON_MODE=s3: the same two scenarios S3 → S3 on moto (127.0.0.1, started with
# scripts/services.sh unless it already answers): fresh buckets SRC / DST_slate / DST_rclone,
# SRC's real S3 event notifications to an SQS queue the daemon follows (`slate sync
# s3://SRC/data s3://DST/data --events sqs://QUEUE`), 20,000 objects by default. Arrivals
# in DST_slate are seen through DST_slate's own S3 notifications (a second queue; the 100
# changed keys are then confirmed by HEAD); the buckets and queues are removed at the end.
#
# BENCH_DAEMON_MODE=pubsub: GCS on fake-gcs-server → a local folder, the daemon following
# fake-gcs-server's real notifications (OBJECT_FINALIZE / OBJECT_DELETE on the Pub/Sub
# emulator's topic gcs-events) through a subscription made for the run (`slate sync
# gs://SRC/data DST --events pubsub://projects/test-project/subscriptions/SUB`); the peer is
# `rclone sync` from fake-gcs-server to another local folder. 2,000 objects, 20/100/500 per s.
# BENCH_DAEMON_MODE=azqueue: Azure Blob on Azurite → a local folder, the daemon following a
# storage queue (`--events azqueue://devstoreaccount1/QUEUE`). Azurite emits no blob events
# (no Event Grid emulator exists): the benchmark puts each write's Event Grid event on the
# queue itself, so latency runs from that post. Peer: `rclone sync` through a container SAS.
# In both, arrivals are polled in the local DST; bucket / container, queue and subscription
# are removed at the end.
#
# See bench/README.md ("Daemon benchmark") for the environment knobs.
set -euo pipefail

# ---------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------
# The exact command line, for the report: the knobs set in the environment (read before the
# defaults below fill them in).
BENCH_CMD=""
for v in BENCH_DAEMON_MODE SLATE_BIN BENCH_DIR BENCH_DAEMON_N BENCH_RATES BENCH_SECONDS BENCH_RUNS \
         BENCH_REPORT BENCH_BACKFILL_TIMEOUT BENCH_KEEP BENCH_STRICT BENCH_S3_THREADS SLATE_MOTO_PORT \
         BENCH_CLOUD_THREADS; do
    if [[ -n "${!v+x}" ]]; then BENCH_CMD+="$v=$(printf '%q' "${!v}") "; fi
done
BENCH_CMD+="bench/daemon.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

MODE="${BENCH_DAEMON_MODE:-local}"                  # local, s3 (moto + SQS), pubsub (GCS), azqueue (Azure)
RATES_DEFAULT="200 500"
case "$MODE" in
    local) N_DEFAULT=100000 ;;
    s3) N_DEFAULT=20000 ;;   # moto takes ~370 PUT/s: 20,000 objects seed in about a minute
    pubsub | azqueue) N_DEFAULT=2000; RATES_DEFAULT="20 100 500" ;;   # emulators are slow to seed
    *) printf '[bench] ERROR: BENCH_DAEMON_MODE must be local, s3, pubsub or azqueue, got %s\n' "'$MODE'" >&2; exit 1 ;;
esac
CLOUD=0                                             # 1: pubsub or azqueue (cloud source → local folder)
if [[ "$MODE" == pubsub || "$MODE" == azqueue ]]; then CLOUD=1; fi
BENCH_DIR="${BENCH_DIR:-/tmp/slate-bench}"          # scratch parent
N="${BENCH_DAEMON_N:-$N_DEFAULT}"                   # seeded files (1 KiB, folders of 1,000)
RATES="${BENCH_RATES:-$RATES_DEFAULT}"              # latency: new files per second, per phase
SECONDS_PER_RATE="${BENCH_SECONDS:-20}"             # latency: writer duration per rate
RUNS="${BENCH_RUNS:-3}"                             # time-to-equal runs (100 changes each)
case "$MODE" in
    local) REPORT_DEFAULT="$SCRIPT_DIR/last-daemon-run.md" ;;
    *) REPORT_DEFAULT="$SCRIPT_DIR/last-daemon-$MODE-run.md" ;;
esac
REPORT="${BENCH_REPORT:-$REPORT_DEFAULT}"
BACKFILL_TIMEOUT="${BENCH_BACKFILL_TIMEOUT:-1800}"  # s to wait for "following changes of"
KEEP="${BENCH_KEEP:-0}"                             # 1 = keep the scratch dir
STRICT="${BENCH_STRICT:-0}"                         # 1 = exit 3 when a target is missed
S3_THREADS="${BENCH_S3_THREADS:-16}"                # s3: boto3 threads (seeding, changes, checks)
MOTO_PORT="${SLATE_MOTO_PORT:-5000}"                # s3: moto on 127.0.0.1 (as scripts/services.sh)
CLOUD_THREADS="${BENCH_CLOUD_THREADS:-16}"          # pubsub / azqueue: writer threads (seeding, changes; latency: 2×)

PER_FOLDER=1000      # files per seeded folder
CHANGES=100          # per time-to-equal run: 50 overwrites, 30 new, 20 deletes
EQUAL_TIMEOUT=120    # s: slate must reach equality within this after the last change
GRACE=30             # s: latency files must have arrived this long after the writer stopped
if [[ "$MODE" != local ]]; then GRACE=60; fi
LAT_FOLDERS=10       # latency files go to lat-R/d000 … lat-R/d009

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '\n[bench] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    sed -n '2,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    echo "Knobs: see $SCRIPT_DIR/README.md (Daemon benchmark)"
    exit 0
fi
[[ $# -eq 0 ]] || die "no arguments expected (configure with BENCH_* environment variables)"

for v in N SECONDS_PER_RATE RUNS BACKFILL_TIMEOUT S3_THREADS MOTO_PORT CLOUD_THREADS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
((N >= 2 * CHANGES)) || die "BENCH_DAEMON_N must be at least $((2 * CHANGES)) (each run changes $CHANGES paths), got $N"
read -ra RATE_LIST <<<"$RATES"
((${#RATE_LIST[@]} > 0)) || die "BENCH_RATES is empty (give rates in files per second, e.g. \"200 500\")"
for r in "${RATE_LIST[@]}"; do
    [[ "$r" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RATES: '$r' is not a positive integer"
done
# each rate writes its own lat-R/ (a repeated rate would find the earlier phase's objects there)
[[ -z "$(printf '%s\n' "${RATE_LIST[@]}" | sort | uniq -d)" ]] || die "BENCH_RATES: each rate at most once, got '$RATES'"
[[ "$KEEP" == 0 || "$KEEP" == 1 ]] || die "BENCH_KEEP must be 0 or 1, got '$KEEP'"

# ---------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------
command -v rclone >/dev/null || die "rclone not found (apt-get install rclone)"
command -v python3 >/dev/null || die "python3 not found"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
/usr/bin/time -f '%M' true 2>/dev/null || die "/usr/bin/time is not GNU time"
python3 -c 'import sys; assert sys.version_info >= (3, 7)' 2>/dev/null || die "python3 ≥ 3.7 needed"
[[ -n "${EPOCHREALTIME:-}" ]] || die "bash ≥ 5 needed (EPOCHREALTIME)"
# The machine sets AWS_CA_BUNDLE, which makes rclone fail with LoadCustomCABundleError.
RCLONE=(env -u AWS_CA_BUNDLE rclone --config /dev/null)

if [[ -n "${SLATE_BIN:-}" ]]; then
    SLATE="$SLATE_BIN"
else
    log "cargo build --release in $REPO_ROOT"
    (cd "$REPO_ROOT" && cargo build --release >&2) || die "cargo build --release failed"
    SLATE="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/slate"
fi
[[ -x "$SLATE" ]] || die "slate binary not found or not executable: $SLATE"
"$SLATE" sync --help >/dev/null 2>&1 || die "'$SLATE sync --help' failed"
"$SLATE" sync --help 2>/dev/null | grep -q -- '--drift-check-secs' \
    || die "'$SLATE sync' has no --drift-check-secs (a slate without the daemon?)"

# ---------------------------------------------------------------------------------------
# Scratch space, cleanup, disk check
# ---------------------------------------------------------------------------------------
mkdir -p "$BENCH_DIR"
WORK="$(mktemp -d "$BENCH_DIR/daemon.XXXXXX")"
SRC="$WORK/src"
DST_SLATE="$WORK/dst-slate"
DST_RCLONE="$WORK/dst-rclone"
DB="$WORK/slate.db"
DAEMON_LOG="$WORK/daemon.log"
HELPER="$SCRIPT_DIR/daemon_bench.py"   # the python helper of every mode
VENV_PYTHON="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/venv/bin/python"   # s3 / pubsub / azqueue: scripts/services.sh's venv
DAEMON_PID=""
S3_CREATED=0                       # s3 mode: 1 once buckets / queues may exist (teardown needed)
MOTO_STARTED=0                     # s3 mode: 1 if this run started moto (stopped at the end)
CLOUD_CREATED=0                    # pubsub / azqueue: 1 once the bucket / queue / subscription may exist
EMU_STARTED=()                     # pubsub / azqueue: the emulators this run started (stopped at the end)
C_SRC="" C_QUEUE="-" C_SUB="-"     # pubsub / azqueue: bucket or container, queue, subscription ("-": none)

stop_daemon() {   # stop_daemon: SIGTERM, up to 30 s, then SIGKILL; sets DAEMON_RC
    DAEMON_RC=""
    [[ -n "$DAEMON_PID" ]] || return 0
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null || true
        local i
        for ((i = 0; i < 300; i++)); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$DAEMON_PID" 2>/dev/null; then
            log "slate daemon (pid $DAEMON_PID) still running 30 s after SIGTERM: SIGKILL"
            kill -KILL "$DAEMON_PID" 2>/dev/null || true
        fi
    fi
    DAEMON_RC=0
    wait "$DAEMON_PID" 2>/dev/null || DAEMON_RC=$?
    DAEMON_PID=""
}

cleanup() {
    local rc=$?
    trap - EXIT
    stop_daemon || true
    if [[ "$S3_CREATED" == 1 ]]; then
        if [[ "$KEEP" == 1 ]]; then
            log "kept buckets $B_SRC $B_DST $B_RCL and queues $Q_SLATE $Q_WITNESS on $S3_ENDPOINT"
        else
            log "removing the benchmark's buckets and queues from moto"
            timeout 600 "${S3ENV[@]}" "$VENV_PYTHON" "$HELPER" s3 teardown "$B_SRC" "$B_DST" "$B_RCL" "$Q_SLATE" "$Q_WITNESS" >&2 \
                || log "WARNING: removing the buckets / queues failed (moto keeps them until it stops)"
        fi
    fi
    if [[ "$CLOUD_CREATED" == 1 ]]; then
        if [[ "$KEEP" == 1 ]]; then
            log "kept $C_SRC, queue $C_QUEUE, subscription $C_SUB on the emulators"
        else
            log "removing the benchmark's $C_SRC, queue $C_QUEUE and subscription $C_SUB from the emulators"
            timeout 600 "${CLOUDPY_CMD[@]}" teardown "$C_SRC" "$C_QUEUE" "$C_SUB" >&2 \
                || log "WARNING: removing them failed (the emulators keep them until they stop)"
            if [[ "$MODE" == azqueue ]]; then
                log "note: Azurite's next blob GC (every 10 min) sweeps the deleted blobs' extents in one blocking loop: its blob service may not answer for minutes then (about 4.5 min after a default run)"
            fi
        fi
    fi
    if ((${#EMU_STARTED[@]} > 0)); then
        if [[ "$KEEP" == 1 ]]; then
            log "emulators started by this run left running for inspection: scripts/services.sh stop ${EMU_STARTED[*]}"
        else
            log "stopping the emulators this run started: ${EMU_STARTED[*]}"
            "$REPO_ROOT/scripts/services.sh" stop "${EMU_STARTED[@]}" >&2 || log "WARNING: scripts/services.sh stop ${EMU_STARTED[*]} failed"
        fi
    fi
    if [[ "$MOTO_STARTED" == 1 ]]; then
        if [[ "$KEEP" == 1 ]]; then
            log "moto (started by this run) left running for inspection: scripts/services.sh stop moto"
        else
            log "stopping moto (this run started it)"
            "$REPO_ROOT/scripts/services.sh" stop moto >&2 || log "WARNING: scripts/services.sh stop moto failed"
        fi
    fi
    if [[ "$KEEP" == 1 ]]; then log "kept scratch dir $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

LAT_TOTAL=0
for r in "${RATE_LIST[@]}"; do LAT_TOTAL=$((LAT_TOTAL + r * SECONDS_PER_RATE)); done
if [[ "$MODE" == local ]]; then
    # Every 1 KiB file takes a 4 KiB block: SRC, DST_slate and DST_rclone hold N each (plus the
    # changes), SRC and DST_slate the latency files; the manifest takes ~2 KiB a file.
    need_mb=$(((3 * N * 4 + N * 2 + LAT_TOTAL * (2 * 4 + 2)) / 1024 + 512))
    need_inodes=$((3 * N + 2 * LAT_TOTAL + 3 * (N / PER_FOLDER + 1) + 1000))
    free_mb=$(df -Pm "$WORK" | awk 'NR==2 {print $4}')
    ((free_mb > need_mb)) || die "need ~${need_mb} MiB free under $BENCH_DIR, have ${free_mb} MiB"
    read -r inodes_total inodes_free < <(df -Pi "$WORK" | awk 'NR==2 {print $2, $4}')
    # (file systems without an inode table, e.g. btrfs, report 0 inodes)
    if ((inodes_total > 0 && inodes_free <= need_inodes)); then
        die "need ~${need_inodes} free inodes under $BENCH_DIR, have ${inodes_free}"
    fi
    need_watches=$((N / PER_FOLDER + 1 + ${#RATE_LIST[@]} * (LAT_FOLDERS + 1) + 100))
    max_watches=$(cat /proc/sys/fs/inotify/max_user_watches 2>/dev/null || echo 0)
    ((max_watches == 0 || max_watches > need_watches)) \
        || die "fs.inotify.max_user_watches is $max_watches, the daemon needs ~$need_watches (raise it with sysctl)"
elif ((CLOUD)); then
    # pubsub / azqueue: DST_slate (N + the latency objects) and DST_rclone (N) are local
    # folders (a 4 KiB block a file); the manifest takes ~2 KiB an object
    need_mb=$(((2 * N * 4 + LAT_TOTAL * 4 + (N + LAT_TOTAL) * 2) / 1024 + 256))
    need_inodes=$((2 * N + LAT_TOTAL + 2 * (N / PER_FOLDER + 1) + ${#RATE_LIST[@]} * (LAT_FOLDERS + 1) + 1000))
    free_mb=$(df -Pm "$WORK" | awk 'NR==2 {print $4}')
    ((free_mb > need_mb)) || die "need ~${need_mb} MiB free under $BENCH_DIR, have ${free_mb} MiB"
    read -r inodes_total inodes_free < <(df -Pi "$WORK" | awk 'NR==2 {print $2, $4}')
    if ((inodes_total > 0 && inodes_free <= need_inodes)); then
        die "need ~${need_inodes} free inodes under $BENCH_DIR, have ${inodes_free}"
    fi
else
    # s3: the objects live in moto's memory; here only the daemon's DB (~2 KiB an object)
    need_mb=$(((N + LAT_TOTAL) * 2 / 1024 + 256))
    free_mb=$(df -Pm "$WORK" | awk 'NR==2 {print $4}')
    ((free_mb > need_mb)) || die "need ~${need_mb} MiB free under $BENCH_DIR, have ${free_mb} MiB"
fi

# ---------------------------------------------------------------------------------------
# The python helper: bench/daemon_bench.py MODE COMMAND ARGS... (seeding, the changes and
# the wait for equality, checks, the latency writer + poller / witness, cloud setup and
# teardown; one store class per source). local runs it with python3 (stdlib only), the
# cloud modes with the python of scripts/services.sh's venv (boto3, azure-storage-blob).
# ---------------------------------------------------------------------------------------
[[ -r "$HELPER" ]] || die "$HELPER not found"

# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------
# median COLUMN FILE
median() {
    awk -v c="$1" '{print $c}' "$2" | sort -g |
        awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# run_timed KEY CMD...: GNU time; appends "wall_s peak_rss_kib cpu_s" to $WORK/res.KEY, the
# command's output goes to $WORK/KEY.out. A failing command fails the benchmark.
run_timed() {
    local key=$1; shift
    local tf="$WORK/time.out" out="$WORK/$key.out" wall rss usr sys rc=0
    /usr/bin/time -f '%e %M %U %S' -o "$tf" "$@" >"$out" 2>&1 || rc=$?
    if ((rc != 0)); then
        tail -n 30 "$out" >&2; cat "$tf" >&2
        die "command failed ($key: exit status $rc): $*"
    fi
    read -r wall rss usr sys < <(tail -n 1 "$tf")
    awk -v w="$wall" -v r="$rss" -v u="$usr" -v s="$sys" \
        'BEGIN {if (w < 0.01) w = 0.01; printf "%.2f %d %.2f\n", w, r, u + s}' >>"$WORK/res.$key"
    log "  $key: $(tail -n 1 "$WORK/res.$key" | awk '{printf "wall %.2f s, peak RSS %.1f MiB, CPU %.2f s", $1, $2/1024, $3}')"
}

daemon_alive() {   # daemon_alive WHEN: die (with the log's tail) if the daemon has exited
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
        tail -n 30 "$DAEMON_LOG" >&2 || true
        local rc=0
        wait "$DAEMON_PID" 2>/dev/null || rc=$?
        DAEMON_PID=""
        die "the slate daemon exited ($1), exit status $rc; its log is above"
    fi
}
# daemon_kib FIELD: VmHWM / VmRSS of the daemon, KiB
daemon_kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$DAEMON_PID/status"; }
CLK_TCK=$(getconf CLK_TCK)
daemon_cpu() { awk -v t="$CLK_TCK" '{printf "%.2f", ($14 + $15) / t}' "/proc/$DAEMON_PID/stat"; }
now_s() { printf '%s' "$EPOCHREALTIME"; }
count_and_bytes() { find "$1" -type f -printf '%s\n' | awk '{n++; b += $1} END {printf "%d %.0f\n", n, b}'; }

# report_common DEFAULTS: the figures both modes report (DEFAULTS: "N/RUNS/RATES/SECONDS" of
# a full run; other settings make it a smoke run)
report_common() {
    rclone_version=$("${RCLONE[@]}" version 2>/dev/null | awk 'NR == 1')
    slate_rev=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
    if [[ -n "$(git -C "$REPO_ROOT" status --porcelain 2>/dev/null)" ]]; then slate_rev+="+dirty"; fi
    # shellcheck source=/dev/null
    if ! os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); then os=$(uname -s); fi
    smoke=0
    [[ "$N/$RUNS/$RATES/$SECONDS_PER_RATE" == "$1" ]] || smoke=1
    non_default=""
    ((smoke == 0)) || non_default=" — **non-default settings (smoke run): not comparable with the targets**"
    MISSED=0

    s_tte=$(median 1 "$WORK/res.tte.slate")
    r_tte=$(median 1 "$WORK/res.tte.rclone")
    r_rss=$(median 2 "$WORK/res.tte.rclone")
    s_all=$(awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}' "$WORK/res.tte.slate")
    r_all=$(awk '{printf "%s%.2f", (NR > 1 ? ", " : ""), $1}' "$WORK/res.tte.rclone")
    tte_ratio=$(awk -v s="$s_tte" -v r="$r_tte" 'BEGIN {x = r * 1000 / s; printf (x < 10 ? "%.2f" : "%.0f"), x}')
    if awk -v x="$tte_ratio" 'BEGIN {exit !(x >= 200)}'; then tte_met=yes; else tte_met="**no**"; MISSED=1; fi
}

report_env_lines() {
    echo "- Machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $os, $(uname -r); load average at the end $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Peer: $rclone_version"
    echo "- slate: $SLATE (git $slate_rev)"
    echo "- Command: \`$BENCH_CMD\`"
}

# report_publish: $WORK/report.md to $REPORT and stdout
report_publish() {
    mkdir -p "$(dirname "$REPORT")"
    cp "$WORK/report.md" "$REPORT"
    cat "$WORK/report.md"
    log "report written to $REPORT"
}
report_strict() { if [[ "$STRICT" == 1 && "$MISSED" == 1 ]]; then exit 3; fi; }
# report_end (cloud modes): the note of a failed latency phase ends the report; publish it,
# then fail the run if a phase failed (else report_strict)
report_end() {
    if [[ -n "$LAT_FAIL" ]]; then
        echo "- **FAILED**: $LAT_FAIL. The benchmark stopped there: later rates did not run and DST_slate was not compared with SRC at the end." >>"$WORK/report.md"
    fi
    report_publish
    [[ -z "$LAT_FAIL" ]] || die "$LAT_FAIL"
    report_strict
}

# same_tree A B WHO: B equals A entirely (every file and its bytes, nothing extra), else die
same_tree() {
    local out
    if ! out=$(diff -r -q "$1" "$2" 2>&1); then
        printf '%s\n' "$out" | head -n 20 >&2
        die "$3: $2 differs from $1 ($(printf '%s\n' "$out" | wc -l) differences; first ones above)"
    fi
    local a b
    a=$(count_and_bytes "$1"); b=$(count_and_bytes "$2")
    [[ "$a" == "$b" ]] || die "$3: $1 holds '$a' (files bytes), $2 holds '$b'"
    log "  $3: $2 equals $1 ($a files/bytes)"
}

# helper_same WHO SRC DST CMD...: CMD (the helper's `same`, printing "objects bytes") says DST
# equals SRC, else die
helper_same() {
    local who=$1 src=$2 dst=$3 out
    shift 3
    out=$("$@") || die "$who: $dst differs from $src (above)"
    log "  $who: $dst equals $src ($out objects/bytes)"
}

# start_daemon SUMMARY_RE NO_SUMMARY PROGRESS_DIR CMD...: start the slate daemon (CMD, its
# output to DAEMON_LOG) and wait for its backfill ("following changes of"); sets BACKFILL_S,
# BACKFILL_LINE (the log's last line matching SUMMARY_RE; NO_SUMMARY stands for none in the
# progress line), BACKFILL_HWM. Progress every 30 s: PROGRESS_DIR's file count, or the time.
start_daemon() {
    local summary_re=$1 no_summary=$2 progress_dir=$3 t_start i
    shift 3
    : >"$DAEMON_LOG"   # exists before the first grep below (the daemon's redirection runs in the child)
    t_start=$(now_s)
    "$@" >"$DAEMON_LOG" 2>&1 &
    DAEMON_PID=$!
    for ((i = 0; ; i++)); do
        grep -q 'slate: following changes of' "$DAEMON_LOG" && break
        daemon_alive "during the backfill"
        ((i < BACKFILL_TIMEOUT * 10)) || die "no 'slate: following changes of' line within $BACKFILL_TIMEOUT s (BENCH_BACKFILL_TIMEOUT); log: $(tail -n 5 "$DAEMON_LOG")"
        if ((i % 300 == 299)); then
            if [[ -n "$progress_dir" ]]; then
                log "  backfill: $(count_and_bytes "$progress_dir" | awk '{print $1}') files in DST_slate after $(((i + 1) / 10)) s"
            else
                log "  backfill: still running after $(((i + 1) / 10)) s"
            fi
        fi
        sleep 0.1
    done
    BACKFILL_S=$(awk -v a="$t_start" -v b="$(now_s)" 'BEGIN {printf "%.1f", b - a}')
    BACKFILL_LINE=$(grep -E "$summary_re" "$DAEMON_LOG" | tail -n 1 || true)
    BACKFILL_HWM=$(daemon_kib VmHWM)
    log "  backfill done in $BACKFILL_S s (${BACKFILL_LINE:-$no_summary}); daemon VmHWM $((BACKFILL_HWM / 1024)) MiB"
}

# tte_polled RUN NOUN LIST CMD...: slate's part of a time-to-equal run in a local DST_slate:
# CMD (the helper's `changes`: "ms_to_equal passes apply_ms", the changed NOUN (keys / paths)
# to LIST) to $WORK/res.tte.slate, else die with the daemon log's tail
tte_polled() {
    local run=$1 noun=$2 list=$3 out tte_ms passes apply_ms
    shift 3
    out=$("$@") \
        || { tail -n 20 "$DAEMON_LOG" >&2; die "slate did not make DST_slate equal on the $CHANGES changed $noun (run $run); daemon log tail above"; }
    read -r tte_ms passes apply_ms <<<"$out"
    echo "$tte_ms $passes $apply_ms" >>"$WORK/res.tte.slate"
    log "  slate: DST_slate equal on all $CHANGES $noun ${tte_ms} ms after the last change ($passes poll passes; the changes took ${apply_ms} ms)"
    [[ "$(wc -l <"$list")" == "$CHANGES" ]] || die "run $run: $(wc -l <"$list") changed $noun listed, want $CHANGES"
}

# tte_verify RUN NOUN LIST CMD...: after a run, DST_rclone and DST_slate match SRC on the
# changed NOUN of LIST (CMD: the helper's `verify SRC`, given DST LIST), else die
tte_verify() {
    local run=$1 noun=$2 list=$3
    shift 3
    "$@" "$DST_RCLONE" "$list" >/dev/null || die "rclone sync (run $run) left DST_rclone different on the changed $noun"
    "$@" "$DST_SLATE" "$list" >/dev/null || die "slate (run $run): DST_slate no longer equal on the changed $noun"
}

# check_rclone_run RUN NOUN: the time-to-equal run's `rclone sync` ($WORK/tte.rclone.out)
# transferred 80 and deleted 20 (NOUN: files / objects, for the message), else die
check_rclone_run() {
    local o="$WORK/tte.rclone.out"
    grep -Eq "^Transferred: +80 / 80, 100%" "$o" || die "rclone sync (run $1): want 80 $2 transferred, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
    grep -Eq "^Deleted: +20 \(files\)" "$o" || die "rclone sync (run $1): want 20 $2 deleted, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
}

# finish_daemon: the daemon's final figures (FINAL_HWM, FINAL_RSS, DAEMON_CPU_TOTAL), then
# SIGTERM (it must exit 0); WARNS: its log's warn / error lines
# lat_missed MISSING MESSAGE: if a latency phase lost objects, LAT_FAIL=MESSAGE (the report is
# still written, then the run fails) and status 0: the caller stops its phases
lat_missed() {
    ((${1} > 0)) || return 1
    tail -n 20 "$DAEMON_LOG" >&2
    LAT_FAIL=$2
    log "FAILED: $LAT_FAIL; stopping here (report follows)"
}

# end_of_phases CHECK...: unless a latency phase failed, CHECK that DST_slate equals SRC
# entirely; then finish_daemon
end_of_phases() {
    if [[ -z "$LAT_FAIL" ]]; then
        log "checking that DST_slate equals SRC entirely (latency objects included)"
        "$@"
    fi
    finish_daemon
}

finish_daemon() {
    FINAL_HWM=$(daemon_kib VmHWM)
    FINAL_RSS=$(daemon_kib VmRSS)
    DAEMON_CPU_TOTAL=$(daemon_cpu)
    log "stopping the daemon (SIGTERM)"
    stop_daemon
    [[ "$DAEMON_RC" == 0 ]] || die "the slate daemon exited with status $DAEMON_RC on SIGTERM (want 0); log: $(tail -n 5 "$DAEMON_LOG")"
    WARNS=$(grep -ciE 'warn|error' "$DAEMON_LOG" || true)
}

# ---------------------------------------------------------------------------------------
# S3 mode (BENCH_DAEMON_MODE=s3): moto S3 → moto S3, SRC's notifications through SQS
# ---------------------------------------------------------------------------------------
S3_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
# The machine sets AWS_CA_BUNDLE (breaks some clients even over http); nothing of the user's AWS
# setup may leak in: only moto on 127.0.0.1, credentials testing/testing, path-style.
S3ENV=(env -u AWS_CA_BUNDLE -u AWS_PROFILE -u AWS_DEFAULT_PROFILE -u AWS_SESSION_TOKEN
       -u AWS_ENDPOINT_URL_S3 -u AWS_ENDPOINT_URL_SQS -u AWS_VIRTUAL_HOSTED_STYLE_REQUEST
       -u AWS_DEFAULT_REGION
       AWS_ENDPOINT_URL="$S3_ENDPOINT" AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
       AWS_REGION=us-east-1 NO_PROXY=127.0.0.1 no_proxy=127.0.0.1
       BENCH_S3_ENDPOINT="$S3_ENDPOINT" BENCH_S3_THREADS="$S3_THREADS")
RCLONE_S3=(env -u AWS_CA_BUNDLE RCLONE_CONFIG_S3REMOTE_TYPE=s3 RCLONE_CONFIG_S3REMOTE_PROVIDER=Other
           RCLONE_CONFIG_S3REMOTE_ENDPOINT="$S3_ENDPOINT" RCLONE_CONFIG_S3REMOTE_ACCESS_KEY_ID=testing
           RCLONE_CONFIG_S3REMOTE_SECRET_ACCESS_KEY=testing RCLONE_CONFIG_S3REMOTE_REGION=us-east-1
           RCLONE_CONFIG_S3REMOTE_FORCE_PATH_STYLE=true NO_PROXY=127.0.0.1 no_proxy=127.0.0.1
           rclone --config /dev/null)
moto_answers() { curl -sf --noproxy '*' --max-time 2 -o /dev/null "$S3_ENDPOINT/moto-api/"; }

# s3py CMD ARGS...: the boto3 helper
s3py() { "${S3ENV[@]}" "$VENV_PYTHON" "$HELPER" s3 "$@"; }

# s3_same A B WHO: bucket B's data/ equals A's (every key with its size and ETag), else die
s3_same() { helper_same "$3" "s3://$1/data" "s3://$2/data" s3py same "$1" "$2"; }

s3_mode() {
    command -v curl >/dev/null || die "curl not found"
    if moto_answers; then
        log "moto already answers on $S3_ENDPOINT: using it (and leaving it running)"
    else
        # `start` brings up every emulator it lacks (it takes no service names); stop again
        # right away the ones other than moto that this run started.
        log "moto not answering on $S3_ENDPOINT: scripts/services.sh start"
        local started="$WORK/services.started" others=() svc
        : >"$started"
        SLATE_STARTED_FILE="$started" SLATE_MOTO_PORT="$MOTO_PORT" "$REPO_ROOT/scripts/services.sh" start >&2 \
            || die "scripts/services.sh start failed"
        while read -r svc; do
            if [[ "$svc" == moto ]]; then MOTO_STARTED=1; elif [[ -n "$svc" ]]; then others+=("$svc"); fi
        done <"$started"
        if ((${#others[@]} > 0)); then
            log "stopping the other emulators this run started: ${others[*]}"
            "$REPO_ROOT/scripts/services.sh" stop "${others[@]}" >&2 || log "WARNING: stopping ${others[*]} failed"
        fi
        moto_answers || die "moto does not answer on $S3_ENDPOINT after scripts/services.sh start"
    fi
    [[ -x "$VENV_PYTHON" ]] || die "$VENV_PYTHON not found (scripts/services.sh install makes it)"
    "${S3ENV[@]}" "$VENV_PYTHON" -c 'import boto3' 2>/dev/null || die "$VENV_PYTHON has no boto3 (scripts/services.sh install)"

    local tag
    tag="$(date +%s)-$$-$((RANDOM % 1000))"
    B_SRC="slate-bench-src-$tag"
    B_DST="slate-bench-dst-$tag"
    B_RCL="slate-bench-rcl-$tag"
    Q_SLATE="slate-bench-q-$tag"
    Q_WITNESS="slate-bench-witness-$tag"
    # ---- seed, rclone's initial copy, the daemon's backfill --------------------------
    log "creating buckets $B_SRC (SRC), $B_DST (DST_slate), $B_RCL (DST_rclone), queues $Q_SLATE, $Q_WITNESS on $S3_ENDPOINT"
    log "seeding $N × 1 KiB random objects (folders of $PER_FOLDER) → s3://$B_SRC/data ($S3_THREADS threads), then SRC's notifications → $Q_SLATE"
    S3_CREATED=1
    local out got
    out=$(s3py setup "$B_SRC" "$B_DST" "$B_RCL" "$Q_SLATE" "$Q_WITNESS" "$N" "$PER_FOLDER") || die "S3 setup / seeding failed"
    read -r got SEED_S <<<"$out"
    [[ "$got" == "$N" ]] || die "seeding wrote '$got' objects, want $N"
    SEED_RATE=$(awk -v n="$N" -v s="$SEED_S" 'BEGIN {printf "%.0f", n / s}')
    log "  seeded in $SEED_S s ($SEED_RATE PUT/s)"

    log "rclone sync SRC → DST_rclone (untimed setup)"
    run_timed rclone-initial "${RCLONE_S3[@]}" sync "s3remote:$B_SRC/data" "s3remote:$B_RCL/data" -v --transfers 16 --checkers 16
    s3_same "$B_SRC" "$B_RCL" "rclone's initial sync"

    log "starting the slate daemon: slate sync s3://$B_SRC/data s3://$B_DST/data --events sqs://$Q_SLATE --db DB --drift-check-secs 0 --quiet"
    start_daemon '^sync: ' "no summary line" "" "${S3ENV[@]}" "$SLATE" sync "s3://$B_SRC/data" "s3://$B_DST/data" \
        --events "sqs://$Q_SLATE" --db "$DB" --drift-check-secs 0 --quiet
    s3_same "$B_SRC" "$B_DST" "slate backfill"
    s3py witness-on "$B_DST" "$Q_WITNESS" >/dev/null || die "configuring DST_slate's notifications failed"

    # ---- 1. time-to-equal ------------------------------------------------------------
    : >"$WORK/res.tte.slate"
    local run list tte_ms events apply_ms confirms
    for ((run = 1; run <= RUNS; run++)); do
        log "time-to-equal, run $run/$RUNS: $CHANGES changes to SRC through S3"
        daemon_alive "before run $run"
        list="$WORK/changed-$run.txt"
        out=$(s3py changes "$B_SRC" "$B_DST" "$Q_WITNESS" "$run" "$CHANGES" "$EQUAL_TIMEOUT" "$list") \
            || { tail -n 20 "$DAEMON_LOG" >&2; die "slate did not make DST_slate equal on the $CHANGES changed keys (run $run); daemon log tail above"; }
        read -r tte_ms events apply_ms confirms <<<"$out"
        echo "$tte_ms $events $apply_ms $confirms" >>"$WORK/res.tte.slate"
        log "  slate: DST_slate equal on all $CHANGES keys ${tte_ms} ms after the last change ($events DST_slate events; the changes took ${apply_ms} ms; HEAD confirmation passes: $confirms)"
        [[ "$(wc -l <"$list")" == "$CHANGES" ]] || die "run $run: $(wc -l <"$list") changed keys listed, want $CHANGES"

        run_timed tte.rclone "${RCLONE_S3[@]}" sync "s3remote:$B_SRC/data" "s3remote:$B_RCL/data" -v
        check_rclone_run "$run" objects
        grep -E '^Checks: ' "$WORK/tte.rclone.out" | tail -n 1 | awk '{print $2}' >>"$WORK/res.tte.rclone.checks"
        s3py verify "$B_SRC" "$B_RCL" "$list" >/dev/null || die "rclone sync (run $run) left DST_rclone different on the changed keys"
        s3py verify "$B_SRC" "$B_DST" "$list" >/dev/null || die "slate (run $run): DST_slate no longer equal on the changed keys"
    done
    log "checking that both destinations equal SRC entirely"
    s3_same "$B_SRC" "$B_DST" "slate (after the time-to-equal runs)"
    s3_same "$B_SRC" "$B_RCL" "rclone (after the time-to-equal runs)"
    TTE_HWM=$(daemon_kib VmHWM)

    # ---- 2. event → replica latency --------------------------------------------------
    local r c0 c1 files missing p50 p99 pmax mean achieved behind during lag50 lagmax blw ble hwm rss
    LAT_FAIL=""   # set when objects never arrived: the report is still written, then the run fails
    for r in "${RATE_LIST[@]}"; do
        log "latency: $r new objects/s for $SECONDS_PER_RATE s → s3://$B_SRC/data/lat-$r/ ($((2 * S3_THREADS)) writer threads; witness: DST_slate's notifications; grace $GRACE s)"
        daemon_alive "before the $r/s phase"
        c0=$(daemon_cpu)
        out=$(s3py latency "$B_SRC" "$Q_SLATE" "$Q_WITNESS" "$r" "$SECONDS_PER_RATE" "$LAT_FOLDERS" "$GRACE" "$((2 * S3_THREADS))") \
            || die "the latency writer / witness failed at $r/s"
        daemon_alive "after the $r/s phase"
        c1=$(daemon_cpu)
        read -r files missing p50 p99 pmax mean achieved behind during lag50 lagmax blw ble <<<"$out"
        hwm=$(daemon_kib VmHWM); rss=$(daemon_kib VmRSS)
        echo "$r $files $missing $p50 $p99 $pmax $mean $achieved $behind $hwm $rss $(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}') $during $lag50 $lagmax $blw $ble" >>"$WORK/res.lat"
        log "  $r/s: $files objects (writer achieved $achieved/s, at most $behind ms behind schedule): p50 $p50 ms, p99 $p99 ms, max $pmax ms; $during arrived while the writer was running, $missing not arrived; daemon's queue backlog $blw messages when the writer stopped, $ble at the end; witness lag p50 $lag50 ms; daemon VmHWM $((hwm / 1024)) MiB, VmRSS $((rss / 1024)) MiB"
        lat_missed "$missing" "$missing of $files objects written at $r/s had not arrived in DST_slate $GRACE s after the writer stopped (writer achieved $achieved/s; p50 $p50 ms, p99 $p99 ms of the arrived ones; the daemon's queue still held $ble messages)" && break
    done
    end_of_phases s3_same "$B_SRC" "$B_DST" "slate (at the end)"

    # ---- report ------------------------------------------------------------------------
    report_common "20000/3/200 500/20"
    local label="S3 (moto) + SQS" checks met
    checks=$(median 1 "$WORK/res.tte.rclone.checks")
    {
        echo "## slate daemon benchmark, S3 mode$non_default"
        echo
        report_env_lines
        echo "- S3 (moto $("$VENV_PYTHON" -c 'import moto; print(moto.__version__)' 2>/dev/null || echo '?') on $S3_ENDPOINT) → the same moto, buckets created for this run; SRC seeded with $N × 1 KiB random objects (\`data/dNNN/f-NNNNNN\`, $PER_FOLDER a folder) before its notifications were configured; the daemon follows SRC's real S3 event notifications (ObjectCreated:*, ObjectRemoved:*) through an SQS queue."
        echo
        echo "| scenario | slate | rclone | ratio (rclone/slate) | target | met |"
        echo "|---|---|---|---|---|---|"
        printf '| %s — time-to-equal: %d changes (50 overwrites, 30 new, 20 deletes) among %d objects, median of %d | %.0f ms (runs: %s ms) | %.2f s (runs: %s s), peak RSS %.0f MiB | %s× | ≥ 200× | %s |\n' \
            "$label" "$CHANGES" "$N" "$RUNS" "$s_tte" "$s_all" "$r_tte" "$r_all" "$(awk -v k="$r_rss" 'BEGIN {print k / 1024}')" "$tte_ratio" "$tte_met"
        while read -r r files missing p50 p99 pmax mean achieved behind hwm rss cpu during lag50 lagmax blw ble; do
            if awk -v p="$p99" 'BEGIN {exit !(p < 1000)}' && ((missing == 0)); then
                if awk -v a="$achieved" -v r="$r" 'BEGIN {exit !(a >= 0.95 * r)}'; then met=yes
                else met=$(printf 'yes at %.0f/s only (moto did not take %d PUT/s)' "$achieved" "$r"); fi
            else
                met="**no**"; MISSED=1
            fi
            printf '| %s — event → replica latency: %d new 1 KiB objects/s for %d s (%d objects; writer achieved %.0f/s) | p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d of %d arrived, %d not arrived after %d s; daemon peak RSS %.0f MiB, CPU %.1f s | — | — | p99 < 1 s, 0 lost | %s |\n' \
                "$label" "$r" "$SECONDS_PER_RATE" "$files" "$achieved" "$p50" "$p99" "$pmax" "$((files - missing))" "$files" "$missing" "$GRACE" "$((hwm / 1024))" "$cpu" "$met"
        done <"$WORK/res.lat"
        echo
        echo "Commands: \`slate sync s3://SRC/data s3://DST_slate/data --events sqs://QUEUE --db DB --drift-check-secs 0 --quiet\` (the daemon, one process for the whole benchmark; \`AWS_ENDPOINT_URL=$S3_ENDPOINT\`, credentials testing/testing, us-east-1) vs \`rclone sync s3remote:SRC/data s3remote:DST_rclone/data --config /dev/null -v\` (an env-configured S3 remote, provider Other, path-style; default transfers / checkers; timed with GNU time after each set of changes)."
        echo
        echo "- slate's time-to-equal: from the completion of the last of the $CHANGES changes (boto3, $S3_THREADS at a time: median $(median 3 "$WORK/res.tte.slate" | awk '{printf "%.0f", $1}') ms for all of them) until every changed key in DST_slate matched. Arrivals are seen through DST_slate's own S3 notifications (a second SQS queue, long-polled by 3 threads of a separate process): a key counts when an ObjectCreated event with its new size (every overwrite changes the size) or an ObjectRemoved event came in; then all $CHANGES keys are confirmed by HEAD (size, or 404), untimed. rclone's: the wall time of one \`rclone sync\` (lists both sides, $N+ objects; its \`Checks:\` count was $checks: on S3 it HEADs both sides of every same-size object for its modification time). rclone's 80 / 20 transfer / delete counts are checked; after each run the changed keys match SRC (size and ETag) in both destinations, and after the runs both equal SRC entirely (listing: key, size, ETag)."
        echo "- Latency: $((2 * S3_THREADS)) boto3 writer threads PUT the objects on a fixed schedule (object i due at t0 + i/R; \`data/lat-R/dNNN/f-NNNNNN\`, $LAT_FOLDERS folders round robin) and record each PUT's completion (CLOCK_MONOTONIC); the witness process records when DST_slate's ObjectCreated event for the object (size 1 KiB) is received. Latency = arrival − PUT completion; the witness adds the SQS hop (receive time − the event's eventTime, below). Polling DST_slate instead was measured too expensive on moto: one prefix listing costs ~50–110 ms of its time in a bucket of 25,000 objects, one HEAD ~4 ms (~260 HEAD/s in all), while moto must also take the writes and the daemon's requests."
        while read -r r files missing p50 p99 pmax mean achieved behind hwm rss cpu during lag50 lagmax blw ble; do
            printf -- '  - %d/s: writer achieved %.0f PUT/s (at most %.0f ms behind schedule); mean latency %.0f ms; %d of %d objects arrived while the writer was still running; the daemon'"'"'s queue held %d messages when the writer stopped; witness lag p50 %.0f ms, max %.0f ms; daemon VmRSS %.0f MiB at the end of the phase.\n' \
                "$r" "$achieved" "$behind" "$mean" "$during" "$files" "$blw" "$lag50" "$lagmax" "$((rss / 1024))"
        done <"$WORK/res.lat"
        echo "- Untimed setup: seeding $SEED_S s ($SEED_RATE PUT/s, $S3_THREADS threads); rclone's initial sync (\`--transfers 16 --checkers 16\`) $(median 1 "$WORK/res.rclone-initial") s (peak RSS $(($(median 2 "$WORK/res.rclone-initial") / 1024)) MiB); slate's backfill (start → \`following changes of\`) $BACKFILL_S s: \`${BACKFILL_LINE:-no summary line}\`."
        echo "- slate daemon peak RSS (VmHWM): $((BACKFILL_HWM / 1024)) MiB after the backfill, $((TTE_HWM / 1024)) MiB after the time-to-equal runs, $((FINAL_HWM / 1024)) MiB at the end (VmRSS then $((FINAL_RSS / 1024)) MiB); CPU (user+sys) over the whole benchmark $DAEMON_CPU_TOTAL s; exit status on SIGTERM $DAEMON_RC; $WARNS log lines with warn/error."
        echo "- moto is one Python process (~1 core) serving the writer, the daemon, rclone and the witness; client, daemon and server share the machine's cores, so the figures are moto's as much as slate's. moto's ReceiveMessage costs O(messages returned × queue depth) (per message it recounts the whole queue for its retention check), so once the daemon's queue backs up, every receive gets slower and the backlog feeds itself."
    } >"$WORK/report.md"
    report_end
}

if [[ "$MODE" == s3 ]]; then
    s3_mode
    exit 0
fi

# ---------------------------------------------------------------------------------------
# Cloud modes (BENCH_DAEMON_MODE=pubsub / azqueue): GCS or Azure Blob → a local folder
# ---------------------------------------------------------------------------------------
# svc_env NAME: the value scripts/services.sh's `env` gives NAME (it honours the SLATE_*_PORT knobs)
svc_env() { "$REPO_ROOT/scripts/services.sh" env 2>/dev/null | sed -n "s/^export $1=//p"; }

# emulators_down NAME...: the named services of scripts/services.sh that do not answer
emulators_down() {
    local st name
    st=$("$REPO_ROOT/scripts/services.sh" status 2>/dev/null || true)
    for name in "$@"; do
        awk -v n="$name" '$1 == n && $2 == "up" {ok = 1} END {exit !ok}' <<<"$st" || printf '%s\n' "$name"
    done
}

# cloud_emulators NAME...: use the named emulators if they answer; else `scripts/services.sh
# start` (it starts every emulator it lacks), stop again the others this run started, and
# remember the named ones it started (stopped at the end)
cloud_emulators() {
    local down started="$WORK/services.started" others=() svc
    down=$(emulators_down "$@")
    if [[ -z "$down" ]]; then
        log "emulators $* answer: using them (and leaving them running)"
        return 0
    fi
    log "not answering: $(tr '\n' ' ' <<<"$down")— scripts/services.sh start"
    : >"$started"
    SLATE_STARTED_FILE="$started" "$REPO_ROOT/scripts/services.sh" start >&2 || die "scripts/services.sh start failed"
    while read -r svc; do
        [[ -n "$svc" ]] || continue
        if [[ " $* " == *" $svc "* ]]; then EMU_STARTED+=("$svc"); else others+=("$svc"); fi
    done <"$started"
    if ((${#others[@]} > 0)); then
        log "stopping the other emulators this run started: ${others[*]}"
        "$REPO_ROOT/scripts/services.sh" stop "${others[@]}" >&2 || log "WARNING: stopping ${others[*]} failed"
    fi
    down=$(emulators_down "$@")
    [[ -z "$down" ]] || die "still not answering after scripts/services.sh start: $(tr '\n' ' ' <<<"$down")"
}

# port_pid PORT: the process listening on 127.0.0.1:PORT (empty if unknown)
port_pid() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1; }
# pid_cpu PID: its user+sys CPU seconds so far (0 if unknown)
pid_cpu() {
    if [[ -n "$1" && -r "/proc/$1/stat" ]]; then
        awk -v t="$CLK_TCK" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t}' "/proc/$1/stat"
    else
        echo 0
    fi
}
# emu_cpu: "cpu cpu …" of EMU_PIDS, in EMU_NAMES' order
emu_cpu() {
    local p out=""
    for p in "${EMU_PIDS[@]}"; do out+="$(pid_cpu "$p") "; done
    echo "${out% }"
}

# cloudpy CMD ARGS...: the helper, with the mode's endpoints
# (CLOUDPY_CMD: the helper's command line, set by cloud_mode)
cloudpy() { "${CLOUDPY_CMD[@]}" "$@"; }

# cloud_same WHO DIR: the local folder DIR equals SRC's data/ (every key, size and MD5), else die
cloud_same() { helper_same "$1" "$SRC_URL" "$2" cloudpy same "$C_SRC" "$2"; }

cloud_mode() {
    command -v curl >/dev/null || die "curl not found"
    command -v ss >/dev/null || die "ss not found (iproute2): needed to find the emulators' processes"
    [[ -x "$VENV_PYTHON" ]] || die "$VENV_PYTHON not found (scripts/services.sh install makes it)"
    GCS_ENDPOINT="${SLATE_TEST_GCS_ENDPOINT:-$(svc_env SLATE_TEST_GCS_ENDPOINT)}"
    GCS_WRITE_ENDPOINT="${SLATE_TEST_GCS_WRITE_ENDPOINT:-$(svc_env SLATE_TEST_GCS_WRITE_ENDPOINT)}"
    PUBSUB_HOST="${PUBSUB_EMULATOR_HOST:-$(svc_env PUBSUB_EMULATOR_HOST)}"
    AZ_BLOB="${SLATE_TEST_AZURITE_BLOB:-$(svc_env SLATE_TEST_AZURITE_BLOB)}"      # …/devstoreaccount1
    AZ_QUEUE="${SLATE_TEST_AZURITE_QUEUE:-$(svc_env SLATE_TEST_AZURITE_QUEUE)}"
    # The daemon's environment, as tests/common/mod.rs's slate() makes it: nothing of the
    # user's cloud setup leaks in (AWS_*, AZURE_*, GOOGLE_*, the emulator variables), no user
    # config file; then the mode's emulator variables with the tests' values.
    CLOUD_ENV=(env)
    local v
    for v in $(compgen -e); do
        case "$v" in
            AWS_* | AZURE_* | GOOGLE_* | AZURITE_* | STORAGE_EMULATOR_HOST | PUBSUB_EMULATOR_HOST) CLOUD_ENV+=(-u "$v") ;;
        esac
    done
    CLOUD_ENV+=(XDG_CONFIG_HOME="$WORK/no-config" NO_PROXY=127.0.0.1 no_proxy=127.0.0.1)
    CLOUDPY_CMD=("${CLOUD_ENV[@]}" BENCH_CLOUD_THREADS="$CLOUD_THREADS"
                 BENCH_GCS_ENDPOINT="$GCS_ENDPOINT" BENCH_PUBSUB_HOST="$PUBSUB_HOST"
                 BENCH_AZ_BLOB="$AZ_BLOB" BENCH_AZ_QUEUE="$AZ_QUEUE" "$VENV_PYTHON" "$HELPER" "$MODE")
    local tag label emu_label events_url rclone_remote
    tag="$(date +%s)-$$-$((RANDOM % 1000))"
    C_SRC="slate-bench-src-$tag"
    if [[ "$MODE" == pubsub ]]; then
        [[ -n "$GCS_ENDPOINT" && -n "$GCS_WRITE_ENDPOINT" && -n "$PUBSUB_HOST" ]] || die "no GCS / Pub/Sub emulator endpoints (scripts/services.sh env)"
        cloud_emulators pubsub fake-gcs gcs-shim
        curl -sf --noproxy '*' --max-time 5 -o /dev/null "http://$PUBSUB_HOST/v1/projects/test-project/topics/gcs-events" \
            || die "the Pub/Sub emulator on $PUBSUB_HOST has no topic projects/test-project/topics/gcs-events (scripts/services.sh start makes it, before fake-gcs-server)"
        CLOUD_ENV+=(PUBSUB_EMULATOR_HOST="$PUBSUB_HOST" STORAGE_EMULATOR_HOST="$GCS_WRITE_ENDPOINT")
        C_SUB="slate-bench-sub-$tag"
        SRC_URL="gs://$C_SRC/data"
        events_url="pubsub://projects/test-project/subscriptions/$C_SUB"
        label="GCS (fake-gcs-server) + Pub/Sub"
        emu_label="fake-gcs-server"
        EMU_NAMES=("fake-gcs-server" "Pub/Sub emulator" "GCS write shim")
        EMU_PIDS=("$(port_pid "${GCS_ENDPOINT##*:}")" "$(port_pid "${PUBSUB_HOST##*:}")" "$(port_pid "${GCS_WRITE_ENDPOINT##*:}")")
        RCLONE_CLOUD=(env -u AWS_CA_BUNDLE RCLONE_CONFIG_G_TYPE="google cloud storage" RCLONE_CONFIG_G_ANONYMOUS=true
                      RCLONE_CONFIG_G_ENDPOINT="$GCS_ENDPOINT/storage/v1/" NO_PROXY=127.0.0.1 no_proxy=127.0.0.1
                      rclone --config /dev/null)
        rclone_remote="g:$C_SRC/data"
    else
        [[ -n "$AZ_BLOB" && -n "$AZ_QUEUE" ]] || die "no Azurite endpoints (scripts/services.sh env)"
        cloud_emulators azurite-blob azurite-queue
        "$VENV_PYTHON" -c 'import azure.storage.blob' 2>/dev/null || die "$VENV_PYTHON has no azure-storage-blob (scripts/services.sh install)"
        CLOUD_ENV+=(AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL="${AZ_BLOB%/devstoreaccount1}"
                    AZURITE_QUEUE_STORAGE_URL="${AZ_QUEUE%/devstoreaccount1}")
        C_QUEUE="slate-bench-q-$tag"
        SRC_URL="az://$C_SRC/data"
        events_url="azqueue://devstoreaccount1/$C_QUEUE"
        label="Azure Blob (Azurite) + Storage Queue"
        emu_label="Azurite"
        EMU_NAMES=("Azurite blob" "Azurite queue")
        local hp="${AZ_BLOB#*://}" hq="${AZ_QUEUE#*://}"
        hp="${hp%%/*}"; hq="${hq%%/*}"
        EMU_PIDS=("$(port_pid "${hp##*:}")" "$(port_pid "${hq##*:}")")
        rclone_remote="a:$C_SRC/data"
    fi
    mkdir -p "$DST_SLATE" "$DST_RCLONE"
    log "scratch dir $WORK (need ~${need_mb} MiB, have ${free_mb} MiB)"

    # ---- seed, rclone's initial copy, the daemon's backfill --------------------------
    log "seeding $N × 1 KiB random objects (folders of $PER_FOLDER) → $SRC_URL ($CLOUD_THREADS threads)$([[ "$MODE" == azqueue ]] && echo "; queue $C_QUEUE (no events for the seed)")"
    CLOUD_CREATED=1
    local out got
    out=$(cloudpy setup "$C_SRC" "$C_QUEUE" "$N" "$PER_FOLDER") || die "setup / seeding failed"
    read -r got SEED_S <<<"$out"
    [[ "$got" == "$N" ]] || die "seeding wrote '$got' objects, want $N"
    SEED_RATE=$(awk -v n="$N" -v s="$SEED_S" 'BEGIN {printf "%.0f", n / (s > 0 ? s : 0.1)}')
    log "  seeded in $SEED_S s ($SEED_RATE writes/s)"
    if [[ "$MODE" == pubsub ]]; then
        # after the seed (its notifications must not reach the daemon; fake-gcs-server
        # publishes them as it stores each object: give the last ones a moment)
        sleep 2
        log "subscription $C_SUB on projects/test-project/topics/gcs-events (ackDeadlineSeconds 10)"
        cloudpy sub-create "$C_SUB" >/dev/null || die "creating the Pub/Sub subscription failed"
    else
        local sas
        sas=$(cloudpy sas "$C_SRC") || die "generating the container SAS for rclone failed"
        RCLONE_CLOUD=(env -u AWS_CA_BUNDLE RCLONE_CONFIG_A_TYPE=azureblob RCLONE_CONFIG_A_SAS_URL="$sas"
                      NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 rclone --config /dev/null)
    fi

    log "rclone sync SRC → DST_rclone (untimed setup)"
    run_timed rclone-initial "${RCLONE_CLOUD[@]}" sync "$rclone_remote" "$DST_RCLONE" -v --transfers 16 --checkers 16
    cloud_same "rclone's initial sync" "$DST_RCLONE"

    log "starting the slate daemon: slate sync $SRC_URL DST_slate --events $events_url --db DB --drift-check-secs 0 --quiet"
    start_daemon '^sync: |backfill: sync: ' "no summary line: --quiet hides the info log" "$DST_SLATE" \
        "${CLOUD_ENV[@]}" "$SLATE" sync "$SRC_URL" "$DST_SLATE" --events "$events_url" --db "$DB" --drift-check-secs 0 --quiet
    cloud_same "slate backfill" "$DST_SLATE"

    # ---- 1. time-to-equal ------------------------------------------------------------
    : >"$WORK/res.tte.slate"
    local run list
    for ((run = 1; run <= RUNS; run++)); do
        log "time-to-equal, run $run/$RUNS: $CHANGES changes to SRC$([[ "$MODE" == azqueue ]] && echo ", each followed by its event on the queue")"
        daemon_alive "before run $run"
        list="$WORK/changed-$run.txt"
        tte_polled "$run" keys "$list" cloudpy changes "$C_SRC" "$C_QUEUE" "$DST_SLATE" "$run" "$CHANGES" "$EQUAL_TIMEOUT" "$list"
        run_timed tte.rclone "${RCLONE_CLOUD[@]}" sync "$rclone_remote" "$DST_RCLONE" -v
        check_rclone_run "$run" objects
        tte_verify "$run" keys "$list" cloudpy verify "$C_SRC"
    done
    log "checking that both destinations equal SRC entirely"
    cloud_same "slate (after the time-to-equal runs)" "$DST_SLATE"
    cloud_same "rclone (after the time-to-equal runs)" "$DST_RCLONE"
    TTE_HWM=$(daemon_kib VmHWM)

    # ---- 2. event → replica latency --------------------------------------------------
    local r c0 c1 e0 e1 t0 wall files missing p50 p99 pmax mean achieved behind during blw ble ibw hwm rss
    local writers=$((2 * CLOUD_THREADS))
    LAT_FAIL=""   # set when objects never arrived: the report is still written, then the run fails
    : >"$WORK/res.lat"
    : >"$WORK/res.emu"
    for r in "${RATE_LIST[@]}"; do
        log "latency: $r new objects/s for $SECONDS_PER_RATE s → $SRC_URL/lat-$r/ ($writers writer threads$([[ "$MODE" == azqueue ]] && echo ", blob then event"); poller on DST_slate, grace $GRACE s)"
        daemon_alive "before the $r/s phase"
        c0=$(daemon_cpu); e0=$(emu_cpu); t0=$(now_s)
        out=$(cloudpy latency "$C_SRC" "$C_QUEUE" "$DST_SLATE" "$DB" "$r" "$SECONDS_PER_RATE" "$LAT_FOLDERS" "$GRACE" "$writers") \
            || die "the latency writer / poller failed at $r/s"
        daemon_alive "after the $r/s phase"
        c1=$(daemon_cpu); e1=$(emu_cpu)
        wall=$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN {printf "%.1f", b - a}')
        read -r files missing p50 p99 pmax mean achieved behind during blw ble ibw <<<"$out"
        hwm=$(daemon_kib VmHWM); rss=$(daemon_kib VmRSS)
        echo "$r $files $missing $p50 $p99 $pmax $mean $achieved $behind $hwm $rss $(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}') $during $blw $ble $ibw" >>"$WORK/res.lat"
        echo "$r $wall $(paste -d' ' <(tr ' ' '\n' <<<"$e0") <(tr ' ' '\n' <<<"$e1") | awk '{printf "%.1f ", $2 - $1}')" >>"$WORK/res.emu"
        log "  $r/s: $files objects (writer achieved $achieved/s, at most $behind ms behind schedule): p50 $p50 ms, p99 $p99 ms, max $pmax ms; $during arrived while the writer was running, $missing not arrived; daemon VmHWM $((hwm / 1024)) MiB, VmRSS $((rss / 1024)) MiB; emulator CPU over the $wall s phase: $(tail -n 1 "$WORK/res.emu" | cut -d' ' -f3-)s ($(IFS=,; echo "${EMU_NAMES[*]}")); when the writer stopped the daemon's inbox held $ibw keys$([[ "$MODE" == azqueue ]] && echo ", its queue $blw messages")"
        lat_missed "$missing" "$missing of $files objects written at $r/s had not arrived in DST_slate $GRACE s after the writer stopped (writer achieved $achieved/s; p50 $p50 ms, p99 $p99 ms of the arrived ones)" && break
    done
    end_of_phases cloud_same "slate (at the end)" "$DST_SLATE"
    STOP_LINE=$(grep -E 'stopped; ' "$DAEMON_LOG" | tail -n 1 | sed "s/$tag/TAG/g; s|$DST_SLATE|DST_slate|g" || true)
    # the first warn / error lines, for the report (ANSI colours off, names shortened)
    WARN_LINES=$(grep -iE 'warn|error' "$DAEMON_LOG" | sed 's/\x1b\[[0-9;]*m//g; s/^[0-9T:.Z-]* *//' | cut -c1-420 | head -n 3 \
        | sed "s/$tag/TAG/g; s|$DST_SLATE|DST_slate|g" || true)

    # ---- report ------------------------------------------------------------------------
    report_common "2000/3/20 100 500/20"
    local met emu_desc
    if [[ "$MODE" == pubsub ]]; then
        emu_desc="GCS on fake-gcs-server ($GCS_ENDPOINT; the daemon reads through the XML write shim $GCS_WRITE_ENDPOINT, as the tests' \`STORAGE_EMULATOR_HOST\`), bucket created for this run, SRC seeded with $N × 1 KiB random objects (\`data/dNNN/f-NNNNNN\`, $PER_FOLDER a folder) through fake-gcs-server's JSON upload API; then a fresh pull subscription on the Pub/Sub emulator's ($PUBSUB_HOST) topic \`gcs-events\`, to which fake-gcs-server publishes a real notification per write (OBJECT_FINALIZE) and delete (OBJECT_DELETE). DST_slate and DST_rclone are local folders (arrivals are polled there)."
    else
        emu_desc="Azure Blob on Azurite ($AZ_BLOB), container created for this run, SRC seeded with $N × 1 KiB random objects (\`data/dNNN/f-NNNNNN\`, $PER_FOLDER a folder; Put Blob, Shared Key with Azurite's well-known key), and an Azurite storage queue ($AZ_QUEUE) the daemon follows. **Azurite emits no blob events (there is no Event Grid emulator): after each write or delete the benchmark itself puts the event Event Grid would deliver on the queue** (Event Grid schema, \`Microsoft.Storage.BlobCreated\` / \`BlobDeleted\`, base64 JSON, one event per message, built like tests/daemon_e2e.rs's \`blob_event\`), so latency runs from the benchmark's event post to the replica. DST_slate and DST_rclone are local folders (arrivals are polled there)."
    fi
    {
        echo "## slate daemon benchmark, $MODE mode$non_default"
        echo
        report_env_lines
        echo "- $emu_desc"
        echo
        echo "| scenario | slate | rclone | ratio (rclone/slate) | target | met |"
        echo "|---|---|---|---|---|---|"
        printf '| %s — time-to-equal: %d changes (50 overwrites, 30 new, 20 deletes) among %d objects, median of %d | %.0f ms (runs: %s ms) | %.2f s (runs: %s s), peak RSS %.0f MiB | %s× | ≥ 200× | %s |\n' \
            "$label" "$CHANGES" "$N" "$RUNS" "$s_tte" "$s_all" "$r_tte" "$r_all" "$(awk -v k="$r_rss" 'BEGIN {print k / 1024}')" "$tte_ratio" "$tte_met"
        while read -r r files missing p50 p99 pmax mean achieved behind hwm rss cpu during blw ble ibw; do
            if awk -v p="$p99" 'BEGIN {exit !(p < 1000)}' && ((missing == 0)); then
                if awk -v a="$achieved" -v r="$r" 'BEGIN {exit !(a >= 0.95 * r)}'; then met=yes
                else met=$(printf 'yes at %.0f/s only (%s did not take %d writes/s)' "$achieved" "$emu_label" "$r"); fi
            else
                MISSED=1
                if awk -v a="$achieved" -v r="$r" 'BEGIN {exit !(a >= 0.95 * r)}'; then met="**no**"
                else met=$(printf '**no** (the writer reached %.0f/s only: %s is the bound)' "$achieved" "$emu_label"); fi
            fi
            printf '| %s — event → replica latency: %d new 1 KiB objects/s for %d s (%d objects; writer achieved %.0f/s) | p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d of %d arrived, %d not arrived after %d s; daemon peak RSS %.0f MiB, CPU %.1f s | — | — | p99 < 1 s, 0 lost | %s |\n' \
                "$label" "$r" "$SECONDS_PER_RATE" "$files" "$achieved" "$p50" "$p99" "$pmax" "$((files - missing))" "$files" "$missing" "$GRACE" "$((hwm / 1024))" "$cpu" "$met"
        done <"$WORK/res.lat"
        echo
        local env_show rclone_env_show
        if [[ "$MODE" == pubsub ]]; then
            env_show="\`PUBSUB_EMULATOR_HOST=$PUBSUB_HOST STORAGE_EMULATOR_HOST=$GCS_WRITE_ENDPOINT\`"
            rclone_env_show="\`RCLONE_CONFIG_G_TYPE='google cloud storage' RCLONE_CONFIG_G_ANONYMOUS=true RCLONE_CONFIG_G_ENDPOINT=$GCS_ENDPOINT/storage/v1/\`"
        else
            env_show="\`AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL=${AZ_BLOB%/devstoreaccount1} AZURITE_QUEUE_STORAGE_URL=${AZ_QUEUE%/devstoreaccount1}\`"
            rclone_env_show="\`RCLONE_CONFIG_A_TYPE=azureblob RCLONE_CONFIG_A_SAS_URL=…\`: a read + list container SAS from azure-storage-blob's \`generate_container_sas\` with Azurite's well-known key"
        fi
        echo "Commands: \`slate sync ${SRC_URL//$tag/TAG} DST_slate --events ${events_url//$tag/TAG} --db DB --drift-check-secs 0 --quiet\` (the daemon, one process for the whole benchmark; $env_show as tests/common/mod.rs's \`slate()\` sets them, every other AWS_, AZURE_, GOOGLE_ variable unset) vs \`rclone sync ${rclone_remote//$tag/TAG} DST_rclone --config /dev/null -v\` ($rclone_env_show; default transfers / checkers; timed with GNU time after each set of changes)."
        echo
        echo "- slate's time-to-equal: from the completion of the last of the $CHANGES changes ($CLOUD_THREADS at a time$([[ "$MODE" == azqueue ]] && echo ", each a blob write or delete followed by its event post: the last event post"); median $(median 3 "$WORK/res.tte.slate" | awk '{printf "%.0f", $1}') ms for all of them) until every changed path in DST_slate matched (same bytes, or gone), read every ~2 ms. rclone's: the wall time of one \`rclone sync\` (lists SRC and DST_rclone, $N+ objects; it compares size and modification time from the listings). rclone's 80 / 20 transfer / delete counts are checked; after each run the changed keys match SRC (size and MD5 of the listing, or absent) in both destinations, and after the runs both equal SRC entirely."
        echo "- Latency: $writers writer threads (python, one keep-alive connection each) write the objects on a fixed schedule (object i due at t0 + i/R; \`data/lat-R/dNNN/f-NNNNNN\`, $LAT_FOLDERS folders round robin) and record when each $([[ "$MODE" == pubsub ]] && echo "upload (JSON API) completed" || echo "object's event post completed (its blob was written just before)") (CLOCK_MONOTONIC); a forked poller looks for each due object in DST_slate every ~2 ms (stat, or a folder listing when many are pending) and records when it is there with its full size. Latency = arrival − $([[ "$MODE" == pubsub ]] && echo "upload completion" || echo "event post"); precision a few ms."
        while read -r r files missing p50 p99 pmax mean achieved behind hwm rss cpu during blw ble ibw; do
            read -r _ wall emu_s <<<"$(awk -v r="$r" '$1 == r' "$WORK/res.emu")"
            printf -- '  - %d/s: writer achieved %.0f/s (at most %.0f ms behind schedule); mean latency %.0f ms; %d of %d objects arrived while the writer was still running; when the writer stopped, %d keys waited in the daemon'"'"'s inbox (received, not yet applied)%s; daemon VmRSS %.0f MiB at the end of the phase; CPU over the %s s phase: slate %.1f s, %s.\n' \
                "$r" "$achieved" "$behind" "$mean" "$during" "$files" "$ibw" \
                "$(if [[ "$MODE" == azqueue ]]; then printf ' and %d messages in its queue (Azurite'"'"'s approximate count)' "$blw"; fi)" \
                "$((rss / 1024))" "$wall" "$cpu" \
                "$(paste -d' ' <(printf '%s\n' "${EMU_NAMES[@]}") <(tr ' ' '\n' <<<"$emu_s") | awk '{n = $NF; $NF = ""; printf "%s%s%s s", (NR > 1 ? ", " : ""), $0, n}')"
        done <"$WORK/res.lat"
        echo "- Untimed setup: seeding $SEED_S s ($SEED_RATE writes/s, $CLOUD_THREADS threads); rclone's initial sync (\`--transfers 16 --checkers 16\`) $(median 1 "$WORK/res.rclone-initial") s (peak RSS $(($(median 2 "$WORK/res.rclone-initial") / 1024)) MiB); slate's backfill (start → \`following changes of\`) $BACKFILL_S s$(if [[ -n "$BACKFILL_LINE" ]]; then echo ": \`$BACKFILL_LINE\`"; else echo " (its summary is logged at info level, which \`--quiet\` hides)"; fi)."
        echo "- slate daemon peak RSS (VmHWM): $((BACKFILL_HWM / 1024)) MiB after the backfill, $((TTE_HWM / 1024)) MiB after the time-to-equal runs, $((FINAL_HWM / 1024)) MiB at the end (VmRSS then $((FINAL_RSS / 1024)) MiB); CPU (user+sys) over the whole benchmark $DAEMON_CPU_TOTAL s; exit status on SIGTERM $DAEMON_RC; $WARNS log lines with warn/error; on SIGTERM it printed \`${STOP_LINE:-nothing}\`."
        if [[ "$MODE" == pubsub ]]; then
            echo "- The Pub/Sub emulator: slate pulls with \`returnImmediately\` (an abandoned long poll would hold later messages on the emulator) and, after an empty pull, pauses 100 ms doubling up to 1 s: a change arriving at an idle daemon (each time-to-equal run; the first objects of a phase) waits up to that pause. Per new object fake-gcs-server takes the benchmark's upload, publishes its notification, and serves the daemon's probe (HEAD) and copy (GET, If-Match), both through the shim, which evaluates If-Match itself (one more metadata request upstream). The topic \`gcs-events\` carries every bucket of the fake-gcs-server: other work on it (tests) reaches this subscription too, and slate drops (dead-letters) those events. Emulators, writer, poller, rclone and the daemon share the machine's cores."
        else
            echo "- Azure queues have no long poll: after an empty receive slate pauses 100 ms doubling up to 2 s, so a change arriving at an idle daemon (each time-to-equal run; the first objects of a phase) waits up to that pause. slate receives up to 32 messages a request and deletes each handled message (8 deletes at a time): per new object Azurite's blob service takes a Put Blob from the benchmark and a Get Blob Properties (the daemon's probe of the source) and a Get Blob (the copy, If-Match) from the daemon; its queue service a Put Message and a share of a Get Messages plus a Delete Message. Azurite's blob and queue services are one Node.js process each; emulators, writer, poller, rclone and the daemon share the machine's cores."
        fi
        if [[ -n "$WARN_LINES" ]]; then
            echo "- The daemon's first warn / error lines (of $WARNS):"
            while IFS= read -r line; do printf "  - \`%s\`\n" "$line"; done <<<"$WARN_LINES"
        fi
    } >"$WORK/report.md"
    report_end
}

if ((CLOUD)); then
    cloud_mode
    exit 0
fi

# ---------------------------------------------------------------------------------------
# Seed, rclone's initial copy, the daemon's backfill
# ---------------------------------------------------------------------------------------
log "scratch dir $WORK (need ~${need_mb} MiB, have ${free_mb} MiB)"
log "seeding $N × 1 KiB random files (folders of $PER_FOLDER) → $SRC"
mkdir -p "$SRC" "$DST_SLATE" "$DST_RCLONE"
t0=$(now_s)
out=$(python3 "$HELPER" local seed "$SRC" "$N" "$PER_FOLDER") || die "seeding failed"
read -r got _ <<<"$out"
[[ "$got" == "$N" ]] || die "seeding wrote '$got' files, want $N"
SEED_S=$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN {printf "%.1f", b - a}')
src_cb=$(count_and_bytes "$SRC")
[[ "$src_cb" == "$N $((N * 1024))" ]] || die "want $N files / $((N * 1024)) bytes in $SRC, got $src_cb"
log "  seeded in $SEED_S s"
sync

log "rclone sync SRC → DST_rclone (untimed setup)"
run_timed rclone-initial "${RCLONE[@]}" sync "$SRC" "$DST_RCLONE" -v
[[ "$(count_and_bytes "$DST_RCLONE")" == "$src_cb" ]] || die "rclone's initial sync left $(count_and_bytes "$DST_RCLONE") in $DST_RCLONE, want $src_cb"

log "starting the slate daemon: slate sync SRC DST_slate --db DB --drift-check-secs 0 --quiet"
start_daemon '^sync: ' "no summary line" "$DST_SLATE" "$SLATE" sync "$SRC" "$DST_SLATE" --db "$DB" --drift-check-secs 0 --quiet
same_tree "$SRC" "$DST_SLATE" "slate backfill"

# ---------------------------------------------------------------------------------------
# 1. time-to-equal
# ---------------------------------------------------------------------------------------
: >"$WORK/res.tte.slate"
for ((run = 1; run <= RUNS; run++)); do
    log "time-to-equal, run $run/$RUNS: $CHANGES changes to SRC"
    daemon_alive "before run $run"
    list="$WORK/changed-$run.txt"
    tte_polled "$run" paths "$list" python3 "$HELPER" local changes "$SRC" "$DST_SLATE" "$run" "$CHANGES" "$EQUAL_TIMEOUT" "$list"
    run_timed tte.rclone "${RCLONE[@]}" sync "$SRC" "$DST_RCLONE" -v
    check_rclone_run "$run" files
    tte_verify "$run" paths "$list" python3 "$HELPER" local verify "$SRC"
done
log "checking that both destinations equal SRC entirely"
same_tree "$SRC" "$DST_SLATE" "slate (after the time-to-equal runs)"
same_tree "$SRC" "$DST_RCLONE" "rclone (after the time-to-equal runs)"
TTE_HWM=$(daemon_kib VmHWM)

# ---------------------------------------------------------------------------------------
# 2. event → replica latency
# ---------------------------------------------------------------------------------------
for r in "${RATE_LIST[@]}"; do
    log "latency: $r new files/s for $SECONDS_PER_RATE s → SRC/lat-$r/ (poller on DST_slate, grace $GRACE s)"
    daemon_alive "before the $r/s phase"
    c0=$(daemon_cpu)
    out=$(python3 "$HELPER" local latency "$SRC" "$DST_SLATE" "$r" "$SECONDS_PER_RATE" "$LAT_FOLDERS" "$GRACE") \
        || die "the latency writer/poller failed at $r/s"
    daemon_alive "after the $r/s phase"
    c1=$(daemon_cpu)
    read -r files missing p50 p99 pmax mean achieved behind during <<<"$out"
    hwm=$(daemon_kib VmHWM); rss=$(daemon_kib VmRSS)
    echo "$r $files $missing $p50 $p99 $pmax $mean $achieved $behind $hwm $rss $(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}') $during" >>"$WORK/res.lat"
    log "  $r/s: $files files (writer achieved $achieved/s, at most $behind ms behind schedule): p50 $p50 ms, p99 $p99 ms, max $pmax ms; $during arrived while the writer was running, $missing not arrived; daemon VmHWM $((hwm / 1024)) MiB, VmRSS $((rss / 1024)) MiB"
    if ((missing > 0)); then
        tail -n 20 "$DAEMON_LOG" >&2
        die "$missing of $files files written at $r/s had not arrived in DST_slate $GRACE s after the writer stopped (p50 $p50 ms, p99 $p99 ms of the arrived ones)"
    fi
done

log "checking that DST_slate equals SRC entirely (latency files included)"
same_tree "$SRC" "$DST_SLATE" "slate (at the end)"
finish_daemon

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
report_common "100000/3/200 500/20"

{
    echo "## slate daemon benchmark$non_default"
    echo
    report_env_lines
    echo "- Local folder → local folder on one file system; SRC seeded with $N × 1 KiB random files in folders of $PER_FOLDER."
    echo
    echo "| scenario | slate | rclone | ratio (rclone/slate) | target | met |"
    echo "|---|---|---|---|---|---|"
    printf '| time-to-equal: %d changes (50 overwrites, 30 new, 20 deletes) among %d files, median of %d | %.0f ms (runs: %s ms) | %.2f s (runs: %s s), peak RSS %.0f MiB | %s× | ≥ 200× | %s |\n' \
        "$CHANGES" "$N" "$RUNS" "$s_tte" "$s_all" "$r_tte" "$r_all" "$(awk -v k="$r_rss" 'BEGIN {print k / 1024}')" "$tte_ratio" "$tte_met"
    while read -r r files missing p50 p99 pmax mean achieved behind hwm rss cpu during; do
        if awk -v p="$p99" 'BEGIN {exit !(p < 1000)}' && ((missing == 0)); then met=yes; else met="**no**"; MISSED=1; fi
        printf '| event → replica latency: %d new 1 KiB files/s for %d s (%d files) | p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d not arrived after %d s; daemon peak RSS %.0f MiB, CPU %.1f s | — | — | p99 < 1 s, 0 lost | %s |\n' \
            "$r" "$SECONDS_PER_RATE" "$files" "$p50" "$p99" "$pmax" "$missing" "$GRACE" "$((hwm / 1024))" "$cpu" "$met"
    done <"$WORK/res.lat"
    echo
    echo "Commands: \`slate sync SRC DST_slate --db DB --drift-check-secs 0 --quiet\` (the daemon, one process for the whole benchmark) vs \`rclone sync SRC DST_rclone --config /dev/null -v\` (timed with GNU time, after each set of changes)."
    echo
    echo "- slate's time-to-equal: from the moment the last of the $CHANGES changes was made (python, all changes within a few ms) until every changed path in DST_slate matched (same bytes, or gone), polled every ~2 ms. rclone's: the wall time of one \`rclone sync\` (listing both sides, $N+ files). Each run uses a fresh set of changes against the same SRC; rclone's transfer and delete counts (80 / 20) are checked, and after the runs both destinations equal SRC entirely (\`diff -r -q\` and file count / bytes)."
    echo "- Latency: a python writer creates the files at a fixed rate (10 folders per rate, created 1 s before the writer starts) and records each file's close time (CLOCK_MONOTONIC); a second process lists the destination folders every ~1 ms and records when each file is there with its full size. Latency = arrival − close; precision a few ms."
    while read -r r files missing p50 p99 pmax mean achieved behind hwm rss cpu during; do
        printf -- '  - %d/s: writer achieved %.0f files/s (at most %.0f ms behind schedule); mean latency %.0f ms; %d of %d files arrived while the writer was still running; daemon VmRSS %.0f MiB at the end of the phase.\n' \
            "$r" "$achieved" "$behind" "$mean" "$during" "$files" "$((rss / 1024))"
    done <"$WORK/res.lat"
    echo "- Untimed setup: seeding $SEED_S s; rclone's initial sync $(median 1 "$WORK/res.rclone-initial") s (peak RSS $(($(median 2 "$WORK/res.rclone-initial") / 1024)) MiB); slate's backfill (start → \`following changes of\`) $BACKFILL_S s: \`${BACKFILL_LINE:-no summary line}\`."
    echo "- slate daemon peak RSS (VmHWM): $((BACKFILL_HWM / 1024)) MiB after the backfill, $((TTE_HWM / 1024)) MiB after the time-to-equal runs, $((FINAL_HWM / 1024)) MiB at the end (VmRSS then $((FINAL_RSS / 1024)) MiB); CPU (user+sys) over the whole benchmark $DAEMON_CPU_TOTAL s; exit status on SIGTERM $DAEMON_RC; $WARNS log lines with warn/error."
} >"$WORK/report.md"
report_publish
report_strict
