#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# leaks.sh: no file descriptor and no memory kept by objfs across 1,000
# open/read/close cycles, nor at unmount.
#
#   OBJFS=/path/to/objfs tests/integration/leaks.sh
#
# One cycle (cycles.py): open, read (whole, or a random pread) and close one
# of three objects (1 byte; 1.5 MiB; 6 MiB, more than the 4 MiB cache, so
# blocks are evicted all along), every byte compared with the source; a
# listing (opendir / readdir / releasedir); a lookup of a missing name; an
# open of an object that left the server (the error path); every tenth
# cycle the counters file. Between the batches, GPU side API sessions
# (side_client open: capability ioctl, unix socket, ring memfd).
#
#  1. The daemon as built: /proc/PID/fd after a warm-up and after 1,000
#     cycles + 100 sessions must hold the same descriptors (by kind), but
#     for sockets, of which up to max_connections more may be pooled
#     connections to the server (a leak per cycle or session is hundreds);
#     VmRSS may grow by less than one chunk_size (one cache block; smaller
#     leaks are the next step's). Unmount: exit status 0 (a sanitizer build's
#     LeakSanitizer report at exit makes it non-zero and is looked for in
#     the log).
#  2. Default build only (valgrind cannot run ASan binaries): the daemon
#     under valgrind --leak-check=full --track-fds=yes for 300 of the same
#     cycles; at unmount no byte definitely, indirectly or possibly lost,
#     no memory error, and no descriptor open but the inherited ones.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse),
# 99 binary missing. Without valgrind step 2 is skipped with a note, except
# under CI=true (tests/deps.sh installs it), where that fails.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs
# shellcheck source=battery.sh
. "$HERE/battery.sh"
CLIENT=${SIDE_CLIENT:-$(dirname "$OBJFS")/../tests/side_client}
[ -x "$CLIENT" ] || { echo "ERROR: side_client not found at $CLIENT (make check builds it)" >&2; exit 99; }

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
WORK=$TEST_TMP/work
CHUNK=1048576
CONNS=4
OPTS="cache_size=4M,chunk_size=$CHUNK,max_connections=$CONNS,ring_slots=2,ring_slot_size=64K"
CYCLES=1000
SESSIONS=100
VG_CYCLES=300

sanitized=0
if objfs_sanitized; then
	sanitized=1
	# LeakSanitizer at exit, whatever the caller's ASAN_OPTIONS say
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1
fi

mkdir -p "$SRC" "$WORK"
head -c 1 /dev/urandom >"$SRC/one"
head -c 1500000 /dev/urandom >"$SRC/mid"
head -c 6000000 /dev/urandom >"$SRC/big"
echo "listed, then removed" >"$SRC/gone"

cat >"$WORK/cycles.py" <<'EOF'
import errno, os, random, sys
m, src, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(n)
names = ("one", "mid", "big")
want = {f: open(os.path.join(src, f), "rb").read() for f in names}
bad = []
for i in range(n):
    f = names[i % 3]
    fd = os.open(os.path.join(m, f), os.O_RDONLY)
    if i % 2:
        got, exp = b"".join(iter(lambda: os.read(fd, 1 << 20), b"")), want[f]
    else:
        off, ln = rng.randrange(len(want[f])), rng.randrange(1, 300000)
        got, exp = os.pread(fd, ln, off), want[f][off:off + ln]
    os.close(fd)
    if got != exp:
        bad.append(f"cycle {i}: {f}: {len(got)} bytes differ from the source's {len(exp)}")
    os.listdir(m)
    try:
        os.stat(os.path.join(m, "missing-%d" % (i % 7)))
        bad.append(f"cycle {i}: a missing name was found")
    except FileNotFoundError:
        pass
    try:
        open(os.path.join(m, "gone"), "rb").read()
        bad.append(f"cycle {i}: the removed object still reads")
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.EIO):
            bad.append(f"cycle {i}: the removed object: {e}")
    if i % 10 == 0:
        open(os.path.join(m, ".objfs-stats"), "rb").read()
print(f"{n} cycles, {len(bad)} bad", *bad[:5], sep="\n")
sys.exit(1 if bad else 0)
EOF

nginx_start "$SRC" || { fail "expected nginx to start"; summary; exit 1; }
URL=http://127.0.0.1:$NGINX_PORT/data/

# fds PID [socket|fuse]: the daemon's descriptors by kind ("1 pipe;2
# /dev/null;"), sockets and /dev/fuse left out; with "socket" or "fuse", how
# many of those. /dev/fuse: the session's and one clone per FUSE worker
# (clone_fd), so their number follows the workers alive, at most threads + 1.
fds() {
	find "/proc/$1/fd" -mindepth 1 -printf '%l\n' 2>/dev/null | sed -e 's/:\[[0-9]*\]$//' |
		case ${2:-} in
		socket) grep -c '^socket$' ;;
		fuse) grep -c '^/dev/fuse$' ;;
		*) grep -v '^socket$\|^/dev/fuse$' | sort | uniq -c | awk '{ $1 = $1; print }' | tr '\n' ';' ;;
		esac
}
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }

