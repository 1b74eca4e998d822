#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# http_basic.sh: end-to-end battery for objfs over plain HTTP (nginx autoindex).
#
#   OBJFS=/path/to/objfs tests/integration/http_basic.sh
#
# Needs root (or a user who may use fusermount3), /dev/fuse, nginx, python3,
# curl.  Exit status: 0 all passed, 1 something failed, 77 skipped (no FUSE),
# 99 hard error (binary missing).
#
# Environment:
#   OBJFS             binary under test (default ../../src/objfs)
#   OBJFS_TEST_OPTS   extra -o options for every mount (e.g. log_level=debug)
#   OBJFS_TEST_KEEP   1 = keep the temp dir (logs, nginx conf) afterwards
#   OBJFS_TEST_SEED   seed for the random-offset reads (default: random)

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

TO=${OBJFS_TEST_TIMEOUT:-180}     # bound for any single command that reads a lot
SHORT_TO=30                       # bound for metadata operations
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT_HTML=$TEST_TMP/mnt-html
MNT_ONE=$TEST_TMP/mnt-one
MNT_SLOW=$TEST_TMP/mnt-slow
WORK=$TEST_TMP/work
BIG=big.bin
BIG_SIZE=$((64 * 1024 * 1024 + 7))

# shellcheck source=battery.sh
. "$HERE/battery.sh"

# The /html/ listing flavour: names, types and a few files' size + content.
t_html() {
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/html/" "$MNT_HTML" "$(opts)"; then
		fail "HTML listing: expected http://127.0.0.1:$NGINX_PORT/html/ to mount at $MNT_HTML"
		return
	fi
	pass "HTML listing: mounted the /html/ (HTML autoindex) URL"
	(cd "$SRC" && find . -mindepth 1 -printf '%y %P\n' | sort) >"$WORK/html.src"
	timeout "$TO" find "$MNT_HTML" -mindepth 1 -printf '%y %P\n' 2>&1 | sort >"$WORK/html.mnt"
	if diff -u "$WORK/html.src" "$WORK/html.mnt" >"$WORK/html.diff"; then
		pass "HTML listing: names and types of all entries match the source"
	else
		fail "HTML listing: expected the same names and types as the source (- source, + mount):"
		excerpt "$WORK/html.diff"
	fi
	files_match "$MNT_HTML" "HTML listing" "a+b.txt" "100% done.txt" "hash#tag.txt" \
		"this&that.txt" "naïve café.txt" "日本語.bin" "with space.txt" \
		"dir with space/inner file.txt" "d1/d2/d3/file" "1MiB+1.bin" "empty.bin" "size4096.bin" &&
		pass "HTML listing: sizes (from HEAD) and sha256 of 12 files incl. special names match"
	check_unmount "HTML listing" "$MNT_HTML"
}

# Source URL naming one object: the mount is a directory holding that file.
t_single_file() {
	local name=$1 url want got listing
	url="http://127.0.0.1:$NGINX_PORT/data/$(url_quote "$name")"
	if ! mount_objfs "$url" "$MNT_ONE" "$(opts)"; then
		fail "single file: expected $url to mount at $MNT_ONE"
		return
	fi
	listing=$(timeout "$SHORT_TO" ls -A "$MNT_ONE" 2>&1)
	if [ "$listing" = "$name" ] && [ -d "$MNT_ONE" ]; then
		pass "single file: mount of $url is a directory listing exactly '$name'"
	else
		fail "single file: expected ls of the mount of $url to show exactly '$name', got '$listing'"
	fi
	want=$(sha_file "$SRC/$name")
	got=$(sha_file "$MNT_ONE/$name" 2>&1)
	if [ "$got" = "$want" ] &&
		[ "$(timeout "$SHORT_TO" stat -c %s -- "$MNT_ONE/$name" 2>&1)" = "$(stat -c %s -- "$SRC/$name")" ]; then
		pass "single file: '$name' has the right size and content"
	else
		fail "single file: expected sha256 $want for '$name', got '$got'"
	fi
	check_unmount "single file" "$MNT_ONE"
}
t_errors() {
	local m=$TEST_TMP/mnt-err dead_port
	mkdir -p "$m"
	expect_mount_error "malformed URL htp:/x" "$m" "htp:/x" "$m"
	dead_port=$(free_port)
	expect_mount_error "unreachable server (port $dead_port, nothing listening)" "$m" \
		-o retries=0,timeout=5 "http://127.0.0.1:$dead_port/data/" "$m"
	expect_mount_error "unknown option -o bogus=1" "$m" \
		-o bogus=1 "http://127.0.0.1:$NGINX_PORT/data/" "$m"
	expect_mount_error "missing mountpoint directory" "$TEST_TMP/no-such-dir" \
		"http://127.0.0.1:$NGINX_PORT/data/" "$TEST_TMP/no-such-dir"
	if [ -e "$TEST_TMP/no-such-dir" ]; then
		fail "error case 'missing mountpoint': expected objfs not to create $TEST_TMP/no-such-dir"
	fi
}

