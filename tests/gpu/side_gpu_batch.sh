#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# side_gpu_batch.sh: batches of the GPU side API into device
# memory, end to end: nginx, a real mount, libobjfs, CUDA
# (tests/gpu/gpu_batch does the GPU work and compares checksums on the
# GPU). Exits 77 without a usable GPU or FUSE.
#
#   OBJFS=/path/to/objfs tests/gpu/side_gpu_batch.sh
#
# Checks: batches of 1 to 10,000 entries over 1 to 1,000 files at odd
# offsets and sizes (some at the end of their file, some longer than a
# ring slot) into odd device offsets, ordered on one stream between a
# writer kernel and the checksum kernel; the host-function fallback; 10,000
# handles in one process (one ring, each open after the first timed); the
# daemon killed with a batch in flight: every entry -EIO, the stream
# completes within 5 s.
#
# Environment: GPU_BATCH (default: ../tests/gpu/gpu_batch next to objfs),
# BATCH_FILES (1000), SIDE_GPU_OPTS (more mount options for the checks).

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../integration/lib.sh
. "$HERE/../integration/lib.sh"

skip_unless_fuse
require_objfs
GB=$(test_binary gpu/gpu_batch GPU_BATCH) || exit 99
gpu_probe "$GB"
NF=${BATCH_FILES:-1000}

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT_SLOW=$TEST_TMP/mnt-slow
mkdir -p "$SRC/shards"
# NF files of 64 KiB to ~2 MiB and odd sizes, a few of 40 MiB (entries longer than a slot)
seq 0 $((NF - 1)) | xargs -P "$(nproc)" -I{} sh -c \
	'head -c $(( ({} * 7919) % 2097152 + 65536 + {} % 7 )) /dev/urandom > "$0/s{}.bin"' "$SRC/shards"
for i in 0 1 2; do head -c $((40 * 1048576 + i)) /dev/urandom >"$SRC/shards/s$i.bin"; done

run_b() {
	local label=$1 out rc
	shift
	out=$(timeout 300 "$@" 2>&1)
	rc=$?
	printf '%s\n' "$out" | sed 's/^/    | /'
	if [ "$rc" -eq 0 ]; then pass "$label"; else fail "$label (exit $rc)"; fi
}

nginx_start "$SRC" || exit 99
URL=http://127.0.0.1:$NGINX_PORT
mount_objfs "$URL/data/" "$MNT" "cache_size=4G${SIDE_GPU_OPTS:+,$SIDE_GPU_OPTS}" || exit 99

run_b "1 entry, 1 file" "$GB" check "$MNT/shards" "$SRC/shards" 1 1 100000 1
run_b "1,000 entries over 10 files" "$GB" check "$MNT/shards" "$SRC/shards" 10 1000 300000 2
run_b "10,000 entries over $NF files" "$GB" check "$MNT/shards" "$SRC/shards" "$NF" 10000 70000 3
run_b "300 entries up to 20 MB (longer than a slot) over 3 files" \
	"$GB" check "$MNT/shards" "$SRC/shards" 3 300 20000000 4
OBJFS_GPU_NO_MEMOPS=1 run_b "2,000 entries through the host-function fallback" \
	"$GB" check "$MNT/shards" "$SRC/shards" 100 2000 100000 5
run_b "10,000 handles in one process" "$GB" opens "$MNT/shards" "$NF" 10000
if unmount_objfs "$MNT" && [ "$UNMOUNT_STATUS" = 0 ]; then
	pass "unmount after the batch tests: objfs exited 0"
else
	fail "expected a clean unmount, got how='$UNMOUNT_HOW' status='$UNMOUNT_STATUS'"
fi

# Daemon killed with a batch in flight: 50 entries of 8 MiB from the 40 MiB
# files through the throttled location (2 MB/s a response after its first
# 2 MB, 2 connections), so it surely is.
mount_objfs "$URL/slow/" "$MNT_SLOW" "max_connections=2" || exit 99
DAEMON=$OBJFS_PID
"$GB" kill "$MNT_SLOW/shards" 3 50 8388608 >"$TEST_TMP/kill.out" 2>&1 &
KPID=$!
for ((i = 0; i < 300; i++)); do
	grep -q enqueued "$TEST_TMP/kill.out" && break
	sleep 0.1
done
sleep 1
killed_at=$(date +%s.%N)
kill -KILL "$DAEMON"
wait "$KPID"
line=$(grep '^stream' "$TEST_TMP/kill.out")
echo "    | $line"
done_at=${line##* at }
case $line in
"stream completed eio=50 ok=0 other=0 of 50 at "*)
	if awk -v a="$killed_at" -v b="$done_at" 'BEGIN { exit !(b - a < 5) }'; then
		pass "daemon killed mid-batch: every entry -EIO, the stream completed $(awk -v a="$killed_at" -v b="$done_at" 'BEGIN { printf "%.3f", b - a }') s after the kill"
	else
		fail "daemon killed mid-batch: -EIO came, but $(awk -v a="$killed_at" -v b="$done_at" 'BEGIN { print b - a }') s after the kill (want < 5 s)"
	fi
	;;
*) fail "daemon killed mid-batch: expected every entry -EIO and the stream complete, got '$line' ($(cat "$TEST_TMP/kill.out"))" ;;
esac
unmount_objfs "$MNT_SLOW" >/dev/null 2>&1
summary
