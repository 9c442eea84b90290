#!/usr/bin/env bash
# bench/run.sh — compare slate against its peers (rclone, cp) in the same run.
#
# Scenarios (each run BENCH_RUNS times, alternating slate / peer, medians reported):
#   1. large:   BENCH_LARGE_N × BENCH_LARGE_MB MiB objects, S3 → local disk     (peer: rclone)
#   2. small:   BENCH_SMALL_N × BENCH_SMALL_KB KiB objects, S3 → S3             (peer: rclone)
#   3. local:   one BENCH_LOCAL_MB MiB file, local folder → local folder        (peer: cp)
#   4. diff:    `slate diff` of BENCH_DIFF_N objects with 100 differences      (peer: rclone check)
#   5. resync:  2nd `slate sync --once` after 100 changes, + `diff --from-manifest` (rclone sync)
#   6. million: idle 2nd `slate sync --once` of BENCH_MILLION_N local files    (peer: rclone sync)
# BENCH_SCENARIOS picks a subset (default: all). The S3 server is s3s-fs (a fast Rust S3
# server over a folder) on 127.0.0.1, started and stopped by this script. Everything talks to
# 127.0.0.1 only. Prints one markdown table on stdout (progress goes to stderr) and writes the
# same report to bench/last-run.md.
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
         BENCH_SMALL_N BENCH_SMALL_KB BENCH_LOCAL_MB BENCH_SCENARIOS BENCH_DIFF_N BENCH_DIFF_FOLDER BENCH_MILLION_N \
         BENCH_RUNS BENCH_REPORT BENCH_STRICT; do
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
DIFF_N="${BENCH_DIFF_N:-100000}"     # objects per side for diff / resync
DIFF_FOLDER="${BENCH_DIFF_FOLDER:-1000}" # objects per "folder" (sync/dNNN/) for diff / resync
MILLION_N="${BENCH_MILLION_N:-1000000}"  # local files for the idle sync
ALL_SCENARIOS="large small local diff resync million"
SCENARIOS="${BENCH_SCENARIOS:-$ALL_SCENARIOS}"   # which scenarios run (space-separated)
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
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    echo "Knobs: see $SCRIPT_DIR/README.md"
    exit 0
