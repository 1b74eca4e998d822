#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# fstab.sh: objfs as a system mount, through the real mount(8) and
# mount.fuse3:
#
#   - mount -t fuse.objfs SOURCE DIR, without and with -o (generic options
#     mount(8) and fstab add: rw, noatime, nodev, nosuid, _netdev, nofail,
#     x-systemd.*), reads byte-exact, umount DIR ends the daemon;
#   - an fstab line in a temporary fstab (mount --fstab FILE DIR) with
#     log_file= and metrics=: byte-exact reads; the log file has the
#     timestamped summary line and is reopened on SIGHUP (logrotate); the
#     metrics endpoint parses with prometheus_client's text parser and
#     objfs_bytes_total grows by exactly the size of a file read;
#   - a bad option in fstab: one clear message, nothing mounted;
#   - /dev/fd/N: the mount made by a helper (as a container runtime or CSI
#     driver does), objfs given the open /dev/fuse;
#   - systemd readiness: contrib/systemd/objfs@.service's ExecStart run with
#     a NOTIFY_SOCKET this script listens on: READY=1 arrives only when the
#     mount answers (checked the moment it arrives), STOPPING=1 at unmount.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no FUSE; not
# root, except under CI=true where that fails), 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs
if [ "$(id -u)" -ne 0 ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: fstab.sh runs as root under CI"; exit 1; }
	skip "needs root for mount(8)"
fi
for t in mount umount; do
	command -v "$t" >/dev/null 2>&1 || {
		[ "${CI:-}" = true ] && { echo "FAIL: $t is missing (tests/deps.sh)"; exit 1; }
		skip "$t is not installed"
	}
done
# the system python, where tests/deps.sh installs prometheus_client
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import prometheus_client.parser' 2>/dev/null; then
	[ "${CI:-}" = true ] && { echo "FAIL: python3-prometheus-client is missing (tests/deps.sh)"; exit 1; }
	skip "python3-prometheus-client is not installed"
fi

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
mkdir -p "$SRC/sub" "$MNT"
for f in a b c d e; do
	head -c $((3 << 20)) /dev/urandom >"$SRC/$f.bin"
done
echo "in a directory" >"$SRC/sub/g.txt"
# mount.fuse3 runs "objfs SOURCE DIR -o OPTS" through /bin/sh, with the
# PATH mount(8) resets (it is setuid: /usr/local/bin:/bin:/usr/bin), so the
# build under test is linked where an installed objfs would be.
HELPER=/usr/local/bin/objfs
if [ -L "$HELPER" ] && [[ "$(readlink "$HELPER")" == */src/objfs ]]; then
	rm -f "$HELPER" # left by an interrupted run of this test
fi
if [ -e "$HELPER" ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: $HELPER exists; fstab.sh needs to put the build there"; exit 1; }
	skip "$HELPER exists (an installed objfs): mount(8) would run it, not $OBJFS"
fi
mkdir -p "$(dirname "$HELPER")"
ln -s "$(readlink -f "$OBJFS")" "$HELPER" || exit 99
at_cleanup rm -f "$HELPER"

nginx_start "$SRC" || exit 99
URL=http://127.0.0.1:$NGINX_PORT/data/

# same FILE: the mounted copy of FILE equals the source
same() {
	cmp -s "$MNT/$1" "$SRC/$1"
}

# objfs_pid_of MNT: the daemon serving MNT (its command line names MNT)
objfs_pid_of() {
	pgrep -f -- "objfs .*$1" | head -n1
}

# gone MNT PID: MNT unmounted and PID exited within 10 s
gone() {
	local i
	for ((i = 0; i < 100; i++)); do
		if ! is_mounted "$1" && ! kill -0 "$2" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# t_mount LABEL MOUNT-ARGS...: mount(8) with these arguments, read, umount
t_mount() {
	local label=$1 pid out
	shift
	if ! out=$(timeout 30 mount "$@" 2>&1); then
		fail "$label: expected 'mount $*' to mount, got: $out"
		return
	fi
	if is_mounted "$MNT" && same a.bin && same sub/g.txt; then
		pass "$label: mounted; a.bin and sub/g.txt read byte-exact${out:+ (mount said: $out)}"
	else
		fail "$label: expected $MNT mounted with the source's bytes"
	fi
	LAST_OPTS=$(awk -v m="$MNT" '$2 == m { print $4 }' /proc/mounts)
	pid=$(objfs_pid_of "$MNT")
	if timeout 10 umount "$MNT" && gone "$MNT" "$pid"; then
		pass "$label: umount unmounted it and the daemon (pid $pid) exited"
	else
		fail "$label: expected umount to unmount $MNT and the daemon $pid to exit"
		umount -l "$MNT" 2>/dev/null
	fi
}

# ---------------------------------------------------------------- mount -t
t_mount "mount -t fuse.objfs" -t fuse.objfs "$URL" "$MNT"
t_mount "mount -t fuse.objfs -o generic options" -t fuse.objfs \
	-o rw,noatime,nodev,nosuid,noexec,_netdev,nofail,x-systemd.automount,x-gvfs-hide,allow_other \
	"$URL" "$MNT"
if [[ ",$LAST_OPTS," == *,ro,* && ",$LAST_OPTS," == *,nodev,* && ",$LAST_OPTS," == *,nosuid,* &&
	",$LAST_OPTS," == *,noexec,* && ",$LAST_OPTS," == *,noatime,* ]]; then
	pass "generic options: the mount is ro,nosuid,nodev,noexec,noatime ($LAST_OPTS)"
else
	fail "generic options: expected ro,nosuid,nodev,noexec,noatime in /proc/mounts, got '$LAST_OPTS'"
fi

# ---------------------------------------------------------------- fstab
FSTAB=$TEST_TMP/fstab
LOG=$TEST_TMP/log/objfs.log
mkdir -p "$(dirname "$LOG")"
MPORT=$(free_port)
printf '%s %s fuse.objfs rw,noauto,_netdev,nofail,user,x-systemd.requires=network-online.target,log_level=debug,log_file=%s,metrics=127.0.0.1:%s 0 0\n' \
	"$URL" "$MNT" "$LOG" "$MPORT" >"$FSTAB"
if out=$(timeout 30 mount --fstab "$FSTAB" "$MNT" 2>&1) && is_mounted "$MNT"; then
	pass "fstab: mount --fstab FILE DIR mounted it${out:+ (said: $out)}"
	PID=$(objfs_pid_of "$MNT")
	if same b.bin; then
		pass "fstab: b.bin reads byte-exact"
	else
		fail "fstab: expected b.bin to equal the source"
	fi
	if grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z objfs\[[0-9]+\]: mounted http://127.0.0.1:[0-9]+/data/ on .*log_level=debug,log_file=' "$LOG"; then
		pass "log_file: a timestamped summary line: $(grep -m1 ': mounted ' "$LOG" | cut -c1-160)..."
	else
		fail "log_file: expected a timestamped 'mounted SOURCE on DIR (... options ...)' line in $LOG, got: $(head -c 400 "$LOG")"
	fi
	# metrics: bytes_total grows by exactly a file that nobody read yet
	scrape() {
		"$PY" - "$MPORT" <<'EOF'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode()
vals = {}
for fam in text_string_to_metric_families(body):
    for s in fam.samples:
        if s.name == "objfs_bytes_total":
            assert s.labels.get("mount") and s.labels.get("source", "").startswith("http://"), s.labels
            vals["bytes"] = int(s.value)
        if s.name == "objfs_ttfb_seconds_count":
            vals["ttfb_count"] = int(s.value)
        if s.name == "objfs_cache_bytes":
            vals["cache_bytes_type"] = fam.type
print(vals["bytes"], vals["ttfb_count"], vals.get("cache_bytes_type"))
EOF
	}
	if m0=$(scrape 2>&1) && cat "$MNT/c.bin" >/dev/null && m1=$(scrape 2>&1); then
		read -r b0 c0 t0 <<<"$m0"
		read -r b1 c1 _ <<<"$m1"
		if [ $((b1 - b0)) -eq $((3 << 20)) ] && [ "$c1" -gt "$c0" ] && [ "$t0" = gauge ]; then
			pass "metrics: parsed by prometheus_client; objfs_bytes_total +$((b1 - b0)) for a 3 MiB file, ttfb histogram count $c0 -> $c1, cache_bytes a gauge"
		else
			fail "metrics: expected objfs_bytes_total to grow by $((3 << 20)) and the ttfb count to grow, got '$m0' -> '$m1'"
		fi
	else
		fail "metrics: expected http://127.0.0.1:$MPORT/metrics to parse: $m0 ${m1:-}"
	fi
	# logrotate: move the file, SIGHUP, the next lines go to a new file
	mv "$LOG" "$LOG.1"
	kill -HUP "$PID"
	sleep 0.5
	cat "$MNT/d.bin" >/dev/null
	if [ -s "$LOG" ] && kill -0 "$PID" 2>/dev/null; then
		pass "log_file: reopened on SIGHUP ($(wc -l <"$LOG") new lines after a read, daemon alive)"
	else
		fail "log_file: expected $LOG recreated with new lines after SIGHUP"
	fi
	if timeout 10 umount "$MNT" && gone "$MNT" "$PID"; then
		pass "fstab: umount unmounted it and the daemon exited"
	else
		fail "fstab: expected umount to end the mount and its daemon"
		umount -l "$MNT" 2>/dev/null
	fi
else
	fail "fstab: expected mount --fstab to mount $URL on $MNT, got: $out"
fi

# A bad option: one clear message, nothing mounted.
printf '%s %s fuse.objfs noauto,bogus_option=1 0 0\n' "$URL" "$MNT" >"$FSTAB"
out=$(timeout 30 mount --fstab "$FSTAB" "$MNT" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && ! is_mounted "$MNT" && [ "$(printf '%s\n' "$out" | grep -c "unknown option 'bogus_option'")" -eq 1 ]; then
	pass "fstab: a bad option fails with one message, nothing mounted: $(printf '%s' "$out" | tr '\n' ' ')"
else
	fail "fstab: expected a failure naming bogus_option once and nothing mounted, got rc=$rc: $out"
	umount -l "$MNT" 2>/dev/null
fi

# ---------------------------------------------------------------- /dev/fd/N
FDLOG=$TEST_TMP/fdmount.log
"$PY" - "$OBJFS" "$URL" "$MNT" >"$FDLOG" 2>&1 <<'EOF' &
# The mounter: opens /dev/fuse, mounts it on DIR itself (as a container
# runtime or CSI node plugin does), then runs objfs on /dev/fd/N.
import ctypes, os, subprocess, sys
objfs, url, mnt = sys.argv[1:4]
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/dev/fuse", os.O_RDWR)
MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
data = "fd=%d,rootmode=40000,user_id=0,group_id=0" % fd
if libc.mount(b"objfs", mnt.encode(), b"fuse.objfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
              data.encode()) != 0:
    print("mount(2) failed: %s" % os.strerror(ctypes.get_errno()))
    sys.exit(1)
p = subprocess.Popen([objfs, "-f", url, "/dev/fd/%d" % fd], pass_fds=[fd])
os.close(fd)
print("objfs pid %d" % p.pid, flush=True)
sys.exit(p.wait())
EOF
FDPID=$!
for ((i = 0; i < 100; i++)); do
	is_mounted "$MNT" && same e.bin && break
	sleep 0.1
done
if is_mounted "$MNT" && same e.bin && same sub/g.txt; then
	pass "/dev/fd/N: objfs serves a mount made by another process; e.bin reads byte-exact"
else
	fail "/dev/fd/N: expected the fd-mounted objfs to serve the source's bytes: $(cat "$FDLOG")"
fi
timeout 10 umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
if timeout 15 tail --pid="$FDPID" -f /dev/null; then
	wait "$FDPID"
	rc=$?
	[ "$rc" -eq 0 ] && pass "/dev/fd/N: objfs exited 0 at umount" ||
		fail "/dev/fd/N: expected objfs to exit 0 at umount, got $rc: $(cat "$FDLOG")"
else
	fail "/dev/fd/N: expected objfs to exit after umount"
	kill "$FDPID" 2>/dev/null
fi

# ---------------------------------------------------------------- systemd
UNIT=$HERE/../../contrib/systemd/objfs@.service
SOCK=$TEST_TMP/notify.sock
NOTES=$TEST_TMP/notify.txt
exec_start=$(sed -n 's/^ExecStart=//p' "$UNIT")
cmd=${exec_start//\/usr\/bin\/objfs/$OBJFS}
cmd=${cmd//\$\{OBJFS_OPTIONS\}/log_level=warn}
cmd=${cmd//\$\{OBJFS_SOURCE\}/$URL}
cmd=${cmd//%f/$MNT}
"$PY" - "$SOCK" "$MNT" >"$NOTES" 2>&1 <<'EOF' &
# Listens like systemd: on READY=1, checks at once that the mount answers.
import os, socket, sys
sock, mnt = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sock)
s.settimeout(60)
open(sock + ".ready", "w").close()
while True:
    msg = s.recv(4096).decode()
    for line in msg.split("\n"):
        if line == "READY=1":
            try:
                ok = os.path.ismount(mnt) and "a.bin" in os.listdir(mnt)
            except OSError as e:
                ok = False
            print("READY answered=%s" % ok, flush=True)
        elif line == "STOPPING=1":
            print("STOPPING", flush=True)
            sys.exit(0)
        elif line:
            print(line, flush=True)
EOF
LPID=$!
for ((i = 0; i < 50; i++)); do [ -e "$SOCK.ready" ] && break; sleep 0.1; done
# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
NOTIFY_SOCKET=$SOCK $cmd >"$TEST_TMP/unit.log" 2>&1 &
UPID=$!
for ((i = 0; i < 100; i++)); do grep -q '^READY' "$NOTES" && break; sleep 0.1; done
if grep -q '^READY answered=True' "$NOTES"; then
	pass "systemd: the unit's ExecStart sent READY=1, and the mount answered when it arrived ($(grep '^STATUS' "$NOTES"))"
else
	fail "systemd: expected READY=1 once the mount answers, got: $(cat "$NOTES") / $(head -c 300 "$TEST_TMP/unit.log")"
fi
timeout 10 fusermount3 -u "$MNT"
wait "$UPID"
urc=$?
if timeout 10 tail --pid="$LPID" -f /dev/null && grep -q '^STOPPING' "$NOTES" && [ "$urc" -eq 0 ]; then
	pass "systemd: STOPPING=1 at unmount, exit status 0"
else
	fail "systemd: expected STOPPING=1 and exit 0 at unmount, got exit $urc and: $(cat "$NOTES")"
	kill "$LPID" 2>/dev/null
fi
summary