# Stop nginx while a throttled read of the big file (2 connections at 2 MB/s)
# is in flight: the reader must
# get EIO (never short or wrong data); after a restart the same mount serves
# the file correctly again.
# The counters file: readable while mounted, counts what the tests above
# fetched, and never listed (find, cp -r and ls -a must not see it).
t_stats_file() {
	local text req direct fb
	text=$(timeout "$SHORT_TO" cat "$MNT/.objfs-stats" 2>&1)
	req=$(printf '%s\n' "$text" | sed -n 's/^requests \([0-9]*\)$/\1/p')
	if [ "${req:-0}" -gt 0 ] && printf '%s\n' "$text" | grep -q '^cache_hits [0-9]*$'; then
		pass "stats: .objfs-stats shows $req requests and the cache counters"
	else
		fail "stats: expected 'requests N' (N > 0) and 'cache_hits N' in $MNT/.objfs-stats, got: $(printf '%s' "$text" | head -c 300)"
	fi
	# nginx answers every range with 206 and a length: the direct receive
	# path (engine_direct.c) took the ranged GETs, none went back to curl
	direct=$(printf '%s\n' "$text" | sed -n 's/^requests_direct \([0-9]*\)$/\1/p')
	fb=$(printf '%s\n' "$text" | sed -n 's/^direct_fallbacks \([0-9]*\)$/\1/p')
	if [ "${direct:-0}" -gt 0 ] && [ "$fb" = 0 ]; then
		pass "stats: $direct ranged GETs received on the direct path, 0 handed to libcurl"
	else
		fail "stats: expected requests_direct > 0 and direct_fallbacks 0, got '$direct' and '$fb'"
	fi
	if timeout "$SHORT_TO" ls -a "$MNT" | grep -qx '.objfs-stats'; then
		fail "stats: expected .objfs-stats to stay out of directory listings, but ls -a shows it"
	else
		pass "stats: .objfs-stats is not listed by ls -a"
	fi
}

# direct_recv=off: the same bytes, every ranged GET through libcurl.
t_direct_off() {
	local want got text
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT_ONE" "$(opts direct_recv=off)"; then
		fail "direct_recv=off: expected the mount to succeed"
		return
	fi
	want=$(sha_file "$SRC/$BIG")
	got=$(sha_file "$MNT_ONE/$BIG" 2>&1)
	text=$(timeout "$SHORT_TO" cat "$MNT_ONE/.objfs-stats" 2>&1)
	if [ "$got" = "$want" ] && printf '%s\n' "$text" | grep -qx 'requests_direct 0'; then
		pass "direct_recv=off: $BIG reads correctly, all through libcurl (requests_direct 0)"
	else
		fail "direct_recv=off: expected sha256 $want and requests_direct 0, got $got and '$(printf '%s\n' "$text" | grep direct)'"
	fi
	check_unmount "direct_recv=off" "$MNT_ONE"
}

