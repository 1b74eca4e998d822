#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# diskcache_sec.sh: a cache_dir that another user could write into or
# redirect, end to end: real FUSE mounts as root over
# nginx.
#
#   OBJFS=/path/to/objfs tests/integration/diskcache_sec.sh
#
#   a. cache_dir owned by another user (uid 65534): the mount is refused,
#      the message names the directory and the owner
#   b. cache_dir mode 0777: refused, the message says it is writable by
#      others
#   c. DIR/lock a symlink to a root-owned file elsewhere (in a root-owned
#      cache_dir): the file keeps its bytes (not truncated, no pid written
#      there); the mount is refused, or at least nothing is
#      written through the link
#   d. chunk files forged -- a page's bytes replaced and every sum
#      recomputed as the old format did (XXH3-64, no key), and again as
#      HMAC-SHA256 under a key that is not the cache's -- a remount reads
#      the true bytes (md5 of the source), counts the chunks bad and no
#      chunk file keeps the forged page. A control forges with the cache's
#      own key (root can read DIR/key): those bytes are served, so the
#      forger is right and only the key was missing.
#   e. a parent directory writable by others and not sticky: refused,
#      naming the parent; sticky (as /tmp) is fine
#
# Needs root (chown, a file only root may write), /dev/fuse, nginx,
# python3 and libxxhash (for the old sums); skipped (77) without root or
# FUSE, except under CI=true, where a missing package or root fails.
# Exit status: 0 all passed, 1 something failed, 77 skipped, 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: diskcache_sec.sh runs as root under CI"; exit 1; }
	skip "needs root (chown to another user, root-owned victim files)"
fi
if [ "${CI:-}" = true ] && ! [ -c /dev/fuse ]; then
	echo "FAIL: /dev/fuse is missing under CI=true"
	exit 1
