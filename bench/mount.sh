#!/usr/bin/env bash
# bench/mount.sh — `slate mount` against `rclone mount` in the same run, in the latency lab.
#
# s3s-fs (a fast S3 server on disk) sits behind the lab (examples/lab.rs: a round trip of
# BENCH_MOUNT_DELAY, half each way, default 20 ms; a cap of BENCH_MOUNT_RATE each way, default 200M). Each
# tool mounts s3://bench-mnt, runs the workloads, and is unmounted:
#   cp-file   cp of a BENCH_MOUNT_FILE_MB MiB file (default 1024) into the mount: until cp
#             returns, and until the object is complete at the store (a HEAD, past the lab)
#   cp-tree   cp -r of a dataset folder of BENCH_MOUNT_TREE_N files (default 2,000: parquet-
#             like shards of 1-2 MiB and small json files; ≈ BENCH_MOUNT_TREE_N MiB) into it,
#             until cp returns and until every object is at the store
#   unzip     unzip -q of a zip of BENCH_MOUNT_ZIP_N files (default 5,000, 1-80 KiB each,
#             stored) from the mount to a local folder
#   read-seq  a sequential read of another file of that size, which no step read before (fio,
#             bs=1M; dd when fio is missing), on a fresh mount
#   read-rand random 4 KiB reads of the first file for BENCH_MOUNT_RAND_SECS (default 30) s
#             (fio) on a fresh mount: nothing of the file in any cache (round-trip bound);
#             and the bytes the lab carried from the store meanwhile (read amplification)
#   find      find over BENCH_MOUNT_FIND_N entries (default 20,000 empty objects in 100
#             folders), on a fresh mount
# and the mount process's peak RSS over the whole run (VmHWM).
# Peers: rclone mount with its defaults, and with the seed's fast flags as far as Debian's
# rclone 1.60 has them: --vfs-cache-mode full --vfs-fast-fingerprint --no-modtime
# --transfers 10 (it lacks --vfs-read-chunk-streams). slate mounts with no flags (close waits
# for the upload); slate-wb is slate with --write-back 1s (close returns at once, as rclone's
# full cache mode), run for the two cp workloads only.
# Everything talks to 127.0.0.1 only. Prints a markdown table, written to
# bench/last-mount-run.md.
#
# Knobs: BENCH_MOUNT_DELAY, BENCH_MOUNT_RATE, BENCH_MOUNT_FILE_MB, BENCH_MOUNT_TREE_N,
# BENCH_MOUNT_FIND_N, BENCH_MOUNT_RAND_SECS, BENCH_MOUNT_WORKLOADS ("cp-file cp-tree
# read-seq read-rand find"), BENCH_MOUNT_TOOLS ("slate rclone-default rclone-fast"),
# BENCH_DIR, SLATE_TEST_HOME, SLATE_BIN, LAB_BIN.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
SLATE_TEST_HOME="${SLATE_TEST_HOME:-$HOME/.cache/slate-test}"
BENCH_DIR="${BENCH_DIR:-/tmp/slate-bench}"
DELAY="${BENCH_MOUNT_DELAY:-20}"
RATE="${BENCH_MOUNT_RATE:-200M}"
FILE_MB="${BENCH_MOUNT_FILE_MB:-1024}"
TREE_N="${BENCH_MOUNT_TREE_N:-2000}"
FIND_N="${BENCH_MOUNT_FIND_N:-20000}"
RAND_SECS="${BENCH_MOUNT_RAND_SECS:-30}"
ZIP_N="${BENCH_MOUNT_ZIP_N:-5000}"
WORKLOADS="${BENCH_MOUNT_WORKLOADS:-cp-file cp-tree unzip read-seq read-rand find}"
TOOLS="${BENCH_MOUNT_TOOLS:-slate slate-wb rclone-default rclone-fast}"
REPORT="${BENCH_REPORT:-$SCRIPT_DIR/last-mount-run.md}"
S3S_PORT="${SLATE_S3S_PORT:-8034}" LAB_PORT=8035
S3S_BIN="$SLATE_TEST_HOME/s3s-fs/bin/s3s-fs"