# direct_io: reads bypass the page cache, bytes as they are (whole file and
# odd preads); MAP_PRIVATE mmap reads right; MAP_SHARED reads right where
# the kernel takes FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6; objfs asks for it
# in its INIT reply: required from 6.6 on) and may be refused with ENODEV
# before (documented), never wrong bytes.
t_direct_io() {
	local want got odd mm shared=shared-refused k
	k=$(uname -r)
	k=${k%%-*}
	if [ "${k%%.*}" -gt 6 ] || { [ "${k%%.*}" = 6 ] && [ "$(echo "$k" | cut -d. -f2)" -ge 6 ]; }; then
		shared=shared
	fi
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT_ONE" "$(opts direct_io)"; then
		fail "direct_io: expected the mount to succeed"
		return
	fi
	want=$(sha_file "$SRC/$BIG")
	got=$(sha_file "$MNT_ONE/$BIG" 2>&1)
	odd=$(timeout "$TO" python3 - "$SRC/$BIG" "$MNT_ONE/$BIG" <<'EOF' 2>&1
import os, random, sys
a, b = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
size = os.fstat(a).st_size
rnd = random.Random(7)
for i in range(200):
    off = rnd.randrange(0, size)
    n = rnd.choice([1, 4095, 4097, 65536, 1 << 20, 3 << 20])
    if os.pread(a, n, off) != os.pread(b, n, off):
        print("differ at %d+%d" % (off, n)); sys.exit(1)
print("ok")
EOF
)
	mm=$(timeout "$TO" python3 - "$SRC/$BIG" "$MNT_ONE/$BIG" <<'EOF' 2>&1
import ctypes, errno, mmap, os, sys
want = open(sys.argv[1], "rb").read(1 << 20)
fd = os.open(sys.argv[2], os.O_RDONLY)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 1 << 20, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
if p in (None, ctypes.c_void_p(-1).value):
    print("private mmap failed: %s" % os.strerror(ctypes.get_errno())); sys.exit(1)
if ctypes.string_at(p, 1 << 20) != want:
    print("private mmap: wrong bytes"); sys.exit(1)
try:
    m = mmap.mmap(fd, 1 << 20, access=mmap.ACCESS_READ)
    print("shared" if m[:] == want else "shared-wrong")
except OSError as e:
    print("shared-refused" if e.errno == errno.ENODEV else "shared-error %s" % e)
EOF
)
	# a kernel before 6.6 may have the flag backported: either answer there
	if [ "$got" = "$want" ] && [ "$odd" = ok ] &&
		{ [ "$mm" = "$shared" ] || [ "$mm" = shared ]; }; then
		pass "direct_io: $BIG reads correctly (sha256, 200 odd preads), private mmap right, shared mmap: $mm (kernel $(uname -r))"
	else
		fail "direct_io: expected sha256 $want, odd preads ok, private mmap right and shared mmap '$shared' on kernel $(uname -r); got $got, '$odd', '$mm'"
	fi
	check_unmount "direct_io" "$MNT_ONE"
}

