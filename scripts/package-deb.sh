#!/usr/bin/env bash
# Builds slate's Debian package and tests the install path end to end (issue 25):
#
#   1. the packaging units (packaging/debian/slate*.service) are still manifests/systemd/'s,
#      but for the binary's path;
#   2. `cargo build --release --locked --bin slate` (the Dockerfile's command) and
#      `cargo deb --no-build` (cargo-deb installed into ~/.cargo/bin if missing, pinned);
#   3. `dpkg -i`, then checks: /usr/bin/slate --version, the conffile /etc/slate/slate.toml, the
#      units (installed, pointing at /usr/bin/slate, not enabled), the user `slate`, and that the
#      shipped config makes slate stop at once (exit 2) instead of doing anything;
#   4. the service with a test config (/etc/slate/slate.toml: one local-folder pair): with
#      `systemctl start slate` where systemd is PID 1, else the installed unit's ExecStart run as
#      its User= (setpriv); a file in the source before the start must reach the replica (the
#      backfill), /readyz must answer 200, a file written after must reach it (inotify), and
#      a SIGTERM must stop slate with exit 0;
#   5. `dpkg -r` (binary gone, conffile kept) and `dpkg --purge` (conffile and state gone).
#
# Run it as root on a Debian-like host without a slate package installed (it installs and
# purges one), before a release:
#
#   scripts/package-deb.sh                  everything above
#   scripts/package-deb.sh --build-only     1 and 2 and a look inside the .deb (no root needed)
#
# CARGO_TARGET_DIR is honoured (the .deb lands in $CARGO_TARGET_DIR/debian/). Every wait is a
# poll with a deadline. Exits 0 when all passed, else 1 with one line saying what failed; the
# host is left as it was found (package purged, a user the run created deleted, test files
# removed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# cargo-deb 3.8.0 is the newest release, and it builds with the project's toolchain (its
# rust-version is 1.85). Raise it deliberately: its metadata keys and paths can change.
CARGO_DEB_VERSION=3.8.0
# How long each wait may take, in seconds.
DEADLINE=${SLATE_PKG_DEADLINE:-60}

build_only=0
case "${1:-}" in
    "") ;;
    --build-only) build_only=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "package-deb: FAIL: unknown argument '$1' (--build-only, --help)" >&2
        exit 1
        ;;
esac

