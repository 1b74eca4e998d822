#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
#
# diskcache_bench.sh: the persistent disk cache against its peers' and the
# disk's ceiling, on one file read sequentially in 4 MiB reads.
#
#   contrib/bench/diskcache_bench.sh [--size MIB] [--objfs PATH] [--s3] [--out FILE]
#
# For objfs (-o cache_dir=), rclone (--vfs-cache-mode full, HTTP remote) and,
# with --s3, s3fs (-o use_cache=, against a throw-away Ceph RGW), three reads
# of the same file:
#   cold        fresh mount, empty cache directory: from the server (loopback
#               nginx / RGW, no WAN emulation), filling the disk cache
#   warm-disk   after unmount, writeback (sync) and POSIX_FADV_DONTNEED on
#               every cache file, a fresh mount: the daemon's memory and the
#               kernel page cache hold nothing of it, so it comes from disk
#   page-cache  the same file again in that mount: the kernel page cache
# and the ceiling: fio --ioengine=io_uring, 4 MiB sequential reads of a
# file of the same size in the same file system as the cache directories,
# buffered (its page cache dropped first, as fio's invalidate=1 does) and
# O_DIRECT. Target: objfs warm-disk >= 0.8 x the buffered ceiling.
#
# Only the cache files' pages are dropped (not echo 1 > drop_caches), so
# other work on the machine keeps its page cache. One run each; the table
# goes to stdout and, with --out, to a file. Needs root, FUSE, nginx, fio,
# rclone (and s3fs + Ceph for --s3). Uses tests/integration/lib.sh.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
SIZE_MB=1024
OBJFS=${OBJFS:-$top/build-bench/src/objfs}
S3=0
OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE_MB=$2; shift ;;
	--objfs) OBJFS=$2; shift ;;
	--s3) S3=1 ;;
	--out) OUT=$2; shift ;;
	*) echo "usage: $0 [--size MIB] [--objfs PATH] [--s3] [--out FILE]" >&2; exit 2 ;;
	esac
	shift
done
export OBJFS
TMPDIR=${OBJFS_BENCH_ROOT:-/tmp}
export TMPDIR
# shellcheck source=../../tests/integration/lib.sh
. "$top/tests/integration/lib.sh"
skip_unless_fuse
require_objfs
command -v fio >/dev/null || { echo "fio is not installed" >&2; exit 1; }

SRC=$TEST_TMP/src
mkdir -p "$SRC"
head -c $((SIZE_MB << 20)) /dev/urandom >"$SRC/data.bin"
WANT=$(sha256sum <"$SRC/data.bin" | cut -d' ' -f1)
nginx_start "$SRC" || exit 1
ROWS=()

# rd FILE: reads FILE in 4 MiB reads, prints MB/s (10^6 bytes per second).
rd() {
	python3 - "$1" <<'EOF'
import os, sys, time
buf = bytearray(4 << 20)
n = 0
t = time.perf_counter()
with open(sys.argv[1], "rb", buffering=0) as f:
    while True:
        k = f.readinto(buf)
        if not k:
            break
        n += k
print(f"{n / (time.perf_counter() - t) / 1e6:.0f}")
EOF
}

# drop PATH...: write back, then drop the page cache of every file under PATH.
drop() {
	python3 - "$@" <<'EOF'
import os, sys
os.sync()
for top in sys.argv[1:]:
    for d, _, fs in os.walk(top):
        for f in fs:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
            except OSError:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
EOF
}

# bg_mount MNT CMD...: runs a peer's mount command in the background, waits
# until MNT is mounted (20 s).
bg_mount() {
	local mnt=$1 i
	shift
	mkdir -p "$mnt"
	"$@" >"$TEST_TMP/$(basename "$mnt").log" 2>&1 &
	BG_PID=$!
	for ((i = 0; i < 200; i++)); do
		is_mounted "$mnt" && return 0
		sleep 0.1
	done
	echo "bench: $1 did not mount $mnt" >&2
	return 1
}

bg_unmount() {
	local mnt=$1 i
	fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
	for ((i = 0; i < 300; i++)); do
		kill -0 "$BG_PID" 2>/dev/null || break
		sleep 0.1
	done
	wait "$BG_PID" 2>/dev/null
}

# check_bytes FILE NAME: the warm bytes are the source's.
check_bytes() {
	if [ "$(sha256sum <"$1" | cut -d' ' -f1)" != "$WANT" ]; then
		echo "bench: $2 returned wrong bytes" >&2
		exit 1
	fi
}

