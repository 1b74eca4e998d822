#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# bench_gpu.sh: the GPU side API benchmark, for a GPU host (one call; contrib/gpu/run_device.sh bench sets up the
# unpacked .debs and runs this). nginx on loopback serves one object
# (default 4 GiB, random bytes, its page cache warm); for each connection
# count N it times moving the whole object into one device buffer:
#
#   pageable  read() through the mount into malloc'd memory, cudaMemcpy
#   pinned    read() through the mount into cudaMallocHost memory, cudaMemcpy
#   gpu       one objfs_gpu_read of the whole object (libobjfs)
#   curl      N curl processes, one range of size/N each, to /dev/null: the
#             ceiling of the HTTP receive path (no copy to the GPU at all)
#
# Each objfs figure is a fresh mount (-o max_connections=N,engine_threads=E,
# plus $BENCH_OPTS), so the daemon's block cache and the kernel page cache of
# the mount are cold; nginx's source file is in the page cache for every
# figure, curl's included. The median of $BENCH_REPS runs is reported. During
# the gpu runs the daemon's threads' CPU time (/proc/PID/task/*/stat) and the
# machine's busy cores (/proc/stat) are recorded: they say what limits a fill.
#
# Environment: OBJFS, GPU_FILL (required), NGINX, OUT (results; default
# ./device-out), BENCH_SIZE (bytes, default 4 GiB), BENCH_CONNS ("1 4 8 16"),
# BENCH_REPS (3), BENCH_MODES ("pageable pinned gpu curl"), BENCH_ENGINE_THREADS
# (engine threads; default N), BENCH_OPTS (more mount options), BENCH_LABEL
# (names the JSON file), BENCH_DATA (directory to keep the object in between
# runs; default a temporary one).
#
# Output: a table on stdout, $OUT/bench_gpu[-LABEL].json, $OUT/bench_gpu[-LABEL].txt.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$HERE/../../tests/integration/lib.sh"
# shellcheck source=../bench/bench_lib.sh
. "$HERE/../bench/bench_lib.sh"

: "${GPU_FILL:?set GPU_FILL to tests/gpu/gpu_fill}"
require_objfs
OUT=${OUT:-$PWD/device-out}
SIZE=${BENCH_SIZE:-4294967296}
CONNS=${BENCH_CONNS:-1 4 8 16}
REPS=${BENCH_REPS:-3}
MODES=${BENCH_MODES:-pageable pinned gpu curl}
LABEL=${BENCH_LABEL:-}
NCPU=$(nproc)
TICK=$(getconf CLK_TCK)
mkdir -p "$OUT"
res=$OUT/bench_gpu${LABEL:+-$LABEL}
: >"$res.txt"
say() { printf '%s\n' "$*" | tee -a "$res.txt"; }

DATA=${BENCH_DATA:-$TEST_TMP/www}
mkdir -p "$DATA"
OBJ=$DATA/big.bin
if [ "$(stat -c %s "$OBJ" 2>/dev/null)" != "$SIZE" ]; then
	t0=$(date +%s.%N)
	bench_big_object "$OBJ" "$SIZE"
	say "# object: $SIZE random bytes made in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
fi
cat "$OBJ" >/dev/null # nginx's side: page cache warm for everyone

# nginx as the tests run it, with a worker per core and no access log.
NGINX_DATA=$DATA
NGINX_PREFIX=$TEST_TMP/nginx
export NGINX_PREFIX
NGINX_PORT=$(free_port)
export NGINX_PORT
_nginx_write_conf "$NGINX_PREFIX" "$NGINX_PORT" "$NGINX_DATA" || exit 99
sed -i "s/^worker_processes .*/worker_processes $NCPU;/; s|access_log .*;|access_log off;|" \
	"$NGINX_PREFIX/nginx.conf"
_nginx_launch || { echo "nginx did not start" >&2; cat "$NGINX_PREFIX/error.log" >&2; exit 99; }
URL=http://127.0.0.1:$NGINX_PORT/data/

