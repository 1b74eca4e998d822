#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# diskcache.sh: the persistent disk cache (-o cache_dir=) end to end over
# nginx.
#
#   OBJFS=/path/to/objfs tests/integration/diskcache.sh
#
#   1. cold read through a mount with cache_dir: right bytes, chunk files
#      written (one per 4 MiB block), kept after unmount
#   2. warm: remount, stop nginx, read again: right bytes, all from disk
#      (the daemon's disk counters say so)
#   2b. burst: a cold read of a 256 MiB object (64 chunks) as fast as it
#      comes writes every chunk (.objfs-stats: disk_cache_writes_dropped 0);
#      remounted with nginx stopped, every chunk is a disk hit (no miss). The first
#      write-behind (a 64 MiB queue of copies) dropped most of such a burst.
#   3. corrupted chunk files (a byte flipped in each): right bytes, the bad
#      chunks are dropped and fetched again (log line), then rewritten
#   4. a changed object (new ETag) is read new, never from its old chunks
#   5. a second mount on the same cache_dir is refused, naming the directory
#      (foreground and daemon mode); the first mount keeps working
#   6. cache_dir on an 8 MiB tmpfs with a 1 GiB cap: it fills up, reads stay
#      right, one log line says the disk cache degraded to memory-only
#
# Needs root (tmpfs mount for 6; skipped without), /dev/fuse, nginx, python3.
# Exit status: 0 all passed, 1 something failed, 77 skipped, 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

TO=${OBJFS_TEST_TIMEOUT:-120}
SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT2=$TEST_TMP/mnt2
CD=$TEST_TMP/cache
SMALL=$TEST_TMP/small
TMPFS_MOUNTED=0
mkdir -p "$SRC" "$MNT" "$MNT2" "$SMALL"

# Unmounts the tmpfs on every exit path, then lib.sh's cleanup runs.
_ds_cleanup() {
	local rc=$?
	if [ "$TMPFS_MOUNTED" = 1 ]; then
		for m in "${!_MOUNT_PID[@]}"; do unmount_objfs "$m" >/dev/null 2>&1; done
		umount "$SMALL" 2>/dev/null || umount -l "$SMALL" 2>/dev/null
	fi
	(exit "$rc")
	cleanup
}
trap _ds_cleanup EXIT

python3 - "$SRC" <<'EOF'
import os, sys
d = sys.argv[1]
def put(name, size, seed):
    r = bytearray(os.urandom(64 * 1024))
    with open(os.path.join(d, name), "wb") as f:
        left = size
        while left:
            n = min(left, len(r))
            f.write(r[:n])
            r[0] = (r[0] + seed) & 0xff
            left -= n
put("a.bin", 20 * 1024 * 1024 + 123, 1)
put("b.bin", 5 * 1024 * 1024, 2)
put("small.txt", 100, 3)
put("big.bin", 256 * 1024 * 1024, 5)
EOF
FILES="a.bin b.bin small.txt"
sha() { sha256sum <"$1" | cut -d' ' -f1; }
declare -A WANT=()
for f in $FILES; do WANT[$f]=$(sha "$SRC/$f"); done

nginx_start "$SRC" || { echo "cannot start nginx" >&2; exit 99; }
URL="http://127.0.0.1:$NGINX_PORT/data/"
OPTS="cache_dir=$CD,cache_dir_size=1G,log_level=info,stats"

# reads_ok MNT LABEL: every file's sha256 through MNT matches the source.
reads_ok() {
	local m=$1 label=$2 f got ok=0
	for f in $FILES; do
		got=$(timeout "$TO" sha256sum <"$m/$f" 2>"$TEST_TMP/err" | cut -d' ' -f1)
		if [ "$got" != "${WANT[$f]}" ]; then
			fail "$label: expected $f to read with sha256 ${WANT[$f]}, got '${got}' ($(head -c 200 "$TEST_TMP/err"))"
			ok=1
		fi
	done
	[ "$ok" = 0 ] && pass "$label: all files read with the right sha256"
	return "$ok"
}

# all_hits LOG LABEL: the mount that wrote LOG read every chunk from disk.
all_hits() {
	local hits bad
	hits=$(stat_of "$1" hits)
	bad=$(stat_of "$1" bad)
	if [ "${hits:-0}" -ge 9 ] && [ "${bad:-x}" = 0 ]; then
		pass "$2 ($hits chunk hits, 0 bad)"
	else
		fail "$2: expected >= 9 disk hits and 0 bad chunks, got hits=${hits:-?} bad=${bad:-?}"
		sed 's/^/    | /' "$1" | tail -n 8
	fi
}

nchunks() { find "$1/chunks" -type f 2>/dev/null | wc -l; }

# stat_of LOG KEY: a disk cache counter (disk_cache_KEY) from the "stats:"
# line that -o stats logs at unmount.
stat_of() {
	sed -n 's/.*stats: //p' "$1" | tr ',' '\n' | sed -n "s/^disk_cache_$2=//p" | tail -n 1
}