# ------------------------------------------------------------------ objfs
CD=$TEST_TMP/objfs-cache
M=$TEST_TMP/m-objfs
O="cache_dir=$CD,cache_dir_size=$((SIZE_MB * 2))M,cache_size=$((SIZE_MB * 2))M,stats"
mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$M" "$O" || exit 1
cold=$(rd "$M/data.bin")
unmount_objfs "$M"
LOG_COLD=$OBJFS_LOG
NCHUNK=$(((SIZE_MB + 3) / 4))
drop "$CD"
mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$M" "$O" || exit 1
warm=$(rd "$M/data.bin")
pc=$(rd "$M/data.bin")
check_bytes "$M/data.bin" objfs
unmount_objfs "$M"
hits=$(sed -n 's/.*disk cache stats: hits=\([0-9]*\).*/\1/p' "$OBJFS_LOG")
misses=$(sed -n 's/.*disk cache stats: .*,misses=\([0-9]*\).*/\1/p' "$OBJFS_LOG")
dropped=$(sed -n 's/.*writes_dropped=\([0-9]*\).*/\1/p' "$LOG_COLD")
# hits can exceed the chunk count: a block dropped behind and read again
ROWS+=("| objfs (\`cache_dir\`) | $cold | $warm | $pc | warm read of $NCHUNK chunks: $hits disk hits, $misses from nginx; the cold read dropped $dropped chunk writes |")
# once more: now every chunk is on disk
drop "$CD"
mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$M" "$O" || exit 1
warm=$(rd "$M/data.bin")
warm_objfs=$warm
check_bytes "$M/data.bin" objfs
unmount_objfs "$M"
hits=$(sed -n 's/.*disk cache stats: hits=\([0-9]*\).*/\1/p' "$OBJFS_LOG")
ROWS+=("| objfs, second warm mount | | $warm | | $hits of $NCHUNK chunks from disk |")

# peer_reads NAME MNT CACHE CMD...: a peer's cold read, then (remounted,
# its cache files dropped from the page cache) its warm-from-disk read and a
# page-cache re-read; sets cold, warm, pc and checks the bytes.
peer_reads() {
	local name=$1 m=$2 cache=$3
	shift 3
	bg_mount "$m" "$@" || exit 1
	cold=$(rd "$m/data.bin")
	bg_unmount "$m"
	drop "$cache"
	bg_mount "$m" "$@" || exit 1
	warm=$(rd "$m/data.bin")
	pc=$(rd "$m/data.bin")
	check_bytes "$m/data.bin" "$name"
	bg_unmount "$m"
}

# ------------------------------------------------------------------ rclone
if command -v rclone >/dev/null; then
	RC=$TEST_TMP/rclone-cache
	M=$TEST_TMP/m-rclone
	RCMD=(rclone mount --read-only --config /dev/null --vfs-cache-mode full
	      --cache-dir "$RC" --vfs-cache-max-size $((SIZE_MB * 2))M
	      --http-url "http://127.0.0.1:$NGINX_PORT/html/" :http: "$M")
	peer_reads rclone "$M" "$RC" "${RCMD[@]}"
	ROWS+=("| rclone 1.60 (\`--vfs-cache-mode full\`) | $cold | $warm | $pc | HTTP remote |")
fi

# ------------------------------------------------------------------ s3fs
if [ "$S3" = 1 ]; then
	# shellcheck source=../../tests/integration/rgw.sh
	. "$top/tests/integration/rgw.sh"
	rgw_check || exit 1
	RGW_MEM=$(((SIZE_MB * 3) << 20)) rgw_start "$TEST_TMP/rgw" || exit 1
	python3 "$top/tests/integration/s3util.py" mb dcbench
	python3 "$top/tests/integration/s3util.py" put dcbench data.bin "$SRC/data.bin"
	PW=$TEST_TMP/s3fs.passwd
	printf '%s:%s\n' "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" >"$PW"
	chmod 600 "$PW"
	SC=$TEST_TMP/s3fs-cache
	M=$TEST_TMP/m-s3fs
	SCMD=(s3fs dcbench "$M" -f -o "url=$RGW_ENDPOINT,use_path_request_style,passwd_file=$PW,ro,use_cache=$SC,parallel_count=16,multireq_max=16")
	peer_reads s3fs "$M" "$SC" "${SCMD[@]}"
	ROWS+=("| s3fs 1.90 (\`use_cache\`) | $cold | $warm | $pc | S3: Ceph RGW (memstore) on loopback |")
fi

# ------------------------------------------------------------------ ceiling
F=$TEST_TMP/fio
mkdir -p "$F"
fio_bw() {
	fio --name=ceiling --directory="$F" --ioengine=io_uring --rw=read --bs=4M \
		--size="${SIZE_MB}M" --iodepth=16 --invalidate=1 --output-format=json "$@" |
		python3 -c 'import json, sys
print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e6))'
}
fio --name=ceiling --directory="$F" --rw=write --bs=4M --size="${SIZE_MB}M" \
	--output=/dev/null
drop "$F"
buffered=$(fio_bw --direct=0)
direct=$(fio_bw --direct=1)
ROWS+=("| fio io_uring, buffered, iodepth 16 (ceiling) | | $buffered | | page cache of the file dropped first |")
ROWS+=("| fio io_uring, O_DIRECT, iodepth 16 | | $direct | | |")

{
	echo "| reader | cold MB/s | warm-disk MB/s | page-cache MB/s | notes |"
	echo "|---|---|---|---|---|"
	printf '%s\n' "${ROWS[@]}"
	echo
	echo "objfs warm-disk (second warm mount) / fio buffered ceiling: $(python3 -c "print(f'{$warm_objfs / $buffered:.2f}')" 2>/dev/null)"
} >"$TEST_TMP/table.md"
cat "$TEST_TMP/table.md"
[ -n "$OUT" ] && cp "$TEST_TMP/table.md" "$OUT"
exit 0
