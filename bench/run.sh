#!/usr/bin/env bash
# bench/run.sh — compare slate against its peers (rclone, cp) in the same run.
#
# Scenarios (each run BENCH_RUNS times, alternating slate / peer, medians reported):
#   1. large: BENCH_LARGE_N × BENCH_LARGE_MB MiB objects, S3 → local disk   (peer: rclone)
#   2. small: BENCH_SMALL_N × BENCH_SMALL_KB KiB objects, S3 → S3           (peer: rclone)
#   3. local: one BENCH_LOCAL_MB MiB file, local folder → local folder      (peer: cp)
#
# The S3 server is s3s-fs (a fast Rust S3 server over a folder) on 127.0.0.1, started and
# stopped by this script. Everything talks to 127.0.0.1 only. Prints one markdown table on
# stdout (progress goes to stderr) and writes the same report to bench/last-run.md.
#
# See bench/README.md for the environment knobs; ../shared/TESTING.md for the background.
set -euo pipefail

# ---------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------
# The exact command line, for the report: the knobs set in the environment (read before
# the defaults below fill them in).
BENCH_CMD=""
for v in SLATE_BIN SLATE_TEST_HOME SLATE_S3S_PORT BENCH_DIR BENCH_LARGE_MB BENCH_LARGE_N \
         BENCH_SMALL_N BENCH_SMALL_KB BENCH_LOCAL_MB BENCH_RUNS BENCH_REPORT BENCH_STRICT; do
    if [[ -n "${!v+x}" ]]; then BENCH_CMD+="$v=$(printf '%q' "${!v}") "; fi
done
BENCH_CMD+="bench/run.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

SLATE_TEST_HOME="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}"  # cached installs
BENCH_DIR="${BENCH_DIR:-/tmp/slate-bench}"                     # scratch parent
PORT="${SLATE_S3S_PORT:-8014}"                                 # s3s-fs port
LARGE_MB="${BENCH_LARGE_MB:-512}"    # size of each large object, MiB
LARGE_N="${BENCH_LARGE_N:-4}"        # number of large objects
SMALL_N="${BENCH_SMALL_N:-20000}"    # number of small objects
SMALL_KB="${BENCH_SMALL_KB:-16}"     # size of each small object, KiB
LOCAL_MB="${BENCH_LOCAL_MB:-2048}"   # size of the local → local file, MiB
RUNS="${BENCH_RUNS:-3}"              # runs per tool per scenario
REPORT="${BENCH_REPORT:-$SCRIPT_DIR/last-run.md}"              # where the report goes
KEEP="${BENCH_KEEP:-0}"              # 1 = keep the scratch dir (for debugging)
STRICT="${BENCH_STRICT:-0}"          # 1 = exit 3 when a target is missed

S3S_VERSION=0.14.1
S3S_BIN="$SLATE_TEST_HOME/s3s-fs/bin/s3s-fs"
ENDPOINT="http://127.0.0.1:$PORT"
SRC_BUCKET=bench-src
DST_BUCKET=bench-dst

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '\n[bench] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    echo "Knobs: see $SCRIPT_DIR/README.md"
    exit 0