# load LABEL N SESSIONS: N cycles, then SESSIONS side API sessions
load() {
	local label=$1 out i bad=0
	if ! out=$(timeout 600 python3 "$WORK/cycles.py" "$MNT" "$SRC" "$2" 2>&1); then
		fail "$label: expected every cycle to read the source's bytes and the right errors: $out"
		return 1
	fi
	for ((i = 0; i < $3; i++)); do
		out=$(timeout 30 "$CLIENT" open "$MNT/mid" 2>&1)
		[ "${out%% *}" = 0 ] || bad=$((bad + 1))
	done
	if [ "$bad" -ne 0 ]; then
		fail "$label: expected $3 side API sessions to open and close, $bad failed (last: $out)"
		return 1
	fi
}

# mount_listed LABEL: mount $URL, list it, then remove "gone" from the server
mount_listed() {
	echo "listed, then removed" >"$SRC/gone"
	if ! mount_objfs "$URL" "$MNT" "$OPTS"; then
		fail "$1: expected $URL to mount with -o $OPTS"
		return 1
	fi
	timeout 30 ls "$MNT" >/dev/null
	rm -f "$SRC/gone"
}

t_proc() {
	local label="1,000 cycles (as built)" pid f0 f1 s0 s1 r0 r1
	[ "$sanitized" = 1 ] && label="1,000 cycles (sanitizer build)"
	mount_listed "$label" || return
	pid=$OBJFS_PID
	load "$label: warm-up" 60 10 || { check_unmount "$label" "$MNT"; return; }
	f0=$(fds "$pid") s0=$(fds "$pid" socket) r0=$(rss "$pid")
	load "$label" "$CYCLES" "$SESSIONS" || { check_unmount "$label" "$MNT"; return; }
	f1=$(fds "$pid") s1=$(fds "$pid" socket) r1=$(rss "$pid") u1=$(fds "$pid" fuse)
	pass "$label: every byte read equals the source, misses and the removed object fail as they should, $SESSIONS side sessions opened and closed"
	if [ -n "$f0" ] && [ "$f0" = "$f1" ] && [ "$s1" -le $((s0 + CONNS)) ] && [ "$u1" -le 65 ]; then
		pass "$label: the same descriptors after as before ($f1), sockets $s0 -> $s1 (at most max_connections=$CONNS more), $u1 /dev/fuse (one per worker, at most 65)"
	else
		fail "$label: expected the same descriptors after as before, at most $CONNS more sockets and 65 /dev/fuse: before '$f0' + $s0 sockets, after '$f1' + $s1 sockets, $u1 /dev/fuse"
	fi
	if [ "$sanitized" = 1 ]; then
		note "sanitizer build: VmRSS ${r0} -> ${r1} kB not checked (shadow memory, quarantine)"
	elif [ $((r1 - r0)) -lt $((CHUNK / 1024)) ]; then
		pass "$label: VmRSS grew by $((r1 - r0)) kB ($r0 -> $r1 kB), less than one chunk_size ($((CHUNK / 1024)) kB)"
	else
		fail "$label: expected VmRSS to grow by less than one chunk_size ($((CHUNK / 1024)) kB), it went $r0 -> $r1 kB"
	fi
	check_unmount "$label" "$MNT"
}

t_valgrind() {
	local label="valgrind at unmount" vg=$WORK/vg.log wrap=$WORK/objfs-vg out lost open
	if [ "$sanitized" = 1 ]; then
		note "sanitizer build: valgrind step left to the default build (LeakSanitizer checked the exit above)"
		return
	fi
	if ! command -v valgrind >/dev/null 2>&1; then
		if [ "${CI:-}" = true ]; then
			fail "$label: valgrind is not installed (CI=true: tests/deps.sh should have installed it)"
		else
			note "valgrind not installed: step 2 skipped"
		fi
		return
	fi
	printf '#!/bin/sh\nexec valgrind --leak-check=full --track-fds=yes --error-exitcode=97 --log-file=%s %s "$@"\n' \
		"$vg" "$OBJFS" >"$wrap"
	chmod +x "$wrap"
	local saved=$OBJFS
	OBJFS=$wrap
	mount_listed "$label"
	out=$?
	OBJFS=$saved
	[ "$out" -eq 0 ] || return
	load "$label" "$VG_CYCLES" 20 && pass "$label: $VG_CYCLES cycles and 20 side sessions served under valgrind"
	unmount_objfs "$MNT"
	if [ "$UNMOUNT_HOW" != fusermount3 ] || [ "$UNMOUNT_STATUS" != 0 ]; then
		fail "$label: expected fusermount3 -u and exit status 0 (97: valgrind found errors), got how='$UNMOUNT_HOW' status='$UNMOUNT_STATUS'"
		grep -E -A12 'definitely|Invalid|uninitialised|FILE DESCRIPTORS' "$vg" | head -40 | sed 's/^/    | /'
		return
	fi
	lost=$(grep -E 'in use at exit|definitely lost|indirectly lost|possibly lost|ERROR SUMMARY' "$vg" |
		sed 's/^==[0-9]*== *//' | tr '\n' ';')
	# every descriptor still open at exit must be one the daemon inherited
	open=$(awk '/Open (file descriptor|AF_UNIX socket)/ { n++; fd = $0 }
		/<inherited from parent>/ { n-- } END { print n + 0 }' "$vg")
	if [ "$open" -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$vg"; then
		pass "$label: no memory error, nothing lost, no descriptor left open at exit ($lost)"
	else
		fail "$label: expected no error and no descriptor of its own open at exit ($open open; $lost):"
		grep -A3 'Open ' "$vg" | head -20 | sed 's/^/    | /'
	fi
}

t_proc
t_valgrind
# LeakSanitizer's report at exit (and ASan's, UBSan's) in the daemon logs
t_sanitizer_logs
summary