# ---------------------------------------------------------------- 1 cold
if mount_objfs "$URL" "$MNT" "$OPTS"; then
	reads_ok "$MNT" "cold read with cache_dir"
	unmount_objfs "$MNT"
	LOG1=$OBJFS_LOG
	# a.bin: 6 blocks of 4 MiB, b.bin 2, small.txt 1
	n=$(nchunks "$CD")
	if [ "$n" = 9 ]; then
		pass "cold read: 9 chunk files written behind and kept after unmount"
	else
		fail "cold read: expected 9 chunk files under $CD/chunks after unmount, found $n"
		sed 's/^/    | /' "$LOG1" | tail -n 5
	fi
	[ -e "$CD/lock" ] && pass "cold read: lock file in cache_dir" ||
		fail "cold read: expected $CD/lock"
else
	fail "cold read: expected $URL to mount with $OPTS"
fi

# ---------------------------------------------------------------- 2 warm, server down
if mount_objfs "$URL" "$MNT" "$OPTS,retries=0,timeout=5"; then
	# open (not read) every file while nginx is up: pins the ETag (HEAD)
	python3 -c 'import sys
for p in sys.argv[1:]: open(p, "rb").close()' $(for f in $FILES; do echo "$MNT/$f"; done)
	nginx_stop
	reads_ok "$MNT" "warm read with nginx stopped (remounted: memory cache empty)"
	unmount_objfs "$MNT"
	all_hits "$OBJFS_LOG" "warm read: served from the disk cache"
	nginx_restart_same_port || { echo "cannot restart nginx" >&2; exit 99; }
else
	fail "warm read: expected $URL to mount again with $OPTS"
fi

# ---------------------------------------------------------------- 2b burst
# dstat MNT KEY: a counter from MNT/.objfs-stats
dstat() { awk -v k="$2" '$1 == k { print $2 }' "$1/.objfs-stats" 2>/dev/null; }
CDB=$TEST_TMP/cache-burst
BIGSHA=$(sha "$SRC/big.bin")
BOPTS="cache_dir=$CDB,cache_dir_size=1G,log_level=info,stats"
if mount_objfs "$URL" "$MNT" "$BOPTS"; then
	# four readers at once, each a quarter: the fetches come as fast as they can
	pids=()
	for q in 0 1 2 3; do
		timeout "$TO" dd if="$MNT/big.bin" of=/dev/null bs=4M skip=$((q * 16)) count=16 \
			status=none &
		pids+=($!)
	done
	wait "${pids[@]}"
	st=$(dstat "$MNT" disk_cache_state)
	dropped=$(dstat "$MNT" disk_cache_writes_dropped)
	misses=$(dstat "$MNT" disk_cache_misses)
	unmount_objfs "$MNT"
	n=$(nchunks "$CDB")
	# misses: blocks looked up whole; each reader's first blocks are read in
	# pages (a run earns whole blocks), whose chunks are written from ranges
	if [ "$st" = on ] && [ "$dropped" = 0 ] && [ "${misses:-0}" -ge 1 ] && [ "$n" = 64 ]; then
		pass "burst: cold read of 64 chunks ($misses disk misses), 0 writes dropped, 64 chunk files"
	else
		fail "burst: expected disk_cache_state on, disk misses, 0 writes dropped and 64 chunk files, got state=${st:-?} misses=${misses:-?} dropped=${dropped:-?} files=$n"
		sed 's/^/    | /' "$OBJFS_LOG" | tail -n 5
	fi
	if mount_objfs "$URL" "$MNT" "$BOPTS,retries=0,timeout=5"; then
		python3 -c 'import sys; open(sys.argv[1], "rb").close()' "$MNT/big.bin"
		nginx_stop
		got=$(timeout "$TO" sha256sum <"$MNT/big.bin" | cut -d' ' -f1)
		hits=$(dstat "$MNT" disk_cache_hits)
		misses=$(dstat "$MNT" disk_cache_misses)
		unmount_objfs "$MNT"
		# >= 64: a block the memory cache dropped behind may be read twice
		if [ "$got" = "$BIGSHA" ] && [ "${hits:-0}" -ge 64 ] && [ "$misses" = 0 ]; then
			pass "burst: remounted with nginx stopped, right bytes, all 64 chunks from disk ($hits hits, 0 misses)"
		else
			fail "burst: expected sha256 $BIGSHA, disk_cache_hits >= 64 and disk_cache_misses 0, got '$got', hits=${hits:-?} misses=${misses:-?}"
			sed 's/^/    | /' "$OBJFS_LOG" | tail -n 5
		fi
		nginx_restart_same_port || { echo "cannot restart nginx" >&2; exit 99; }
	else
		fail "burst: expected $URL to mount again"
	fi
else
	fail "burst: expected $URL to mount with $BOPTS"
fi
rm -rf "$CDB"

# ---------------------------------------------------------------- 3 corruption
python3 - "$CD" <<'EOF'
import os, sys
n = 0
for root, _, files in os.walk(os.path.join(sys.argv[1], "chunks")):
    for f in files:
        p = os.path.join(root, f)
        size = os.path.getsize(p)
        off = 4096 + (size - 4096) // 2   # a byte in the middle of the data
        with open(p, "r+b") as fh:
            fh.seek(off)
            b = fh.read(1)
            fh.seek(off)
            fh.write(bytes([b[0] ^ 0x55]))
        n += 1