fi
skip_unless_fuse
require_objfs
XXH=$(python3 -c 'import ctypes.util; print(ctypes.util.find_library("xxhash") or "")')
if [ -z "$XXH" ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: libxxhash is missing (tests/deps.sh)"; exit 1; }
	skip "libxxhash is not installed (needed to forge format 2 sums)"
fi

TO=${OBJFS_TEST_TIMEOUT:-60}
SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
mkdir -p "$SRC" "$MNT"
remember_mountpoint "$MNT"

# 5 MiB + 17: two 4 MiB blocks, the second short
head -c $((5 * 1024 * 1024 + 17)) /dev/urandom >"$SRC/data.bin"
WANT=$(md5sum <"$SRC/data.bin" | cut -d' ' -f1)

nginx_start "$SRC" || { echo "cannot start nginx" >&2; exit 99; }
URL="http://127.0.0.1:$NGINX_PORT/data/"

# try_mount CD: runs "objfs -f -o cache_dir=CD" until it exits or mounts
# (then unmounts it at once, so that a mount that should have been refused
# costs no time). Sets RC (its exit status), OUT (its output), MOUNTED (1
# when it had mounted).
try_mount() {
	local log=$TEST_TMP/try.$RANDOM.log pid i
	MOUNTED=0
	"$OBJFS" -f -o "cache_dir=$1" "$URL" "$MNT" >"$log" 2>&1 &
	pid=$!
	for ((i = 0; i < TO * 10; i++)); do
		_pid_alive "$pid" || break
		if is_mounted "$MNT"; then
			MOUNTED=1
			sleep 0.5
			timeout 10 fusermount3 -u "$MNT" || timeout 10 umount -l "$MNT"
			break
		fi
		sleep 0.1
	done
	for ((i = 0; i < 100; i++)); do
		_pid_alive "$pid" || break
		sleep 0.1
	done
	_pid_alive "$pid" && kill -KILL "$pid"
	RC=0
	wait "$pid" || RC=$?
	OUT=$(cat "$log")
}

# refused LABEL CD WORDS...: a mount with cache_dir=CD exits non-zero
# without mounting, and its message holds CD and each of WORDS.
refused() {
	local label=$1 cd=$2 w ok=1
	shift 2
	try_mount "$cd"
	[ "$MOUNTED" = 0 ] && [ "$RC" != 0 ] || ok=0
	[[ $OUT == *"$cd"* ]] || ok=0
	for w in "$@"; do [[ $OUT == *"$w"* ]] || ok=0; done
	if [ "$ok" = 1 ]; then
		pass "$label: mount refused (exit $RC): $(printf '%s' "$OUT" | tail -n 1 | cut -c1-200)"
	else
		fail "$label: expected the mount to be refused (non-zero exit, not mounted) with a message naming $cd and saying '$*', got exit $RC, mounted=$MOUNTED: $OUT"
	fi
}

# stat_of LOG KEY: a disk cache counter from the "stats:" line -o stats logs at unmount.
stat_of() {
	sed -n 's/.*stats: //p' "$1" | tr ',' '\n' | sed -n "s/^disk_cache_$2=//p" | tail -n 1
}

# read_md5 CD: mounts with cache_dir=CD, reads data.bin, unmounts; GOT is
# its md5 (empty when the mount failed), OBJFS_LOG the mount's log.
read_md5() {
	GOT=
	if mount_objfs "$URL" "$MNT" "cache_dir=$1,cache_dir_size=1G,log_level=info,stats"; then
		GOT=$(timeout "$TO" md5sum <"$MNT/data.bin" | cut -d' ' -f1)
		unmount_objfs "$MNT"
	fi
}

# ---------------------------------------------------------------- a another owner
CD=$TEST_TMP/a-foreign
mkdir -m 0700 "$CD" && chown 65534:65534 "$CD"
refused "a. cache_dir owned by uid 65534" "$CD" "owned by uid 65534" "mounting user 0"
[ -z "$(ls -A "$CD")" ] && pass "a. nothing written into the foreign cache_dir" ||
	fail "a. expected the foreign cache_dir to stay empty, found: $(ls -A "$CD")"

# ---------------------------------------------------------------- b mode 0777
CD=$TEST_TMP/b-open
mkdir "$CD" && chmod 0777 "$CD"
refused "b. cache_dir mode 0777" "$CD" "writable by group or others"

# ---------------------------------------------------------------- c lock -> victim
CD=$TEST_TMP/c-lock
VDIR=$TEST_TMP/c-rootonly
mkdir -m 0700 "$CD" "$VDIR"
printf 'root secret: do not truncate\n' >"$VDIR/victim"
VSUM=$(md5sum <"$VDIR/victim")
ln -s "$VDIR/victim" "$CD/lock"
try_mount "$CD"
if [ "$(md5sum <"$VDIR/victim")" = "$VSUM" ]; then
	pass "c. lock -> root-owned victim: the victim kept its bytes ($(printf '%s' "$OUT" | tail -n 1 | cut -c1-160))"
else
	fail "c. lock -> root-owned victim: expected $VDIR/victim unchanged, it now holds: $(head -c 100 "$VDIR/victim" | od -c | head -n 2)"
fi
if [ "$MOUNTED" = 0 ] && [ "$RC" != 0 ] && [[ $OUT == *"$CD/lock"* ]]; then
	pass "c. the mount refused the symlinked lock, naming it"
elif [ "$MOUNTED" = 1 ] && ! [ -L "$CD/lock" ]; then
	pass "c. the symlink was replaced, not written through"
else
	fail "c. expected the mount to refuse the symlinked lock (a message naming $CD/lock), got exit $RC, mounted=$MOUNTED: $OUT"
fi

# ---------------------------------------------------------------- e parents
PAR=$TEST_TMP/e-parent
mkdir "$PAR" && chmod 0777 "$PAR"
refused "e. parent writable by others, not sticky" "$PAR/cache" "$PAR" "not sticky"
chmod 1777 "$PAR"
read_md5 "$PAR/cache"
if [ "$GOT" = "$WANT" ]; then
	pass "e. under a sticky parent (as /tmp): mounted, right bytes"
else
	fail "e. expected a mount under the sticky parent $PAR to read md5 $WANT, got '$GOT'"
fi

# ---------------------------------------------------------------- d forged chunks
CD=$TEST_TMP/d-cache
read_md5 "$CD"
[ "$GOT" = "$WANT" ] && pass "d. cold read through cache_dir: right bytes" ||
	fail "d. cold read: expected md5 $WANT, got '$GOT'"
NCH=$(find "$CD/chunks" -type f | wc -l)
[ "$NCH" = 2 ] || fail "d. expected 2 chunk files after the cold read, found $NCH"

# forge CD HOW: every chunk file's page 1 replaced by 'F' bytes, then every
# sum recomputed: HOW=old as format 2 did (XXH3-64, unkeyed), HOW=wrongkey
# as format 3 under a random key, HOW=realkey under CD/key. The layout is
# diskcache_i.h's; a file with magic OBJFSDC2 is always summed as format 2.
forge() {
	python3 - "$1" "$2" "$XXH" <<'EOF'
import ctypes, hashlib, hmac, os, struct, sys
cd, how, xxh = sys.argv[1], sys.argv[2], ctypes.CDLL(sys.argv[3])
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
key = open(os.path.join(cd, "key"), "rb").read() if how == "realkey" else os.urandom(32)
n = 0
for root, _, files in os.walk(os.path.join(cd, "chunks")):
    for f in files:
        p = os.path.join(root, f)
        b = bytearray(open(p, "rb").read())
        magic, _, ver, psz, blen, mlen, ilen, npg, _ = struct.unpack_from("<8sQIIQIIII", b)
        v2 = how == "old" or magic == b"OBJFSDC2"
        bm = 48 + 8 * npg
        io = bm + (npg + 7) // 8
        ident = bytes(b[io:io + ilen])
        if npg < 2:
            continue
        b[mlen + 4096:mlen + 8192] = b"F" * 4096
        def mac(data):
            return struct.unpack("<Q", hmac.new(key, data, hashlib.sha256).digest()[:8])[0]
        for pg in range(npg):
            if not b[bm + pg // 8] >> (pg % 8) & 1:
                continue
            data = bytes(b[mlen + pg * 4096:mlen + min(blen, (pg + 1) * 4096)])
            if v2:
                s = xxh.XXH3_64bits(data, len(data))
            else:
                pre = b"objfs-dc3-page".ljust(16, b"\0") + hashlib.sha256(ident).digest() + \
                      struct.pack("<QQ", pg, blen)
                s = mac(pre + data)
            struct.pack_into("<Q", b, 48 + 8 * pg, s)
        if v2:
            h = xxh.XXH3_64bits(bytes(b[16:mlen]), mlen - 16)
        else:
            h = mac(b"objfs-dc3-meta".ljust(16, b"\0") + bytes(b[16:48]) + bytes(b[bm:io + ilen]))
        struct.pack_into("<Q", b, 8, h)
        open(p, "r+b").write(b)
        n += 1
print(n)
EOF
}

# forged_pages CD: how many chunk files hold the forged page
forged_pages() {
	python3 - "$1" <<'EOF'
import os, sys
n = 0
for root, _, files in os.walk(os.path.join(sys.argv[1], "chunks")):
    for f in files:
        if b"F" * 4096 in open(os.path.join(root, f), "rb").read():
            n += 1
print(n)
EOF
}

for how in old wrongkey; do
	n=$(forge "$CD" "$how")
	if [ "${n:-0}" -lt 1 ]; then
		fail "d. ($how) expected to forge at least one chunk file, forged '${n}'"
		continue
	fi
	read_md5 "$CD"
	bad=$(stat_of "$OBJFS_LOG" bad)
	left=$(forged_pages "$CD")
	if [ "$GOT" = "$WANT" ] && [ "${bad:-0}" -ge "$n" ] && [ "$left" = 0 ]; then
		pass "d. ($how) $n forged chunk(s): true bytes read (md5 $GOT), $bad chunk(s) counted bad, none left on disk"
	else
		fail "d. ($how) expected md5 $WANT, >= $n bad chunks and no forged page left on disk, got md5 '$GOT', bad=${bad:-?}, forged files left=$left"
		sed 's/^/    | /' "$OBJFS_LOG" | grep -i 'chunk\|disk' | tail -n 6
	fi
done
# the control: the forger with the cache's own key makes chunks that verify
if [ -f "$CD/key" ]; then
	n=$(forge "$CD" realkey)
	read_md5 "$CD"
	if [ "${n:-0}" -ge 1 ] && [ "$GOT" != "$WANT" ] && [ -n "$GOT" ]; then
		pass "d. control: forged under the cache's own key, the chunk verifies (md5 $GOT): the forger is right, only the key stops it"
	else
		fail "d. control: expected chunks forged under $CD/key to be served (md5 other than $WANT), got '$GOT' ($n forged)"
	fi
	rm -rf "$CD"
else
	fail "d. expected a key file $CD/key (0600) made by the mount"
fi

summary
