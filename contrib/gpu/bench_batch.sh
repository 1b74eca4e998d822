#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# bench_batch.sh: the GPU side API's batch benchmark, on a GPU host
# (contrib/gpu/run_device.sh exec contrib/gpu/bench_batch.sh): NSAMPLES
# random LEN-byte samples across NFILES files of an objfs mount into one
# device buffer (tests/gpu/gpu_batch bench):
#
#   readv    one objfs_gpu_readv of every sample (libobjfs batch)
#   readva   the same through objfs_gpu_readv_async and a synchronize; its
#            line adds the call's own time ("enqueue"; not in the default set)
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
# BENCH_REPS (2), BENCH_OPTS (mount options), BENCH_MODES (the modes to run,
# default "readv readv1 loop pread16"; "MODE+OPTS" runs MODE on a mount
# with OPTS added, e.g. "readv+fill_threads=16"; "MODE@old" runs it on a
# mount of the daemon binary BENCH_OLD, with the client GPU_BATCH_OLD if
# set, to compare two builds). After
# each mode's warm pass its line "stats" gives the requests of each pass,
# the cache's hits and kept ranges (where the warm bytes came from), the
# daemon's CPU seconds in each pass (and nginx's in the cold one: the
# fetches' other side), how long the warm pass's fills waited for ring
# slots the consumer had not released (side_ring_wait_us), and the
# daemon's minor page faults in each pass.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$HERE/../../tests/integration/lib.sh"
# shellcheck source=../bench/bench_lib.sh
. "$HERE/../bench/bench_lib.sh"

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
bench_nginx "$DATA" || exit 99 # a worker per core, no access log: not the limit
MNT=$TEST_TMP/mnt
say "== bench_batch: $NS samples of $LEN bytes across $NF files of $FSIZE bytes; mount -o $OPTS; $(nproc) cores"
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
read -r -a modes <<<"${BENCH_MODES:-readv readv1 loop pread16}"
# stat_of KEY: a counter of the mount's .objfs-stats
stat_of() { sed -n "s/^$1 //p" "$MNT/.objfs-stats"; }
# cpu_s PID...: user + system CPU seconds of the PIDs together
cpu_s() {
	local p
	for p in "$@"; do cat "/proc/$p/stat" 2>/dev/null; done |
		awk -v h="$(getconf CLK_TCK)" '{ t += $14 + $15 } END { printf "%.2f", t / h }'
}
# nginx_cpu_s: cpu_s of nginx's workers
nginx_cpu_s() {
	local w
	read -r -a w <<<"$(pgrep -P "$(cat "$NGINX_PREFIX/nginx.pid")" | tr '\n' ' ')"
	cpu_s "${w[@]}"
}
# minflt PID: the minor page faults of PID so far
minflt() { awk '{ print $10 }' "/proc/$1/stat"; }
# cpu_delta A B: B - A, two decimals
cpu_delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
nm=${#modes[@]}
# one_pass MODE: one gpu_batch pass, its line labelled MODE
one_pass() {
	local m=${1%%[+@]*} env=() gb=$GPU_BATCH
	[ "$m" = readv1 ] && m=readv env=(OBJFS_GPU_NO_BATCHCOPY=1)
	[ "${1%@old}" = "$1" ] || gb=${GPU_BATCH_OLD:-$GPU_BATCH}
	env "${env[@]}" "$gb" bench "$MNT/shards" "$NF" "$NS" "$LEN" "$m" $((rep + 1)) 2>&1 |
		grep '^bench' | sed "s/^bench $m /bench $1 /"
}
for ((rep = 0; rep < REPS; rep++)); do
	for ((k = 0; k < nm; k++)); do
		m=${modes[$(((k + rep) % nm))]}
		mopts=$OPTS bin=$OBJFS
		[ "${m#*+}" = "$m" ] || mopts="$OPTS,${m#*+}"
		[ "${m%@old}" = "$m" ] || bin=${BENCH_OLD:?set BENCH_OLD for MODE@old}
		OBJFS=$bin mount_objfs "$URL" "$MNT" "${mopts%@old}" || exit 99
		t0=$(cpu_s "$OBJFS_PID") n0=$(nginx_cpu_s) f0=$(minflt "$OBJFS_PID")
		c=$(one_pass "$m")
		r1=$(stat_of requests) w1=$(stat_of side_ring_wait_us) t1=$(cpu_s "$OBJFS_PID")
		f1=$(minflt "$OBJFS_PID")
		n1=$(nginx_cpu_s)
		wl=$(one_pass "$m")
		say "rep $rep cold: $c"
		say "rep $rep warm: $wl"
		say "rep $rep stats $m: requests cold $r1 warm $(($(stat_of requests) - r1))" \
			"cache_hits $(stat_of cache_hits) cache_ranges_kept $(stat_of cache_ranges_kept)" \
			"cache_bytes $(stat_of cache_bytes)" \
			"cold_daemon_cpu_s $(cpu_delta "$t0" "$t1") cold_nginx_cpu_s $(cpu_delta "$n0" "$n1")" \
			"warm_daemon_cpu_s $(cpu_delta "$t1" "$(cpu_s "$OBJFS_PID")")" \
			"warm_ring_wait_ms $((($(stat_of side_ring_wait_us) - w1) / 1000))" \
			"daemon_minflt cold $((f1 - f0)) warm $(($(minflt "$OBJFS_PID") - f1))"
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
