#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# side_host.sh: the GPU side API end to end, into host memory (no GPU
# needed): a real nginx, a real mount, libobjfs through tests/side_client.
#
#   OBJFS=/path/to/objfs tests/integration/side_host.sh
#
# Checks: odd offsets and sizes compared with the source (through a small
# ring, so every read wraps around it many times); a short file gives the
# short count; FUSE reads and side reads of one file agree; a token of
# another inode is refused; a non-objfs file gives ENOTTY and side=off gives
# EOPNOTSUPP; a client killed mid-fill leaves the daemon serving and its
# ring unmapped; a HELLO carrying a descriptor whose close() never returns
# (a file of tests/hang_fuse) is refused at once and the daemon still
# unmounts; with cache_dir, side reads
# are served from the disk cache with the server stopped.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no FUSE),
# 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs
CLIENT=$(test_binary side_client SIDE_CLIENT) || exit 99

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT_SLOW=$TEST_TMP/mnt-slow
MNT_OFF=$TEST_TMP/mnt-off
mkdir -p "$SRC"
head -c $((40 * 1024 * 1024 + 7)) /dev/urandom >"$SRC/big.bin"
head -c 10 /dev/urandom >"$SRC/small.bin"
head -c 5000 /dev/urandom >"$SRC/other.bin"
mkdir -p "$SRC/shards"
for ((i = 0; i < 300; i++)); do
	head -c $((i * 997 % 200000 + i % 3)) /dev/urandom >"$SRC/shards/s$i.bin"
done
mkdir -p "$SRC/wide" # larger than a block: samples of them are ranges, not whole objects
for ((i = 0; i < 8; i++)); do
	head -c $((9 * 1024 * 1024 + i)) /dev/urandom >"$SRC/wide/w$i.bin"
done

# rings PID: how many side API rings the process has mapped
rings() {
	grep -c 'memfd:objfs-ring' "/proc/$1/maps" 2>/dev/null || true
}

nginx_start "$SRC" || exit 99
URL=http://127.0.0.1:$NGINX_PORT

mount_objfs "$URL/data/" "$MNT" "ring_slots=4,ring_slot_size=1M" || exit 99
FAST_PID=$OBJFS_PID

if out=$(timeout 120 "$CLIENT" reads "$MNT/big.bin" "$SRC/big.bin" 2>&1); then
	pass "odd offsets and sizes into host memory equal the source (40 MiB file, 4 x 1 MiB ring)"
else
	fail "expected every side read of big.bin to equal the source; side_client said:"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/    | /' | head -20
fi
if out=$(timeout 60 "$CLIENT" reads "$MNT/small.bin" "$SRC/small.bin" 2>&1); then
	pass "a 10-byte file: reads past its end give the short count (and 0 at the end)"
else
	fail "expected short counts on small.bin; side_client said:"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/    | /' | head -20
fi
if [ "$(timeout 60 sha256sum <"$MNT/big.bin" | cut -d' ' -f1)" = "$(sha256sum <"$SRC/big.bin" | cut -d' ' -f1)" ]; then
	pass "FUSE reads of the file the side API filled from are right (one shared cache)"
else
	fail "expected cat through the mount to equal the source after side reads"
fi
if out=$(timeout 120 "$CLIENT" batch "$MNT/shards" "$SRC/shards" 2>&1); then
	pass "batches of 1-3,000 entries over 300 files (one session, one ring) equal the source"
	printf '%s\n' "$out" | grep '^opened' | sed 's/^/    | /'
else
	fail "expected every batch entry to equal the source; side_client said:"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/    | /' | head -20
fi
# Sparse samples (40 of 64 KiB over 8 files of 9 MiB: too few in a block to
# fetch it whole) are kept in memory as ranges: the same batch again, from
# a second process, is byte-exact and makes no request.
# stat_of MNT KEY: a counter of MNT/.objfs-stats
stat_of() { sed -n "s/^$2 //p" "$1/.objfs-stats"; }
out=$(timeout 60 "$CLIENT" samples "$MNT/wide" 40 1 "$SRC/wide" 2>&1)
rc=$?
req1=$(stat_of "$MNT" requests)
kept=$(stat_of "$MNT" cache_ranges_kept)
out2=$(timeout 60 "$CLIENT" samples "$MNT/wide" 40 1 "$SRC/wide" 2>&1)
rc2=$?
req2=$(stat_of "$MNT" requests)
if [ "$rc" = 0 ] && [ "$rc2" = 0 ] && [ "${kept:-0}" -gt 0 ] && [ "$req1" = "$req2" ]; then
	pass "sparse samples kept in memory: the same batch again is byte-exact with no request ($kept ranges kept)"
else
	fail "expected two byte-exact passes, ranges kept and no request in the second (rc $rc/$rc2, ranges_kept ${kept:-?}, requests $req1 -> $req2):"
	printf '%s\n%s\n' "$out" "$out2" | sed 's/^/    | /' | head -20