fi
[[ $# -eq 0 ]] || die "no arguments expected (configure with BENCH_* environment variables)"

for v in PORT LARGE_MB LARGE_N SMALL_N SMALL_KB LOCAL_MB DIFF_N DIFF_FOLDER MILLION_N RUNS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
read -ra _picked <<<"$SCENARIOS"
((${#_picked[@]} > 0)) || die "BENCH_SCENARIOS is empty (pick from: $ALL_SCENARIOS)"
SCENARIOS=""
for v in "${_picked[@]}"; do
    [[ " $ALL_SCENARIOS " == *" $v "* ]] || die "unknown scenario '$v' in BENCH_SCENARIOS (pick from: $ALL_SCENARIOS)"
    [[ " $SCENARIOS " == *" $v "* ]] || SCENARIOS+="${SCENARIOS:+ }$v"
done
want() { [[ " $SCENARIOS " == *" $1 "* ]]; }
if { want diff || want resync; } && ((DIFF_N < 100)); then
    die "BENCH_DIFF_N must be at least 100 (100 of the objects change), got $DIFF_N"
fi

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
if want diff || want resync || want million; then
    command -v python3 >/dev/null || apt_install python3
fi
if want diff || want resync; then   # boto3 applies the 100 changes at the source
    python3 -c 'import boto3' 2>/dev/null || apt_install python3-boto3
    python3 -c 'import boto3' 2>/dev/null || die "python3 cannot import boto3"
fi

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
if want diff || want resync || want million; then
    for v in sync diff; do
        "$SLATE" "$v" --help >/dev/null 2>&1 || die "'$SLATE $v --help' failed (a slate without sync/diff?)"
    done
fi

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
# The scenarios run in three phases, each freeing its files before the next: copy (large,
# small, local), sync (diff, resync), million. Peak use (MiB) is the biggest phase's, plus a
# margin. Copy: large source + destination, small seed/source/destination (+ s3s-fs's two
# JSON files per object, one block each), local source + destination. Sync: BENCH_DIFF_N
# objects in two buckets, each 3 blocks, live + pristine copy, + the seed folder. Million:
# two trees of one-block files, + the manifest (~2 KiB a file).
need_copy=0 need_sync=0 need_million=0 need_inodes=0
want large && need_copy=$((need_copy + 2 * LARGE_N * LARGE_MB))
want small && need_copy=$((need_copy + 3 * SMALL_N * (SMALL_KB + 8) / 1024))
want local && need_copy=$((need_copy + 2 * LOCAL_MB))
if want diff || want resync; then
    need_sync=$((DIFF_N * 52 / 1024))
    need_inodes=$((13 * DIFF_N))
fi
if want million; then
    need_million=$((MILLION_N * 10 / 1024))
    ((2 * MILLION_N + MILLION_N / 500 > need_inodes)) && need_inodes=$((2 * MILLION_N + MILLION_N / 500))
fi
need_mb=$need_copy
((need_sync > need_mb)) && need_mb=$need_sync
((need_million > need_mb)) && need_mb=$need_million
need_mb=$((need_mb + 512))
free_mb=$(df -Pm "$WORK" | awk 'NR==2 {print $4}')
((free_mb > need_mb)) || die "need ~${need_mb} MiB free under $BENCH_DIR, have ${free_mb} MiB"
read -r inodes_total inodes_free < <(df -Pi "$WORK" | awk 'NR==2 {print $2, $4}')
# (file systems without an inode table, e.g. btrfs, report 0 inodes)
if ((inodes_total > 0 && inodes_free <= need_inodes)); then
    die "need ~${need_inodes} free inodes under $BENCH_DIR, have ${inodes_free}"
fi

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
PRISTINE="$WORK/s3data.pristine"

# Check a prefix through S3 (count and bytes): check_seed PREFIX COUNT BYTES [BUCKET].
# s3s-fs walks the whole bucket for every list page, so a listing of N objects in pages of
# 1,000 costs it O(N²) (100,000 objects: ~2 s a page, minutes a listing); this check (never
# timed) asks for one page of up to 10^7 keys, which s3s-fs grants.
check_seed() {
    local prefix=$1 want_n=$2 want_bytes=$3 bucket=${4:-$SRC_BUCKET} got
    got=$(rcl size --json --disable ListR --s3-list-chunk 10000000 "s3remote:$bucket/$prefix/" 2>&1) \
        || die "rclone size failed: $got"
    [[ "$got" == *"\"count\":$want_n,"* && "$got" == *"\"bytes\":$want_bytes"[,}]* ]] \
        || die "check of s3://$bucket/$prefix/ through S3 failed: want $want_n objects / $want_bytes bytes, got $got"
}

if want small; then
    log "seeding: $SMALL_N × $SMALL_KB KiB random objects → s3://$SRC_BUCKET/small/"
    mkdir -p "$SEED/small"
    digits=$(( ${#SMALL_N} > 6 ? ${#SMALL_N} : 6 ))
    head -c $((SMALL_N * SMALL_BYTES)) /dev/urandom |
        (cd "$SEED/small" && split -b "$SMALL_BYTES" -a "$digits" -d - obj-)
    rcl copy "$SEED/small" "s3remote:$SRC_BUCKET/small/" --no-check-dest \
        --transfers 32 --checkers 32 >&2
    rm -rf "$SEED/small"

    # s3s-fs keeps two JSON side files per object in one flat folder at its root; deleting and
    # re-creating 20,000 objects there makes every later run slower than the one before (seen:
    # 17 s, 36 s, 40 s for the same copy), whichever tool runs it. So every small-object run
    # starts from a pristine copy of the server's folder, taken right after seeding the small
    # objects.
    stop_s3s
    cp -a "$DATA" "$PRISTINE"
    start_s3s
fi

if want large; then
    log "seeding: $LARGE_N × $LARGE_MB MiB random objects → s3://$SRC_BUCKET/large/"
    mkdir -p "$SEED/large"
    for ((i = 1; i <= LARGE_N; i++)); do
        head -c "$LARGE_BYTES" /dev/urandom >"$SEED/large/large-$i.bin"
    done
    rcl copy "$SEED/large" "s3remote:$SRC_BUCKET/large/" --no-check-dest --transfers 32 >&2
    rm -rf "$SEED/large"
fi

if want local; then
    log "seeding: one $LOCAL_MB MiB random file in $WORK/local-src"
    mkdir -p "$WORK/local-src"
    head -c "$LOCAL_BYTES" /dev/urandom >"$WORK/local-src/local.bin"
fi

want large && check_seed large "$LARGE_N" $((LARGE_N * LARGE_BYTES))
want small && check_seed small "$SMALL_N" $((SMALL_N * SMALL_BYTES))

# ---------------------------------------------------------------------------------------
# Timing: run_timed KEY CMD... appends "wall_s peak_rss_kib client_cpu_s server_cpu_s"
# to $WORK/res.KEY; the command's output (stdout and stderr) goes to $WORK/KEY.out. A failing
# command fails the benchmark, with the tail of its output. `EXPECT_RC=1 run_timed …` for a
# command whose expected exit status is 1 (a compare that finds differences); any other
# status fails the benchmark.
# ---------------------------------------------------------------------------------------
run_timed() {
    local key=$1; shift
    local tf="$WORK/time.out" out="$WORK/$key.out" s0 s1 wall rss usr sys rc=0 want_rc=${EXPECT_RC:-0}
    s0=$(server_cpu)
    /usr/bin/time -f '%e %M %U %S' -o "$tf" "$@" >"$out" 2>&1 || rc=$?
    if ((rc != want_rc)); then
        tail -n 30 "$out" >&2; cat "$tf" >&2
        die "command failed ($key: exit status $rc, want $want_rc): $*"
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

# restore_data DIR: stop s3s-fs, put its folder back to the state saved in DIR, start it.
restore_data() {
    stop_s3s
    rm -rf "$DATA"
    cp -a "$1" "$DATA"
    sync
    start_s3s
}

# Reset the server to the pristine state taken after seeding (small source objects, empty
# destination), then confirm through S3 that the destination prefix is really empty.
clean_dst_small() {
    restore_data "$PRISTINE"
    [[ -z "$(rcl lsf "s3remote:$DST_BUCKET/small/" 2>&1)" ]] || die "s3://$DST_BUCKET/small not empty after reset"
}

# expect_re WHAT FILE REGEX...: every (extended) REGEX matches a line of FILE, else fail.
expect_re() {
    local what=$1 file=$2 re; shift 2
    for re; do
        if ! grep -Eq -- "$re" "$file"; then
            tail -n 20 "$file" >&2
            die "$what: no line of its output (tail above) matches /$re/"
        fi
    done
}

# expect_text WHAT TEXT NEEDLE...: every NEEDLE occurs in TEXT, else fail.
expect_text() {
    local what=$1 text=$2 n; shift 2
    for n; do
        [[ "$text" == *"$n"* ]] || die "$what: want '$n' in: ${text:-<no output>}"
    done
}

# sync_summary KEY: slate's summary line ("sync: …") from the last run of KEY.
sync_summary() { { grep -a '^sync: ' "$WORK/$1.out" || true; } | tail -n 1; }

# check_diff_json WHAT FILE ONLY_SRC ONLY_DST CHANGED EQUAL BYTES: the summary line of
# `slate diff --json` holds these counts, and one JSON line per difference precedes it.
check_diff_json() {
    local what=$1 file=$2 line f exp got re lines; shift 2
    line=$({ grep -a '^{"summary"' "$file" || true; } | tail -n 1)
    [[ -n "$line" ]] || { tail -n 5 "$file" >&2; die "$what: no JSON summary line in its output (tail above)"; }
    local -a want_diffs=("$1" "$2" "$3")
    for f in only_in_source only_in_destination changed equal bytes_to_copy; do
        exp=$1; shift
        re="\"$f\":([0-9]+)"
        got=""; [[ "$line" =~ $re ]] && got=${BASH_REMATCH[1]}
        [[ "$got" == "$exp" ]] || die "$what: want $f $exp, got '$got' in: $line"
    done
    lines=$(grep -ac '^{.*"status":"' "$file" || true)
    exp=$((want_diffs[0] + want_diffs[1] + want_diffs[2]))
    ((lines == exp)) || die "$what: want $exp difference lines, got $lines"
}

# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------
DST_LOCAL="$WORK/dst"
if want large; then
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
fi

if want small; then
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
fi

if want local; then
    for ((run = 1; run <= RUNS; run++)); do
        log "local → local, run $run/$RUNS"
        fresh_dir "$DST_LOCAL"
        run_timed local.slate "${SLATE_CMD[@]}" copy "$WORK/local-src" "$DST_LOCAL" --quiet
        verify_local slate "$DST_LOCAL"
        fresh_dir "$DST_LOCAL"
        run_timed local.peer cp -r "$WORK/local-src/." "$DST_LOCAL/"
        verify_local cp "$DST_LOCAL"
    done
    rm -rf "$DST_LOCAL" "$WORK/local-src"
fi

# ---------------------------------------------------------------------------------------
# Sync scenarios (diff, resync) over BENCH_DIFF_N objects at s3://bench-src/sync/ and an
# identical copy at s3://bench-dst/sync/, then the same 100 changes at the source: 50
# overwritten, 30 new, 20 deleted.
#
# Layout: BENCH_DIFF_FOLDER objects per folder (sync/d000/obj-000000 …), the way datasets are
# sharded in practice, as in the million scenario. It also keeps the server out of the result:
# s3s-fs walks the whole bucket and stats every key under the prefix for each list page, so a
# flat 100,000-key prefix costs it ~2 s a page (hours per run for either tool).
#
# s3s-fs lists no ETags, so a same-size overwrite is invisible to any compare that trusts a
# listing there (slate's, by design: size + a digest the listing exposes; real S3 lists the
# MD5), while rclone check HEADs every object for its MD5. So the overwrites change the
# object's size (1 KiB → 1.5 KiB): both tools can see them, and the counts must come out exact.
# ---------------------------------------------------------------------------------------
CHG_OVERWRITE=50 CHG_NEW=30 CHG_DELETE=20
OBJ_BYTES=1024                                   # a seeded or new object
OVR_BYTES=1536                                   # an overwritten object
SRC_AFTER_N=$((DIFF_N + CHG_NEW - CHG_DELETE))   # source objects after the changes
SRC_AFTER_BYTES=$(((DIFF_N - CHG_OVERWRITE - CHG_DELETE + CHG_NEW) * OBJ_BYTES + CHG_OVERWRITE * OVR_BYTES))
EQUAL_AFTER=$((DIFF_N - CHG_OVERWRITE - CHG_DELETE))   # keys on both sides, unchanged
BYTES_AFTER=$((CHG_OVERWRITE * OVR_BYTES + CHG_NEW * OBJ_BYTES))   # what a sync must copy
SYNC_DIGITS=$(( ${#DIFF_N} > 6 ? ${#DIFF_N} : 6 ))
STEP=$((DIFF_N / 100))
# Changed keys (relative to sync/): seeded object j*STEP is overwritten for j < 50, deleted
# for 50 ≤ j < 70; the new ones are new-000000 … new-000029.
seeded_key() { printf 'd%03d/obj-%0*d' $(($1 / DIFF_FOLDER)) "$SYNC_DIGITS" "$1"; }
OVR_KEYS=("$(seeded_key 0)" "$(seeded_key $(((CHG_OVERWRITE - 1) * STEP)))")
DEL_KEYS=("$(seeded_key $((CHG_OVERWRITE * STEP)))" "$(seeded_key $(((CHG_OVERWRITE + CHG_DELETE - 1) * STEP)))")
NEW_KEYS=(d000/new-000000 "$(printf 'd000/new-%06d' $((CHG_NEW - 1)))")
PRISTINE_SYNC="$WORK/s3data.pristine-sync"
DB_DIR="$WORK/db"
SYNC_SRC="s3://$SRC_BUCKET/sync/" SYNC_DST="s3://$DST_BUCKET/sync/"
RSYNC_SRC="s3remote:$SRC_BUCKET/sync/" RSYNC_DST="s3remote:$DST_BUCKET/sync/"

# fresh_db NAME: path of an empty manifest (no file yet) under $DB_DIR.
fresh_db() {
    local db="$DB_DIR/$1.db"
    mkdir -p "$DB_DIR"
    rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
    printf '%s\n' "$db"
}

# apply_changes: the 100 changes at s3://bench-src/sync/ through S3 PUTs and DELETEs (boto3),
# each confirmed by a HEAD.
cat >"$WORK/changes.py" <<'PY'
import os, sys
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, bucket = sys.argv[1], sys.argv[2]
n, digits, step, n_over, n_new, n_del, obj_bytes, ovr_bytes, per_folder = map(int, sys.argv[3:12])
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                  aws_secret_access_key="testing", region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"},
                                retries={"mode": "standard", "max_attempts": 5}))
key = lambda i: "sync/d%03d/obj-%0*d" % (i // per_folder, digits, i)
over = [key(j * step) for j in range(n_over)]
dele = [key(j * step) for j in range(n_over, n_over + n_del)]
new = ["sync/d000/new-%06d" % j for j in range(n_new)]
for k in over:
    s3.put_object(Bucket=bucket, Key=k, Body=os.urandom(ovr_bytes))
for k in new:
    s3.put_object(Bucket=bucket, Key=k, Body=os.urandom(obj_bytes))
for k in dele:
    s3.delete_object(Bucket=bucket, Key=k)

def size(k):
    try:
        return s3.head_object(Bucket=bucket, Key=k)["ContentLength"]
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise

bad = ([k for k in over if size(k) != ovr_bytes] + [k for k in new if size(k) != obj_bytes]
       + [k for k in dele if size(k) is not None])
if bad:
    sys.exit("changes not visible through S3: %s" % bad[:5])
print("changed s3://%s/sync/: %d overwritten, %d new, %d deleted" % (bucket, len(over), len(new), len(dele)))
PY
apply_changes() {
    env -u AWS_CA_BUNDLE -u AWS_PROFILE -u AWS_SESSION_TOKEN AWS_CONFIG_FILE=/dev/null \
        AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_REQUEST_CHECKSUM_CALCULATION=when_required \
        AWS_RESPONSE_CHECKSUM_VALIDATION=when_required \
        python3 "$WORK/changes.py" "$ENDPOINT" "$SRC_BUCKET" "$DIFF_N" "$SYNC_DIGITS" "$STEP" \
        "$CHG_OVERWRITE" "$CHG_NEW" "$CHG_DELETE" "$OBJ_BYTES" "$OVR_BYTES" "$DIFF_FOLDER" >&2 \
        || die "applying the changes at s3://$SRC_BUCKET/sync/ failed"
}

# verify_resync TOOL: the destination equals the changed source: count and bytes through S3,
# every key and size through s3s-fs's folders, content of changed and new objects, deleted
# objects gone.
verify_resync() {
    local tool=$1 s d k
    check_seed sync "$SRC_AFTER_N" "$SRC_AFTER_BYTES" "$DST_BUCKET"
    s=$(cd "$DATA/$SRC_BUCKET/sync" && find . -type f -printf '%P %s\n' | sort)
    d=$(cd "$DATA/$DST_BUCKET/sync" && find . -type f -printf '%P %s\n' | sort)
    [[ "$s" == "$d" ]] || die "$tool resync: the destination's keys/sizes differ from the source's:
$(diff <(printf '%s\n' "$s") <(printf '%s\n' "$d") | head -n 10)"
    for k in "${OVR_KEYS[@]}" "${NEW_KEYS[@]}"; do
        cmp -s "$DATA/$SRC_BUCKET/sync/$k" "$DATA/$DST_BUCKET/sync/$k" \
            || die "$tool resync: sync/$k differs between source and destination"
    done
    for k in "${DEL_KEYS[@]}"; do
        [[ ! -e "$DATA/$DST_BUCKET/sync/$k" ]] || die "$tool resync: sync/$k still at the destination"
    done
}

if want diff || want resync; then
    # A fresh server folder (the copy scenarios' objects would only slow every listing down:
    # s3s-fs walks the whole bucket for each list page).
    stop_s3s
    rm -rf "$DATA" "$PRISTINE"
    mkdir -p "$DATA/$SRC_BUCKET" "$DATA/$DST_BUCKET"
    start_s3s
    log "seeding: $DIFF_N × 1 KiB random objects → s3://$SRC_BUCKET/sync/ and s3://$DST_BUCKET/sync/"
    mkdir -p "$SEED/sync"
    head -c $((DIFF_N * OBJ_BYTES)) /dev/urandom |
        (cd "$SEED/sync" && split -b "$OBJ_BYTES" -a "$SYNC_DIGITS" -d - obj-)
    # into folders of BENCH_DIFF_FOLDER: obj-000123 → d000/obj-000123
    python3 - "$SEED/sync" "$DIFF_FOLDER" <<'PY' || die "sorting the seed into folders failed"
import os, sys
root, per = sys.argv[1], int(sys.argv[2])
for name in os.listdir(root):
    d = os.path.join(root, "d%03d" % (int(name[4:]) // per))
    os.makedirs(d, exist_ok=True)
    os.rename(os.path.join(root, name), os.path.join(d, name))
PY
    for b in "$SRC_BUCKET" "$DST_BUCKET"; do
        rcl copy "$SEED/sync" "s3remote:$b/sync/" --no-check-dest --transfers 32 --checkers 32 >&2
    done
    rm -rf "$SEED/sync"
    check_seed sync "$DIFF_N" $((DIFF_N * OBJ_BYTES)) "$SRC_BUCKET"
    check_seed sync "$DIFF_N" $((DIFF_N * OBJ_BYTES)) "$DST_BUCKET"
    # Both sides identical: the state every diff / resync run starts from.
    stop_s3s
    cp -a "$DATA" "$PRISTINE_SYNC"
    start_s3s
fi

if want diff; then
    log "diff: the 100 changes at the source"
    restore_data "$PRISTINE_SYNC"
    apply_changes
    for ((run = 1; run <= RUNS; run++)); do
        log "diff S3 ↔ S3, run $run/$RUNS"
        db=$(fresh_db diff)
        EXPECT_RC=1 run_timed diff.slate "${SLATE_CMD[@]}" diff "$SYNC_SRC" "$SYNC_DST" --json --db "$db"
        check_diff_json "slate diff" "$WORK/diff.slate.out" \
            "$CHG_NEW" "$CHG_DELETE" "$CHG_OVERWRITE" "$EQUAL_AFTER" "$BYTES_AFTER"
        EXPECT_RC=1 run_timed diff.peer "${RCLONE[@]}" check "$RSYNC_SRC" "$RSYNC_DST" --checkers 64
        expect_re "rclone check" "$WORK/diff.peer.out" \
            ": $((CHG_NEW + CHG_DELETE + CHG_OVERWRITE)) differences found\$" \
            ": $EQUAL_AFTER matching files\$" ": $CHG_NEW files missing\$" ": $CHG_DELETE files missing\$"
        # The like-for-like peer: s3s-fs lists no ETags, so slate compares sizes there, and
        # `--size-only` makes rclone compare the same (no HEAD per object for an MD5).
        EXPECT_RC=1 run_timed diffsize.peer "${RCLONE[@]}" check "$RSYNC_SRC" "$RSYNC_DST" --checkers 64 --size-only
        expect_re "rclone check --size-only" "$WORK/diffsize.peer.out" \
            ": $((CHG_NEW + CHG_DELETE + CHG_OVERWRITE)) differences found\$" \
            ": $EQUAL_AFTER matching files\$" ": $CHG_NEW files missing\$" ": $CHG_DELETE files missing\$"
    done
    cp "$WORK/res.diff.slate" "$WORK/res.diffsize.slate"
fi

if want resync; then
    [[ "$(
        (exec 3<>/dev/tcp/127.0.0.1/9) 2>/dev/null && echo open
    )" != open ]] || die "something listens on 127.0.0.1:9, the closed port for --from-manifest"
    SLATE_OFFLINE=(env -u AWS_PROFILE -u AWS_SESSION_TOKEN
        AWS_ENDPOINT_URL=http://127.0.0.1:9 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
        AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true "$SLATE")
    for ((run = 1; run <= RUNS; run++)); do
        log "resync S3 → S3, run $run/$RUNS"
        restore_data "$PRISTINE_SYNC"
        db=$(fresh_db resync)
        # untimed: the first --once lists both (identical) sides and builds the manifest
        run_timed resync-first.slate "${SLATE_CMD[@]}" sync --once "$SYNC_SRC" "$SYNC_DST" --db "$db"
        line=$(sync_summary resync-first.slate)
        expect_text "slate sync --once (first)" "$line" \
            "sync: source $DIFF_N listed, destination $DIFF_N listed; copied 0 (0 new, 0 changed," \
            "deleted 0, $DIFF_N equal"
        apply_changes
        # the default: both sides listed (what the destination holds, whoever wrote it)
        run_timed resync.slate "${SLATE_CMD[@]}" sync --once "$SYNC_SRC" "$SYNC_DST" --db "$db"
        line=$(sync_summary resync.slate)
        expect_text "slate sync --once (second)" "$line" \
            "sync: source $SRC_AFTER_N listed, destination $DIFF_N listed; copied $((CHG_NEW + CHG_OVERWRITE)) ($CHG_NEW new, $CHG_OVERWRITE changed," \
            "deleted $CHG_DELETE, $EQUAL_AFTER equal"
        [[ "$line" != *FAILED* ]] || die "slate sync --once (second): $line"
        verify_resync slate

        # the same with --trust-manifest: the destination from the manifest, not listed
        restore_data "$PRISTINE_SYNC"
        dbt=$(fresh_db resynctrust)
        run_timed resynctrust-first.slate "${SLATE_CMD[@]}" sync --once "$SYNC_SRC" "$SYNC_DST" --db "$dbt"
        apply_changes
        run_timed resynctrust.slate "${SLATE_CMD[@]}" sync --once "$SYNC_SRC" "$SYNC_DST" --db "$dbt" --trust-manifest
        line=$(sync_summary resynctrust.slate)
        expect_text "slate sync --once --trust-manifest (second)" "$line" \
            "sync: source $SRC_AFTER_N listed, destination from the manifest (not listed); copied $((CHG_NEW + CHG_OVERWRITE)) ($CHG_NEW new, $CHG_OVERWRITE changed," \
            "deleted $CHG_DELETE, $EQUAL_AFTER equal"
        verify_resync "slate --trust-manifest"
        # zero requests: the endpoint is a closed port, so any request would fail the command
        run_timed manifest.slate "${SLATE_OFFLINE[@]}" diff "$SYNC_SRC" "$SYNC_DST" --from-manifest \
            --json --db "$db"
        check_diff_json "slate diff --from-manifest" "$WORK/manifest.slate.out" 0 0 0 "$SRC_AFTER_N" 0

        restore_data "$PRISTINE_SYNC"
        apply_changes
        run_timed resync.peer "${RCLONE[@]}" sync "$RSYNC_SRC" "$RSYNC_DST" --transfers 64 --checkers 64 -v
        expect_re "rclone sync" "$WORK/resync.peer.out" \
            "^Transferred: +$((CHG_NEW + CHG_OVERWRITE)) / $((CHG_NEW + CHG_OVERWRITE)), 100%" \
            "^Deleted: +$CHG_DELETE \\(files\\)"
        verify_resync rclone

        # like-for-like: `--size-only` skips the HEAD per object rclone makes for modtimes
        restore_data "$PRISTINE_SYNC"
        apply_changes
        run_timed resyncsize.peer "${RCLONE[@]}" sync "$RSYNC_SRC" "$RSYNC_DST" --transfers 64 --checkers 64 --size-only -v
        expect_re "rclone sync --size-only" "$WORK/resyncsize.peer.out" \
            "^Transferred: +$((CHG_NEW + CHG_OVERWRITE)) / $((CHG_NEW + CHG_OVERWRITE)), 100%" \
            "^Deleted: +$CHG_DELETE \\(files\\)"
        verify_resync "rclone --size-only"
    done
    cp "$WORK/res.resync.slate" "$WORK/res.resyncsize.slate"
    cp "$WORK/res.resync.peer" "$WORK/res.resynctrust.peer"
fi

# ---------------------------------------------------------------------------------------
# million: BENCH_MILLION_N small files in folders of 1,000, local → local, destination
# identical (cp -a); the idle second `slate sync --once` (lists both sides) vs an idle
# `rclone sync`.
# ---------------------------------------------------------------------------------------
if want million; then
    if want diff || want resync; then   # free the sync scenarios' disk
        stop_s3s
        rm -rf "$DATA" "$PRISTINE_SYNC"
        mkdir -p "$DATA/$SRC_BUCKET" "$DATA/$DST_BUCKET"
        start_s3s
    fi
    M_SRC="$WORK/million/src" M_DST="$WORK/million/dst"
    log "seeding: $MILLION_N files of a few bytes in folders of 1,000 → $M_SRC"
    mkdir -p "$M_SRC"
    python3 - "$M_SRC" "$MILLION_N" <<'PY' || die "creating $MILLION_N files failed"
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range((n + 999) // 1000):
    folder = os.path.join(root, "d%04d" % d)
    os.mkdir(folder)
    for i in range(d * 1000, min(n, d * 1000 + 1000)):
        fd = os.open(os.path.join(folder, "f%07d" % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"%d\n" % i)
        os.close(fd)
PY
    log "copying the tree (cp -a) → $M_DST"
    cp -a "$M_SRC" "$M_DST"
    sync
    m_src_cb=$(count_and_bytes "$M_SRC")
    [[ "$m_src_cb" == "$MILLION_N "* ]] || die "million: want $MILLION_N files in $M_SRC, got $m_src_cb"
    [[ "$(count_and_bytes "$M_DST")" == "$m_src_cb" ]] || die "million: $M_DST differs from $M_SRC after cp -a"
    verify_million() {   # verify_million TOOL: the idle sync left the destination as it was
        local got
        got=$(count_and_bytes "$M_DST")
        [[ "$got" == "$m_src_cb" ]] || die "$1 million: want '$m_src_cb' (files bytes) in $M_DST, got '$got'"
        cmp -s "$M_SRC/d0000/f0000000" "$M_DST/d0000/f0000000" || die "$1 million: d0000/f0000000 differs"
    }

    db=$(fresh_db million)
    log "million: first slate sync --once (untimed: lists both sides, builds the manifest)"
    run_timed million-first.slate "${SLATE_CMD[@]}" sync --once "$M_SRC" "$M_DST" --db "$db"
    line=$(sync_summary million-first.slate)
    expect_text "slate sync --once (first, million)" "$line" \
        "sync: source $MILLION_N listed, destination $MILLION_N listed; copied 0 (0 new, 0 changed," \
        "deleted 0, $MILLION_N equal"
    for ((run = 1; run <= RUNS; run++)); do
        log "million: idle sync --once, run $run/$RUNS"
        run_timed million.slate "${SLATE_CMD[@]}" sync --once "$M_SRC" "$M_DST" --db "$db"
        line=$(sync_summary million.slate)
        expect_text "slate sync --once (idle, million)" "$line" \
            "sync: source $MILLION_N listed, destination $MILLION_N listed; copied 0 (0 new, 0 changed," \
            "deleted 0, $MILLION_N equal; no data transferred"
        verify_million slate
        run_timed million.peer "${RCLONE[@]}" sync "$M_SRC" "$M_DST" -v
        expect_re "rclone sync (idle, million)" "$WORK/million.peer.out" \
            "There was nothing to transfer" "^Checks: +$MILLION_N / $MILLION_N, 100%"
        if grep -Eq '^Deleted:' "$WORK/million.peer.out"; then
            die "rclone sync (idle, million) deleted something: $(grep -E '^Deleted:' "$WORK/million.peer.out")"
        fi
        verify_million rclone
    done
    rm -rf "$WORK/million"
fi

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
# row NAME KEY UNIT AMOUNT [TARGET...]: one table line from the medians of $WORK/res.KEY.slate
# and $WORK/res.KEY.peer (a row without .peer results is slate's alone: "—" for the peer).
# AMOUNT is what a run moves (bytes for MB/s, else objects or files); MB = 10^6 bytes.
# TARGETs, all of which must hold: ratio:X (slate's speed ≥ X × the peer's), rss:X (slate's
# peak RSS ≤ X × the peer's), rss_mib:X (slate's peak RSS < X MiB), wall_s:X (slate's wall
# time < X s). No TARGET: "none set", reported only.
MISSED=0
row() {
    local name=$1 key=$2 unit=$3 amount=$4 targets="${*:5}"
    local sw sr sc ss pw="" pr="" pc="" ps="" line
    sw=$(median 1 "$WORK/res.$key.slate"); sr=$(median 2 "$WORK/res.$key.slate")
    sc=$(median 3 "$WORK/res.$key.slate"); ss=$(median 4 "$WORK/res.$key.slate")
    if [[ -s "$WORK/res.$key.peer" ]]; then
        pw=$(median 1 "$WORK/res.$key.peer"); pr=$(median 2 "$WORK/res.$key.peer")
        pc=$(median 3 "$WORK/res.$key.peer"); ps=$(median 4 "$WORK/res.$key.peer")
    fi
    line=$(awk -v name="$name" -v unit="$unit" -v amt="$amount" -v targets="$targets" \
        -v sw="$sw" -v pw="$pw" -v sr="$sr" -v pr="$pr" -v sc="$sc" -v pc="$pc" -v ss="$ss" -v ps="$ps" '
        function cell(w, c, s) {
            v = (unit == "MB/s") ? amt / 1e6 / w : amt / w
            t = sprintf("%.0f %s (%.2f s; CPU %.1f s", v, unit, w, c)
            if (name ~ /S3/) t = t sprintf(", s3s-fs %.1f s", s)
            return t ")"
        }
        BEGIN {
            peer = (pw != "")
            if (peer) { ratio = pw / sw; rssr = sr / pr }
            n = split(targets, T, " "); ok = 1; target = ""
            for (i = 1; i <= n; i++) {
                split(T[i], kv, ":"); k = kv[1]; x = kv[2] + 0
                if (k == "ratio")        { ok = ok && peer && ratio >= x; t = sprintf("≥%s×", kv[2]) }
                else if (k == "rss")     { ok = ok && peer && rssr <= x;  t = sprintf("RSS ≤%s×", kv[2]) }
                else if (k == "rss_mib") { ok = ok && sr / 1024 < x;      t = sprintf("slate RSS <%s MiB", kv[2]) }
                else if (k == "wall_s")  { ok = ok && sw < x;             t = sprintf("<%s s", kv[2]) }
                else                     { ok = 0;                        t = "unknown target " T[i] }
                target = target (target == "" ? "" : ", ") t
            }
            target = (target == "") ? "none set" : target ": " (ok ? "met" : "**MISSED**")
            printf "| %s | %s | %s | %s | %.1f MiB | %s | %s | %s |\n",
                name, cell(sw, sc, ss), peer ? cell(pw, pc, ps) : "—",
                peer ? sprintf("%.2f×", ratio) : "—", sr / 1024,
                peer ? sprintf("%.1f MiB", pr / 1024) : "—",
                peer ? sprintf("%.2f×", rssr) : "—", target
        }')
    [[ "$line" == *MISSED* ]] && MISSED=1
    printf '%s\n' "$line"
}

# setup_note KEY WHAT: "WHAT X s, Y MiB peak RSS" from the median of $WORK/res.KEY (untimed
# setup runs: reported in a note, not in the table).
setup_note() {
    awk -v what="$2" -v w="$(median 1 "$WORK/res.$1")" -v r="$(median 2 "$WORK/res.$1")" \
        'BEGIN {printf "%s %.2f s, %.1f MiB peak RSS", what, w, r / 1024}'
}

rclone_version=$(rcl version 2>/dev/null | awk 'NR == 1')
slate_rev=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
[[ -n "$(git -C "$REPO_ROOT" status --porcelain 2>/dev/null)" ]] && slate_rev+="+dirty"
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)
# Smoke run: a selected scenario runs at non-default sizes, or BENCH_RUNS is not 3.
smoke=0
[[ "$RUNS" == 3 ]] || smoke=1
if want large && [[ "$LARGE_MB/$LARGE_N" != 512/4 ]]; then smoke=1; fi
if want small && [[ "$SMALL_N/$SMALL_KB" != 20000/16 ]]; then smoke=1; fi
if want local && [[ "$LOCAL_MB" != 2048 ]]; then smoke=1; fi
if { want diff || want resync; } && [[ "$DIFF_N" != 100000 ]]; then smoke=1; fi
if want million && [[ "$MILLION_N" != 1000000 ]]; then smoke=1; fi
non_default=""
((smoke == 0)) || non_default=" — **non-default sizes (smoke run): not comparable with the targets**"

commands=()
want large && commands+=("\`slate copy s3://$SRC_BUCKET/large/ DIR --quiet\` vs \`rclone copy s3remote:$SRC_BUCKET/large/ DIR --multi-thread-streams 4\`")
want small && commands+=("\`slate copy s3://$SRC_BUCKET/small/ s3://$DST_BUCKET/small/ --quiet --transfers 64\` vs \`rclone copy s3remote:$SRC_BUCKET/small/ s3remote:$DST_BUCKET/small/ --transfers 64 --checkers 64\`")
want local && commands+=("\`slate copy SRC DST --quiet\` vs \`cp -r SRC/. DST/\`")
want diff && commands+=("\`slate diff $SYNC_SRC $SYNC_DST --json --db NEW.db\` vs \`rclone check $RSYNC_SRC $RSYNC_DST --checkers 64\` (and with \`--size-only\`)")
want resync && commands+=("\`slate sync --once $SYNC_SRC $SYNC_DST --db DB\` (the second run on DB) vs \`rclone sync $RSYNC_SRC $RSYNC_DST --transfers 64 --checkers 64 -v\` (and with \`--size-only\`), then \`slate diff $SYNC_SRC $SYNC_DST --from-manifest --json --db DB\` with \`AWS_ENDPOINT_URL=http://127.0.0.1:9\` (a closed port)")
want million && commands+=("\`slate sync --once SRC DST --db DB\` (the second run on DB) vs \`rclone sync SRC DST -v\`")

{
    echo "## slate benchmark$non_default"
    echo
    echo "- Machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $os, $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Peers: $rclone_version; $(cp --version | awk 'NR == 1'); server: s3s-fs $S3S_VERSION on 127.0.0.1 (same machine)"
    echo "- slate: $SLATE (git $slate_rev)"
    echo "- Command: \`$BENCH_CMD\`"
    [[ "$SCENARIOS" == "$ALL_SCENARIOS" ]] || echo "- Scenarios: $SCENARIOS (of: $ALL_SCENARIOS)"
    echo "- Medians of $RUNS alternating runs (slate, peer, …); MB = 10^6 bytes; peak RSS and CPU (user+sys) from GNU time; s3s-fs = server CPU during the run."
    echo
    echo "| scenario | slate | peer | ratio (slate/peer, >1 = slate faster) | slate peak RSS | peer peak RSS | RSS ratio (slate/peer) | target |"
    echo "|---|---|---|---|---|---|---|---|"
    want large && row "large: $LARGE_N × $LARGE_MB MiB, S3 → local (peer: rclone)" large MB/s \
        $((LARGE_N * LARGE_BYTES)) ratio:1.2 rss:0.5
    want small && row "small: $SMALL_N × $SMALL_KB KiB, S3 → S3 (peer: rclone)" small obj/s "$SMALL_N" ratio:2
    want local && row "local: 1 × $LOCAL_MB MiB file, local → local (peer: cp)" local MB/s "$LOCAL_BYTES" ratio:0.8
    want diff && row "diff: $DIFF_N × 1 KiB in folders of $DIFF_FOLDER, S3 ↔ S3, 100 differences (peer: rclone check)" diff obj/s \
        "$DIFF_N" ratio:3
    want diff && row "diff, like for like, S3 ↔ S3: the same slate runs (peer: rclone check --size-only, which compares what slate can on this server)" \
        diffsize obj/s "$DIFF_N"
    want resync && row "resync: 2nd \`sync --once\` after 100 changes in $DIFF_N (folders of $DIFF_FOLDER), S3 → S3 (peer: rclone sync)" \
        resync obj/s "$DIFF_N"
    want resync && row "resync, like for like, S3 → S3: the same slate runs (peer: rclone sync --size-only)" \
        resyncsize obj/s "$DIFF_N"
    want resync && row "resync with \`--trust-manifest\` (the destination not listed; peer: rclone sync)" \
        resynctrust obj/s "$DIFF_N"
    want resync && row "from-manifest: \`diff --from-manifest\` of $SRC_AFTER_N keys, no request (no peer)" \
        manifest keys/s "$SRC_AFTER_N" wall_s:1
    want million && row "million: idle 2nd \`sync --once\`, $MILLION_N files, local → local (peer: rclone sync)" \
        million files/s "$MILLION_N" rss_mib:256
    echo
    echo "Commands: $(IFS=';'; printf '%s' "${commands[*]}" | sed 's/;/; /g')."
    if want diff || want resync; then
        echo
        echo "diff / resync: the source changes by 50 overwrites (1 KiB → 1.5 KiB), 30 new and 20 deleted objects; counts are checked exactly." \
             "s3s-fs lists no ETags, so slate compares by size there (a same-size overwrite would be invisible to it), while rclone check HEADs every object for its MD5 and rclone sync HEADs for modification times; the like-for-like rows give rclone \`--size-only\`, the compare slate makes on this server, so they measure listing and planning alone." \
             "s3s-fs walks the whole bucket for every list page of 1,000, so listing N objects costs it O(N²): both tools pay that (the s3s-fs CPU figures)."
    fi
    notes=()
    want resync && notes+=("$(setup_note resync-first.slate "first \`sync --once\` of the resync pair (lists both sides):")")
    want million && notes+=("$(setup_note million-first.slate "first \`sync --once\` of the million pair (lists both sides):")")
    if ((${#notes[@]} > 0)); then
        echo
        echo "Untimed setup runs (medians): $(IFS=';'; printf '%s' "${notes[*]}" | sed 's/;/; /g')."
    fi
} >"$WORK/report.md"

mkdir -p "$(dirname "$REPORT")"
cp "$WORK/report.md" "$REPORT"
cat "$WORK/report.md"
log "report written to $REPORT"

if [[ "$STRICT" == 1 && "$MISSED" == 1 ]]; then exit 3; fi