# An HTTP index gives mtimes but no ETags: an open pins the listing's mtime
# instead of asking with a HEAD (one request per small file: its GET), every
# GET's Last-Modified must match it (a file changed under an open handle
# reads as EIO, never a mix), and a listing refreshed after the TTLs brings
# the new version.
t_open_pins_mtime() {
	local dir=$SRC/pin f r0 r1 out want
	mkdir -p "$dir"
	head -c 10000 /dev/urandom >"$dir/small.bin"
	head -c $((12 << 20)) /dev/urandom >"$dir/big.bin"
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT_ONE" "$(opts attr_timeout=2,entry_timeout=2,list_ttl=2)"; then
		fail "mtime pin: expected the mount to succeed"
		return
	fi
	stat_req() { sed -n 's/^requests \([0-9]*\)$/\1/p' "$MNT_ONE/.objfs-stats"; }
	ls "$MNT_ONE/pin" >/dev/null
	r0=$(stat_req)
	want=$(sha_file "$dir/small.bin")
	f=$(sha_file "$MNT_ONE/pin/small.bin")
	r1=$(stat_req)
	if [ "$f" = "$want" ] && [ $((r1 - r0)) -eq 1 ]; then
		pass "mtime pin: a small file of an HTTP index opens and reads with one request (its GET, no HEAD)"
	else
		fail "mtime pin: expected the right bytes with 1 request, got $((r1 - r0)) requests ($f vs $want)"
	fi
	f=$(sha_file "$MNT_ONE/pin/small.bin")
	if [ "$f" = "$want" ] && [ "$(stat_req)" -eq "$r1" ]; then
		pass "mtime pin: read again, the same version: no request"
	else
		fail "mtime pin: expected a second read of the same version without a request, got $(($(stat_req) - r1))"
	fi
	out=$(timeout "$TO" python3 - "$MNT_ONE/pin/big.bin" "$dir/big.bin" <<'EOF' 2>&1
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
first = os.pread(fd, 4096, 0)
with open(sys.argv[2], "r+b") as f:   # the object changes under the handle
    f.seek(8 << 20)
    f.write(os.urandom(1 << 20))
st = os.stat(sys.argv[2])
os.utime(sys.argv[2], (st.st_atime, st.st_mtime + 10))
try:
    os.pread(fd, 4096, 9 << 20)
    print("read")
except OSError as e:
    print("EIO" if e.errno == 5 else "errno %d" % e.errno)
EOF
)
	if [ "$out" = EIO ]; then
		pass "mtime pin: a file changed under an open handle reads as EIO (Last-Modified differs), never a mix"
	else
		fail "mtime pin: expected EIO reading past a change under the handle, got '$out'"
	fi
	# the small file, in the kernel's page cache (kept across opens of its
	# version), changes too (same size, new bytes): the pages of the old
	# version must go
	head -c 10000 /dev/urandom >"$dir/small.bin"
	touch -d @$(($(date +%s) + 20)) "$dir/small.bin"
	sleep 2.5
	want=$(sha_file "$dir/big.bin")
	f=$(sha_file "$MNT_ONE/pin/big.bin")
	if [ "$f" = "$want" ]; then
		pass "mtime pin: after the TTLs the new version reads right"
	else
		fail "mtime pin: expected the new version ($want) after the TTLs, got $f"
	fi
	want=$(sha_file "$dir/small.bin")
	f=$(sha_file "$MNT_ONE/pin/small.bin")
	head -c 7000 /dev/urandom >"$dir/small.bin" # and shrinks
	touch -d @$(($(date +%s) + 40)) "$dir/small.bin"
	sleep 2.5
	r0=$(sha_file "$dir/small.bin")
	r1=$(sha_file "$MNT_ONE/pin/small.bin")
	if [ "$f" = "$want" ] && [ "$r1" = "$r0" ]; then
		pass "mtime pin: a small file in the page cache, then changed and shrunk, reads each new version right"
	else
		fail "mtime pin: expected the small file's new versions ($want, $r0), got $f, $r1"
	fi
	check_unmount "mtime pin" "$MNT_ONE"
	rm -rf "$dir"
}

