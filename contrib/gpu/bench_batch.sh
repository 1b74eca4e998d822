#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# bench_batch.sh: benchmark (1) of issue 17 on the lent GPU machine
# (contrib/gpu/run_device.sh exec contrib/gpu/bench_batch.sh): NSAMPLES
# random LEN-byte samples across NFILES files of an objfs mount into one
# device buffer (tests/gpu/gpu_batch bench):
#
#   readv    one objfs_gpu_readv of every sample (libobjfs batch)
#   readv1   the same, each sample its own cudaMemcpyAsync
#            (OBJFS_GPU_NO_BATCHCOPY=1: libobjfs before cudaMemcpyBatchAsync)
#   loop     a loop of objfs_gpu_read, one sample each
#   pread16  16 threads: pread through the mount into pinned memory, then
#            cudaMemcpyAsync (8 staging buffers a thread)
#
# Each (rep, mode) is a fresh mount: "cold" is the first pass (the daemon's
# caches empty; nginx's files in the page cache), "warm" the same samples
# again on the same mount (whatever the path keeps: FUSE reads keep blocks
# in the daemon's block cache and pages in the kernel's page cache; side
# fills keep nothing in memory without cache_dir, so their warm pass
# fetches again). Modes alternate within each rep, the order rotated.
#
# Environment: GPU_BATCH, OBJFS (run_device.sh sets them), OUT, BENCH_FILES
# (1000), BENCH_FILE_SIZE (2 MiB), BENCH_SAMPLES (10000), BENCH_LEN (65536),
# BENCH_REPS (2), BENCH_OPTS (mount options).

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$HERE/../../tests/integration/lib.sh"

: "${GPU_BATCH:?set GPU_BATCH to tests/gpu/gpu_batch}"
require_objfs
OUT=${OUT:-$PWD/device-out}
NF=${BENCH_FILES:-1000}
FSIZE=${BENCH_FILE_SIZE:-2097152}
NS=${BENCH_SAMPLES:-10000}
LEN=${BENCH_LEN:-65536}
REPS=${BENCH_REPS:-2}
OPTS=${BENCH_OPTS:-cache_size=4G}
mkdir -p "$OUT"
res=$OUT/bench_batch.txt
: >"$res"
say() { printf '%s\n' "$*" | tee -a "$res"; }

DATA=$TEST_TMP/www
mkdir -p "$DATA/shards"
seq 0 $((NF - 1)) | xargs -P "$(nproc)" -I{} sh -c 'head -c '"$FSIZE"' /dev/urandom > "$0/s{}.bin"' "$DATA/shards"
cat "$DATA"/shards/* >/dev/null # nginx's files in the page cache
nginx_start "$DATA" || exit 99
URL=http://127.0.0.1:$NGINX_PORT
MNT=$TEST_TMP/mnt
say "== bench_batch: $NS samples of $LEN bytes across $NF files of $FSIZE bytes; mount -o $OPTS; $(nproc) cores"
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
modes=(readv readv1 loop pread16)
nm=${#modes[@]}
# one_pass MODE: one gpu_batch pass, its line labelled MODE
one_pass() {
	local m=$1 env=()
	[ "$m" = readv1 ] && m=readv env=(OBJFS_GPU_NO_BATCHCOPY=1)
	env "${env[@]}" "$GPU_BATCH" bench "$MNT/shards" "$NF" "$NS" "$LEN" "$m" $((rep + 1)) 2>&1 |
		grep '^bench' | sed "s/^bench $m /bench $1 /"
}
for ((rep = 0; rep < REPS; rep++)); do
	for ((k = 0; k < nm; k++)); do
		m=${modes[$(((k + rep) % nm))]}
		mount_objfs "$URL/data/" "$MNT" "$OPTS" || exit 99
		c=$(one_pass "$m")
		w=$(one_pass "$m")
		say "rep $rep cold: $c"
		say "rep $rep warm: $w"
		unmount_objfs "$MNT" >/dev/null 2>&1
	done
done
say "== medians (samples/s)"
for m in "${modes[@]}"; do
	for t in cold warm; do
		med=$(grep "$t: bench $m " "$res" | awk '{ print $8 }' | sort -n |
			awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }')
		say "$m $t ${med:-?}"
	done
done