# snap_threads FILE: "tid comm ticks" per thread of the daemon (tid 0: the whole
# process) and snap_busy FILE: "busy_ticks total_ticks" of all CPUs, from a
# snapshot gpu_fill had made
snap_threads() {
	grep ') [A-Za-z] ' "$1" | awk '{
		i = index($0, "("); j = match($0, /\) [A-Za-z] /)
		comm = substr($0, i + 1, j - i - 1); gsub(/ /, "_", comm)
		split(substr($0, j + 2), f, " ")
		print $1, comm, f[12] + f[13] }'
}
snap_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' "$1"; }

# one_run N MODE: sets RUN to GB/s (or "fail"); threads' CPU to $res.txt for gpu.
# Not inside $(...): the mounts it starts belong to this shell (lib.sh).
one_run() {
	local n=$1 mode=$2 mnt=$TEST_TMP/mnt out gbps e opts before= after= b0= b1= t0= t1=
	e=${BENCH_ENGINE_THREADS:-$n}
	if [ "$mode" = curl ]; then
		local per=$(((SIZE + n - 1) / n)) i lo hi pids=()
		t0=$(date +%s.%N)
		for ((i = 0; i < n; i++)); do
			lo=$((i * per))
			hi=$((lo + per - 1))
			[ "$hi" -lt "$SIZE" ] || hi=$((SIZE - 1))
			curl -sf -o /dev/null -r "$lo-$hi" "${URL}big.bin" &
			pids+=($!)
		done
		RUN=
		for i in "${pids[@]}"; do wait "$i" || RUN=fail; done
		t1=$(date +%s.%N)
		[ -n "$RUN" ] || RUN=$(awk -v a="$t0" -v b="$t1" -v s="$SIZE" 'BEGIN { printf "%.3f", s / (b - a) / 1e9 }')
		return
	fi
	opts="max_connections=$n,engine_threads=$e${BENCH_OPTS:+,$BENCH_OPTS}"
	RUN=fail
	mount_objfs "$URL" "$mnt" "$opts" >&2 || return
	# gpu_fill runs this right before and right after objfs_gpu_read
	rm -f "$TEST_TMP"/snap.*
	export BENCH_SNAP_CMD="n=\$(ls $TEST_TMP | grep -c '^snap\.'); { cat /proc/$OBJFS_PID/task/*/stat; echo '0 (total) S' \$(cut -d' ' -f4- /proc/$OBJFS_PID/stat); date +%s.%N; head -1 /proc/stat; } >$TEST_TMP/snap.\$n 2>/dev/null"
	out=$(timeout 300 "$GPU_FILL" bench1 "$mode" "$mnt/big.bin" 2>&1)
	unset BENCH_SNAP_CMD
	if [ -f "$TEST_TMP/snap.1" ]; then
		before=$(snap_threads "$TEST_TMP/snap.0")
		after=$(snap_threads "$TEST_TMP/snap.1")
		t0=$(sed -n '/^[0-9]*\.[0-9]*$/p' "$TEST_TMP/snap.0")
		t1=$(sed -n '/^[0-9]*\.[0-9]*$/p' "$TEST_TMP/snap.1")
		b0=$(snap_busy "$TEST_TMP/snap.0")
		b1=$(snap_busy "$TEST_TMP/snap.1")
	fi
	gbps=$(printf '%s\n' "$out" | awk '$1 == "bench1" && NF >= 5 { print $3 }')
	if [ "$mode" = gpu ] && [ -n "$after" ]; then
		{
			echo "## N=$n gpu ($opts): $out"
			echo "#   machine: $(awk -v a="$b0" -v b="$b1" -v n="$NCPU" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.1f of %d cores busy", n * (y[1] - x[1]) / (y[2] - x[2]), n }')"
			echo "#   objfs threads, % of one core during objfs_gpu_read (total: the whole process):"
			join <(printf '%s\n' "$before" | sort) <(printf '%s\n' "$after" | sort) |
				awk -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v hz="$TICK" \
					'{ d = $5 - $3; if (d > 0) { c[$2] += d; k[$2]++ } }
					 END { for (x in c) printf "#     %-16s x%-3d %6.0f%%\n", x, k[x], 100 * c[x] / hz / w }' |
				sort -k3 -nr
			# side_ring_wait_us: time the fill waited for the GPU to free a slot
			echo "#   counters: $(grep -E '^(requests|retries|ttfb_p50_us|ttfb_p99_us|cache_direct_bytes|side_ring_wait_us) ' "$mnt/.objfs-stats" | tr '\n' ' ')"
		} >>"$res.txt"
	fi
	unmount_objfs "$mnt" >&2
	RUN=${gbps:-fail}
	[ -n "$gbps" ] || printf '%s\n' "$out" | sed 's/^/    | /' >&2
}