say() { printf '==> %s\n' "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
# The last line on failure; anything printed before it (a log's tail) is context.
fail() {
    printf 'package-deb: FAIL: %s\n' "$*" >&2
    exit 1
}

# wait_for SECONDS WHAT CMD...: run CMD until it succeeds, at most SECONDS; while the daemon
# under test is watched (daemon_pid set), its death ends the wait at once.
wait_for() {
    local secs=$1 what=$2
    shift 2
    local end=$((SECONDS + secs))
    until "$@"; do
        if [[ -n ${daemon_pid:-} ]] && ! daemon_alive; then
            show_log
            fail "slate exited while waiting for $what"
        fi
        if ((SECONDS >= end)); then
            show_log
            fail "no $what within ${secs}s"
        fi
        sleep 0.2
    done
}

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[[ -n $version ]] || fail "no version in Cargo.toml"

# --- 1. the packaging units are the manifests' units ------------------------------------------
say "packaging units against manifests/systemd"
# A unit without comments and blank lines, /usr/local/bin/slate as the package's /usr/bin/slate.
unit_body() {
    sed -e '/^[[:space:]]*[#;]/d' -e '/^[[:space:]]*$/d' \
        -e 's#/usr/local/bin/slate#/usr/bin/slate#g' "$1"
}
for u in slate.service slate@.service; do
    if ! diff <(unit_body "manifests/systemd/$u") <(unit_body "packaging/debian/$u") >/dev/null; then
        diff <(unit_body "manifests/systemd/$u") <(unit_body "packaging/debian/$u") | sed 's/^/    /' >&2 || true
        fail "packaging/debian/$u differs from manifests/systemd/$u (beyond comments and the binary's path): make them agree"
    fi
    grep -q '^ExecStart=/usr/bin/slate ' "packaging/debian/$u" ||
        fail "packaging/debian/$u: ExecStart must run /usr/bin/slate"
done
ok "slate.service and slate@.service agree, ExecStart=/usr/bin/slate"

# --- 2. build ---------------------------------------------------------------------------------
if [[ $(cargo deb --version 2>/dev/null || true) != "cargo-deb $CARGO_DEB_VERSION" ]]; then
    say "installing cargo-deb $CARGO_DEB_VERSION into ~/.cargo/bin"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked ||
        fail "cargo install cargo-deb --version $CARGO_DEB_VERSION failed"
fi

say "cargo build --release --locked --bin slate"
cargo build --release --locked --bin slate || fail "the release build failed"

say "cargo deb --no-build"
deb_log=$(mktemp "${TMPDIR:-/tmp}/slate-deb.XXXXXX")
if ! cargo deb --no-build >"$deb_log" 2>&1; then
    sed 's/^/    /' "$deb_log" >&2
    rm -f "$deb_log"
    fail "cargo deb failed"
fi
# cargo-deb prints the package's path last
deb=$(tail -n1 "$deb_log")
rm -f "$deb_log"
[[ $deb == *.deb && -f $deb ]] || fail "cargo deb printed no .deb path (got '$deb')"
deb_size=$(stat -c %s "$deb")
printf '    %s (%s bytes, %s KiB)\n' "$deb" "$deb_size" "$((deb_size / 1024))"

# The package's own view: fields, conffiles, files, maintainer scripts.
say "inspecting the .deb"
[[ $(dpkg-deb -f "$deb" Package) == slate ]] || fail "$deb: Package is not slate"
[[ $(dpkg-deb -f "$deb" Version) == "$version"* ]] || fail "$deb: Version is not $version"
depends=$(dpkg-deb -f "$deb" Depends)
[[ $depends == *libc6* ]] || fail "$deb: Depends ($depends) does not name libc6"
contents=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/slate ./etc/slate/slate.toml ./usr/share/doc/slate/config.example.toml \
    ./usr/share/doc/slate/credentials.env.example ./usr/share/doc/slate/copyright; do
    grep -qx -- "$f" <<<"$contents" || fail "$deb lacks $f"
done
grep -qE '^\./(usr/)?lib/systemd/system/slate\.service$' <<<"$contents" || fail "$deb lacks slate.service"
grep -qE '^\./(usr/)?lib/systemd/system/slate@\.service$' <<<"$contents" || fail "$deb lacks slate@.service"
ctrl=$(mktemp -d "${TMPDIR:-/tmp}/slate-deb-control.XXXXXX")
dpkg-deb -e "$deb" "$ctrl"
grep -qx /etc/slate/slate.toml "$ctrl/conffiles" || fail "$deb: /etc/slate/slate.toml is not a conffile"
for script in preinst postinst prerm postrm; do
    if [[ -f $ctrl/$script ]] && ! sh -n "$ctrl/$script" 2>/dev/null; then
        sh -n "$ctrl/$script" 2>&1 | sed 's/^/    /' >&2 || true
        fail "$deb: the maintainer script $script is not valid sh"
    fi
done
grep -q 'adduser --system' "$ctrl/postinst" || fail "$deb: the postinst creates no user"
# enable = false, start = false: cargo-deb's fragments that only keep an operator's enabling
# (debian-installed ... was-enabled) and restart a running unit on upgrade (try-restart), never
# one that enables or starts it on a first install.
grep -q 'deb-systemd-helper debian-installed slate.service' "$ctrl/postinst" ||
    fail "$deb: the postinst lacks the systemd fragment of enable = false"
if grep -qE 'was-enabled defaults to true|deb-systemd-invoke start|_dh_action=start' "$ctrl/postinst"; then
    fail "$deb: the postinst enables or starts slate on install"
fi
rm -rf "$ctrl"
ok "Package slate $(dpkg-deb -f "$deb" Version), Depends: $depends; conffile, units, postinst"

if ((build_only)); then
    say "built (--build-only: not installed)"
    exit 0
fi

# --- 3. install -------------------------------------------------------------------------------
[[ $(id -u) == 0 ]] || fail "installing needs root (or run with --build-only)"
command -v dpkg >/dev/null || fail "no dpkg: not a Debian-like host"
pkg_status() { dpkg-query -W -f='${db:Status-Status}' slate 2>/dev/null || true; }
if [[ -n $(pkg_status) && $(pkg_status) != not-installed ]]; then
    fail "a slate package is on this host already ($(pkg_status)): this test installs and purges it; run 'dpkg --purge slate' first"
fi

user_existed=0
getent passwd slate >/dev/null && user_existed=1
test_root=
daemon_pid=
dropin=
installed=0

# shellcheck disable=SC2317  # called by the trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        local end=$((SECONDS + 40))
        while kill -0 "$daemon_pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
        kill -KILL "$daemon_pid" 2>/dev/null || true
    fi
    if [[ -n $dropin ]]; then
        systemctl stop slate >/dev/null 2>&1 || true
        rm -rf "$(dirname "$dropin")"
        systemctl daemon-reload >/dev/null 2>&1 || true
    fi
    if ((installed)) && [[ $(pkg_status) != not-installed && -n $(pkg_status) ]]; then
        dpkg --purge slate >/dev/null 2>&1 || echo "package-deb: cleanup: dpkg --purge slate failed" >&2
    fi
    if ((!user_existed)) && getent passwd slate >/dev/null; then
        userdel slate >/dev/null 2>&1 || true
        if getent group slate >/dev/null; then groupdel slate >/dev/null 2>&1 || true; fi
    fi
    if [[ -n $test_root ]]; then rm -rf "$test_root"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "dpkg -i $(basename "$deb")"
installed=1
dpkg -i "$deb" | sed 's/^/    /' || fail "dpkg -i $deb failed"
[[ $(pkg_status) == installed ]] || fail "dpkg -i left slate '$(pkg_status)', not installed"

say "checking the installed package"
[[ -x /usr/bin/slate ]] || fail "/usr/bin/slate is missing or not executable"
got=$(/usr/bin/slate --version 2>&1) || fail "/usr/bin/slate --version failed: $got"
[[ $got == "slate $version" ]] || fail "/usr/bin/slate --version says '$got', not 'slate $version'"
ok "/usr/bin/slate --version: $got"

[[ -f /etc/slate/slate.toml ]] || fail "/etc/slate/slate.toml is missing"
dpkg-query -W -f='${Conffiles}\n' slate | grep -q '^ */etc/slate/slate.toml ' ||
    fail "dpkg does not list /etc/slate/slate.toml as a conffile"
ok "/etc/slate/slate.toml, a conffile"
for f in config.example.toml credentials.env.example workers.env.example copyright; do
    [[ -f /usr/share/doc/slate/$f ]] || fail "/usr/share/doc/slate/$f is missing"
done
ok "/usr/share/doc/slate: config.example.toml, credentials.env.example, workers.env.example"

unit=
for d in /usr/lib/systemd/system /lib/systemd/system; do
    [[ -f $d/slate.service ]] && unit=$d/slate.service && break
done
[[ -n $unit ]] || fail "slate.service is not installed in /usr/lib/systemd/system or /lib/systemd/system"
[[ -f $(dirname "$unit")/slate@.service ]] || fail "slate@.service is not installed beside $unit"
unit_key() { sed -n "s/^$1=//p" "$unit" | tail -n1; }
exec_line=$(unit_key ExecStart)
[[ $exec_line == "/usr/bin/slate sync --config /etc/slate/slate.toml" ]] ||
    fail "$unit: ExecStart=$exec_line, not /usr/bin/slate sync --config /etc/slate/slate.toml"
for w in /etc/systemd/system/multi-user.target.wants/slate.service /etc/systemd/system/multi-user.target.wants/slate@*.service; do
    [[ -e $w ]] && fail "the package enabled the unit ($w exists)"
done
ok "$unit and slate@.service, ExecStart=$exec_line, not enabled"

unit_user=$(unit_key User)
unit_group=$(unit_key Group)
[[ -n $unit_user && -n $unit_group ]] || fail "$unit has no User= or Group="
pw=$(getent passwd "$unit_user") || fail "the postinst created no user '$unit_user'"
IFS=: read -r _ _ uid _ _ home shell <<<"$pw"
((uid < 1000)) || fail "user $unit_user has uid $uid: not a system user"
[[ $shell == */nologin || $shell == /bin/false ]] || fail "user $unit_user has the login shell $shell"
getent group "$unit_group" >/dev/null || fail "no group '$unit_group'"
[[ -d /var/lib/slate && $(stat -c %U /var/lib/slate) == "$unit_user" ]] ||
    fail "/var/lib/slate is missing or not owned by $unit_user"
ok "user $unit_user (uid $uid, home $home, shell $shell), /var/lib/slate owned by it"

# slate as the unit runs it: its User= and Group=, a clean environment, the state directory
# there (StateDirectory= does that under systemd).
as_unit_user() {
    setpriv --reuid="$unit_user" --regid="$unit_group" --init-groups -- \
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" USER="$unit_user" \
        LOGNAME="$unit_user" LANG=C.UTF-8 "$@"
}
read -r -a exec_argv <<<"$exec_line"

say "the shipped /etc/slate/slate.toml does nothing"
rc=0
msg=$(as_unit_user "${exec_argv[@]}" 2>&1 </dev/null) || rc=$?
((rc == 2)) || fail "slate on the shipped config exited $rc, not 2 (a config error): $msg"
ok "exit 2: $msg"

# --- 4. the service ---------------------------------------------------------------------------
systemd_pid1=0
[[ $(ps -p 1 -o comm= 2>/dev/null | tr -d ' ') == systemd ]] && systemd_pid1=1

# The unit has PrivateTmp=yes and ProtectSystem=strict: under systemd the test folders must lie
# outside /tmp and /var/tmp, and the replica is made writable with a drop-in's ReadWritePaths=
# (what manifests/README.md tells an operator with local-folder pairs to do).
if ((systemd_pid1)); then
    mkdir -p /srv
    test_root=$(mktemp -d /srv/slate-pkgtest.XXXXXX)
else
    test_root=$(mktemp -d "${TMPDIR:-/tmp}/slate-pkgtest.XXXXXX")
fi
chmod 0755 "$test_root"
install -d -o "$unit_user" -g "$unit_group" -m 0755 "$test_root/source" "$test_root/replica"

# a free port on loopback for the listener (/readyz)
port=
for ((p = 39000 + RANDOM % 1000, n = 0; n < 200; p++, n++)); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        port=$p
        break
    fi
done
[[ -n $port ]] || fail "no free port on 127.0.0.1 between 39000 and 40200"

# The operator's step: a config with a pair, in place of the shipped one.
cat >/etc/slate/slate.toml <<EOF
# written by scripts/package-deb.sh: removed with the package (dpkg --purge)
[daemon]
db = "/var/lib/slate/slate.db"
listen = "127.0.0.1:$port"

[[pairs]]
name = "package-test"
src = "$test_root/source"
dst = "$test_root/replica"
EOF

printf 'before the start %s\n' "$(date +%s%N)" >"$test_root/source/before.txt"
chown "$unit_user:$unit_group" "$test_root/source/before.txt"

log=$test_root/slate.log
if ((systemd_pid1)); then
    say "systemctl start slate (systemd is PID 1)"
    dropin=/run/systemd/system/slate.service.d/50-package-test.conf
    mkdir -p "$(dirname "$dropin")"
    cat >"$dropin" <<EOF
[Service]
ReadWritePaths=$test_root/replica
Environment=RUST_LOG=slate=info,warn
EOF
    systemctl daemon-reload
    since=$(date '+%Y-%m-%d %H:%M:%S')
    systemctl start slate || fail "systemctl start slate failed"
    daemon_pid=$(systemctl show -p MainPID --value slate)
    [[ -n $daemon_pid && $daemon_pid != 0 ]] || fail "slate.service has no main process"
    daemon_alive() { [[ $(systemctl is-active slate 2>/dev/null) == active ]]; }
    show_log() { journalctl -u slate --since "$since" --no-pager 2>/dev/null | tail -n 30 | sed 's/^/    | /' >&2 || true; }
else
    say "systemd is not PID 1 ($(ps -p 1 -o comm= 2>/dev/null || echo '?')): the unit's ExecStart as User=$unit_user"
    printf '    %s\n' "$exec_line"
    # not through as_unit_user: $! must be slate's own pid (setpriv and env exec, no fork)
    setpriv --reuid="$unit_user" --regid="$unit_group" --init-groups -- \
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" USER="$unit_user" \
        LOGNAME="$unit_user" LANG=C.UTF-8 RUST_LOG=slate=info,warn \
        "${exec_argv[@]}" </dev/null >"$log" 2>&1 &
    daemon_pid=$!
    daemon_alive() { kill -0 "$daemon_pid" 2>/dev/null; }
    show_log() { tail -n 30 "$log" 2>/dev/null | sed 's/^/    | /' >&2 || true; }
fi
# the process is slate itself, run as User= (setpriv changes the user, then execs slate)
runs_as_unit_user() {
    [[ $(ps -o user=,comm= -p "$daemon_pid" | tr -s ' ' | sed 's/^ //') == "$unit_user slate" ]]
}
wait_for 10 "slate (pid $daemon_pid) running as $unit_user" runs_as_unit_user
ok "slate running, pid $daemon_pid, user $unit_user"

same_file() { [[ -f $test_root/replica/$1 ]] && cmp -s "$test_root/source/$1" "$test_root/replica/$1"; }
wait_for "$DEADLINE" "before.txt in the replica (the backfill)" same_file before.txt
ok "before.txt replicated (backfill)"

ready() { [[ $(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz") == 200 ]]; }
wait_for "$DEADLINE" "200 from /readyz on 127.0.0.1:$port" ready
ok "/readyz 200 on 127.0.0.1:$port"

mkdir "$test_root/source/sub"
printf 'after the start %s\n' "$(date +%s%N)" >"$test_root/source/sub/after.txt"
chown -R "$unit_user:$unit_group" "$test_root/source/sub"
wait_for "$DEADLINE" "sub/after.txt in the replica (a change while running)" same_file sub/after.txt
ok "sub/after.txt replicated (followed a change)"
[[ $(stat -c %U "$test_root/replica/sub/after.txt") == "$unit_user" ]] ||
    fail "the replica's sub/after.txt is not owned by $unit_user"

if ((systemd_pid1)); then
    say "systemctl stop slate"
    systemctl stop slate || fail "systemctl stop slate failed"
    result=$(systemctl show -p Result --value slate)
    [[ $result == success ]] || fail "slate.service stopped with Result=$result, not success"
    [[ $(systemctl is-active slate || true) != active ]] || fail "slate.service still active after stop"
    ok "stopped, Result=$result"
else
    say "SIGTERM to slate"
    kill -TERM "$daemon_pid"
    stopped() { ! kill -0 "$daemon_pid" 2>/dev/null; }
    saved_pid=$daemon_pid
    daemon_pid=
    wait_for 45 "slate's exit after SIGTERM" stopped
    rc=0
    wait "$saved_pid" || rc=$?
    if ((rc != 0)); then
        show_log
        fail "slate exited $rc after SIGTERM, not 0"
    fi
    ok "exited 0"
fi
daemon_pid=
[[ -s /var/lib/slate/slate.db ]] || fail "no database at /var/lib/slate/slate.db after the run"
ok "/var/lib/slate/slate.db written"

# --- 5. remove and purge ----------------------------------------------------------------------
say "dpkg -r slate"
dpkg -r slate | sed 's/^/    /' || fail "dpkg -r slate failed"
[[ ! -e /usr/bin/slate ]] || fail "/usr/bin/slate is still there after dpkg -r"
[[ ! -e $unit ]] || fail "$unit is still there after dpkg -r"
[[ $(pkg_status) == config-files ]] || fail "after dpkg -r slate is '$(pkg_status)', not config-files"
[[ -f /etc/slate/slate.toml ]] || fail "dpkg -r removed the conffile /etc/slate/slate.toml"
ok "binary and units gone; /etc/slate/slate.toml kept (config-files)"

say "dpkg --purge slate"
dpkg --purge slate | sed 's/^/    /' || fail "dpkg --purge slate failed"
[[ ! -e /etc/slate/slate.toml ]] || fail "/etc/slate/slate.toml is still there after purge"
[[ ! -e /var/lib/slate ]] || fail "/var/lib/slate is still there after purge"
[[ $(pkg_status) == not-installed || -z $(pkg_status) ]] || fail "after purge slate is '$(pkg_status)'"
installed=0
ok "conffile and /var/lib/slate gone"

if [[ -n $dropin ]]; then
    rm -rf "$(dirname "$dropin")"
    systemctl daemon-reload
    dropin=
fi
printf 'package-deb: passed: %s (%s bytes) built, installed, ran as a service (%s), removed\n' \
    "$deb" "$deb_size" "$( ((systemd_pid1)) && echo systemd || echo "ExecStart as $unit_user, no systemd")"
