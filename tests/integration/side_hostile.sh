#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# side_hostile.sh: a hostile client of the GPU side API against an
# allow_other mount (docs/reliability.md, "Against a local user"). The
# attacker is a second, unprivileged user running
# tests/side_client's raw-protocol modes; root is the victim, whose FUSE
# reads (md5sum of files nobody read yet) and side reads must finish in
# time and byte-exact while each attack runs:
#
#   nodone     FILLs whose DONE replies are never read (no shared thread may
#              block in send(), or every FUSE read hangs)
#   pending    20 connections that never say HELLO (they must not hold the
#              64 session slots)
#   sessions   more sessions than the uid's ring budget (-EDQUOT)
#   caps       20,000 capability ioctls (they must not take all 4,096
#              records from everyone else)
#   norelease  a full ring never released: the daemon's CPU over 3 s (its
#              wait backs off instead of polling)
#
# The ring geometry is 7 x 292 KiB (2 MiB with its header); side_ring_budget=10M
# gives each uid a quarter, 2.5 MiB: one ring. The daemon makes every ring
# and takes no descriptor from a client, so a client cannot hand it a ring
# whose pages fault.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no FUSE; not
# root, except under CI=true where that fails), 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs
CLIENT=$(test_binary side_client SIDE_CLIENT) || exit 99
if [ "$(id -u)" -ne 0 ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: side_hostile.sh runs as root under CI"; exit 1; }
	skip "needs root to act as a second user"
fi
command -v setpriv >/dev/null 2>&1 || {
	[ "${CI:-}" = true ] && { echo "FAIL: setpriv is missing (tests/deps.sh)"; exit 1; }
	skip "setpriv is not installed"
}
second_user objfstest || { echo "ERROR: cannot create the test user objfstest" >&2; exit 99; }

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
PUB=$TEST_TMP/pub
VICTIM_TO=20
chmod 711 "$TEST_TMP"
mkdir -p "$SRC" "$PUB"
chmod 1777 "$PUB"
for i in 1 2 3 4 5 6; do
	head -c $((24 << 20)) /dev/urandom >"$SRC/v$i.bin"
done
head -c $((32 << 20)) /dev/urandom >"$SRC/bait.bin"

nginx_start "$SRC" || exit 99
mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" \
	"allow_other,ring_slots=7,ring_slot_size=292K,side_ring_budget=10M,stats" || exit 99
PID=$OBJFS_PID

# The attacker's capability for bait.bin (allow_other: any user may read it).
if ! timeout 30 "${AS_USER[@]}" "$CLIENT" cap "$MNT/bait.bin" "$PUB/user.cap"; then
	fail "expected uid $TUID to get a capability for bait.bin"
	unmount_objfs "$MNT"
	summary
	exit 1
fi
# bait.bin is not read first: the attacker's fills go to the network, so
# the engine threads finish them (and must not block sending their DONEs).

# victim LABEL N: root reads vN.bin (never read before) through FUSE and a
# part of bait.bin through its own side session, both byte-exact, in time.
victim() {
	local label=$1 n=$2 got want t0 out
	t0=$SECONDS
	got=$(timeout -s KILL "$VICTIM_TO" md5sum <"$MNT/v$n.bin" | cut -d' ' -f1)
	want=$(md5sum <"$SRC/v$n.bin" | cut -d' ' -f1)
	if [ "$got" = "$want" ] && [ $((SECONDS - t0)) -le "$VICTIM_TO" ]; then
		pass "$label: root's md5sum of a 24 MiB file through FUSE is right ($((SECONDS - t0)) s)"
	else
		fail "$label: expected root's md5sum of v$n.bin to finish within $VICTIM_TO s and match, got '${got:-nothing}' after $((SECONDS - t0)) s"
	fi
	if out=$(timeout "$VICTIM_TO" "$CLIENT" reads "$MNT/bait.bin" "$SRC/bait.bin" 2>&1); then
		pass "$label: root's side reads of bait.bin are right"
	else
		fail "$label: expected root's side reads to work and be right:"
		printf '%s\n' "$out" | grep -v '^ok' | head -5 | sed 's/^/    | /'
	fi
}

alive() {
	if _pid_alive "$PID" && is_mounted "$MNT"; then
		pass "$1: objfs (pid $PID) alive and mounted"
	else
		fail "$1: expected objfs (pid $PID) alive and mounted; its log:"
		tail -n 20 "$OBJFS_LOG" | sed 's/^/    | /'
		summary
		exit 1
	fi
}

# attack MODE ARGS...: runs the attacker in the background; sets APID, AOUT.
attack() {
	AOUT=$TEST_TMP/attack.$1.out
	timeout 60 "${AS_USER[@]}" "$CLIENT" "$@" >"$AOUT" 2>&1 &
	APID=$!
}

# cpu_ticks PID: utime + stime of PID, in clock ticks.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# ---------------------------------------------------------------- 1. unread replies
attack nodone "$PUB/user.cap" 45
sleep 2
victim "unread DONEs" 1
kill "$APID" 2>/dev/null # it ends by itself once the daemon ends its session
wait "$APID"
note "attacker: $(cat "$AOUT")"
alive "unread DONEs"

# ---------------------------------------------------------------- 3. pending connections
attack pending "$PUB/user.cap" 20 6
sleep 1
victim "20 connections without HELLO" 3
wait "$APID"
if grep -q "^16 of 20 connections refused at once" "$AOUT"; then
	pass "20 connections without HELLO: 4 wait, 16 refused at once (per-uid bound)"
else
	fail "expected 16 of the attacker's 20 connections refused at once, it got: $(cat "$AOUT")"
fi

# ---------------------------------------------------------------- 4. sessions and ring budget
attack sessions "$PUB/user.cap" 5 6
sleep 1
victim "sessions past the ring budget" 4
wait "$APID"
if grep -q "^1 of 5 sessions accepted, then refused Disk quota exceeded" "$AOUT"; then
	pass "sessions past the uid's ring budget: 1 accepted, then EDQUOT"
else
	fail "expected 1 of 5 sessions, then EDQUOT (side_ring_budget=10M: one 2 MiB ring per uid), got: $(cat "$AOUT")"
fi

# ---------------------------------------------------------------- 5. capability flood
out=$(timeout 120 "${AS_USER[@]}" "$CLIENT" caps "$MNT/bait.bin" 20000 2>&1)
if [ "$out" = "16383 capabilities granted, then No space left on device" ]; then
	pass "20,000 capability ioctls: 16,383 granted (a quarter of 65,536, one held already), then ENOSPC"
else
	fail "expected the attacker's capabilities to stop at its quarter (16,383 more), got '$out'"
fi
# A second user (a bare uid) floods too: the two hold half of all
# capabilities, and root still gets one from the quarter it keeps.
AS_USER2=(setpriv --reuid="$((TUID + 1))" --regid="$TGID" --clear-groups --)
out=$(timeout 120 "${AS_USER2[@]}" "$CLIENT" caps "$MNT/bait.bin" 20000 2>&1)
if [ "$out" = "16384 capabilities granted, then No space left on device" ]; then
	pass "a second user's 20,000 capability ioctls: 16,384 granted, then ENOSPC"
else
	fail "expected the second user's capabilities to stop at its quarter (16,384), got '$out'"
fi
if timeout 30 "$CLIENT" cap "$MNT/bait.bin" "$PUB/root.cap"; then
	pass "capability flood of two users: root still gets a capability"
else
	fail "capability flood of two users: expected root to still get a capability"
fi
victim "capability flood" 5

# ---------------------------------------------------------------- 6. a ring never released
attack norelease "$PUB/user.cap" 6
sleep 1.5
t0=$(cpu_ticks "$PID")
sleep 3
t1=$(cpu_ticks "$PID")
hz=$(getconf CLK_TCK)
used=$(awk -v d=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.2f", d / hz }')
if awk -v u="$used" 'BEGIN { exit !(u < 0.15) }'; then
	pass "a ring never released: the daemon used $used s of CPU in 3 s (under 5%)"
else
	fail "a ring never released: expected the daemon to use under 0.15 s of CPU in 3 s, it used $used s"
fi
victim "a ring never released" 6
wait "$APID"
note "attacker: $(cat "$AOUT")"

alive "after every attack"
note "$(grep -o 'side_[a-z_]* [0-9]*' "$MNT/.objfs-stats" 2>/dev/null | tr '\n' ' ')"
check_unmount "hostile clients" "$MNT"
if grep -q 'ERROR: AddressSanitizer\|runtime error:' "$OBJFS_LOG"; then
	fail "expected no sanitizer report in the daemon's log"
	grep -m3 'ERROR: AddressSanitizer\|runtime error:' "$OBJFS_LOG" | sed 's/^/    | /'
fi
summary
