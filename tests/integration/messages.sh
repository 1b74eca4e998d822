#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# messages.sh: a mount that fails says why, in words that name the fix, at
# the default log level, on stderr, with the one "objfs: " prefix.
#
#   OBJFS=/path/to/objfs tests/integration/messages.sh
#
# What must hold (nginx on loopback; each case exits non-zero, mounts
# nothing):
#  - nothing listening: the reason on stderr, also with log_file= (which
#    has the line too, with its level);
#  - every line on stderr starts with "objfs: " and none with a level tag.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse),
# 99 binary missing.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
WORK=$TEST_TMP/work
MNT=$TEST_TMP/mnt

mkdir -p "$SRC" "$WORK" "$MNT"
echo "data" >"$SRC/file.txt"
if ! nginx_start "$SRC"; then
	fail "expected nginx to start"
	summary
	exit 1
fi
log "objfs: $OBJFS; nginx on $NGINX_PORT"

# says DESC WANT_REGEX [NOT_REGEX] ARGS...: objfs ARGS (daemonising) exits
# non-zero, mounts nothing, and its stderr matches WANT_REGEX (grep -E)
# and not NOT_REGEX ("" for none); every line starts with "objfs: " and
# none with a level tag.
says() {
	local desc=$1 want=$2 not=$3 rc=0
	shift 3
	remember_mountpoint "$MNT"
	timeout 120 "$OBJFS" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
	if is_mounted "$MNT"; then
		fail "$desc: expected no mount, got one (exit $rc)"
		timeout 10 fusermount3 -u "$MNT" 2>/dev/null
	elif [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
		fail "$desc: expected objfs to exit non-zero, got exit $rc"
	elif ! grep -E -q -- "$want" "$WORK/err"; then
		fail "$desc: expected stderr to match /$want/, got: $(head -c 600 "$WORK/err")"
	elif [ -n "$not" ] && grep -E -q -- "$not" "$WORK/err"; then
		fail "$desc: expected stderr not to match /$not/, got: $(head -c 600 "$WORK/err")"
	elif grep -v -q '^objfs: ' "$WORK/err" || grep -E -q '^objfs: (error|warning|note): ' "$WORK/err"; then
		fail "$desc: expected every line to start with 'objfs: ' and no level tag, got: $(head -c 600 "$WORK/err")"
	else
		pass "$desc: exit $rc: $(grep -E -m 1 -- "$want" "$WORK/err" | cut -c 1-260)"
	fi
}

DEAD=$(free_port)
says "nothing listening" \
	"^objfs: cannot list 'http://127\.0\.0\.1:$DEAD/data/': connection refused" "" \
	-o retries=0 "http://127.0.0.1:$DEAD/data/" "$MNT"
# with a log file the reason reaches the terminal all the same
says "nothing listening, log_file=" \
	"^objfs: cannot list 'http://127\.0\.0\.1:$DEAD/data/': connection refused" "" \
	-o "retries=0,log_file=$WORK/file.log" "http://127.0.0.1:$DEAD/data/" "$MNT"
if grep -q "objfs\[[0-9]*\]: error: cannot list 'http://127\.0\.0\.1:$DEAD/data/'" "$WORK/file.log"; then
	pass "nothing listening, log_file=: the file has the line, with its level"
else
	fail "nothing listening, log_file=: expected 'error: cannot list' in the file, got: $(head -c 300 "$WORK/file.log")"
fi
summary