log() { printf '[mount %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '\n[mount] ERROR: %s\n' "$*" >&2; exit 1; }
want() { [[ " $WORKLOADS " == *" $1 "* ]]; }
for v in DELAY FILE_MB TREE_N FIND_N RAND_SECS ZIP_N; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done

command -v rclone >/dev/null || die "rclone missing (scripts/services.sh install puts it there)"
command -v fusermount3 >/dev/null || die "fusermount3 missing (scripts/services.sh install puts it there)"
[[ -x /usr/bin/time ]] || die "GNU time missing (apt-get install time)"
[[ -x "$S3S_BIN" ]] || die "s3s-fs missing: run scripts/services.sh install"
if ! command -v fio >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        log "installing Debian's fio"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends fio >&2 \
            || log "fio could not be installed: dd for sequential reads, no random reads"
    fi
fi
if want unzip && ! command -v unzip >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        log "installing Debian's unzip"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends unzip >&2 || true
    fi
    command -v unzip >/dev/null || die "unzip missing (apt-get install unzip)"
fi
if [[ -z "${SLATE_BIN:-}" || -z "${LAB_BIN:-}" ]]; then
    log "cargo build --release (slate and the lab)"
    (cd "$REPO_ROOT" && cargo build --release --features lab --bin slate --example lab >&2) \
        || die "cargo build failed"
fi
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release"
SLATE="${SLATE_BIN:-$TARGET/slate}"
LAB="${LAB_BIN:-$TARGET/examples/lab}"

mkdir -p "$BENCH_DIR"
WORK="$(mktemp -d "$BENCH_DIR/mount.XXXXXX")"
MNT="$WORK/mnt"
PIDS=()
MOUNT_PID=""
cleanup() {
    local rc=$? p
    mountpoint -q "$MNT" 2>/dev/null && fusermount3 -u -z "$MNT" 2>/dev/null || true
    [[ -n $MOUNT_PID ]] && kill "$MOUNT_PID" 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT

mkdir -p "$WORK/s3data/bench-mnt" "$MNT"
env -u RUST_LOG "$S3S_BIN" --host 127.0.0.1 --port "$S3S_PORT" --access-key testing \
    --secret-key testing "$WORK/s3data" >"$WORK/s3s.log" 2>&1 &
PIDS+=($!)
"$LAB" --listen "$LAB_PORT" --upstream "127.0.0.1:$S3S_PORT" --delay "${DELAY}ms" --rate "$RATE" \
    >"$WORK/lab.out" 2>&1 &
PIDS+=($!) LAB_PID=$!
for ((i = 0; ; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$S3S_PORT") 2>/dev/null && grep -q '^listening on' "$WORK/lab.out" && break
    ((i < 300)) || die "s3s-fs or the lab did not start"
    sleep 0.1
done

export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other \
    RCLONE_CONFIG_S3_ACCESS_KEY_ID=testing RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=testing \
    RCLONE_CONFIG_S3_REGION=us-east-1 RCLONE_CONFIG_S3_FORCE_PATH_STYLE=true
DIRECT="http://127.0.0.1:$S3S_PORT" LABBED="http://127.0.0.1:$LAB_PORT"
rcl() { RCLONE_CONFIG_S3_ENDPOINT="$DIRECT" env -u AWS_CA_BUNDLE rclone --config /dev/null "$@"; }

# --- seeds -------------------------------------------------------------------------------
log "seeding: a ${FILE_MB} MiB file, a dataset of $TREE_N files, $FIND_N entries"
mkdir -p "$WORK/seed"
head -c $((FILE_MB << 20)) /dev/urandom >"$WORK/seed/big.zip"
head -c $((FILE_MB << 20)) /dev/urandom >"$WORK/seed/seq.bin"
python3 - "$WORK/seed/dataset" "$TREE_N" <<'EOF'
import os, random, sys, json
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
for i in range(n):
    d = os.path.join(root, "data", f"train-{i // 200:03d}")
    os.makedirs(d, exist_ok=True)
    if i % 10 == 9:
        with open(os.path.join(d, f"meta-{i:05d}.json"), "w") as f:
            json.dump({"i": i, "rows": rng.randint(1000, 9000)}, f)
    else:
        with open(os.path.join(d, f"shard-{i:05d}.parquet"), "wb") as f:
            f.write(os.urandom(rng.randint(1 << 20, 2 << 20)))
EOF
TREE_BYTES=$(du -sb "$WORK/seed/dataset" | awk '{print $1}')
python3 - "$WORK/seed/small.zip" "$ZIP_N" <<'EOF'
import os, random, sys, zipfile
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(11)
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    for i in range(n):
        z.writestr(f"ds/part-{i // 500:02d}/img-{i:05d}.bin", os.urandom(rng.randint(1 << 10, 80 << 10)))
EOF
rcl mkdir s3:bench-mnt >&2
rcl copy "$WORK/seed/big.zip" s3:bench-mnt/read/ >&2
rcl copy "$WORK/seed/small.zip" s3:bench-mnt/read/ >&2
rcl copy "$WORK/seed/seq.bin" s3:bench-mnt/read/ >&2
rm -f "$WORK/seed/seq.bin"
mkdir -p "$WORK/seed/find"
python3 - "$WORK/seed/find" "$FIND_N" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"f{i % 100:03d}")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, f"e-{i:06d}"), "wb").close()
EOF
rcl copy "$WORK/seed/find" s3:bench-mnt/find/ --transfers 64 --checkers 64 >&2
rm -rf "$WORK/seed/find"

# --- mounts --------------------------------------------------------------------------------
# mount_tool TOOL: mounts s3://bench-mnt on $MNT through the lab; MOUNT_PID is its process.
mount_tool() {
    local tool=$1
    case $tool in
        slate | slate-wb)
            local extra=()
            [[ $tool == slate-wb ]] && extra=(--write-back 1s)
            env -u AWS_PROFILE AWS_ENDPOINT_URL="$LABBED" AWS_ACCESS_KEY_ID=testing \
                AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 \
                "$SLATE" mount s3://bench-mnt "$MNT" --cache-dir "$WORK/cache-slate" "${extra[@]}" \
                >"$WORK/mount-$tool.log" 2>&1 &
            ;;
        rclone-default)
            RCLONE_CONFIG_S3_ENDPOINT="$LABBED" env -u AWS_CA_BUNDLE rclone --config /dev/null \
                mount s3:bench-mnt "$MNT" --cache-dir "$WORK/cache-rclone" \
                >"$WORK/mount-$tool.log" 2>&1 &
            ;;
        rclone-fast)
            RCLONE_CONFIG_S3_ENDPOINT="$LABBED" env -u AWS_CA_BUNDLE rclone --config /dev/null \
                mount s3:bench-mnt "$MNT" --cache-dir "$WORK/cache-rclone" \
                --vfs-cache-mode full --vfs-fast-fingerprint --no-modtime --transfers 10 \
                >"$WORK/mount-$tool.log" 2>&1 &
            ;;
    esac
    MOUNT_PID=$!
    for ((i = 0; ; i++)); do
        mountpoint -q "$MNT" && ls "$MNT" >/dev/null 2>&1 && break
        ((i < 300)) || { tail -n 20 "$WORK/mount-$tool.log" >&2; die "$tool did not mount"; }
        sleep 0.1
    done
}
# unmount_tool: unmounts and waits for the process; sets PEAK_KB (its VmHWM before exit).
unmount_tool() {
    PEAK_KB=$(awk '/^VmHWM/{print $2}' "/proc/$MOUNT_PID/status" 2>/dev/null || echo 0)
    fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT"
    wait "$MOUNT_PID" 2>/dev/null || true
    MOUNT_PID=""
    rm -rf "$WORK/cache-slate" "$WORK/cache-rclone"
}
peak() { local p; p=$(awk '/^VmHWM/{print $2}' "/proc/$MOUNT_PID/status" 2>/dev/null || echo 0); ((p > PEAK)) && PEAK=$p || true; }
now() { date +%s.%N; }
# quiet_disk: writes what earlier steps left dirty in the page cache (the seeds, the last
# tool's files) before a timed step, so that no tool pays for another's writeback
quiet_disk() { sync; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
# complete_at_store KEY SIZE: waits until the object is whole at the store (s3s-fs keeps each
# object as a file under its folder, written when the upload completes)
complete_at_store() {
    for ((i = 0; i < 6000; i++)); do
        [[ $(stat -c %s "$WORK/s3data/bench-mnt/$1" 2>/dev/null || echo -1) == "$2" ]] && return 0
        sleep 0.1
    done
    die "$1 not complete at the store"
}
count_at_store() { find "$WORK/s3data/bench-mnt/$1" -type f 2>/dev/null | wc -l; }
# lab_down: the bytes the lab has carried from the store so far (it prints them on SIGUSR1)
lab_down() {
    local n i
    n=$(grep -c '^up ' "$WORK/lab.out" || true)
    kill -USR1 "$LAB_PID"
    for ((i = 0; i < 100; i++)); do
        (($(grep -c '^up ' "$WORK/lab.out" || true) > n)) && break
        sleep 0.05
    done
    grep '^up ' "$WORK/lab.out" | tail -n 1 | awk '{print $4}'
}

declare -A R
for tool in $TOOLS; do
    PEAK=0
    if want cp-file; then
        mount_tool "$tool"
        log "$tool: cp of ${FILE_MB} MiB into the mount"
        quiet_disk
        t0=$(now); cp "$WORK/seed/big.zip" "$MNT/up-$tool.zip"; t1=$(now); peak
        complete_at_store "up-$tool.zip" $((FILE_MB << 20)); t2=$(now)
        R[$tool,cp-file]=$(secs "$t0" "$t1"); R[$tool,cp-file-store]=$(secs "$t0" "$t2")
        unmount_tool; ((PEAK_KB > PEAK)) && PEAK=$PEAK_KB
    fi
    if want cp-tree; then
        mount_tool "$tool"
        log "$tool: cp -r of $TREE_N files into the mount"
        quiet_disk
        t0=$(now); cp -r "$WORK/seed/dataset" "$MNT/tree-$tool"; t1=$(now); peak
        for ((i = 0; i < 6000; i++)); do
            [[ $(count_at_store "tree-$tool") == "$TREE_N" ]] && break
            sleep 0.2
        done
        t2=$(now)
        R[$tool,cp-tree]=$(secs "$t0" "$t1"); R[$tool,cp-tree-store]=$(secs "$t0" "$t2")
        unmount_tool; ((PEAK_KB > PEAK)) && PEAK=$PEAK_KB
    fi
    if [[ $tool == slate-wb ]]; then
        # reads are slate's: only the writes differ
        R[$tool,rss]=$((PEAK / 1024))
        continue
    fi
    if want unzip; then
        mount_tool "$tool"
        log "$tool: unzip -q of $ZIP_N files from the mount"
        quiet_disk
        t0=$(now); unzip -q "$MNT/read/small.zip" -d "$WORK/unz-$tool"; t1=$(now); peak
        n=$(find "$WORK/unz-$tool" -type f | wc -l)
        [[ $n == "$ZIP_N" ]] || die "$tool: unzip gave $n files, not $ZIP_N"
        rm -rf "$WORK/unz-$tool"
        R[$tool,unzip]=$(secs "$t0" "$t1")
        if [[ -z ${UNZIP_LOCAL:-} ]]; then
            # the floor of the row: the same unzip from a local file
            quiet_disk
            t0=$(now); unzip -q "$WORK/seed/small.zip" -d "$WORK/unz-local"; t1=$(now)
            rm -rf "$WORK/unz-local"
            UNZIP_LOCAL=$(secs "$t0" "$t1")
        fi
        unmount_tool; ((PEAK_KB > PEAK)) && PEAK=$PEAK_KB
    fi
    if want read-seq; then
        # a file no step has read: each tool fetches all of it, through the lab
        mount_tool "$tool"
        log "$tool: sequential read of ${FILE_MB} MiB"
        t0=$(now)
        if command -v fio >/dev/null; then
            fio --name=seq --filename="$MNT/read/seq.bin" --rw=read --bs=1M --readonly \
                --size=$((FILE_MB))M --ioengine=psync --output="$WORK/fio-seq.out" >/dev/null
        else
            dd if="$MNT/read/seq.bin" of=/dev/null bs=1M status=none
        fi
        t1=$(now); peak
        R[$tool,read-seq]=$(python3 -c "print(f'{$FILE_MB * 1.048576 / ($t1 - $t0):.1f}')")
        unmount_tool; ((PEAK_KB > PEAK)) && PEAK=$PEAK_KB
    fi
    if want read-rand && command -v fio >/dev/null; then
        mount_tool "$tool"
        log "$tool: random 4 KiB reads for $RAND_SECS s"
        d0=$(lab_down)
        fio --name=rand --filename="$MNT/read/big.zip" --rw=randread --bs=4k --readonly \
            --size=$((FILE_MB))M --ioengine=psync --time_based --runtime="$RAND_SECS" \
            --output-format=json --output="$WORK/fio-rand.json" >/dev/null
        peak
        d1=$(lab_down)
        R[$tool,read-rand]=$(python3 -c "import json; print(f\"{json.load(open('$WORK/fio-rand.json'))['jobs'][0]['read']['iops']:.1f}\")")
        R[$tool,rand-fetched]=$(((d1 - d0) >> 20))
        unmount_tool; ((PEAK_KB > PEAK)) && PEAK=$PEAK_KB
    fi
    if want find; then
        mount_tool "$tool"
        log "$tool: find over $FIND_N entries"
        t0=$(now); n=$(find "$MNT/find" -type f | wc -l); t1=$(now); peak
        [[ $n == "$FIND_N" ]] || die "$tool: find saw $n entries, not $FIND_N"
        R[$tool,find]=$(secs "$t0" "$t1")
        unmount_tool; ((PEAK_KB > PEAK)) && PEAK=$PEAK_KB
    fi
    R[$tool,rss]=$((PEAK / 1024))
done

# --- table ---------------------------------------------------------------------------------
ratio() { # ratio SLATE PEER HIGHER_IS_BETTER
    [[ -n ${1:-} && -n ${2:-} ]] || { echo "—"; return; }
    python3 -c "a,b=$1,$2; print(f'{(a/b if $3 else b/a):.2f}×' if a and b else '—')"
}
{
    echo "# slate mount against rclone mount ($(date -u +%Y-%m-%d), ${DELAY} ms round trip, cap $RATE, s3s-fs)"
    echo
    echo "rclone $(rclone version | head -n 1 | awk '{print $2}'): fast flags = --vfs-cache-mode full --vfs-fast-fingerprint --no-modtime --transfers 10 (no --vfs-read-chunk-streams in this version)."
    echo
    echo "slate-wb is slate with --write-back 1s; its ratios are in brackets."
    echo
    echo "| workload | slate | slate-wb | rclone defaults | rclone fast flags | slate vs defaults | slate vs fast |"
    echo "|---|---|---|---|---|---|---|"
    row() { # row LABEL KEY HIGHER_IS_BETTER UNIT
        local s=${R[slate,$2]:-} w=${R[slate-wb,$2]:-} d=${R[rclone-default,$2]:-} f=${R[rclone-fast,$2]:-}
        local vd vf
        vd=$(ratio "$s" "$d" "$3"); vf=$(ratio "$s" "$f" "$3")
        if [[ -n $w ]]; then
            vd="$vd ($(ratio "$w" "$d" "$3"))"; vf="$vf ($(ratio "$w" "$f" "$3"))"
        fi
        echo "| $1 | ${s:-—} $4 | ${w:-—} $4 | ${d:-—} $4 | ${f:-—} $4 | $vd | $vf |"
    }
    want cp-file && row "cp ${FILE_MB} MiB file, until cp returns" cp-file 0 s
    want cp-file && row "cp ${FILE_MB} MiB file, until complete at the store" cp-file-store 0 s
    want cp-tree && row "cp -r $TREE_N files ($((TREE_BYTES >> 20)) MiB), until cp returns" cp-tree 0 s
    want cp-tree && row "cp -r $TREE_N files, until all at the store" cp-tree-store 0 s
    want unzip && row "unzip -q of $ZIP_N files from the mount" unzip 0 s
    want read-seq && row "sequential read (fio bs=1M)" read-seq 1 MB/s
    want read-rand && row "random 4 KiB reads, ${RAND_SECS} s" read-rand 1 IOPS
    want read-rand && row "MiB fetched from the store by those random reads" rand-fetched 0 MiB
    want find && row "find over $FIND_N entries" find 0 s
    row "peak RSS of the mount" rss 0 MiB
    if [[ -n ${UNZIP_LOCAL:-} ]]; then
        echo
        echo "The same unzip from a local file (no mount) took $UNZIP_LOCAL s: the floor of the unzip row."
    fi
} | tee "$REPORT"