t_server_stop() {
	local want rc=0 prog i res
	want=$(sha_file "$SRC/$BIG")
	cat >"$WORK/reader.py" <<'EOF'
import errno, hashlib, os, sys

path, want, size, progress = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
h = hashlib.sha256()
n = 0
try:
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
            with open(progress + ".tmp", "w") as p:
                p.write(str(n))
            os.replace(progress + ".tmp", progress)
    finally:
        os.close(fd)
except OSError as e:
    print(f"ERRNO {errno.errorcode.get(e.errno, e.errno)} ({e.strerror}) after {n} bytes")
    sys.exit(3 if e.errno == errno.EIO else 4)
got = h.hexdigest()
if n != size:
    print(f"SHORT read returned EOF after {n} of {size} bytes (sha {got})")
    sys.exit(5)
if got != want:
    print(f"CORRUPT {n} bytes with sha {got}, expected {want}")
    sys.exit(6)
print(f"OK {n} bytes, sha {got}")
EOF
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/slow/" "$MNT_SLOW" "$(opts retries=1,timeout=5,max_connections=2)"; then
		fail "server stop: expected the /slow/ URL to mount with -o retries=1,timeout=5,max_connections=2"
		return
	fi
	echo 0 >"$WORK/progress"
	timeout 60 python3 "$WORK/reader.py" "$MNT_SLOW/$BIG" "$want" "$BIG_SIZE" "$WORK/progress" \
		>"$WORK/reader.out" 2>&1 &
	local rpid=$!
	# wait for the first MiB, then stop the server at once: the rest of the
	# read needs ~15 s more at 4 MB/s
	for ((i = 0; i < 150; i++)); do
		prog=$(cat "$WORK/progress" 2>/dev/null)
		[ "${prog:-0}" != 0 ] && break
		_pid_alive "$rpid" || break
		sleep 0.1
	done
	prog=$(cat "$WORK/progress" 2>/dev/null)
	if ! _pid_alive "$rpid"; then
		note "reader finished before the stop (progress ${prog:-?} bytes)"
	fi
	nginx_stop
	note "nginx stopped after the reader had ${prog:-?} of $BIG_SIZE bytes"
	wait "$rpid" || rc=$?
	res=$(cat "$WORK/reader.out")
	case $rc in
	3) pass "server stop: the in-flight read failed with EIO: $res" ;;
	0) fail "server stop: expected EIO, but the read completed with correct data ($res) although nginx was stopped when the reader had ${prog:-?} bytes" ;;
	124) fail "server stop: expected EIO, but the reader hung for 60 s (retries=1,timeout=5)" ;;
	5 | 6) fail "server stop: expected EIO, got silently wrong data: $res" ;;
	*) fail "server stop: expected EIO (Input/output error), got exit $rc: $res" ;;
	esac

	if ! nginx_restart_same_port; then
		fail "server stop: expected nginx to restart on port $NGINX_PORT"
		return
	fi
	rc=0
	timeout 120 python3 "$WORK/reader.py" "$MNT_SLOW/$BIG" "$want" "$BIG_SIZE" "$WORK/progress" \
		>"$WORK/reader2.out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		pass "server stop: after restarting nginx the same mount reads $BIG correctly: $(cat "$WORK/reader2.out")"
	else
		fail "server stop: expected a full, correct read after restarting nginx, got exit $rc: $(cat "$WORK/reader2.out")"
	fi
	check_unmount "server stop" "$MNT_SLOW"
}

# ---------------------------------------------------------------- main

MAIN_PID=

log "objfs: $OBJFS"
log "temp:  $TEST_TMP"
if ! make_tree; then
	fail "expected to create the source tree in $SRC"
	summary
	exit 1
fi
if ! nginx_start "$SRC"; then
	fail "expected nginx to start serving $SRC"
	summary
	exit 1
fi
log "nginx: http://127.0.0.1:$NGINX_PORT/ (pid $NGINX_PID)"

if mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" "$(opts)"; then
	MAIN_PID=$OBJFS_PID
	pass "mounted http://127.0.0.1:$NGINX_PORT/data/ at $MNT (objfs pid $MAIN_PID)"
	# cold-cache tests first
	t_concurrent
	t_random_reads
	t_sha_all "$MNT" "JSON listing"
	t_tree_shape "$MNT" "JSON listing"
	t_cp_diff
	t_tar
	t_find_count
	t_read_only
	t_stats_file
else
	fail "expected http://127.0.0.1:$NGINX_PORT/data/ to mount at $MNT; skipping the tests that need it"
fi

t_html
t_single_file "a+b.txt"
t_single_file "100% done.txt"
t_single_file "日本語.bin"
t_errors
t_direct_off
t_direct_io
t_open_pins_mtime
t_server_stop

if [ -n "$MAIN_PID" ]; then
	if _pid_alive "$MAIN_PID"; then
		check_unmount "final (main mount, pid $MAIN_PID)" "$MNT"
	else
		fail "final: expected objfs (pid $MAIN_PID) to be still serving $MNT before unmount, but it has exited"
	fi
fi
t_sanitizer_logs

summary