median() { printf '%s\n' "$@" | grep -v fail | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "fail" }'; }

say "# bench_gpu.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null), $NCPU cores"
say "# objfs: $OBJFS; object $SIZE bytes; median of $REPS; engine_threads=${BENCH_ENGINE_THREADS:-N}; extra options: ${BENCH_OPTS:-none}"
declare -A MED
json="{\"label\":\"$LABEL\",\"size\":$SIZE,\"reps\":$REPS,\"cores\":$NCPU,\"opts\":\"${BENCH_OPTS:-}\",\"engine_threads\":\"${BENCH_ENGINE_THREADS:-N}\",\"runs\":["
sep=
# The modes take turns within each repetition (gpu, curl, gpu, curl, ...),
# so each gpu run has a curl run next to it under the same conditions:
# curl alone can vary by half over minutes. "c/d pairs"
# is the median of those per-repetition ratios.
declare -A VALS
for n in $CONNS; do
	for ((r = 0; r < REPS; r++)); do
		for m in $MODES; do
			one_run "$n" "$m"
			VALS[$n,$m]+=" $RUN"
		done
	done
	pairs=()
	read -ra g <<<"${VALS[$n,gpu]:-}"
	read -ra c <<<"${VALS[$n,curl]:-}"
	for ((r = 0; r < ${#g[@]} && r < ${#c[@]}; r++)); do
		pairs+=("$(awk -v a="${g[$r]}" -v b="${c[$r]}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "fail" }')")
	done
	MED[$n,pairs]=$( ((${#pairs[@]})) && median "${pairs[@]}" || echo fail)
	((${#pairs[@]})) && say "N=$n gpu/curl pairs: ${pairs[*]} -> ${MED[$n,pairs]}"
	for m in $MODES; do
		read -ra vals <<<"${VALS[$n,$m]}"
		MED[$n,$m]=$(median "${vals[@]}")
		say "N=$n $m: ${vals[*]} -> ${MED[$n,$m]} GB/s"
		json+="$sep{\"conns\":$n,\"mode\":\"$m\",\"gbps\":[$(printf '%s\n' "${vals[@]}" | sed 's/^fail$/null/' | paste -sd,)],\"median\":$(echo "${MED[$n,$m]}" | sed 's/^fail$/null/')}"
		sep=,
	done
done
json+="]}"
printf '%s\n' "$json" >"$res.json"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }
say ""
say "| N conns | (a) pageable GB/s | (b) pinned GB/s | (c) objfs_gpu_read GB/s | (d) curl GB/s | c/d | c/d pairs | c/a |"
say "|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $CONNS; do
	a=${MED[$n,pageable]:--} b=${MED[$n,pinned]:--} c=${MED[$n,gpu]:--} d=${MED[$n,curl]:--}
	say "| $n | $a | $b | $c | $d | $(ratio "$c" "$d") | ${MED[$n,pairs]:--} | $(ratio "$c" "$a") |"
done
say ""
say "threads and cores during the gpu runs:"
grep '^#' "$res.txt" | grep -v '^# bench_gpu\|^# objfs:\|^# object' || true
nginx_stop
exit 0