print(n, "chunk files corrupted")
EOF
if mount_objfs "$URL" "$MNT" "$OPTS"; then
	reads_ok "$MNT" "corrupted chunk files"
	unmount_objfs "$MNT"
	bad=$(stat_of "$OBJFS_LOG" bad)
	if [ "${bad:-0}" -ge 9 ] && grep -q "dropped: data checksum mismatch" "$OBJFS_LOG"; then
		pass "corrupted chunks: all $bad detected by checksum, dropped and fetched again"
	else
		fail "corrupted chunks: expected >= 9 bad chunks and a 'data checksum mismatch' log line, got bad=${bad:-?}"
		sed 's/^/    | /' "$OBJFS_LOG" | tail -n 8
	fi
	# rewritten: a warm read now verifies cleanly
	if mount_objfs "$URL" "$MNT" "$OPTS"; then
		reads_ok "$MNT" "after re-fetch" >/dev/null
		unmount_objfs "$MNT"
		all_hits "$OBJFS_LOG" "corrupted chunks: rewritten after the re-fetch, next mount reads them"
	fi
else
	fail "corrupted chunks: expected $URL to mount"
fi

# ---------------------------------------------------------------- 4 changed object
python3 - "$SRC/b.bin" <<'EOF'
import os, sys
p = sys.argv[1]
size = os.path.getsize(p)
with open(p, "wb") as f:
    f.write(os.urandom(size))          # same size, new bytes
st = os.stat(p)
os.utime(p, (st.st_atime + 10, st.st_mtime + 10))  # nginx's ETag is mtime-size
EOF
WANT[b.bin]=$(sha "$SRC/b.bin")
if mount_objfs "$URL" "$MNT" "$OPTS"; then
	got=$(timeout "$TO" sha256sum <"$MNT/b.bin" | cut -d' ' -f1)
	if [ "$got" = "${WANT[b.bin]}" ]; then
		pass "changed object (new ETag, same size): new bytes, not the cached chunks"
	else
		fail "changed object: expected the new b.bin (sha256 ${WANT[b.bin]}), got $got"
	fi
	# ---------------------------------------------------------------- 5 second mount
	out=$(timeout 30 "$OBJFS" -f -o "cache_dir=$CD" "$URL" "$MNT2" 2>&1)
	rc=$?
	if [ "$rc" != 0 ] && ! is_mounted "$MNT2" && [[ $out == *"$CD"* ]] && [[ $out == *"in use"* ]]; then
		pass "second mount on the same cache_dir refused (exit $rc): $out"
	else
		fail "second mount: expected a non-zero exit and a message naming $CD, got exit $rc: $out"
	fi
	remember_mountpoint "$MNT2"
	out=$(timeout 30 "$OBJFS" -o "cache_dir=$CD/" "$URL" "$MNT2" 2>&1)
	rc=$?
	if [ "$rc" != 0 ] && ! is_mounted "$MNT2" && [[ $out == *"in use"* ]]; then
		pass "second mount (daemon mode, path with a trailing /) refused (exit $rc)"
	else
		fail "second mount (daemon mode): expected a non-zero exit, got exit $rc: $out"
		is_mounted "$MNT2" && fusermount3 -u "$MNT2"
	fi
	reads_ok "$MNT" "first mount still serving after the refused second one" >/dev/null &&
		pass "first mount unaffected by the refused second mount"
	unmount_objfs "$MNT"
else
	fail "changed object: expected $URL to mount"
fi

# ---------------------------------------------------------------- 6 full disk
if mount -t tmpfs -o size=8m objfs-dc-test "$SMALL" 2>/dev/null; then
	TMPFS_MOUNTED=1
	if mount_objfs "$URL" "$MNT" "cache_dir=$SMALL/c,cache_dir_size=1G,stats"; then
		reads_ok "$MNT" "cache_dir on a full 8 MiB tmpfs"
		# and again, from memory or the network, still right
		reads_ok "$MNT" "cache_dir on a full tmpfs, second pass" >/dev/null &&
			pass "full disk: second pass right too"
		unmount_objfs "$MNT"
		n=$(grep -c "degrading to memory-only" "$OBJFS_LOG")
		deg=$(stat_of "$OBJFS_LOG" state)
		if [ "$n" = 1 ] && [ "$deg" = off ]; then
			pass "full disk: one log line: $(grep -m1 'degrading to memory-only' "$OBJFS_LOG" | cut -c1-160)"
		else
			fail "full disk: expected exactly one 'degrading to memory-only' line and disk_cache_state=off, got $n lines, state=${deg:-?}"
			sed 's/^/    | /' "$OBJFS_LOG" | tail -n 8
		fi
	else
		fail "full disk: expected $URL to mount with cache_dir on the tmpfs"
	fi
	umount "$SMALL" && TMPFS_MOUNTED=0
else
	note "cannot mount a tmpfs here (not root?): full-disk case skipped"
fi

summary
