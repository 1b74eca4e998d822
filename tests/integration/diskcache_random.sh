#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# diskcache_random.sh: random reads go through the cache layer, disk cache
# included, and fetch only the pages they ask for.
#
#   OBJFS=/path/to/objfs tests/integration/diskcache_random.sh
#
#   1. epoch 1: with cache_dir and cache_size=16M, 300 random preads (4 KiB
#      to 1 MiB, random offsets, POSIX_FADV_RANDOM so the kernel reads just
#      the pages asked) of a 96 MiB object: every byte right, and the mount
#      fetched at most 1.1x the bytes asked (each read rounded out to 4 KiB
#      pages); a 4 KiB read must not cost a 4 MiB GET
#   2. epoch 2: unmount, remount, open, stop nginx, the same preads: every
#      byte right, all from the disk cache (no request reached the network)
#
# Before the reader owned the read policy, random reads of objects over
# cache_size/4 went around the cache (objfs_store_read), so epoch 2 went to
# the network again: with nginx stopped every read failed with EIO.
#
# Needs /dev/fuse, nginx, python3.
# Exit status: 0 all passed, 1 something failed, 77 skipped, 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
CD=$TEST_TMP/cache
PLAN=$TEST_TMP/plan
mkdir -p "$SRC" "$MNT"
head -c $((96 * 1024 * 1024)) /dev/urandom >"$SRC/big.bin"

nginx_start "$SRC" || { echo "cannot start nginx" >&2; exit 99; }
URL="http://127.0.0.1:$NGINX_PORT/data/"
OPTS="cache_dir=$CD,cache_dir_size=1G,cache_size=16M,stats"

# The plan: 300 (offset, length) pairs, the same in both epochs.
python3 - "$PLAN" $((96 * 1024 * 1024)) <<'EOF'
import random, sys
rng = random.Random(12)
size = int(sys.argv[2])
with open(sys.argv[1], "w") as f:
    for _ in range(300):
        n = rng.choice([4096, 4096, 16384, 65536, 100000, 262144, 1 << 20])
        off = rng.randrange(0, size - n)
        f.write("%d %d\n" % (off, n))
EOF

# replay FILE|fd:N: does the plan's preads on FILE and checks each against the
# source; prints "asked PAGEBYTES" on success, a reason and status 1 on error.
replay() {
	timeout 300 python3 - "$1" "$SRC/big.bin" "$PLAN" <<'EOF'
import os, sys
# "fd:N": a descriptor the shell opened before nginx was stopped
fd = int(sys.argv[1][3:]) if sys.argv[1].startswith("fd:") else os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
src = open(sys.argv[2], "rb")
asked = 0
for line in open(sys.argv[3]):
    off, n = map(int, line.split())
    try:
        got = os.pread(fd, n, off)
    except OSError as e:
        print("pread(%d, %d) failed: %s" % (off, n, e))
        sys.exit(1)
    src.seek(off)
    want = src.read(n)
    if got != want[:len(got)]:
        print("pread(%d, %d): WRONG BYTES (%d returned)" % (off, n, len(got)))
        sys.exit(1)
    if len(got) != n:
        print("pread(%d, %d): short read of %d bytes (the rest failed)" % (off, n, len(got)))
        sys.exit(1)
    asked += ((off + n + 4095) // 4096 - off // 4096) * 4096
print("asked", asked)
EOF
}

stat_of() { sed -n "s/^$2 //p" "$1/.objfs-stats"; }

# ----------------------------------------------------------- 1 epoch one
if mount_objfs "$URL" "$MNT" "$OPTS"; then
	before=$(stat_of "$MNT" bytes)
	if out=$(replay "$MNT/big.bin"); then
		asked=${out#asked }
		fetched=$(($(stat_of "$MNT" bytes) - before))
		pass "epoch 1: 300 random preads byte-exact"
		if [ "$fetched" -le $((asked * 11 / 10)) ]; then
			pass "epoch 1: fetched $fetched bytes for $asked asked in pages (<= 1.1x)"
		else
			fail "epoch 1: expected at most 1.1x the $asked bytes asked (in pages) fetched, got $fetched"
		fi
	else
		fail "epoch 1: $out"
	fi
	unmount_objfs "$MNT"
	files=$(find "$CD/chunks" -type f 2>/dev/null | wc -l)
	if [ "$files" -gt 0 ]; then
		pass "epoch 1: $files chunk files (whole or partial) written behind, kept after unmount"
	else
		fail "epoch 1: expected chunk files under $CD/chunks after unmount, found none"
		sed 's/^/    | /' "$OBJFS_LOG" | tail -n 8
	fi
else
	fail "epoch 1: expected $URL to mount with $OPTS"
fi

# ----------------------------------------------------------- 2 epoch two
if mount_objfs "$URL" "$MNT" "$OPTS"; then
	exec 7<"$MNT/big.bin"
	nginx_stop
	if out=$(replay fd:7); then
		pass "epoch 2: with nginx stopped, the same preads byte-exact from the disk cache"
	else
		fail "epoch 2: with nginx stopped, expected every read from the disk cache: $out"
	fi
	hits=$(stat_of "$MNT" disk_cache_hits)
	reqs=$(stat_of "$MNT" request_errors)
	note "epoch 2: disk_cache_hits=$hits request_errors=$reqs"
	exec 7<&-
	unmount_objfs "$MNT"
else
	fail "epoch 2: expected $URL to mount again with $OPTS"
fi

summary
