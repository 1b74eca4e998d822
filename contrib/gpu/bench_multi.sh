#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# bench_multi.sh: several client processes filling from one mount at once:
# one process per GPU on a machine of several, or N processes
# on one GPU (or in host memory where there is none). One device call:
#
#   contrib/gpu/run_device.sh exec contrib/gpu/bench_multi.sh
#
# Each process opens its own object (distinct names: distinct cache
# entries for objfs; hard links of one file for nginx, one copy in the page
# cache), says "ready" once its session and ring are up, and waits for a
# common start signal; then one objfs_gpu_read of the whole object into
# device memory (tests/gpu/gpu_fill fill), or host memory without a GPU
# (tests/side_client fill). Per repetition, alternating:
#
#   objfs  N processes at once through a fresh mount with
#          max_connections = N x MULTI_CONNS
#   curl   N x MULTI_CONNS curl processes, each one range of 1/MULTI_CONNS
#          of one of the same N objects: the ceiling of that connection count
#   one    one process alone through a fresh mount of the same options
#
# Reported per run: the aggregate (all bytes / first start to last end),
# each process's GB/s (its bytes / its own time), the fairness spread (the
# largest |process x N / aggregate - 1|; fair within 20% means <= 0.20),
# and the ring memory per process (side_ring_bytes / N while all are up).
# Summary: medians, and the medians of per-pair ratios objfs/curl and
# objfs/one.
#
# Environment: OBJFS, GPU_FILL or SIDE_CLIENT (the client; GPU_FILL is used
# when a GPU is usable), OUT (./device-out), MULTI_PROCS (N: the GPU count
# when several, else 8), MULTI_GPUS (how many GPUs to use, from device 0;
# default all), MULTI_SIZE (bytes per object, default 4 GiB),
# MULTI_CONNS (16), MULTI_REPS (3), MULTI_OPTS (more mount options),
# MULTI_LABEL (names the results file).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$HERE/../../tests/integration/lib.sh"
# shellcheck source=../bench/bench_lib.sh
. "$HERE/../bench/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
SIZE=${MULTI_SIZE:-4294967296}
CONNS=${MULTI_CONNS:-16}
REPS=${MULTI_REPS:-3}
LABEL=${MULTI_LABEL:-}
ngpu=0
if [ -n "${GPU_FILL:-}" ] && "$GPU_FILL" probe >/dev/null 2>&1; then
	ngpu=${MULTI_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
	[ "$ngpu" -ge 1 ] || ngpu=1
fi
if [ "$ngpu" -ge 2 ]; then N=${MULTI_PROCS:-$ngpu}; else N=${MULTI_PROCS:-8}; fi
if [ "$ngpu" -eq 0 ]; then
	CLIENT=${SIDE_CLIENT:?set GPU_FILL (with a GPU) or SIDE_CLIENT}
fi
bench_results "bench_multi${LABEL:+-$LABEL}"

DATA=$TEST_TMP/www
bench_objects "$DATA" "$N" "$SIZE" 1
bench_nginx "$DATA" || exit 99
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores, $nodes NUMA node(s), $ngpu GPU(s); objfs=$OBJFS"
if [ "$ngpu" -ge 1 ]; then
	nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>/dev/null |
		while read -r l; do
			b=$(echo "$l" | awk -F', ' '{ print tolower($3) }') # 00000000:3b:00.0
			say "#   GPU $l, NUMA node $(cat /sys/bus/pci/devices/*:"${b: -7}"/numa_node 2>/dev/null)"
		done
fi
say "# $N processes x $SIZE bytes, $CONNS connections each; reps $REPS; opts: ${MULTI_OPTS:-(defaults)}"

MNT=$TEST_TMP/mnt
mkdir -p "$MNT"
OPTS="max_connections=$((N * CONNS)),log_level=info${MULTI_OPTS:+,$MULTI_OPTS}"

# run_clients K: K processes (process i on GPU i % ngpu) through the fresh
# mount at $MNT; appends "objfs|one agg spread ring_per_proc rates..." data
# to $res.runs and prints the line. 0 when every process read every byte.
run_clients() {
	local k=$1 what=$2 i go=$TEST_TMP/go pids=() ok=1 ring
	rm -f "$go"
	for ((i = 0; i < k; i++)); do
		if [ "$ngpu" -ge 1 ]; then
			"$GPU_FILL" fill $((i % ngpu)) "$MNT/obj$i.bin" "$go" >"$TEST_TMP/fill.$i" 2>&1 &
		else
			"$CLIENT" fill "$MNT/obj$i.bin" "$go" >"$TEST_TMP/fill.$i" 2>&1 &
		fi
		pids+=($!)
	done
	for ((t = 0; t < 600; t++)); do
		[ "$(cat "$TEST_TMP"/fill.* 2>/dev/null | grep -c '^ready')" -ge "$k" ] && break
		sleep 0.1
	done
	ring=$(awk '$1 == "side_ring_bytes" { print $2 }' "$MNT/.objfs-stats")
	touch "$go"
	for i in "${pids[@]}"; do wait "$i" || ok=0; done
	cat "$TEST_TMP"/fill.* | awk -v what="$what" -v k="$k" -v ring="${ring:-0}" '
		$1 == "fill" && $5 == "ok" {
			n++; bytes += $2; r[n] = $2 / ($4 - $3) / 1e9
			if (t0 == "" || $3 < t0) t0 = $3
			if ($4 > t1) t1 = $4
		}
		END {
			if (n != k) { print what " fail"; exit 1 }
			agg = bytes / (t1 - t0) / 1e9; spread = 0
			for (i = 1; i <= n; i++) {
				d = r[i] * n / agg - 1; if (d < 0) d = -d
				if (d > spread) spread = d
			}
			printf "%s %.3f %.3f %d", what, agg, spread, ring / k
			for (i = 1; i <= n; i++) printf " %.3f", r[i]
			printf "\n"
		}' | tee -a "$res.runs" || ok=0
	rm -f "$TEST_TMP"/fill.*
	[ "$ok" = 1 ]
}

# run_curl: N x CONNS curl range streams over the N objects
run_curl() {
	local i c per=$((SIZE / CONNS)) t0 t1 pids=() ok=1 lo hi
	t0=$(now)
	for ((i = 0; i < N; i++)); do
		for ((c = 0; c < CONNS; c++)); do
			lo=$((c * per))
			hi=$((c == CONNS - 1 ? SIZE - 1 : lo + per - 1))
			curl -sf -o /dev/null -r "$lo-$hi" "${URL}obj$i.bin" &
			pids+=($!)
		done
	done
	for i in "${pids[@]}"; do wait "$i" || ok=0; done
	t1=$(now)
	[ "$ok" = 1 ] && echo "curl $(gbps $((N * SIZE)) "$t0" "$t1")" | tee -a "$res.runs"
}

with_mount() {
	mount_objfs "$URL" "$MNT" "$OPTS" >/dev/null || return 1
	"$@"
	local rc=$? log=${_MOUNT_LOG[$MNT]:-}
	unmount_objfs "$MNT" >/dev/null
	# where the daemon saw each ring placed (side.c logs it on a machine of several nodes)
	[ -z "$log" ] || grep -o 'side: session .*NUMA node.*' "$log" | sed 's/^/# /' >>"$res.txt"
	return $rc
}

for ((rep = 1; rep <= REPS; rep++)); do
	with_mount run_clients "$N" objfs || say "objfs run $rep failed"
	run_curl || say "curl run $rep failed"
	with_mount run_clients 1 one || say "one-process run $rep failed"
done
grep -h 'ring of' "$TEST_TMP"/*.log 2>/dev/null | sort -u | head -"$N" | sed 's/^/# daemon: /' | tee -a "$res.txt"

awk -v n="$N" '
	function med(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	$1 == "objfs" { o[++no] = $2; s[no] = $3; ring = $4 }
	$1 == "curl" { c[++nc] = $2 }
	$1 == "one" { u[++nu] = $2 }
	END {
		if (!no || !nc || !nu) { print "incomplete: " no " objfs, " nc " curl, " nu " one"; exit 1 }
		k = no < nc ? no : nc; for (i = 1; i <= k; i++) rc[i] = o[i] / c[i]
		m = no < nu ? no : nu; for (i = 1; i <= m; i++) ru[i] = o[i] / u[i]
		for (i = 1; i <= no; i++) ss[i] = s[i]
		printf "objfs %d processes: %.2f GB/s median; curl %d streams: %.2f; one process alone: %.2f\n", n, med(o, no), n * '"$CONNS"', med(c, nc), med(u, nu)
		printf "median per-pair ratio objfs/curl %.2f, objfs/one %.2f; fairness spread median %.2f (max %.2f); ring %d MiB per process\n", med(rc, k), med(ru, m), med(ss, no), ss[no], ring / 1048576
	}' "$res.runs" | tee -a "$res.txt"