fi
[[ $# -eq 0 ]] || die "no arguments expected (configure with BENCH_* environment variables)"

for v in PORT LARGE_MB LARGE_N SMALL_N SMALL_KB LOCAL_MB RUNS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done

# ---------------------------------------------------------------------------------------
# Install what we need (idempotent)
# ---------------------------------------------------------------------------------------
as_root() {
    if [[ "$(id -u)" == 0 ]]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root (or sudo) to run: $*"; fi
}

# apt_install PKG: install a Debian package; `apt-get update` only if apt does not know it
# (or the first install attempt fails, e.g. because the package lists are stale).
apt_install() {
    local pkg=$1 policy
    policy=$(apt-cache policy "$pkg" 2>/dev/null || true)   # no `| grep -q`: SIGPIPE + pipefail
    if [[ "$policy" != *"Candidate: "[0-9]* ]]; then
        log "apt-get update (no candidate for $pkg)"
        as_root apt-get update -qq >&2
    fi
    log "apt-get install -y $pkg"
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2; then
        as_root apt-get update -qq >&2
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2 \
            || die "could not install $pkg"
    fi
}

command -v rclone >/dev/null || apt_install rclone
[[ -x /usr/bin/time ]] || apt_install time
/usr/bin/time -f '%M' true 2>/dev/null || die "/usr/bin/time is not GNU time"

if ! { [[ -x "$S3S_BIN" ]] && [[ "$("$S3S_BIN" --version 2>/dev/null)" == *" $S3S_VERSION"* ]]; }; then
    log "installing s3s-fs $S3S_VERSION into $SLATE_TEST_HOME/s3s-fs (2-4 minutes, once)"
    mkdir -p "$SLATE_TEST_HOME"
    cargo install s3s-fs --version "$S3S_VERSION" --features binary --locked \
        --root "$SLATE_TEST_HOME/s3s-fs" >&2 || die "cargo install s3s-fs failed"
fi

# ---------------------------------------------------------------------------------------
# Build slate (unless SLATE_BIN points at a binary)
# ---------------------------------------------------------------------------------------
if [[ -n "${SLATE_BIN:-}" ]]; then
    SLATE="$SLATE_BIN"
else
    log "cargo build --release in $REPO_ROOT"
    (cd "$REPO_ROOT" && cargo build --release >&2) || die "cargo build --release failed"
    SLATE="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/slate"
fi
[[ -x "$SLATE" ]] || die "slate binary not found or not executable: $SLATE"
"$SLATE" copy --help >/dev/null 2>&1 || die "'$SLATE copy --help' failed"

# ---------------------------------------------------------------------------------------
# Scratch space, cleanup, disk check
# ---------------------------------------------------------------------------------------
mkdir -p "$BENCH_DIR"
WORK="$(mktemp -d "$BENCH_DIR/run.XXXXXX")"
DATA="$WORK/s3data"          # s3s-fs root: one folder per bucket
S3S_PID=""

cleanup() {
    local rc=$?
    if [[ -n "$S3S_PID" ]] && kill -0 "$S3S_PID" 2>/dev/null; then
        kill "$S3S_PID" 2>/dev/null || true
        wait "$S3S_PID" 2>/dev/null || true
    fi
    if [[ "$KEEP" == 1 ]]; then log "kept scratch dir $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

LARGE_BYTES=$((LARGE_MB * 1024 * 1024))
SMALL_BYTES=$((SMALL_KB * 1024))
LOCAL_BYTES=$((LOCAL_MB * 1024 * 1024))
# Peak use (MiB): large source + destination, small seed/source/destination (+ s3s-fs's two
# JSON files per object, one block each), local source + destination, plus a margin.
need_mb=$((2 * LARGE_N * LARGE_MB + 3 * SMALL_N * (SMALL_KB + 8) / 1024 + 2 * LOCAL_MB + 512))
free_mb=$(df -Pm "$WORK" | awk 'NR==2 {print $4}')
((free_mb > need_mb)) || die "need ~${need_mb} MiB free under $BENCH_DIR, have ${free_mb} MiB"

# ---------------------------------------------------------------------------------------
# Clients: rclone (configured by env only) and slate (S3 settings by env)
# ---------------------------------------------------------------------------------------
export RCLONE_CONFIG_S3REMOTE_TYPE=s3
export RCLONE_CONFIG_S3REMOTE_PROVIDER=Other
export RCLONE_CONFIG_S3REMOTE_ENDPOINT="$ENDPOINT"
export RCLONE_CONFIG_S3REMOTE_ACCESS_KEY_ID=testing
export RCLONE_CONFIG_S3REMOTE_SECRET_ACCESS_KEY=testing
export RCLONE_CONFIG_S3REMOTE_REGION=us-east-1
export RCLONE_CONFIG_S3REMOTE_FORCE_PATH_STYLE=true
# The machine sets AWS_CA_BUNDLE, which makes rclone fail with LoadCustomCABundleError.
RCLONE=(env -u AWS_CA_BUNDLE rclone --config /dev/null)
rcl() { "${RCLONE[@]}" "$@"; }
# Two s3s-fs 0.14.1 bugs that rclone 1.60 trips over (real S3 behaves differently):
#  - HEAD on a "folder" key (e.g. bench-src/large, which rclone sends to check whether the
#    path is a single file) answers 500 instead of 404; rclone then retries for ~90 s before
#    going on, and slate (which sends the same probe) gives up with an error after its
#    retries. Both skip the probe when the path ends in "/", so every S3 path given to
#    either tool below ends in "/" (same meaning, one request fewer, same for both).
#  - An empty `delimiter=` (rclone's recursive ListR listing: `size`, `ls`, `--fast-list`)
#    is taken as a real delimiter and returns garbage prefixes, i.e. no objects. rclone
#    copy without --fast-list lists folder by folder (delimiter "/") and is fine; for
#    `rclone size` we pass --disable ListR.

SLATE_CMD=(env -u AWS_PROFILE -u AWS_SESSION_TOKEN
    AWS_ENDPOINT_URL="$ENDPOINT" AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
    AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true "$SLATE")

# ---------------------------------------------------------------------------------------
# Start s3s-fs over a fresh data dir
# ---------------------------------------------------------------------------------------
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "something already listens on 127.0.0.1:$PORT (set SLATE_S3S_PORT)"
fi
mkdir -p "$DATA/$SRC_BUCKET" "$DATA/$DST_BUCKET"

start_s3s() {
    log "starting s3s-fs on $ENDPOINT over $DATA"
    env -u RUST_LOG "$S3S_BIN" --host 127.0.0.1 --port "$PORT" --access-key testing \
        --secret-key testing "$DATA" >>"$WORK/s3s-fs.log" 2>&1 &
    S3S_PID=$!
    local i
    for ((i = 0; ; i++)); do
        kill -0 "$S3S_PID" 2>/dev/null || { cat "$WORK/s3s-fs.log" >&2; die "s3s-fs exited"; }
        if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
        ((i < 100)) || die "s3s-fs did not listen on $PORT within 10 s"
        sleep 0.1
    done
}

stop_s3s() {
    kill "$S3S_PID" 2>/dev/null || true
    wait "$S3S_PID" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || return 0
        sleep 0.1
    done
    die "s3s-fs did not release port $PORT"
}
start_s3s
# A real signed S3 request: the bucket listing must show both buckets.
buckets=$(rcl lsd s3remote: 2>&1) || true
[[ "$buckets" == *" $SRC_BUCKET"* ]] || die "s3s-fs does not list $SRC_BUCKET: $buckets"

# s3s-fs CPU seconds so far (user+sys), to report server work per run.
CLK_TCK=$(getconf CLK_TCK)
server_cpu() { awk -v t="$CLK_TCK" '{printf "%.2f", ($14 + $15) / t}' "/proc/$S3S_PID/stat"; }

# ---------------------------------------------------------------------------------------
# Seed data through S3 PUTs (never by writing into s3s-fs's folder: see TESTING.md)
# ---------------------------------------------------------------------------------------
SEED="$WORK/seed"
mkdir -p "$SEED/large" "$SEED/small" "$WORK/local-src"

log "seeding: $SMALL_N × $SMALL_KB KiB random objects → s3://$SRC_BUCKET/small/"
digits=$(( ${#SMALL_N} > 6 ? ${#SMALL_N} : 6 ))
head -c $((SMALL_N * SMALL_BYTES)) /dev/urandom |
    (cd "$SEED/small" && split -b "$SMALL_BYTES" -a "$digits" -d - obj-)
rcl copy "$SEED/small" "s3remote:$SRC_BUCKET/small/" --no-check-dest \
    --transfers 32 --checkers 32 >&2
rm -rf "$SEED/small"

# s3s-fs keeps two JSON side files per object in one flat folder at its root; deleting and
# re-creating 20,000 objects there makes every later run slower than the one before (seen:
# 17 s, 36 s, 40 s for the same copy), whichever tool runs it. So every small-object run starts
# from a pristine copy of the server's folder, taken right after seeding the small objects.
PRISTINE="$WORK/s3data.pristine"
stop_s3s
cp -a "$DATA" "$PRISTINE"
start_s3s

log "seeding: $LARGE_N × $LARGE_MB MiB random objects → s3://$SRC_BUCKET/large/"
for ((i = 1; i <= LARGE_N; i++)); do
    head -c "$LARGE_BYTES" /dev/urandom >"$SEED/large/large-$i.bin"
done
rcl copy "$SEED/large" "s3remote:$SRC_BUCKET/large/" --no-check-dest --transfers 32 >&2
rm -rf "$SEED/large"


log "seeding: one $LOCAL_MB MiB random file in $WORK/local-src"
head -c "$LOCAL_BYTES" /dev/urandom >"$WORK/local-src/local.bin"

# Check the seed through S3 (count and bytes of each prefix).
check_seed() {
    local prefix=$1 want_n=$2 want_bytes=$3 got
    got=$(rcl size --json --disable ListR "s3remote:$SRC_BUCKET/$prefix/" 2>&1) || die "rclone size failed: $got"
    [[ "$got" == *"\"count\":$want_n,"* && "$got" == *"\"bytes\":$want_bytes"[,}]* ]] \
        || die "seed check of $SRC_BUCKET/$prefix failed: want $want_n objects / $want_bytes bytes, got $got"
}
check_seed large "$LARGE_N" $((LARGE_N * LARGE_BYTES))
check_seed small "$SMALL_N" $((SMALL_N * SMALL_BYTES))

# ---------------------------------------------------------------------------------------
# Timing: run_timed KEY CMD... appends "wall_s peak_rss_kib client_cpu_s server_cpu_s"
# to $WORK/res.KEY. A failing command fails the benchmark, with the tail of its output.
# ---------------------------------------------------------------------------------------
run_timed() {
    local key=$1; shift
    local tf="$WORK/time.out" out="$WORK/$key.out" s0 s1 wall rss usr sys
    s0=$(server_cpu)
    if ! /usr/bin/time -f '%e %M %U %S' -o "$tf" "$@" >"$out" 2>&1; then
        tail -n 30 "$out" >&2; cat "$tf" >&2
        die "command failed ($key): $*"
    fi
    s1=$(server_cpu)
    read -r wall rss usr sys < <(tail -n 1 "$tf")
    awk -v w="$wall" -v r="$rss" -v u="$usr" -v s="$sys" -v a="$s0" -v b="$s1" \
        'BEGIN {if (w < 0.01) w = 0.01; printf "%.2f %d %.2f %.2f\n", w, r, u + s, b - a}' \
        >>"$WORK/res.$key"
    log "  $key: $(tail -n 1 "$WORK/res.$key" |
        awk '{printf "wall %.2f s, peak RSS %.1f MiB, CPU %.2f s, s3s-fs CPU %.2f s", $1, $2/1024, $3, $4}')"
}

# median COLUMN FILE
median() {
    awk -v c="$1" '{print $c}' "$2" | sort -g |
        awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# Fresh, empty local destination; `sync` so the previous run's dirty pages don't bleed in.
fresh_dir() { rm -rf "$1"; mkdir -p "$1"; sync; }

# ---------------------------------------------------------------------------------------
# Correctness checks after each run (a benchmark that copied nothing must fail loudly)
# ---------------------------------------------------------------------------------------
# count_and_bytes DIR -> "files bytes"
count_and_bytes() { find "$1" -type f -printf '%s\n' | awk '{n++; b += $1} END {printf "%d %.0f\n", n, b}'; }

verify_large() {   # verify_large TOOL DIR
    local tool=$1 dir=$2 got f
    got=$(count_and_bytes "$dir")
    [[ "$got" == "$LARGE_N $((LARGE_N * LARGE_BYTES))" ]] \
        || die "$tool large: want $LARGE_N files / $((LARGE_N * LARGE_BYTES)) bytes in $dir, got $got"
    for ((i = 1; i <= LARGE_N; i++)); do
        f=$(find "$dir" -type f -name "large-$i.bin")
        [[ -n "$f" && "$(stat -c %s "$f")" == "$LARGE_BYTES" ]] || die "$tool large: large-$i.bin missing or wrong size"
    done
    f=$(find "$dir" -type f -name "large-$LARGE_N.bin")
    cmp -s "$f" "$DATA/$SRC_BUCKET/large/large-$LARGE_N.bin" || die "$tool large: $f differs from the source"
}

verify_small() {   # verify_small TOOL
    local tool=$1 got f
    got=$(count_and_bytes "$DATA/$DST_BUCKET/small" 2>/dev/null || true)
    [[ "$got" == "$SMALL_N $((SMALL_N * SMALL_BYTES))" ]] \
        || die "$tool small: want $SMALL_N objects / $((SMALL_N * SMALL_BYTES)) bytes in $DST_BUCKET/small, got '$got'"
    f=$(cd "$DATA/$SRC_BUCKET/small" && find . -type f | tail -n 1)
    cmp -s "$DATA/$SRC_BUCKET/small/$f" "$DATA/$DST_BUCKET/small/$f" || die "$tool small: object $f differs"
}

verify_local() {   # verify_local TOOL DIR
    local tool=$1 dir=$2 got
    got=$(count_and_bytes "$dir")
    [[ "$got" == "1 $LOCAL_BYTES" ]] || die "$tool local: want 1 file / $LOCAL_BYTES bytes in $dir, got $got"
    cmp -s "$dir/local.bin" "$WORK/local-src/local.bin" || die "$tool local: $dir/local.bin differs"
}

# Reset the server to the pristine state taken after seeding (small source objects, empty
# destination), then confirm through S3 that the destination prefix is really empty.
clean_dst_small() {
    stop_s3s
    rm -rf "$DATA"
    cp -a "$PRISTINE" "$DATA"
    sync
    start_s3s
    [[ -z "$(rcl lsf "s3remote:$DST_BUCKET/small/" 2>&1)" ]] || die "s3://$DST_BUCKET/small not empty after reset"
}

# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------
DST_LOCAL="$WORK/dst"
for ((run = 1; run <= RUNS; run++)); do
    log "large S3 → local, run $run/$RUNS"
    fresh_dir "$DST_LOCAL"
    run_timed large.slate "${SLATE_CMD[@]}" copy "s3://$SRC_BUCKET/large/" "$DST_LOCAL" --quiet
    verify_large slate "$DST_LOCAL"
    fresh_dir "$DST_LOCAL"
    run_timed large.peer "${RCLONE[@]}" copy "s3remote:$SRC_BUCKET/large/" "$DST_LOCAL" \
        --multi-thread-streams 4
    verify_large rclone "$DST_LOCAL"
done
rm -rf "$DST_LOCAL"

for ((run = 1; run <= RUNS; run++)); do
    log "small S3 → S3, run $run/$RUNS"
    clean_dst_small
    run_timed small.slate "${SLATE_CMD[@]}" copy "s3://$SRC_BUCKET/small/" "s3://$DST_BUCKET/small/" \
        --quiet --transfers 64
    verify_small slate
    clean_dst_small
    run_timed small.peer "${RCLONE[@]}" copy "s3remote:$SRC_BUCKET/small/" "s3remote:$DST_BUCKET/small/" \
        --transfers 64 --checkers 64
    verify_small rclone
done
clean_dst_small

for ((run = 1; run <= RUNS; run++)); do
    log "local → local, run $run/$RUNS"
    fresh_dir "$DST_LOCAL"
    run_timed local.slate "${SLATE_CMD[@]}" copy "$WORK/local-src" "$DST_LOCAL" --quiet
    verify_local slate "$DST_LOCAL"
    fresh_dir "$DST_LOCAL"
    run_timed local.peer cp -r "$WORK/local-src/." "$DST_LOCAL/"
    verify_local cp "$DST_LOCAL"
done
rm -rf "$DST_LOCAL"

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
# row NAME KEY UNIT AMOUNT TPUT_TARGET [RSS_TARGET]: one table line from the medians.
# AMOUNT is what a run moves (bytes for MB/s, objects for obj/s); MB = 10^6 bytes.
MISSED=0
row() {
    local name=$1 key=$2 unit=$3 amount=$4 tput_t=$5 rss_t=${6:-}
    local sw sr sc ss pw pr pc ps line
    sw=$(median 1 "$WORK/res.$key.slate"); pw=$(median 1 "$WORK/res.$key.peer")
    sr=$(median 2 "$WORK/res.$key.slate"); pr=$(median 2 "$WORK/res.$key.peer")
    sc=$(median 3 "$WORK/res.$key.slate"); pc=$(median 3 "$WORK/res.$key.peer")
    ss=$(median 4 "$WORK/res.$key.slate"); ps=$(median 4 "$WORK/res.$key.peer")
    line=$(awk -v name="$name" -v unit="$unit" -v amt="$amount" -v tt="$tput_t" -v rt="$rss_t" \
        -v sw="$sw" -v pw="$pw" -v sr="$sr" -v pr="$pr" -v sc="$sc" -v pc="$pc" -v ss="$ss" -v ps="$ps" '
        function cell(w, c, s) {
            v = (unit == "MB/s") ? amt / 1e6 / w : amt / w
            t = sprintf("%.0f %s (%.2f s; CPU %.1f s", v, unit, w, c)
            if (name ~ /S3/) t = t sprintf(", s3s-fs %.1f s", s)
            return t ")"
        }
        BEGIN {
            ratio = pw / sw; rssr = sr / pr
            ok = (ratio >= tt) && (rt == "" || rssr <= rt)
            target = sprintf("≥%s×", tt) (rt == "" ? "" : sprintf(", RSS ≤%s×", rt))
            printf "| %s | %s | %s | %.2f× | %.1f MiB | %.1f MiB | %.2f× | %s: %s |\n",
                name, cell(sw, sc, ss), cell(pw, pc, ps), ratio, sr / 1024, pr / 1024, rssr,
                target, ok ? "met" : "**MISSED**"
        }')
    [[ "$line" == *MISSED* ]] && MISSED=1
    printf '%s\n' "$line"
}

rclone_version=$(rcl version 2>/dev/null | awk 'NR == 1')
slate_rev=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
[[ -n "$(git -C "$REPO_ROOT" status --porcelain 2>/dev/null)" ]] && slate_rev+="+dirty"
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)
non_default=""
[[ "$LARGE_MB/$LARGE_N/$SMALL_N/$SMALL_KB/$LOCAL_MB/$RUNS" == 512/4/20000/16/2048/3 ]] \
    || non_default=" — **non-default sizes (smoke run): not comparable with the targets**"

{
    echo "## slate benchmark$non_default"
    echo
    echo "- Machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $os, $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Peers: $rclone_version; $(cp --version | awk 'NR == 1'); server: s3s-fs $S3S_VERSION on 127.0.0.1 (same machine)"
    echo "- slate: $SLATE (git $slate_rev)"
    echo "- Command: \`$BENCH_CMD\`"
    echo "- Medians of $RUNS alternating runs (slate, peer, …); MB = 10^6 bytes; peak RSS and CPU (user+sys) from GNU time; s3s-fs = server CPU during the run."
    echo
    echo "| scenario | slate | peer | ratio (slate/peer, >1 = slate faster) | slate peak RSS | peer peak RSS | RSS ratio (slate/peer) | target |"
    echo "|---|---|---|---|---|---|---|---|"
    row "large: $LARGE_N × $LARGE_MB MiB, S3 → local (peer: rclone)" large MB/s \
        $((LARGE_N * LARGE_BYTES)) 1.2 0.5
    row "small: $SMALL_N × $SMALL_KB KiB, S3 → S3 (peer: rclone)" small obj/s "$SMALL_N" 2
    row "local: 1 × $LOCAL_MB MiB file, local → local (peer: cp)" local MB/s "$LOCAL_BYTES" 0.8
    echo
    echo "Commands: \`slate copy s3://$SRC_BUCKET/large/ DIR --quiet\` vs \`rclone copy s3remote:$SRC_BUCKET/large/ DIR --multi-thread-streams 4\`;" \
         "\`slate copy s3://$SRC_BUCKET/small/ s3://$DST_BUCKET/small/ --quiet --transfers 64\` vs \`rclone copy s3remote:$SRC_BUCKET/small/ s3remote:$DST_BUCKET/small/ --transfers 64 --checkers 64\`;" \
         "\`slate copy SRC DST --quiet\` vs \`cp -r SRC/. DST/\`."
} >"$WORK/report.md"

mkdir -p "$(dirname "$REPORT")"
cp "$WORK/report.md" "$REPORT"
cat "$WORK/report.md"
log "report written to $REPORT"

if [[ "$STRICT" == 1 && "$MISSED" == 1 ]]; then exit 3; fi