fi
if out=$(timeout 60 "$CLIENT" wrongino "$MNT/big.bin" "$MNT/other.bin" 2>&1); then
	pass "a token of another inode is refused (HELLO, ATTACH: EACCES; an unknown handle: EBADF)"
else
	fail "expected B's token to be refused for A; side_client said:"
	printf '%s\n' "$out" | sed 's/^/    | /'
fi
# The Python binding (ctypes) into host buffers, when a shared libobjfs exists.
export OBJFS_LIB=${OBJFS_LIB:-$(dirname "$OBJFS")/../lib/.libs/libobjfs.so.0}
# A sanitizer build of libobjfs needs its runtime loaded first into python
# (and python's own exit-time allocations are not ours to report).
py_env=()
if asan=$(ldd "$OBJFS_LIB" 2>/dev/null | awk '/libasan/ { print $3 }') && [ -n "$asan" ]; then
	py_env=(env "LD_PRELOAD=$asan" "ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0")
fi
if [ -e "$OBJFS_LIB" ]; then
	if out=$(timeout 120 ${py_env[@]+"${py_env[@]}"} python3 "$HERE/../gpu/python_check.py" \
		"$MNT/big.bin" "$SRC/big.bin" 2>&1); then
		pass "Python binding: read_into bytearrays at odd offsets (and GPU frameworks where installed)"
	else
		fail "expected the Python binding's reads to equal the source; it said:"
	fi
	printf '%s\n' "$out" | sed 's/^/    | /'
else
	note "no shared libobjfs at $OBJFS_LIB: Python binding not tested"
fi
out=$(timeout 30 "$CLIENT" open "$SRC/small.bin" 2>&1)
case $out in
"-25 "*) pass "objfs_gpu_open on a file outside the mount: -ENOTTY" ;;
*) fail "expected -ENOTTY (-25) for a non-objfs file, got '$out'" ;;
esac

# A client killed mid-fill: throttled mount, so the fill is surely running.
# Pieces of 4 MiB: nginx lets the first second's worth (2 MB) of every
# response through unthrottled, and a fill fetches each piece in one request.
# One fill worker (fill_threads=1): a fetch in flight must not hold it.
mount_objfs "$URL/slow/" "$MNT_SLOW" \
	"ring_slots=2,ring_slot_size=4M,max_connections=2,fill_threads=1,log_level=info" || exit 99
SLOW_PID=$OBJFS_PID
if grep -q "ring 2 x 4194304 bytes, 1 fill workers" "$OBJFS_LOG"; then
	pass "fill_threads=1: the side server runs one fill worker"
else
	fail "expected 'ring 2 x 4194304 bytes, 1 fill workers' in the log; it says: $(grep 'side:' "$OBJFS_LOG" | head -3)"
fi
"$CLIENT" hang "$MNT_SLOW/big.bin" >"$TEST_TMP/hang.out" 2>&1 &
HANG=$!
for ((i = 0; i < 100; i++)); do
	grep -q reading "$TEST_TMP/hang.out" 2>/dev/null && [ "$(rings "$SLOW_PID")" -ge 1 ] && break
	sleep 0.1
done
if [ "$(rings "$SLOW_PID")" -ge 1 ]; then
	pass "mid-fill: the daemon has the client's ring mapped"
else
	fail "expected the daemon (pid $SLOW_PID) to map the client's ring during the fill; $(cat "$TEST_TMP/hang.out")"
fi
sleep 0.5
kill -KILL "$HANG"
wait "$HANG" 2>/dev/null
for ((i = 0; i < 150; i++)); do
	[ "$(rings "$SLOW_PID")" -eq 0 ] && break
	sleep 0.1
done
if [ "$(rings "$SLOW_PID")" -eq 0 ] && kill -0 "$SLOW_PID" 2>/dev/null; then
	pass "client killed mid-fill: the daemon lives and unmapped the ring within $((i / 10)) s"
else
	fail "expected the daemon alive with no ring mapped 15 s after the client was killed (rings: $(rings "$SLOW_PID"))"
fi
if out=$(timeout 60 "$CLIENT" reads "$MNT_SLOW/small.bin" "$SRC/small.bin" 2>&1); then
	pass "after the killed client, the same daemon serves a new session"
else
	fail "expected the daemon to serve side reads after the kill; side_client said:"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/    | /' | head
fi
check_unmount "throttled mount after a killed client" "$MNT_SLOW"

mount_objfs "$URL/data/" "$MNT_OFF" "side=off" || exit 99
out=$(timeout 30 "$CLIENT" open "$MNT_OFF/small.bin" 2>&1)
case $out in
"-95 "*) pass "side=off: objfs_gpu_open gives -EOPNOTSUPP" ;;
*) fail "expected -EOPNOTSUPP (-95) with side=off, got '$out'" ;;
esac
check_unmount "side=off mount" "$MNT_OFF"

