#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# local_user.sh: what a second, unprivileged local user (objfstest) can do
# to a root daemon through its log file and its metrics endpoint.
#
#   OBJFS=/path/to/objfs tests/integration/local_user.sh
#
# log_file= in directories the other user may write (sticky, as /tmp;
# fs.protected_symlinks/protected_regular may be off, as they are here):
#  1. at mount, their symlink at the log's name, to a root-owned 0600 file:
#     the mount is refused naming the path and the reason; the file keeps
#     its bytes, mode and owner;
#  2. at mount, a file of theirs at the name: refused, the file untouched;
#  3. a directory writable by others and not sticky: refused, nothing made;
#  4. a mount logging to the sticky directory; the file rotated, their
#     symlink put at the name (to a file root would create, then to the
#     root file), SIGHUP each time: the reopen is refused with one line,
#     the lines go on to the rotated file, nothing is created or written
#     there; their symlink removed, the next SIGHUP opens a new log.
# metrics=:
#  5. 64 idle connections and 16 that trickle half a request, held by the
#     other user while root scrapes: every scrape gets a whole exposition
#     that prometheus_client parses (10 s per scrape only detects a hang).
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse;
# not root, except under CI=true where that fails), 99 binary missing.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs
if [ "$(id -u)" -ne 0 ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: local_user.sh runs as root under CI"; exit 1; }
	skip "needs root to act as a second user"
fi
command -v setpriv >/dev/null 2>&1 && command -v useradd >/dev/null 2>&1 || {
	[ "${CI:-}" = true ] && { echo "FAIL: setpriv/useradd missing (tests/deps.sh)"; exit 1; }
	skip "setpriv or useradd is not installed"
}
second_user objfstest || { echo "ERROR: cannot create the test user objfstest" >&2; exit 99; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
mkdir -p "$SRC" "$MNT"
chmod 711 "$TEST_TMP"   # the other user reaches the directories below
head -c $((1 << 20)) /dev/urandom >"$SRC/f.bin"
for i in 1 2 3 4 5 6; do printf 'poke %s\n' "$i" >"$SRC/p$i.txt"; done
nginx_start "$SRC" || { fail "expected nginx to start"; summary; exit 1; }
URL=http://127.0.0.1:$NGINX_PORT/data/

# Root's files the other user points at: one that exists, one root would create.
ROOT=$TEST_TMP/rootonly
mkdir -m 0711 "$ROOT"
printf 'root only: never written by objfs\n' >"$ROOT/secret"
chmod 600 "$ROOT/secret"
fileid() { stat -c '%a %u %g %s' "$1" && md5sum <"$1"; }
SECRET_ID=$(fileid "$ROOT/secret")
secret_kept() { [ "$(fileid "$ROOT/secret")" = "$SECRET_ID" ]; }

STICKY=$TEST_TMP/sticky
mkdir "$STICKY" && chmod 1777 "$STICKY"
LOG=$STICKY/objfs.log

# try_mount LOGFILE: objfs -f with log_file=LOGFILE; RC its exit status
# (0 when it mounted: then unmounted), OUT its output.
try_mount() {
	local pid i
	"$OBJFS" -f -o "log_file=$1" "$URL" "$MNT" >"$TEST_TMP/try.out" 2>&1 &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		is_mounted "$MNT" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if is_mounted "$MNT"; then
		timeout 10 fusermount3 -u "$MNT"
		RC=0
		wait "$pid"
	else
		RC=0
		wait "$pid" || RC=$?
		[ "$RC" != 0 ] || RC=mounted-not
	fi
	OUT=$(cat "$TEST_TMP/try.out")
}

# refused LABEL LOGFILE WORDS...: the mount fails, naming LOGFILE and WORDS.
refused() {
	local label=$1 lf=$2 w ok=1
	shift 2
	try_mount "$lf"
	[ "$RC" != 0 ] && [ "$RC" != mounted-not ] || ok=0
	[[ $OUT == *"$lf"* ]] || ok=0
	for w in "$@"; do [[ $OUT == *"$w"* ]] || ok=0; done
	if [ "$ok" = 1 ]; then
		pass "$label: mount refused (exit $RC): $OUT"
	else
		fail "$label: expected the mount refused with a message naming $lf and '$*', got exit $RC: $OUT"
	fi
}

# ---------------------------------------------------------------- 1 symlink at mount
"${AS_USER[@]}" ln -s "$ROOT/secret" "$LOG"
refused "1. log_file their symlink to a root 0600 file" "$LOG" "symbolic link owned by uid $TUID"
secret_kept && pass "1. the root file kept its bytes, mode and owner" ||
	fail "1. expected $ROOT/secret unchanged ($SECRET_ID), now: $(fileid "$ROOT/secret")"
"${AS_USER[@]}" rm -f "$LOG"

# ---------------------------------------------------------------- 2 their file at mount
"${AS_USER[@]}" sh -c "printf 'theirs\n' >'$LOG'"
THEIRS=$(fileid "$LOG")
refused "2. log_file a file of theirs" "$LOG" "owned by uid $TUID"
[ "$(fileid "$LOG")" = "$THEIRS" ] && pass "2. their file untouched" ||
	fail "2. expected their file unchanged ($THEIRS), now $(fileid "$LOG")"
"${AS_USER[@]}" rm -f "$LOG"

# ---------------------------------------------------------------- 3 loose directory
LOOSE=$TEST_TMP/loose
mkdir "$LOOSE" && chmod 0777 "$LOOSE"
refused "3. log_file in a directory others may write, not sticky" "$LOOSE/objfs.log" \
	"$LOOSE" "not sticky"
[ -z "$(ls -A "$LOOSE")" ] && pass "3. nothing created there" ||
	fail "3. expected $LOOSE empty, found $(ls -A "$LOOSE")"

# ---------------------------------------------------------------- 4 SIGHUP swaps
MPORT=$(free_port)
if mount_objfs "$URL" "$MNT" "log_file=$LOG,log_level=debug,metrics=127.0.0.1:$MPORT"; then
	PID=$OBJFS_PID
	cat "$MNT/f.bin" >/dev/null
	[ "$(stat -c '%u %a' "$LOG")" = "0 640" ] && pass "4. log made by root, mode 640" ||
		fail "4. expected $LOG root's, mode 640: $(stat -c '%u %a' "$LOG")"
	# poke: the first read of another file, a fetch: log lines at log_level=debug
	POKES=0
	poke() { POKES=$((POKES + 1)); cat "$MNT/p$POKES.txt" >/dev/null; }
	# hup_to TARGET: rotate, their symlink to TARGET at the name, SIGHUP, a poke
	hup_to() {
		mv "$LOG" "$LOG.1"
		"${AS_USER[@]}" ln -s "$1" "$LOG"
		kill -HUP "$PID"
		sleep 0.2
		poke
	}
	hup_to "$ROOT/created"
	n1=$(grep -c 'not reopened on SIGHUP' "$LOG.1")
	if [ ! -e "$ROOT/created" ] && [ "$n1" = 1 ] && kill -0 "$PID" 2>/dev/null; then
		pass "4. symlink to a file root would create: nothing created, one line: $(grep -m1 'not reopened' "$LOG.1" | cut -c1-200)"
	else
		fail "4. expected $ROOT/created not made and one 'not reopened' line in $LOG.1 (got $n1), daemon alive: $(ls -l "$ROOT")"
	fi
	lines=$(wc -l <"$LOG.1")
	poke
	[ "$(wc -l <"$LOG.1")" -gt "$lines" ] && pass "4. later lines go on to the file opened before" ||
		fail "4. expected new lines in $LOG.1 after the refused reopen"
	"${AS_USER[@]}" rm -f "$LOG"
	mv "$LOG.1" "$LOG"
	hup_to "$ROOT/secret"
	secret_kept && pass "4. symlink to a root 0600 file: the file kept its bytes, mode and owner" ||
		fail "4. expected $ROOT/secret unchanged ($SECRET_ID), now: $(fileid "$ROOT/secret")"
	"${AS_USER[@]}" rm -f "$LOG"
	kill -HUP "$PID"
	sleep 0.2
	poke
	if [ -f "$LOG" ] && [ ! -L "$LOG" ] && [ "$(stat -c %u "$LOG")" = 0 ] && [ -s "$LOG" ]; then
		pass "4. the name free again: the next SIGHUP opened a new log ($(wc -l <"$LOG") lines)"
	else
		fail "4. expected a new root-owned $LOG with lines after the last SIGHUP"
	fi

	# ------------------------------------------------------------ 5 metrics
	cat >"$TEST_TMP/hold.py" <<'EOF'
import socket, sys, time
port, ready = int(sys.argv[1]), sys.argv[2]
held = []
for i in range(80):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        if i >= 64:
            s.sendall(b"GET /metr")  # half a request line, then nothing
    except OSError:
        break  # the listen queue is full: hold what is open
    held.append(s)
print(len(held), "held", flush=True)
open(ready, "w").close()
time.sleep(30)
EOF
	chmod 644 "$TEST_TMP/hold.py"
	rm -f "$STICKY/held"
	timeout 40 "${AS_USER[@]}" "$PY" "$TEST_TMP/hold.py" "$MPORT" "$STICKY/held" >"$TEST_TMP/held.out" &
	HOLD=$!
	for ((i = 0; i < 100; i++)); do [ -e "$STICKY/held" ] && break; sleep 0.1; done
	good=0
	for ((i = 0; i < 5; i++)); do
		if timeout 15 curl -s --max-time 10 "http://127.0.0.1:$MPORT/metrics" >"$TEST_TMP/scrape" &&
			"$PY" - "$TEST_TMP/scrape" <<'EOF'
import sys
from prometheus_client.parser import text_string_to_metric_families
names = {f.name for f in text_string_to_metric_families(open(sys.argv[1]).read())}
sys.exit(0 if "objfs_ttfb_seconds" in names and "objfs_bytes" in names else 1)
EOF
		then
			good=$((good + 1))
		fi
	done
	kill "$HOLD" 2>/dev/null
	wait "$HOLD" 2>/dev/null
	held=$(cat "$TEST_TMP/held.out" 2>/dev/null)
	if [ "$held" = "80 held" ] && [ "$good" = 5 ]; then
		pass "5. 80 idle or trickling connections of another user held: 5 of 5 scrapes whole and parsed"
	else
		fail "5. expected 80 connections held ('$held') and 5 of 5 scrapes parsed meanwhile, got $good"
	fi
	check_unmount "4-5. the mount" "$MNT"
else
	fail "4. expected a mount with log_file=$LOG to come up"
fi

summary
