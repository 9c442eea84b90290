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
PY="$WORK/daemon_bench.py"
DAEMON_PID=""
S3_PY="$WORK/daemon_bench_s3.py"   # s3 mode: the boto3 helper
S3_CREATED=0                       # s3 mode: 1 once buckets / queues may exist (teardown needed)
MOTO_STARTED=0                     # s3 mode: 1 if this run started moto (stopped at the end)
CLOUD_PY="$WORK/daemon_bench_cloud.py"   # pubsub / azqueue: the helper (stdlib; SAS: azure-storage-blob)
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
            timeout 600 "${S3ENV[@]}" "$S3PYTHON" "$S3_PY" teardown "$B_SRC" "$B_DST" "$B_RCL" "$Q_SLATE" "$Q_WITNESS" >&2 \
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
# The python helper (stdlib only): seed, apply changes + wait for equality, verify,
# latency writer + poller.
# ---------------------------------------------------------------------------------------
cat >"$PY" <<'PYEOF'
import multiprocessing as mp
import os
import random
import re
import sys
import time

KIB = 1024
FOLDER_RE = re.compile(r"^d[0-9]+$")


def die(msg):
    print("python: " + msg, file=sys.stderr)
    sys.exit(2)


def write_file(path, data, excl=False):
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if excl else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def seed(root, n, per_folder):
    """n random 1 KiB files: d000/f-000000 … (per_folder a folder)."""
    fdig = max(3, len(str((n - 1) // per_folder)))
    ndig = max(6, len(str(n - 1)))
    blob = os.urandom(n * KIB)
    for i in range(n):
        d = os.path.join(root, "d%0*d" % (fdig, i // per_folder))
        if i % per_folder == 0:
            os.makedirs(d, exist_ok=True)
        write_file(os.path.join(d, "f-%0*d" % (ndig, i)), blob[i * KIB:(i + 1) * KIB], excl=True)
    print(n)


def read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def changes(src, dst, run, n_changes, timeout, list_out):
    """Apply n_changes to src (50% overwrites, 30% new, 20% deletes, spread over the folders),
    then poll dst until it mirrors src on every changed path. Prints: ms_to_equal passes
    apply_ms. Writes the changed paths (relative) to list_out."""
    n_over, n_new = n_changes // 2, n_changes * 3 // 10
    n_del = n_changes - n_over - n_new
    rng = random.Random(7919 * run + 17)
    folders = sorted(d for d in os.listdir(src) if FOLDER_RE.match(d))
    files = {d: sorted(f for f in os.listdir(os.path.join(src, d)) if not f.startswith(".")) for d in folders}
    folders = [d for d in folders if files[d]]
    if not folders:
        die("no seeded folder in " + src)
    rng.shuffle(folders)
    for d in folders:
        rng.shuffle(files[d])
    picked = []          # existing files: overwrites, then deletes; one folder after the other
    k = 0
    while len(picked) < n_over + n_del:
        d = folders[k % len(folders)]
        k += 1
        if files[d]:
            picked.append(d + "/" + files[d].pop())
        elif k > 10 * (n_over + n_del) + len(folders):
            die("not enough files to change in " + src)
    new = ["%s/new-r%03d-%03d" % (folders[(n_over + n_del + j) % len(folders)], run, j) for j in range(n_new)]
    ops = [("over", p) for p in picked[:n_over]] + [("del", p) for p in picked[n_over:]] + [("new", p) for p in new]
    rng.shuffle(ops)
    expect = {}          # relative path -> bytes, or None for deleted
    payload = {}
    for op, p in ops:    # content prepared before the clock starts
        if op == "del":
            continue
        cur = os.stat(os.path.join(src, p)).st_size if op == "over" else -1
        size = cur
        while size == cur:
            size = rng.randint(KIB + 1, 2 * KIB - 1)
        payload[p] = os.urandom(size)
    t_first = time.monotonic()
    for op, p in ops:
        path = os.path.join(src, p)
        if op == "del":
            os.unlink(path)
            expect[p] = None
        else:
            write_file(path, payload[p], excl=(op == "new"))
            expect[p] = payload[p]
    t_last = time.monotonic()   # the moment the last change was made
    pending = dict(expect)
    passes = 0
    deadline = t_last + timeout
    while True:
        passes += 1
        for p in list(pending):
            if read_or_none(os.path.join(dst, p)) == pending[p]:
                del pending[p]
        now = time.monotonic()
        if not pending:
            # all 100 seen equal: confirm they all still are (nothing regressed meanwhile)
            bad = [p for p, e in expect.items() if read_or_none(os.path.join(dst, p)) != e]
            if not bad:
                break
            for p in bad:
                pending[p] = expect[p]
        if now > deadline:
            print("python: %d of %d changed paths still differ in %s %d s after the last change, e.g. %s"
                  % (len(pending), len(expect), dst, timeout, ", ".join(sorted(pending)[:5])), file=sys.stderr)
            sys.exit(3)
        time.sleep(0.002)
    with open(list_out, "w") as f:
        f.write("".join(p + "\n" for p in sorted(expect)))
    print("%.3f %d %.3f" % ((now - t_last) * 1000, passes, (t_last - t_first) * 1000))


def verify(src, dst, list_in):
    """Every path of list_in is the same in dst as in src (bytes, or absent in both)."""
    bad = []
    with open(list_in) as f:
        for p in (l.rstrip("\n") for l in f):
            if p and read_or_none(os.path.join(src, p)) != read_or_none(os.path.join(dst, p)):
                bad.append(p)
    if bad:
        die("%d changed paths differ between %s and %s, e.g. %s" % (len(bad), src, dst, ", ".join(bad[:5])))
    print("ok")


def _poll(dst_root, sub, n_folders, total, written, nwritten, writer_done, arrived, grace):
    """Poller process: watch for each written file in dst, only the not-yet-arrived ones."""
    pending = [dict() for _ in range(n_folders)]     # folder -> {name: index}
    seen = 0
    dirs = [os.path.join(dst_root, sub, "d%03d" % j) for j in range(n_folders)]
    while True:
        n = nwritten.value
        while seen < n:
            pending[seen % n_folders]["f-%06d" % seen] = seen
            seen += 1
        for j in range(n_folders):
            if not pending[j]:
                continue
            try:
                names = set(os.listdir(dirs[j]))
            except FileNotFoundError:
                continue
            now = time.monotonic()
            for name in [nm for nm in pending[j] if nm in names]:
                try:
                    if os.stat(os.path.join(dirs[j], name)).st_size != KIB:
                        continue           # not complete yet
                except FileNotFoundError:
                    continue
                arrived[pending[j].pop(name)] = now
        done_at = writer_done.value
        left = sum(len(p) for p in pending)
        if done_at > 0 and seen == total and left == 0:
            return
        if done_at > 0 and time.monotonic() > done_at + grace:
            return
        time.sleep(0.001)


def latency(src, dst, rate, seconds, n_folders, grace):
    """Write rate*seconds new 1 KiB files (lat-R/dXXX/f-NNNNNN) at `rate` per second and time
    their arrival in dst. Prints: files missing p50 p99 max mean (ms) achieved_rate
    writer_max_behind_ms arrived_while_writing."""
    total = rate * seconds
    sub = "lat-%d" % rate
    for j in range(n_folders):
        os.makedirs(os.path.join(src, sub, "d%03d" % j))
    time.sleep(1.0)   # let the watcher add its watches on the new folders
    ctx = mp.get_context("fork")
    written = ctx.Array("d", total, lock=False)
    arrived = ctx.Array("d", total, lock=False)
    nwritten = ctx.Value("q", 0, lock=False)
    writer_done = ctx.Value("d", 0.0, lock=False)
    poller = ctx.Process(target=_poll, args=(dst, sub, n_folders, total, written, nwritten,
                                             writer_done, arrived, grace), daemon=True)
    poller.start()
    blob = os.urandom(total * KIB)
    behind = 0.0
    t0 = time.monotonic() + 0.1
    for i in range(total):
        target = t0 + i / rate
        now = time.monotonic()
        if now < target:
            time.sleep(target - now)
        else:
            behind = max(behind, now - target)
        path = os.path.join(src, sub, "d%03d" % (i % n_folders), "f-%06d" % i)
        write_file(path, blob[i * KIB:(i + 1) * KIB], excl=True)
        written[i] = time.monotonic()      # write complete (closed)
        nwritten.value = i + 1
    writer_done.value = time.monotonic()
    poller.join(grace + 60)
    if poller.is_alive():
        poller.terminate()
        die("the latency poller did not finish")
    lat = sorted((arrived[i] - written[i]) * 1000 for i in range(total) if arrived[i] > 0)
    missing = total - len(lat)
    if not lat:
        lat = [float("nan")]

    def pct(q):   # nearest rank: the ceil(q * n)-th smallest
        return lat[max(0, -(-round(q * 1000) * len(lat) // 1000) - 1)]

    span = written[total - 1] - written[0]
    achieved = (total - 1) / span if span > 0 else float("inf")
    during = sum(1 for i in range(total) if 0 < arrived[i] <= writer_done.value)
    print("%d %d %.1f %.1f %.1f %.1f %.1f %.1f %d" % (total, missing, pct(0.50), pct(0.99), lat[-1],
          sum(lat) / len(lat), achieved, behind * 1000, during))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "seed":
        seed(args[0], int(args[1]), int(args[2]))
    elif cmd == "changes":
        changes(args[0], args[1], int(args[2]), int(args[3]), float(args[4]), args[5])
    elif cmd == "verify":
        verify(args[0], args[1], args[2])
    elif cmd == "latency":
        latency(args[0], args[1], int(args[2]), int(args[3]), int(args[4]), float(args[5]))
    else:
        die("unknown command " + cmd)


if __name__ == "__main__":
    main()
PYEOF

# The S3 mode's helper (boto3; run by the python of scripts/services.sh's venv): buckets,
# queues and notifications, seeding, changes + the witness of DST_slate's notifications,
# checks by HEAD and by listing, latency writer, teardown.
if [[ "$MODE" == s3 ]]; then
    cat >"$S3_PY" <<'PYEOF'
import concurrent.futures as cf
import datetime
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import re
import sys
import threading
import time
import urllib.parse

import boto3
import botocore.exceptions
from botocore.config import Config

KIB = 1024
ENDPOINT = os.environ["BENCH_S3_ENDPOINT"]
THREADS = int(os.environ.get("BENCH_S3_THREADS", "16"))
PREFIX = "data/"
FOLDER_RE = re.compile(r"^data/(d[0-9]+)/([^/]+)$")


def die(msg):
    print("python: " + msg, file=sys.stderr, flush=True)
    sys.exit(2)


def client(kind, pool=None):
    """A fresh client (create them after fork: a client holds a connection pool)."""
    conf = Config(max_pool_connections=pool or max(THREADS, 10) + 4,
                  retries={"max_attempts": 10, "mode": "standard"},
                  s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60)
    return boto3.client(kind, endpoint_url=ENDPOINT, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing", config=conf)


def is_404(e):
    return (isinstance(e, botocore.exceptions.ClientError)
            and e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"))


def head(s3, bucket, key):
    """(size, etag) or None if the key is absent."""
    try:
        r = s3.head_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as e:
        if is_404(e):
            return None
        raise
    return (r["ContentLength"], r["ETag"])


def listing(s3, bucket, prefix=PREFIX):
    """{key: (size, etag)} of every object under prefix."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = (o["Size"], o["ETag"])
    return out


def queue_url(sqs, name):
    return sqs.get_queue_url(QueueName=name)["QueueUrl"]


def notify(s3, sqs, bucket, qname):
    """bucket's ObjectCreated / ObjectRemoved notifications → queue qname (S3 sends a TestEvent)."""
    arn = sqs.get_queue_attributes(QueueUrl=queue_url(sqs, qname),
                                   AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={
        "QueueConfigurations": [{"Id": "slate-bench", "QueueArn": arn,
                                 "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})


def setup(src, dst, dstr, q_slate, q_witness, n, per_folder):
    """Fresh buckets and queues; n random 1 KiB objects data/d000/f-000000 … in src (in
    parallel); then src's notifications → q_slate (after seeding: the daemon must not start
    with n events). Prints: n seconds."""
    s3, sqs = client("s3"), client("sqs")
    for b in (src, dst, dstr):
        s3.create_bucket(Bucket=b)
    for q in (q_slate, q_witness):
        sqs.create_queue(QueueName=q)
    fdig = max(3, len(str((n - 1) // per_folder)))
    ndig = max(6, len(str(n - 1)))
    blob = os.urandom(n * KIB)
    keys = ["data/d%0*d/f-%0*d" % (fdig, i // per_folder, ndig, i) for i in range(n)]
    t0 = time.monotonic()
    done = [0]
    lock = threading.Lock()

    def put(i):
        s3.put_object(Bucket=src, Key=keys[i], Body=blob[i * KIB:(i + 1) * KIB])
        with lock:
            done[0] += 1
            if done[0] % 5000 == 0:
                print("python:   seeded %d of %d (%.0f/s)" % (done[0], n, done[0] / (time.monotonic() - t0)),
                      file=sys.stderr, flush=True)

    with cf.ThreadPoolExecutor(THREADS) as ex:
        for f in cf.as_completed([ex.submit(put, i) for i in range(n)]):
            f.result()
    secs = time.monotonic() - t0
    got = listing(s3, src)
    if len(got) != n or any(v[0] != KIB for v in got.values()):
        die("seeding: %s holds %d objects under %s, want %d of %d bytes" % (src, len(got), PREFIX, n, KIB))
    notify(s3, sqs, src, q_slate)
    print("%d %.1f" % (n, secs))


def witness_on(dst, q_witness):
    """dst's own notifications → q_witness: how the benchmark sees arrivals without polling."""
    s3, sqs = client("s3"), client("sqs")
    notify(s3, sqs, dst, q_witness)
    print("ok")


def teardown(src, dst, dstr, q_slate, q_witness):
    s3, sqs = client("s3"), client("sqs")
    for b in (src, dst, dstr):    # notifications off first: deleting must not fill the queues
        try:
            s3.put_bucket_notification_configuration(Bucket=b, NotificationConfiguration={})
        except botocore.exceptions.ClientError:
            pass
    for q in (q_slate, q_witness):
        try:
            sqs.delete_queue(QueueUrl=queue_url(sqs, q))
        except botocore.exceptions.ClientError:
            pass
    for b in (src, dst, dstr):
        try:
            keys = list(listing(s3, b, ""))
        except botocore.exceptions.ClientError:
            continue
        chunks = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
        with cf.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda c: s3.delete_objects(Bucket=b, Delete={
                "Objects": [{"Key": k} for k in c], "Quiet": True}), chunks))
        s3.delete_bucket(Bucket=b)
    print("python: removed buckets %s %s %s and queues %s %s" % (src, dst, dstr, q_slate, q_witness),
          file=sys.stderr)


# ---- the witness: DST_slate's S3 notifications, received in a separate process ----------

def _parse_time(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return float("nan")


def _witness_main(qname, out, stop, nthreads):
    sqs = client("sqs", pool=nthreads + 2)
    url = queue_url(sqs, qname)

    def loop():
        while not stop.is_set():
            try:
                r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                        VisibilityTimeout=600)
            except Exception as e:   # noqa: BLE001 (report and go on: moto may be busy)
                print("python: witness receive failed: %s" % e, file=sys.stderr, flush=True)
                time.sleep(0.2)
                continue
            t_mono, t_wall = time.monotonic(), time.time()
            msgs = r.get("Messages", [])
            if not msgs:
                continue
            batch = []
            for m in msgs:
                try:
                    body = json.loads(m["Body"])
                except ValueError:
                    continue
                for rec in body.get("Records", []):   # the s3:TestEvent has none
                    o = rec.get("s3", {}).get("object", {})
                    batch.append((t_mono, rec.get("eventName", ""), urllib.parse.unquote_plus(o.get("key", "")),
                                  o.get("size", -1), t_wall - _parse_time(rec.get("eventTime"))))
            if batch:
                out.put(batch)
            try:
                sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            except Exception as e:   # noqa: BLE001
                print("python: witness delete failed: %s" % e, file=sys.stderr, flush=True)

    ts = [threading.Thread(target=loop, daemon=True) for _ in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


class Witness:
    """Receives DST_slate's notifications in a forked process with a few long-polling threads;
    get() yields lists of (monotonic receive time, eventName, key, size, lag s) where lag is
    receive wall time − the event's eventTime (how long the event waited for us)."""

    def __init__(self, qname, nthreads=3):
        ctx = mp.get_context("fork")
        self.q = ctx.Queue()
        self.stop_ev = ctx.Event()
        self.p = ctx.Process(target=_witness_main, args=(qname, self.q, self.stop_ev, nthreads), daemon=True)
        self.p.start()

    def get(self, timeout):
        try:
            return self.q.get(timeout=timeout)
        except queue_mod.Empty:
            if not self.p.is_alive():
                die("the witness process died")
            return []

    def close(self):
        self.stop_ev.set()
        self.p.join(10)
        if self.p.is_alive():
            self.p.terminate()


def drain(qname):
    """Drop whatever waits in the witness queue (the TestEvent, stale events); returns how many
    S3 event messages were dropped."""
    sqs = client("sqs")
    url = queue_url(sqs, qname)
    n = empty = 0
    while empty < 2:
        r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=600)
        msgs = r.get("Messages", [])
        if not msgs:
            empty += 1
            time.sleep(0.05)
            continue
        n += sum(1 for m in msgs if '"Records"' in m.get("Body", ""))   # not the s3:TestEvent
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
    return n


def backlog(sqs, url):
    """Messages in a queue: visible + in flight (ApproximateNumberOf…)."""
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])


def pct(vals, q):   # nearest rank: the ceil(q * n)-th smallest of sorted vals
    return vals[max(0, -(-round(q * 1000) * len(vals) // 1000) - 1)]


# ---- time-to-equal -------------------------------------------------------------------

def changes(src, dst, q_witness, run, n_changes, timeout, list_out):
    """Apply n_changes to src through S3 (50% overwrites with a new size, 30% new, 20% deletes,
    spread over the folders; THREADS at once), then wait until dst mirrors src on every
    changed key: the witness reports each key's arrival (a Created event with the new size, or
    a Removed event); then all of them are confirmed by HEAD (size, or 404). Prints:
    ms_to_equal dst_events apply_ms. Writes the changed keys to list_out."""
    s3 = client("s3")
    n_over, n_new = n_changes // 2, n_changes * 3 // 10
    n_del = n_changes - n_over - n_new
    rng = random.Random(7919 * run + 17)
    files = {}
    sizes = {}
    for k, (size, _) in listing(s3, src).items():
        m = FOLDER_RE.match(k)
        if m:
            files.setdefault(m.group(1), []).append(k)
            sizes[k] = size
    folders = sorted(files)
    if not folders:
        die("no seeded folder in " + src)
    rng.shuffle(folders)
    for d in folders:
        files[d].sort()
        rng.shuffle(files[d])
    picked = []
    k = 0
    while len(picked) < n_over + n_del:
        d = folders[k % len(folders)]
        k += 1
        if files[d]:
            picked.append(files[d].pop())
        elif k > 10 * (n_over + n_del) + len(folders):
            die("not enough objects to change in " + src)
    new = ["data/%s/new-r%03d-%03d" % (folders[(n_over + n_del + j) % len(folders)], run, j) for j in range(n_new)]
    ops = [("over", p) for p in picked[:n_over]] + [("del", p) for p in picked[n_over:]] + [("new", p) for p in new]
    rng.shuffle(ops)
    expect = {}          # key -> size, or None for deleted
    payload = {}
    for op, p in ops:    # content prepared before the clock starts
        if op == "del":
            expect[p] = None
            continue
        cur = sizes[p] if op == "over" else -1
        size = cur
        while size == cur:
            size = rng.randint(KIB + 1, 2 * KIB - 1)
        payload[p] = os.urandom(size)
        expect[p] = size
    stale = drain(q_witness)
    if stale:
        print("python: %d stale events in the witness queue before run %d (dropped)" % (stale, run), file=sys.stderr)
    w = Witness(q_witness)
    time.sleep(0.3)      # the witness' first long polls are in place

    def apply(op_p):
        op, p = op_p
        if op == "del":
            s3.delete_object(Bucket=src, Key=p)
        else:
            s3.put_object(Bucket=src, Key=p, Body=payload[p])
        return time.monotonic()

    t_first = time.monotonic()
    with cf.ThreadPoolExecutor(THREADS) as ex:
        done = list(ex.map(apply, ops))
    t_last = max(done)   # the moment the last change was complete
    arrived = {}         # key -> monotonic receive time of the matching event
    events = 0
    deadline = t_last + timeout
    confirms = 0
    while True:
        for t, name, key, size, _lag in w.get(0.5 if len(arrived) < len(expect) else 0):
            events += 1
            if key not in expect or key in arrived:
                continue
            want = expect[key]
            if (want is None and name.startswith("ObjectRemoved")) or \
               (want is not None and name.startswith("ObjectCreated") and size == want):
                arrived[key] = t
        if len(arrived) == len(expect):
            # all seen: confirm by HEAD that every key really is equal now
            confirms += 1
            with cf.ThreadPoolExecutor(THREADS) as ex:
                got = dict(zip(expect, ex.map(lambda p: head(s3, dst, p), expect)))
            bad = [p for p, want in expect.items() if (got[p] is None) != (want is None)
                   or (want is not None and got[p][0] != want)]
            if not bad:
                break
            print("python: %d keys seen arriving but not equal by HEAD (run %d), e.g. %s; waiting on"
                  % (len(bad), run, ", ".join(bad[:3])), file=sys.stderr)
            for p in bad:
                del arrived[p]
        if time.monotonic() > deadline:
            w.close()
            pend = sorted(set(expect) - set(arrived))
            print("python: %d of %d changed keys still differ in %s %d s after the last change, e.g. %s"
                  % (len(pend), len(expect), dst, timeout, ", ".join(pend[:5])), file=sys.stderr)
            sys.exit(3)
    w.close()
    t_eq = max(arrived.values())
    with open(list_out, "w") as f:
        f.write("".join(p + "\n" for p in sorted(expect)))
    print("%.3f %d %.3f %d" % ((t_eq - t_last) * 1000, events, (t_last - t_first) * 1000, confirms))


def verify(src, dst, list_in):
    """Every key of list_in is the same in dst as in src (size and ETag, or absent in both)."""
    s3 = client("s3")
    with open(list_in) as f:
        keys = [l.rstrip("\n") for l in f if l.strip()]
    with cf.ThreadPoolExecutor(THREADS) as ex:
        a = list(ex.map(lambda k: head(s3, src, k), keys))
        b = list(ex.map(lambda k: head(s3, dst, k), keys))
    bad = [k for k, x, y in zip(keys, a, b) if x != y]
    if bad:
        die("%d changed keys differ between %s and %s, e.g. %s" % (len(bad), src, dst, ", ".join(bad[:5])))
    print("ok")


def same(src, dst):
    """dst holds exactly src's objects under data/ (key, size, ETag). Prints: count bytes."""
    s3 = client("s3")
    a, b = listing(s3, src), listing(s3, dst)
    if a != b:
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        diff = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        die("%s/%s differs from %s/%s: %d missing (e.g. %s), %d extra (e.g. %s), %d different (e.g. %s)"
            % (dst, PREFIX, src, PREFIX, len(only_a), ", ".join(only_a[:3]), len(only_b), ", ".join(only_b[:3]),
               len(diff), ", ".join(diff[:3])))
    print("%d %d" % (len(a), sum(v[0] for v in a.values())))


# ---- latency -------------------------------------------------------------------------

def latency(src, q_slate, q_witness, rate, seconds, n_folders, grace, nthreads):
    """PUT rate*seconds new 1 KiB objects (data/lat-R/dXXX/f-NNNNNN) at `rate` per second from
    nthreads threads (object i is due at t0 + i/rate), recording each PUT's completion; the
    witness records each one's arrival in DST_slate. Prints: total missing p50 p99 max mean
    achieved behind_ms during lag_p50_ms lag_max_ms backlog_at_writer_end backlog_at_end (the
    messages waiting in the daemon's queue)."""
    total = rate * seconds
    sub = "data/lat-%d" % rate
    keys = ["%s/d%03d/f-%06d" % (sub, i % n_folders, i) for i in range(total)]
    index = {k: i for i, k in enumerate(keys)}
    stale = drain(q_witness)
    if stale:
        print("python: %d stale events in the witness queue before the %d/s phase (dropped)" % (stale, rate),
              file=sys.stderr)
    w = Witness(q_witness)
    s3 = client("s3", pool=nthreads + 4)
    sqs = client("sqs")
    url_slate = queue_url(sqs, q_slate)
    backlog_w = -1
    blob = os.urandom(total * KIB)
    written = [0.0] * total
    arrived = [0.0] * total
    behind = [0.0] * nthreads
    errors = []
    time.sleep(0.5)
    t0 = time.monotonic() + 0.1

    def writer(k):
        for i in range(k, total, nthreads):
            target = t0 + i / rate
            now = time.monotonic()
            if now < target:
                time.sleep(target - now)
            else:
                behind[k] = max(behind[k], now - target)
            try:
                s3.put_object(Bucket=src, Key=keys[i], Body=blob[i * KIB:(i + 1) * KIB])
            except Exception as e:   # noqa: BLE001
                errors.append("%s: %s" % (keys[i], e))
                return
            written[i] = time.monotonic()

    ts = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(nthreads)]
    for t in ts:
        t.start()
    lags = []
    writer_done = 0.0
    left = total
    while True:
        for t, name, key, size, lag in w.get(0.2):
            i = index.get(key)
            if i is None or not name.startswith("ObjectCreated") or size != KIB or arrived[i]:
                continue
            arrived[i] = t
            lags.append(lag)
            left -= 1
        if not writer_done and not any(t.is_alive() for t in ts):
            writer_done = time.monotonic()
            if errors:
                w.close()
                die("%d PUTs failed at %d/s, e.g. %s" % (len(errors), rate, errors[0]))
            backlog_w = backlog(sqs, url_slate)
        if writer_done and (left == 0 or time.monotonic() > writer_done + grace):
            break
    w.close()
    backlog_end = backlog(sqs, url_slate)
    lat = sorted((arrived[i] - written[i]) * 1000 for i in range(total) if arrived[i] > 0)
    missing = total - len(lat)
    if missing:
        miss = [keys[i] for i in range(total) if not arrived[i]]
        print("python: %d of %d objects written at %d/s never arrived, e.g. %s"
              % (missing, total, rate, ", ".join(miss[:5])), file=sys.stderr)
    if not lat:
        lat = [float("nan")]
    lags.sort()
    if not lags:
        lags = [float("nan")]
    ws = sorted(written)
    span = ws[-1] - ws[0]
    achieved = (total - 1) / span if span > 0 else float("inf")
    during = sum(1 for i in range(total) if 0 < arrived[i] <= writer_done)
    print("%d %d %.1f %.1f %.1f %.1f %.1f %.1f %d %.1f %.1f %d %d" % (
        total, missing, pct(lat, 0.50), pct(lat, 0.99), lat[-1], sum(lat) / len(lat), achieved,
        max(behind) * 1000, during, pct(lags, 0.5) * 1000, lags[-1] * 1000, backlog_w, backlog_end))


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "setup":
        setup(a[0], a[1], a[2], a[3], a[4], int(a[5]), int(a[6]))
    elif cmd == "witness-on":
        witness_on(a[0], a[1])
    elif cmd == "changes":
        changes(a[0], a[1], a[2], int(a[3]), int(a[4]), float(a[5]), a[6])
    elif cmd == "verify":
        verify(a[0], a[1], a[2])
    elif cmd == "same":
        same(a[0], a[1])
    elif cmd == "latency":
        latency(a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5]), float(a[6]), int(a[7]))
    elif cmd == "teardown":
        teardown(a[0], a[1], a[2], a[3], a[4])
    else:
        die("unknown command " + cmd)


if __name__ == "__main__":
    main()
PYEOF
fi

# The cloud modes' helper (pubsub / azqueue; run by the python of scripts/services.sh's venv,
# stdlib only but for the container SAS): bucket / container, queue and subscription, seeding,
# changes + waiting for DST_slate (a local folder), checks against the source's listing,
# latency writer + poller, teardown.
if ((CLOUD)); then
    cat >"$CLOUD_PY" <<'PYEOF'
import base64
import concurrent.futures as cf
import datetime
import email.utils
import hashlib
import hmac
import http.client
import json
import multiprocessing as mp
import os
import random
import re
import sys
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

KIB = 1024
MODE = os.environ["BENCH_CLOUD_MODE"]                 # pubsub | azqueue
THREADS = int(os.environ.get("BENCH_CLOUD_THREADS", "16"))
PREFIX = "data/"
FOLDER_RE = re.compile(r"^data/(d[0-9]+)/([^/]+)$")
# Azurite's account and key, published in Azure's documentation (as slate and the tests use)
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZ_VERSION = "2021-12-02"


def die(msg):
    print("python: " + msg, file=sys.stderr, flush=True)
    sys.exit(2)


class Http:
    """Keep-alive HTTP/1.1 to one emulator, one connection per thread; retries connection
    errors, 429 and 5xx (every request made here is idempotent, or harmless when repeated:
    a repeated queue message is a repeated event)."""

    def __init__(self, base, sign=None):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.root = u.hostname, u.port or 80, u.path.rstrip("/")
        self.sign = sign
        self.local = threading.local()

    def request(self, method, path, query=(), body=b"", headers=None, allow=(), encoded=False):
        """path: under the base URL's path; encoded=True: already percent-encoded (a GCS object
        name is one path segment, its '/' encoded)."""
        path = self.root + (path if encoded else urllib.parse.quote(path))
        url = path + ("?" + urllib.parse.urlencode(list(query)) if query else "")
        err = None
        for attempt in range(6):
            h = dict(headers or {})
            h["Content-Length"] = str(len(body))
            if self.sign:
                self.sign(method, path, query, h, len(body))
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                conn.request(method, url, body=body, headers=h)
                r = conn.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self.local.conn = None
                err = "%s %s: %s" % (method, path, e)
                time.sleep(0.1 * (attempt + 1))
                continue
            if 200 <= r.status < 300 or r.status in allow:
                return r.status, data, r
            err = "%s %s: HTTP %d %s" % (method, path, r.status, data[:300])
            if r.status == 429 or r.status >= 500:
                time.sleep(0.1 * (attempt + 1))
                continue
            break
        raise RuntimeError(err)


def az_sign(method, path, query, h, body_len):
    """Shared Key (Blob and Queue services, version 2009-09-19 and later) with Azurite's key."""
    h["x-ms-date"] = email.utils.formatdate(usegmt=True)
    h["x-ms-version"] = AZ_VERSION
    low = {k.lower(): v for k, v in h.items()}
    std = [low.get("content-encoding", ""), low.get("content-language", ""), str(body_len) if body_len else "",
           low.get("content-md5", ""), low.get("content-type", ""), "", "", "", "", "", ""]
    xms = "".join("%s:%s\n" % (k, low[k]) for k in sorted(low) if k.startswith("x-ms-"))
    res = "/" + AZ_ACCOUNT + path + "".join("\n%s:%s" % (k.lower(), v) for k, v in sorted(query))
    to_sign = method + "\n" + "\n".join(std) + "\n" + xms + res
    sig = base64.b64encode(hmac.new(base64.b64decode(AZ_KEY), to_sign.encode(), hashlib.sha256).digest())
    h["Authorization"] = "SharedKey %s:%s" % (AZ_ACCOUNT, sig.decode())


class Gcs:
    """A bucket on fake-gcs-server, through its JSON API (writes: the JSON upload API; each
    write publishes OBJECT_FINALIZE, each delete OBJECT_DELETE to the topic gcs-events)."""

    def __init__(self, bucket, queue=None):
        self.bucket = bucket
        self.http = Http(os.environ["BENCH_GCS_ENDPOINT"])

    def _o(self, key):
        return "/storage/v1/b/%s/o/%s" % (self.bucket, urllib.parse.quote(key, safe=""))

    def create(self):
        self.http.request("POST", "/storage/v1/b", [("project", "test-project")],
                          json.dumps({"name": self.bucket}).encode(), {"Content-Type": "application/json"})

    def put(self, key, data, event=True):
        self.http.request("POST", "/upload/storage/v1/b/%s/o" % self.bucket,
                          [("uploadType", "media"), ("name", key)], data,
                          {"Content-Type": "application/octet-stream"})

    def delete(self, key, event=True):
        self.http.request("DELETE", self._o(key), allow=(404,), encoded=True)

    def listing(self, prefix=PREFIX):
        """{key: (size, md5 base64)} of every object under prefix."""
        out, token = {}, None
        while True:
            q = [("prefix", prefix), ("maxResults", "1000")] + ([("pageToken", token)] if token else [])
            _, data, _ = self.http.request("GET", "/storage/v1/b/%s/o" % self.bucket, q)
            page = json.loads(data)
            for o in page.get("items", []):
                out[o["name"]] = (int(o["size"]), o.get("md5Hash"))
            token = page.get("nextPageToken")
            if not token:
                return out

    def get(self, key):
        st, data, _ = self.http.request("GET", self._o(key), [("alt", "media")], allow=(404,), encoded=True)
        return None if st == 404 else data

    def drop(self):
        keys = list(self.listing(""))
        with cf.ThreadPoolExecutor(THREADS) as ex:
            list(ex.map(self.delete, keys))
        self.http.request("DELETE", "/storage/v1/b/" + self.bucket, allow=(404,))
        return len(keys)

    def backlog(self):
        return -1     # the Pub/Sub emulator does not tell a subscription's backlog


_seq_lock = threading.Lock()
_seq_last = [0]


def sequencer():
    """Increasing across the benchmark's processes (wall-clock nanoseconds), as Azure's
    per-blob sequencers increase: 32 hex digits, like Event Grid's."""
    with _seq_lock:
        _seq_last[0] = max(_seq_last[0] + 1, time.time_ns())
        return "%032X" % _seq_last[0]


class Az:
    """A container on Azurite plus the storage queue the daemon follows. Azurite emits no
    blob events (no Event Grid emulator exists): every write or delete is followed by the
    event Event Grid would deliver to the queue (Event Grid schema, one event a message,
    base64 JSON), built as tests/daemon_e2e.rs's blob_event does."""

    def __init__(self, container, queue=None):
        self.container, self.queue = container, queue
        self.blob_base = os.environ["BENCH_AZ_BLOB"].rstrip("/")   # …/devstoreaccount1
        self.blob = Http(self.blob_base, az_sign)
        self.q = Http(os.environ["BENCH_AZ_QUEUE"], az_sign)

    def create(self):
        self.blob.request("PUT", "/" + self.container, [("restype", "container")])
        self.q.request("PUT", "/" + self.queue)

    def event(self, key, kind, size):
        topic = ("/subscriptions/0/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/"
                 + AZ_ACCOUNT)
        ev = {"topic": topic,
              "subject": "/blobServices/default/containers/%s/blobs/%s" % (self.container, key),
              "eventType": "Microsoft.Storage." + kind, "id": str(uuid.uuid4()),
              "eventTime": datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z"),
              "data": {"api": "PutBlob" if kind == "BlobCreated" else "DeleteBlob", "contentLength": size,
                       "blobType": "BlockBlob", "url": "%s/%s/%s" % (self.blob_base, self.container, key),
                       "sequencer": sequencer()},
              "dataVersion": "", "metadataVersion": "1"}
        text = base64.b64encode(json.dumps(ev).encode()).decode()
        self.q.request("POST", "/%s/messages" % self.queue,
                       body=("<QueueMessage><MessageText>%s</MessageText></QueueMessage>" % text).encode())

    def put(self, key, data, event=True):
        self.blob.request("PUT", "/%s/%s" % (self.container, key), body=data,
                          headers={"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"})
        if event:
            self.event(key, "BlobCreated", len(data))

    def delete(self, key, event=True):
        self.blob.request("DELETE", "/%s/%s" % (self.container, key), allow=(404,))
        if event:
            self.event(key, "BlobDeleted", 0)

    def listing(self, prefix=PREFIX):
        out, marker = {}, None
        while True:
            q = [("restype", "container"), ("comp", "list"), ("prefix", prefix), ("maxresults", "5000")]
            if marker:
                q.append(("marker", marker))
            _, data, _ = self.blob.request("GET", "/" + self.container, q)
            root = ET.fromstring(data)
            for b in root.iter("Blob"):
                p = b.find("Properties")
                out[b.findtext("Name")] = (int(p.findtext("Content-Length")), p.findtext("Content-MD5") or None)
            marker = root.findtext("NextMarker")
            if not marker:
                return out

    def get(self, key):
        st, data, _ = self.blob.request("GET", "/%s/%s" % (self.container, key), allow=(404,))
        return None if st == 404 else data

    def drop(self):
        n = len(self.listing(""))
        self.q.request("DELETE", "/" + self.queue, allow=(404,))
        self.blob.request("DELETE", "/" + self.container, [("restype", "container")], allow=(404,))
        return n

    def backlog(self):
        """Messages in the daemon's queue (Azurite's approximate count: visible + invisible)."""
        _, _, r = self.q.request("GET", "/" + self.queue, [("comp", "metadata")])
        return int(r.getheader("x-ms-approximate-messages-count", "-1"))


def backend(name, queue=None):
    return (Gcs if MODE == "pubsub" else Az)(name, queue)


def pubsub(method, name, body=None):
    h = Http("http://" + os.environ["BENCH_PUBSUB_HOST"])
    return h.request(method, "/v1/projects/test-project/subscriptions/" + name,
                     body=json.dumps(body).encode() if body is not None else b"",
                     headers={"Content-Type": "application/json"}, allow=(404,))


def pct(vals, q):   # nearest rank: the ceil(q * n)-th smallest of sorted vals
    return vals[max(0, -(-round(q * 1000) * len(vals) // 1000) - 1)]


def md5b64(data):
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def fresh(size):
    """Random content. pubsub: never one whose MD5 in base64 starts with "W/" (1 in 4,096): the
    GCS write shim the daemon reads through takes such an unquoted ETag for a weak one, strips
    the "W/" and answers the daemon's If-Match with 412 (the copy fails, "source object changed
    during the copy"); fixed in scripts/gcs_xml_shim.py, but the running shim may predate it."""
    while True:
        data = os.urandom(size)
        if MODE != "pubsub" or not md5b64(data).startswith("W/"):
            return data


def read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def local_path(dst, key):
    return os.path.join(dst, key[len(PREFIX):])


# ---- setup / teardown ------------------------------------------------------------------

def setup(src, queue, n, per_folder):
    """A fresh bucket / container (and, azqueue, the queue); n random 1 KiB objects
    data/d000/f-000000 … (THREADS at a time; azqueue: no events for these). Prints: n seconds."""
    be = backend(src, queue)
    be.create()
    fdig = max(3, len(str((n - 1) // per_folder)))
    ndig = max(6, len(str(n - 1)))
    blobs = [fresh(KIB) for _ in range(n)]
    keys = ["data/d%0*d/f-%0*d" % (fdig, i // per_folder, ndig, i) for i in range(n)]
    t0 = time.monotonic()
    done = [0]
    lock = threading.Lock()

    def put(i):
        be.put(keys[i], blobs[i], event=False)
        with lock:
            done[0] += 1
            if done[0] % 1000 == 0:
                print("python:   seeded %d of %d (%.0f/s)" % (done[0], n, done[0] / (time.monotonic() - t0)),
                      file=sys.stderr, flush=True)

    with cf.ThreadPoolExecutor(THREADS) as ex:
        for f in cf.as_completed([ex.submit(put, i) for i in range(n)]):
            f.result()
    secs = time.monotonic() - t0
    got = be.listing()
    if len(got) != n or any(v[0] != KIB for v in got.values()):
        die("seeding: %s holds %d objects under %s, want %d of %d bytes" % (src, len(got), PREFIX, n, KIB))
    print("%d %.1f" % (n, secs))


def sub_create(name):
    st, data, _ = pubsub("PUT", name, {"topic": "projects/test-project/topics/gcs-events",
                                       "ackDeadlineSeconds": 10})
    if st != 200:
        die("creating the subscription %s: HTTP %d %s" % (name, st, data[:200]))
    print("ok")


def teardown(src, queue, sub):
    """Subscription first (the deletes publish OBJECT_DELETE), then the objects, the bucket /
    container and the queue."""
    failed = False
    if sub != "-":
        try:
            pubsub("DELETE", sub)
        except Exception as e:   # noqa: BLE001 (go on with the rest)
            print("python: deleting the subscription %s failed: %s" % (sub, e), file=sys.stderr)
            failed = True
    try:
        n = backend(src, queue).drop()
    except Exception as e:   # noqa: BLE001
        print("python: removing %s / queue %s failed: %s" % (src, queue, e), file=sys.stderr)
        sys.exit(2)
    print("python: removed %s (%d objects)%s%s" % (src, n, " and queue " + queue if queue != "-" else "",
                                                  " and subscription " + sub if sub != "-" else ""),
          file=sys.stderr)
    if failed:
        sys.exit(2)


def sas(container):
    """A container SAS URL (read, list) for rclone, signed with Azurite's well-known key."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    token = generate_container_sas(AZ_ACCOUNT, container, account_key=AZ_KEY,
                                   permission=ContainerSasPermissions(read=True, list=True),
                                   expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=12))
    print("%s/%s?%s" % (os.environ["BENCH_AZ_BLOB"].rstrip("/"), container, token))


# ---- checks ----------------------------------------------------------------------------

def local_state(dst, key):
    data = read_or_none(local_path(dst, key))
    return None if data is None else (len(data), md5b64(data))


def verify(src, dst, list_in):
    """Every key of list_in is the same in the local folder dst as in src (size and MD5, or
    absent in both)."""
    be = backend(src)
    with open(list_in) as f:
        keys = [l.rstrip("\n") for l in f if l.strip()]
    want = be.listing()
    bad = []
    for k in keys:
        w = want.get(k)
        if w is not None and w[1] is None:     # no MD5 listed: compare the bytes
            data = be.get(k)
            w = None if data is None else (len(data), md5b64(data))
        if local_state(dst, k) != w:
            bad.append(k)
    if bad:
        die("%d changed keys differ between %s and %s, e.g. %s" % (len(bad), src, dst, ", ".join(bad[:5])))
    print("ok")


def same(src, dst):
    """The local folder dst holds exactly src's objects under data/ (size and MD5). Prints:
    count bytes."""
    be = backend(src)
    want = be.listing()
    have = set()
    for root, _, names in os.walk(dst):
        for nm in names:
            have.add(PREFIX + os.path.relpath(os.path.join(root, nm), dst))
    missing = sorted(set(want) - have)
    extra = sorted(have - set(want))
    diff = []
    for k in sorted(set(want) & have):
        w = want[k]
        if w[1] is None:
            data = be.get(k)
            w = None if data is None else (len(data), md5b64(data))
        if local_state(dst, k) != w:
            diff.append(k)
    if missing or extra or diff:
        die("%s differs from %s/%s: %d missing (e.g. %s), %d extra (e.g. %s), %d different (e.g. %s)"
            % (dst, src, PREFIX, len(missing), ", ".join(missing[:3]), len(extra), ", ".join(extra[:3]),
               len(diff), ", ".join(diff[:3])))
    print("%d %d" % (len(want), sum(v[0] for v in want.values())))


# ---- time-to-equal -------------------------------------------------------------------

def changes(src, queue, dst, run, n_changes, timeout, list_out):
    """Apply n_changes to src (50% overwrites with a new size, 30% new, 20% deletes, spread
    over the folders; THREADS at once; azqueue: each followed by its event on the queue), then
    read the changed paths in the local folder dst every ~2 ms until each holds the new bytes
    (or is gone). Prints: ms_to_equal passes apply_ms. Writes the changed keys to list_out."""
    be = backend(src, queue)
    n_over, n_new = n_changes // 2, n_changes * 3 // 10
    n_del = n_changes - n_over - n_new
    rng = random.Random(7919 * run + 17)
    files, sizes = {}, {}
    for k, (size, _) in be.listing().items():
        m = FOLDER_RE.match(k)
        if m:
            files.setdefault(m.group(1), []).append(k)
            sizes[k] = size
    folders = sorted(files)
    if not folders:
        die("no seeded folder in " + src)
    rng.shuffle(folders)
    for d in folders:
        files[d].sort()
        rng.shuffle(files[d])
    picked = []
    k = 0
    while len(picked) < n_over + n_del:
        d = folders[k % len(folders)]
        k += 1
        if files[d]:
            picked.append(files[d].pop())
        elif k > 10 * (n_over + n_del) + len(folders):
            die("not enough objects to change in " + src)
    new = ["data/%s/new-r%03d-%03d" % (folders[(n_over + n_del + j) % len(folders)], run, j) for j in range(n_new)]
    ops = [("over", p) for p in picked[:n_over]] + [("del", p) for p in picked[n_over:]] + [("new", p) for p in new]
    rng.shuffle(ops)
    expect = {}          # key -> bytes, or None for deleted
    for op, p in ops:    # content prepared before the clock starts
        if op == "del":
            expect[p] = None
            continue
        cur = sizes[p] if op == "over" else -1
        size = cur
        while size == cur:
            size = rng.randint(KIB + 1, 2 * KIB - 1)
        expect[p] = fresh(size)

    def apply(op_p):
        op, p = op_p
        if op == "del":
            be.delete(p)
        else:
            be.put(p, expect[p])
        return time.monotonic()

    t_first = time.monotonic()
    with cf.ThreadPoolExecutor(THREADS) as ex:
        done = list(ex.map(apply, ops))
    t_last = max(done)   # the moment the last change (azqueue: its event) was complete
    pending = dict(expect)
    passes = 0
    deadline = t_last + timeout
    while True:
        passes += 1
        for p in list(pending):
            if read_or_none(local_path(dst, p)) == pending[p]:
                del pending[p]
        now = time.monotonic()
        if not pending:
            bad = [p for p, e in expect.items() if read_or_none(local_path(dst, p)) != e]
            if not bad:
                break
            for p in bad:
                pending[p] = expect[p]
        if now > deadline:
            print("python: %d of %d changed keys still differ in %s %d s after the last change, e.g. %s"
                  % (len(pending), len(expect), dst, timeout, ", ".join(sorted(pending)[:5])), file=sys.stderr)
            sys.exit(3)
        time.sleep(0.002)
    with open(list_out, "w") as f:
        f.write("".join(p + "\n" for p in sorted(expect)))
    print("%.3f %d %.3f" % ((now - t_last) * 1000, passes, (t_last - t_first) * 1000))


# ---- latency -------------------------------------------------------------------------

def _poll(dst, sub, n_folders, total, rate, t0, writer_done, arrived, grace):
    """Poller process: object i is looked for in dst once it is due (t0 + i/rate), until it is
    there with its full size. Few pending in a folder: stat each; many: list the folder."""
    pending = [dict() for _ in range(n_folders)]     # folder -> {name: index}
    dirs = [os.path.join(dst, sub, "d%03d" % j) for j in range(n_folders)]
    seen = 0
    while True:
        due = min(total, int((time.monotonic() - t0) * rate) + 1) if time.monotonic() >= t0 else 0
        while seen < due:
            pending[seen % n_folders]["f-%06d" % seen] = seen
            seen += 1
        for j in range(n_folders):
            pend = pending[j]
            if not pend:
                continue
            if len(pend) > 32:
                try:
                    names = set(os.listdir(dirs[j]))
                except FileNotFoundError:
                    continue
                cand = [nm for nm in pend if nm in names]
            else:
                cand = list(pend)
            for name in cand:
                try:
                    st = os.stat(os.path.join(dirs[j], name))
                except FileNotFoundError:
                    continue
                if st.st_size == KIB:
                    arrived[pend.pop(name)] = time.monotonic()
        done_at = writer_done.value
        if done_at > 0 and seen == total and not any(pending):
            return
        if done_at > 0 and time.monotonic() > done_at + grace:
            return
        time.sleep(0.002)


def inbox_count(db):
    """Keys waiting in the daemon's inbox (received, not yet applied), read-only; -1: unknown."""
    try:
        import sqlite3
        c = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(db), uri=True, timeout=5)
        try:
            return c.execute("SELECT COUNT(*) FROM inbox").fetchone()[0]
        finally:
            c.close()
    except Exception:   # noqa: BLE001 (a figure for the report, not a check)
        return -1


def latency(src, queue, dst, db, rate, seconds, n_folders, grace, nthreads):
    """Write rate*seconds new 1 KiB objects (data/lat-R/dXXX/f-NNNNNN) at `rate` per second
    from nthreads threads (object i due at t0 + i/rate; azqueue: blob, then its event),
    recording each write's completion; a forked poller records each one's arrival in the local
    folder dst. Prints: total missing p50 p99 max mean achieved behind_ms during
    backlog_at_writer_end backlog_at_end (messages in the daemon's queue; -1: unknown)
    inbox_at_writer_end (keys in the daemon's inbox, its database db)."""
    total = rate * seconds
    sub = "lat-%d" % rate
    keys = ["%s%s/d%03d/f-%06d" % (PREFIX, sub, i % n_folders, i) for i in range(total)]
    ctx = mp.get_context("fork")
    arrived = ctx.Array("d", total, lock=False)
    writer_done = ctx.Value("d", 0.0, lock=False)
    t0 = time.monotonic() + 0.5
    poller = ctx.Process(target=_poll, args=(dst, sub, n_folders, total, rate, t0, writer_done, arrived,
                                             grace), daemon=True)
    poller.start()           # forked before any thread or connection exists
    be = backend(src, queue)
    blobs = [fresh(KIB) for _ in range(total)]
    written = [0.0] * total
    behind = [0.0] * nthreads
    errors = []

    def writer(k):
        for i in range(k, total, nthreads):
            target = t0 + i / rate
            now = time.monotonic()
            if now < target:
                time.sleep(target - now)
            else:
                behind[k] = max(behind[k], now - target)
            try:
                be.put(keys[i], blobs[i])
            except Exception as e:   # noqa: BLE001
                errors.append("%s: %s" % (keys[i], e))
                return
            written[i] = time.monotonic()

    ts = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    writer_done.value = time.monotonic()
    if errors:
        poller.terminate()
        die("%d writes failed at %d/s, e.g. %s" % (len(errors), rate, errors[0]))
    backlog_w = be.backlog()
    inbox_w = inbox_count(db)
    poller.join(grace + 60)
    if poller.is_alive():
        poller.terminate()
        die("the latency poller did not finish")
    backlog_end = be.backlog()
    lat = sorted((arrived[i] - written[i]) * 1000 for i in range(total) if arrived[i] > 0)
    missing = total - len(lat)
    if missing:
        miss = [keys[i] for i in range(total) if not arrived[i]]
        print("python: %d of %d objects written at %d/s never arrived, e.g. %s"
              % (missing, total, rate, ", ".join(miss[:5])), file=sys.stderr)
    if not lat:
        lat = [float("nan")]
    ws = sorted(written)
    span = ws[-1] - ws[0]
    achieved = (total - 1) / span if span > 0 else float("inf")
    during = sum(1 for i in range(total) if 0 < arrived[i] <= writer_done.value)
    print("%d %d %.1f %.1f %.1f %.1f %.1f %.1f %d %d %d %d" % (
        total, missing, pct(lat, 0.50), pct(lat, 0.99), lat[-1], sum(lat) / len(lat), achieved,
        max(behind) * 1000, during, backlog_w, backlog_end, inbox_w))


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "setup":
        setup(a[0], a[1], int(a[2]), int(a[3]))
    elif cmd == "sub-create":
        sub_create(a[0])
    elif cmd == "sas":
        sas(a[0])
    elif cmd == "changes":
        changes(a[0], a[1], a[2], int(a[3]), int(a[4]), float(a[5]), a[6])
    elif cmd == "verify":
        verify(a[0], a[1], a[2])
    elif cmd == "same":
        same(a[0], a[1])
    elif cmd == "latency":
        latency(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]), float(a[7]), int(a[8]))
    elif cmd == "teardown":
        teardown(a[0], a[1], a[2])
    else:
        die("unknown command " + cmd)


if __name__ == "__main__":
    main()
PYEOF
fi

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

# ---------------------------------------------------------------------------------------
# S3 mode (BENCH_DAEMON_MODE=s3): moto S3 → moto S3, SRC's notifications through SQS
# ---------------------------------------------------------------------------------------
S3_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
S3PYTHON="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/venv/bin/python"   # scripts/services.sh's venv
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
s3py() { "${S3ENV[@]}" "$S3PYTHON" "$S3_PY" "$@"; }

# s3_same A B WHO: bucket B's data/ equals A's (every key with its size and ETag), else die
s3_same() {
    local out
    out=$(s3py same "$1" "$2") || die "$3: s3://$2/data differs from s3://$1/data (above)"
    log "  $3: s3://$2/data equals s3://$1/data ($out objects/bytes)"
}

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
    [[ -x "$S3PYTHON" ]] || die "$S3PYTHON not found (scripts/services.sh install makes it)"
    "${S3ENV[@]}" "$S3PYTHON" -c 'import boto3' 2>/dev/null || die "$S3PYTHON has no boto3 (scripts/services.sh install)"

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
    : >"$DAEMON_LOG"
    local t_start i
    t_start=$(now_s)
    "${S3ENV[@]}" "$SLATE" sync "s3://$B_SRC/data" "s3://$B_DST/data" --events "sqs://$Q_SLATE" \
        --db "$DB" --drift-check-secs 0 --quiet >"$DAEMON_LOG" 2>&1 &
    DAEMON_PID=$!
    for ((i = 0; ; i++)); do
        grep -q 'slate: following changes of' "$DAEMON_LOG" && break
        daemon_alive "during the backfill"
        ((i < BACKFILL_TIMEOUT * 10)) || die "no 'slate: following changes of' line within $BACKFILL_TIMEOUT s (BENCH_BACKFILL_TIMEOUT); log: $(tail -n 5 "$DAEMON_LOG")"
        ((i % 300 == 299)) && log "  backfill: still running after $(((i + 1) / 10)) s"
        sleep 0.1
    done
    BACKFILL_S=$(awk -v a="$t_start" -v b="$(now_s)" 'BEGIN {printf "%.1f", b - a}')
    BACKFILL_LINE=$(grep -E '^sync: ' "$DAEMON_LOG" | tail -n 1 || true)
    BACKFILL_HWM=$(daemon_kib VmHWM)
    log "  backfill done in $BACKFILL_S s (${BACKFILL_LINE:-no summary line}); daemon VmHWM $((BACKFILL_HWM / 1024)) MiB"
    s3_same "$B_SRC" "$B_DST" "slate backfill"
    s3py witness-on "$B_DST" "$Q_WITNESS" >/dev/null || die "configuring DST_slate's notifications failed"

    # ---- 1. time-to-equal ------------------------------------------------------------
    : >"$WORK/res.tte.slate"
    local run list tte_ms events apply_ms confirms o
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
        o="$WORK/tte.rclone.out"
        grep -Eq "^Transferred: +80 / 80, 100%" "$o" || die "rclone sync (run $run): want 80 objects transferred, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
        grep -Eq "^Deleted: +20 \(files\)" "$o" || die "rclone sync (run $run): want 20 objects deleted, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
        grep -E '^Checks: ' "$o" | tail -n 1 | awk '{print $2}' >>"$WORK/res.tte.rclone.checks"
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
        if ((missing > 0)); then
            tail -n 20 "$DAEMON_LOG" >&2
            LAT_FAIL="$missing of $files objects written at $r/s had not arrived in DST_slate $GRACE s after the writer stopped (writer achieved $achieved/s; p50 $p50 ms, p99 $p99 ms of the arrived ones; the daemon's queue still held $ble messages)"
            log "FAILED: $LAT_FAIL; stopping here (report follows)"
            break
        fi
    done

    if [[ -z "$LAT_FAIL" ]]; then
        log "checking that DST_slate equals SRC entirely (latency objects included)"
        s3_same "$B_SRC" "$B_DST" "slate (at the end)"
    fi
    FINAL_HWM=$(daemon_kib VmHWM)
    FINAL_RSS=$(daemon_kib VmRSS)
    DAEMON_CPU_TOTAL=$(daemon_cpu)
    log "stopping the daemon (SIGTERM)"
    stop_daemon
    [[ "$DAEMON_RC" == 0 ]] || die "the slate daemon exited with status $DAEMON_RC on SIGTERM (want 0); log: $(tail -n 5 "$DAEMON_LOG")"
    WARNS=$(grep -ciE 'warn|error' "$DAEMON_LOG" || true)

    # ---- report ------------------------------------------------------------------------
    report_common "20000/3/200 500/20"
    local label="S3 (moto) + SQS" checks met
    checks=$(median 1 "$WORK/res.tte.rclone.checks")
    {
        echo "## slate daemon benchmark, S3 mode$non_default"
        echo
        report_env_lines
        echo "- S3 (moto $("$S3PYTHON" -c 'import moto; print(moto.__version__)' 2>/dev/null || echo '?') on $S3_ENDPOINT) → the same moto, buckets created for this run; SRC seeded with $N × 1 KiB random objects (\`data/dNNN/f-NNNNNN\`, $PER_FOLDER a folder) before its notifications were configured; the daemon follows SRC's real S3 event notifications (ObjectCreated:*, ObjectRemoved:*) through an SQS queue."
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
        if [[ -n "$LAT_FAIL" ]]; then
            echo "- **FAILED**: $LAT_FAIL. The benchmark stopped there: later rates did not run and DST_slate was not compared with SRC at the end."
        fi
    } >"$WORK/report.md"
    report_publish
    [[ -z "$LAT_FAIL" ]] || die "$LAT_FAIL"
    report_strict
}

if [[ "$MODE" == s3 ]]; then
    s3_mode
    exit 0
fi

# ---------------------------------------------------------------------------------------
# Cloud modes (BENCH_DAEMON_MODE=pubsub / azqueue): GCS or Azure Blob → a local folder
# ---------------------------------------------------------------------------------------
CLOUDPYTHON="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}/venv/bin/python"   # scripts/services.sh's venv

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
cloud_same() {
    local out
    out=$(cloudpy same "$C_SRC" "$2") || die "$1: $2 differs from $SRC_URL (above)"
    log "  $1: $2 equals $SRC_URL ($out objects/bytes)"
}

cloud_mode() {
    command -v curl >/dev/null || die "curl not found"
    command -v ss >/dev/null || die "ss not found (iproute2): needed to find the emulators' processes"
    [[ -x "$CLOUDPYTHON" ]] || die "$CLOUDPYTHON not found (scripts/services.sh install makes it)"
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
    CLOUDPY_CMD=("${CLOUD_ENV[@]}" BENCH_CLOUD_MODE="$MODE" BENCH_CLOUD_THREADS="$CLOUD_THREADS"
                 BENCH_GCS_ENDPOINT="$GCS_ENDPOINT" BENCH_PUBSUB_HOST="$PUBSUB_HOST"
                 BENCH_AZ_BLOB="$AZ_BLOB" BENCH_AZ_QUEUE="$AZ_QUEUE" "$CLOUDPYTHON" "$CLOUD_PY")
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
        "$CLOUDPYTHON" -c 'import azure.storage.blob' 2>/dev/null || die "$CLOUDPYTHON has no azure-storage-blob (scripts/services.sh install)"
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
    : >"$DAEMON_LOG"
    local t_start i
    t_start=$(now_s)
    "${CLOUD_ENV[@]}" "$SLATE" sync "$SRC_URL" "$DST_SLATE" --events "$events_url" \
        --db "$DB" --drift-check-secs 0 --quiet >"$DAEMON_LOG" 2>&1 &
    DAEMON_PID=$!
    for ((i = 0; ; i++)); do
        grep -q 'slate: following changes of' "$DAEMON_LOG" && break
        daemon_alive "during the backfill"
        ((i < BACKFILL_TIMEOUT * 10)) || die "no 'slate: following changes of' line within $BACKFILL_TIMEOUT s (BENCH_BACKFILL_TIMEOUT); log: $(tail -n 5 "$DAEMON_LOG")"
        ((i % 300 == 299)) && log "  backfill: $(count_and_bytes "$DST_SLATE" | awk '{print $1}') files in DST_slate after $(((i + 1) / 10)) s"
        sleep 0.1
    done
    BACKFILL_S=$(awk -v a="$t_start" -v b="$(now_s)" 'BEGIN {printf "%.1f", b - a}')
    BACKFILL_LINE=$(grep -E '^sync: |backfill: sync: ' "$DAEMON_LOG" | tail -n 1 || true)
    BACKFILL_HWM=$(daemon_kib VmHWM)
    log "  backfill done in $BACKFILL_S s (${BACKFILL_LINE:-no summary line: --quiet hides the info log}); daemon VmHWM $((BACKFILL_HWM / 1024)) MiB"
    cloud_same "slate backfill" "$DST_SLATE"

    # ---- 1. time-to-equal ------------------------------------------------------------
    : >"$WORK/res.tte.slate"
    local run list tte_ms passes apply_ms o
    for ((run = 1; run <= RUNS; run++)); do
        log "time-to-equal, run $run/$RUNS: $CHANGES changes to SRC$([[ "$MODE" == azqueue ]] && echo ", each followed by its event on the queue")"
        daemon_alive "before run $run"
        list="$WORK/changed-$run.txt"
        out=$(cloudpy changes "$C_SRC" "$C_QUEUE" "$DST_SLATE" "$run" "$CHANGES" "$EQUAL_TIMEOUT" "$list") \
            || { tail -n 20 "$DAEMON_LOG" >&2; die "slate did not make DST_slate equal on the $CHANGES changed keys (run $run); daemon log tail above"; }
        read -r tte_ms passes apply_ms <<<"$out"
        echo "$tte_ms $passes $apply_ms" >>"$WORK/res.tte.slate"
        log "  slate: DST_slate equal on all $CHANGES keys ${tte_ms} ms after the last change ($passes poll passes; the changes took ${apply_ms} ms)"
        [[ "$(wc -l <"$list")" == "$CHANGES" ]] || die "run $run: $(wc -l <"$list") changed keys listed, want $CHANGES"

        run_timed tte.rclone "${RCLONE_CLOUD[@]}" sync "$rclone_remote" "$DST_RCLONE" -v
        o="$WORK/tte.rclone.out"
        grep -Eq "^Transferred: +80 / 80, 100%" "$o" || die "rclone sync (run $run): want 80 objects transferred, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
        grep -Eq "^Deleted: +20 \(files\)" "$o" || die "rclone sync (run $run): want 20 objects deleted, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
        cloudpy verify "$C_SRC" "$DST_RCLONE" "$list" >/dev/null || die "rclone sync (run $run) left DST_rclone different on the changed keys"
        cloudpy verify "$C_SRC" "$DST_SLATE" "$list" >/dev/null || die "slate (run $run): DST_slate no longer equal on the changed keys"
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
        if ((missing > 0)); then
            tail -n 20 "$DAEMON_LOG" >&2
            LAT_FAIL="$missing of $files objects written at $r/s had not arrived in DST_slate $GRACE s after the writer stopped (writer achieved $achieved/s; p50 $p50 ms, p99 $p99 ms of the arrived ones)"
            log "FAILED: $LAT_FAIL; stopping here (report follows)"
            break
        fi
    done

    if [[ -z "$LAT_FAIL" ]]; then
        log "checking that DST_slate equals SRC entirely (latency objects included)"
        cloud_same "slate (at the end)" "$DST_SLATE"
    fi
    FINAL_HWM=$(daemon_kib VmHWM)
    FINAL_RSS=$(daemon_kib VmRSS)
    DAEMON_CPU_TOTAL=$(daemon_cpu)
    log "stopping the daemon (SIGTERM)"
    stop_daemon
    [[ "$DAEMON_RC" == 0 ]] || die "the slate daemon exited with status $DAEMON_RC on SIGTERM (want 0); log: $(tail -n 5 "$DAEMON_LOG")"
    WARNS=$(grep -ciE 'warn|error' "$DAEMON_LOG" || true)
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
        if [[ -n "$LAT_FAIL" ]]; then
            echo "- **FAILED**: $LAT_FAIL. The benchmark stopped there: later rates did not run and DST_slate was not compared with SRC at the end."
        fi
    } >"$WORK/report.md"
    report_publish
    [[ -z "$LAT_FAIL" ]] || die "$LAT_FAIL"
    report_strict
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
got=$(python3 "$PY" seed "$SRC" "$N" "$PER_FOLDER") || die "seeding failed"
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
: >"$DAEMON_LOG"   # exists before the first grep below (the daemon's redirection runs in the child)
t_start=$(now_s)
"$SLATE" sync "$SRC" "$DST_SLATE" --db "$DB" --drift-check-secs 0 --quiet >"$DAEMON_LOG" 2>&1 &
DAEMON_PID=$!
for ((i = 0; ; i++)); do
    grep -q 'slate: following changes of' "$DAEMON_LOG" && break
    daemon_alive "during the backfill"
    ((i < BACKFILL_TIMEOUT * 10)) || die "no 'slate: following changes of' line within $BACKFILL_TIMEOUT s (BENCH_BACKFILL_TIMEOUT); log: $(tail -n 5 "$DAEMON_LOG")"
    ((i % 300 == 299)) && log "  backfill: $(count_and_bytes "$DST_SLATE" | awk '{print $1}') files in DST_slate after $(((i + 1) / 10)) s"
    sleep 0.1
done
BACKFILL_S=$(awk -v a="$t_start" -v b="$(now_s)" 'BEGIN {printf "%.1f", b - a}')
BACKFILL_LINE=$(grep -E '^sync: ' "$DAEMON_LOG" | tail -n 1 || true)
BACKFILL_HWM=$(daemon_kib VmHWM)
log "  backfill done in $BACKFILL_S s (${BACKFILL_LINE:-no summary line}); daemon VmHWM $((BACKFILL_HWM / 1024)) MiB"
same_tree "$SRC" "$DST_SLATE" "slate backfill"

# ---------------------------------------------------------------------------------------
# 1. time-to-equal
# ---------------------------------------------------------------------------------------
: >"$WORK/res.tte.slate"
for ((run = 1; run <= RUNS; run++)); do
    log "time-to-equal, run $run/$RUNS: $CHANGES changes to SRC"
    daemon_alive "before run $run"
    list="$WORK/changed-$run.txt"
    out=$(python3 "$PY" changes "$SRC" "$DST_SLATE" "$run" "$CHANGES" "$EQUAL_TIMEOUT" "$list") \
        || { tail -n 20 "$DAEMON_LOG" >&2; die "slate did not make DST_slate equal on the $CHANGES changed paths (run $run); daemon log tail above"; }
    read -r tte_ms passes apply_ms <<<"$out"
    echo "$tte_ms $passes $apply_ms" >>"$WORK/res.tte.slate"
    log "  slate: DST_slate equal on all $CHANGES paths ${tte_ms} ms after the last change ($passes poll passes; the changes took ${apply_ms} ms)"
    [[ "$(wc -l <"$list")" == "$CHANGES" ]] || die "run $run: $(wc -l <"$list") changed paths listed, want $CHANGES"

    run_timed tte.rclone "${RCLONE[@]}" sync "$SRC" "$DST_RCLONE" -v
    o="$WORK/tte.rclone.out"
    grep -Eq "^Transferred: +80 / 80, 100%" "$o" || die "rclone sync (run $run): want 80 files transferred, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
    grep -Eq "^Deleted: +20 \(files\)" "$o" || die "rclone sync (run $run): want 20 files deleted, got: $(grep -E '^(Transferred|Checks|Deleted|Errors)' "$o" | tr '\n' ';')"
    python3 "$PY" verify "$SRC" "$DST_RCLONE" "$list" >/dev/null || die "rclone sync (run $run) left DST_rclone different on the changed paths"
    python3 "$PY" verify "$SRC" "$DST_SLATE" "$list" >/dev/null || die "slate (run $run): DST_slate no longer equal on the changed paths"
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
    out=$(python3 "$PY" latency "$SRC" "$DST_SLATE" "$r" "$SECONDS_PER_RATE" "$LAT_FOLDERS" "$GRACE") \
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
FINAL_HWM=$(daemon_kib VmHWM)
FINAL_RSS=$(daemon_kib VmRSS)
DAEMON_CPU_TOTAL=$(daemon_cpu)
log "stopping the daemon (SIGTERM)"
stop_daemon
[[ "$DAEMON_RC" == 0 ]] || die "the slate daemon exited with status $DAEMON_RC on SIGTERM (want 0); log: $(tail -n 5 "$DAEMON_LOG")"
WARNS=$(grep -ciE 'warn|error' "$DAEMON_LOG" || true)

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