# A descriptor whose close() never returns, sent with HELLO: a file of a
# FUSE mount that never answers FLUSH (tests/hang_fuse). The daemon's
# socket refuses it (SO_PASSRIGHTS, Linux >= 6.16: sendmsg fails), or the
# daemon the HELLO, at once; it goes on serving and unmounts below while
# hang_fuse is still up (before protocol version 3 HELLO carried the
# client's ring: the session thread waited in close(), unkillably, and the
# daemon's exit with it). The client's own exit closes the descriptor
# too, and waits for hang_fuse, killed after.
HANG_FS=$(test_binary hang_fuse HANG_FUSE) || exit 99
HANG_MNT=$TEST_TMP/hang
mkdir -p "$HANG_MNT"
"$HANG_FS" "$HANG_MNT" 2>"$TEST_TMP/hang_fuse.err" &
HANG_PID=$!
at_cleanup "kill $HANG_PID 2>/dev/null"
for ((i = 0; i < 50; i++)); do
	is_mounted "$HANG_MNT" && break
	sleep 0.1
done
: >"$TEST_TMP/ringfd.out"
"$CLIENT" ringfd "$MNT/small.bin" "$HANG_MNT/f" >>"$TEST_TMP/ringfd.out" 2>&1 &
RINGFD_PID=$!
for ((i = 0; i < 100; i++)); do
	grep -q . "$TEST_TMP/ringfd.out" && break
	sleep 0.1
done
out=$(cat "$TEST_TMP/ringfd.out")
case $out in
*"Protocol error"* | *"refused by the daemon's socket"*)
	pass "HELLO carrying a descriptor whose close() hangs: refused at once ($out)" ;;
*) fail "expected HELLO carrying hang_fuse's file refused (EPERM or EPROTO) within 10 s, got '$out'" ;;
esac
if out=$(timeout 60 "$CLIENT" reads "$MNT/small.bin" "$SRC/small.bin" 2>&1); then
	pass "side reads go on after it"
else
	fail "expected side reads to go on; side_client said: $(printf '%s' "$out" | head -c 300)"
fi
if kill -0 "$FAST_PID" 2>/dev/null && [ "$(rings "$FAST_PID")" -eq 0 ]; then
	pass "after all clients closed, the daemon maps no ring"
else
	fail "expected no ring mapped in the daemon after the clients closed (rings: $(rings "$FAST_PID"))"
fi
check_unmount "side API mount (hang_fuse still up)" "$MNT"
kill "$HANG_PID" 2>/dev/null
wait "$HANG_PID" "$RINGFD_PID" 2>/dev/null
timeout 10 fusermount3 -u "$HANG_MNT" 2>/dev/null

# Disk cache under the side API: one whole-file side read (the
# first epoch: fetched straight into the ring, written behind from copies)
# fills the disk cache; a fresh mount on it then serves side reads with the
# server stopped, whole blocks read from disk straight into the ring.
MNT_DC=$TEST_TMP/mnt-dc
DC=$TEST_TMP/dc
opts="cache_dir=$DC,chunk_size=1M,ring_slots=4,ring_slot_size=2M"
mount_objfs "$URL/data/" "$MNT_DC" "$opts" || exit 99
out=$(timeout 120 "$CLIENT" hang "$MNT_DC/big.bin" 2>&1)
case $out in
*"read ended: success"*) ;;
*) fail "expected a whole-file side read to succeed; side_client said: $out" ;;
esac
check_unmount "disk cache mount, first" "$MNT_DC"
mount_objfs "$URL/data/" "$MNT_DC" "$opts,retries=0,timeout=5" || exit 99
head -c 1 "$MNT_DC/big.bin" >/dev/null # an open while the server is up pins the ETag
reqs0=$(awk '$1 == "requests" { print $2 }' "$MNT_DC/.objfs-stats")
nginx_stop
if out=$(timeout 120 "$CLIENT" reads "$MNT_DC/big.bin" "$SRC/big.bin" 2>&1); then
	pass "with the server stopped, side reads from the disk cache equal the source"
else
	fail "expected side reads served from the disk cache to equal the source; side_client said:"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/    | /' | head -20
fi
stats=$(cat "$MNT_DC/.objfs-stats")
hits=$(printf '%s\n' "$stats" | awk '$1 == "disk_cache_hits" { print $2 }')
reqs=$(printf '%s\n' "$stats" | awk -v r0="${reqs0:-x}" '$1 == "requests" { print $2 - r0 }')
kept=$(printf '%s\n' "$stats" | awk '$1 == "cache_bytes" { print $2 }')
# 40 MiB in 1 MiB blocks: whole blocks go disk -> ring and are not kept in
# memory; only the parts of blocks at the reads' odd edges pass through it
if [ "${hits:-0}" -ge 40 ] && [ "${reqs:-1}" -eq 0 ] && [ "${kept:-0}" -lt $((40 << 20)) ]; then
	pass "side reads came from disk (disk_cache_hits $hits, no request, $kept bytes kept in memory)"
else
	fail "expected disk hits, no requests and blocks not all kept in memory; stats: hits=$hits requests=$reqs cache_bytes=$kept"
fi
check_unmount "disk cache mount, second" "$MNT_DC"
summary
