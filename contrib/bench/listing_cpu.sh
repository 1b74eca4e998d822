#!/bin/bash
# listing_cpu.sh: the daemon's CPU for `ls -l` of a large flat S3 prefix,
# two or more objfs builds alternating on one tests/s3_synth.py server.
# Each run mounts a fresh objfs (as million_bench.sh does),
# reads /proc/PID/stat around `ls -l | grep -c '^-'` and prints the
# daemon's user and system seconds: on a shared machine the wall clock
# moves with other load, the daemon's own CPU far less. With
# PERF=1 each run is also recorded (`perf record -g`, frame pointers; set
# PERF_OPTS="--call-graph dwarf,16384 -F 2000" for libcurl's frames) into
# $OUT/perf.<build>.<rep>.data.
#
#   contrib/bench/listing_cpu.sh OBJFS_BEFORE OBJFS_AFTER      (root: FUSE)
#
# Environment: BENCH_KEYS (300000), BENCH_LATENCY_MS (0), BENCH_REPS (3),
# PERF, PERF_OPTS, OUT (./bench-out).
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 OBJFS [OBJFS...]" >&2; exit 2; }
OBJFS=$1
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
KEYS=${BENCH_KEYS:-300000}
LAT=${BENCH_LATENCY_MS:-0}
REPS=${BENCH_REPS:-3}
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
synth_start lc --keys "$KEYS" --latency-ms "$LAT"
# shellcheck disable=SC2154 # PORT_lc: set by synth_start
EP=http://127.0.0.1:$PORT_lc
MNT=$TEST_TMP/mnt
mkdir -p "$MNT"
hz=$(getconf CLK_TCK)
echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; $KEYS keys, ${LAT} ms a request; builds: $*"
for ((rep = 1; rep <= REPS; rep++)); do
	for b in "$@"; do
		# shellcheck disable=SC2034 # lib.sh's mount_objfs runs $OBJFS
		OBJFS=$b
		require_objfs
		mount_objfs s3://bkt "$MNT" "endpoint=$EP,no_sign,path_style,region=us-east-1" >/dev/null ||
			{ echo "$b: mount failed"; continue; }
		pid=$OBJFS_PID
		read -r u0 s0 < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
		if [ -n "${PERF:-}" ]; then
			# shellcheck disable=SC2086
			perf record -q ${PERF_OPTS:--g} -o "$OUT/perf.$(basename "$b").$rep.data" \
				-p "$pid" 2>/dev/null &
			perf_pid=$!
			sleep 0.3
		fi
		t0=$(date +%s.%N)
		# shellcheck disable=SC2010 # ls -l is what is measured
		n=$(ls -l "$MNT" | grep -c '^-')
		t1=$(date +%s.%N)
		read -r u1 s1 < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
		if [ -n "${PERF:-}" ]; then
			kill -INT "$perf_pid"
			wait "$perf_pid"
		fi
		unmount_objfs "$MNT" >/dev/null
		awk -v b="$b" -v r="$rep" -v n="$n" -v t0="$t0" -v t1="$t1" -v u="$((u1 - u0))" \
			-v s="$((s1 - s0))" -v hz="$hz" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
			'BEGIN { printf "%s rep %d: %d entries, ls -l %.2f s, daemon CPU %.2f s (user %.2f, system %.2f), load %s\n",
				 b, r, n, t1 - t0, (u + s) / hz, u / hz, s / hz, l }'
		sleep 0.5
	done
done
