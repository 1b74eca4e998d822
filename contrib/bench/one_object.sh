#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# one_object.sh: N readers through the mount, each its own range of ONE
# object, against N readers of N objects (the same bytes in all), and N
# curl processes with the same ranges as the ceiling, alternating. What it
# is for: https_bench.sh found 16 FUSE readers of ranges of one object at
# about half of 16 readers of 16 objects (5.7 against 11.9 GB/s over HTTP),
# and a data loader's workers reading one large file (an indexed .bin, a
# tar of samples) is that shape.
#
#   contrib/gpu/run_device.sh exec contrib/bench/one_object.sh
#   (anywhere else: OBJFS=build/src/objfs contrib/bench/one_object.sh)
#
# Environment: OO_READERS (default 16), OO_SIZE (bytes a reader, default
# 512 MiB), OO_REPS (default 3), OO_OPTS (more mount options), OO_PERF (a
# perf binary: one more run of each objfs shape recorded system wide, with
# the readers' and the daemon's symbols in $OUT/one_object.perf-*.txt).
# Each run: a fresh mount, readers `dd bs=1M` of their range. Reported:
# GB/s and the daemon's CPU seconds per GB, medians; ratios per repetition.

set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
N=${OO_READERS:-16}
PER=${OO_SIZE:-536870912}
REPS=${OO_REPS:-3}
OPTS=${OO_OPTS:-}
bench_results "one_object"

DATA=$TEST_TMP/www
mkdir -p "$DATA"
bench_big_object "$DATA/big.bin" $((N * PER))
for ((i = 0; i < N; i++)); do ln -f "$DATA/big.bin" "$DATA/name$i.bin"; done
bench_nginx "$DATA" || exit 99
MNT=$TEST_TMP/mnt
at_cleanup "unmount_objfs $MNT >/dev/null 2>&1"
MB=$((PER >> 20))

# readers SHAPE DIR: N dd processes; "one": ranges of big.bin, "many":
# [i*PER, +PER) of name$i.bin (the same bytes, another inode each)
readers() {
	local pids=() i
	for ((i = 0; i < N; i++)); do
		if [ "$1" = one ]; then
			dd if="$2/big.bin" of=/dev/null bs=1M skip=$((i * MB)) count=$MB status=none &
		else
			dd if="$2/name$i.bin" of=/dev/null bs=1M skip=$((i * MB)) count=$MB status=none &
		fi
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || return 1; done
}

curl_ranges() {
	local pids=() i
	for ((i = 0; i < N; i++)); do
		curl -s -o /dev/null -r $((i * PER))-$(((i + 1) * PER - 1)) "${URL}big.bin" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || return 1; done
}

# run_objfs SHAPE: one fresh mount; prints "GB/s cpu_s_per_GB"
run_objfs() {
	local t0 t1 c0 c1 ok=1 hz
	hz=$(getconf CLK_TCK)
	mount_objfs "$URL" "$MNT" "ro${OPTS:+,$OPTS}" || return 1
	ls -l "$MNT" >/dev/null
	c0=$(awk '{ print $14 + $15 }' "/proc/$OBJFS_PID/stat")
	t0=$(now)
	readers "$1" "$MNT" || ok=0
	t1=$(now)
	c1=$(awk '{ print $14 + $15 }' "/proc/$OBJFS_PID/stat")
	cp "$MNT/.objfs-stats" "$TEST_TMP/stats" 2>/dev/null
	unmount_objfs "$MNT" >/dev/null 2>&1
	[ "$ok" = 1 ] || return 1
	awk -v b=$((N * PER)) -v a="$t0" -v c="$t1" -v c0="$c0" -v c1="$c1" -v hz="$hz" \
		'BEGIN { printf "%.3f %.2f\n", b / (c - a) / 1e9, (c1 - c0) / hz / (b / 1e9) }'
}

say "# $(date -u +%FT%TZ) $(hostname) $(nproc) cores; objfs=$OBJFS"
say "# $N readers x $PER bytes; reps $REPS; options: ${OPTS:-defaults}"
for ((r = 1; r <= REPS; r++)); do
	for shape in many one curl; do
		if [ "$shape" = curl ]; then
			t0=$(now)
			curl_ranges && t1=$(now) && bench_record 1 "$res.runs" "curl" "$(gbps $((N * PER)) "$t0" "$t1")"
		else
			if v=$(run_objfs "$shape"); then
				bench_record 1 "$res.runs" "$shape" "$v"
			else
				bench_record 0 "$res.runs" "$shape" ""
			fi
		fi
	done
done
for shape in many one curl; do
	awk -v s="$shape" '$1 == s && $2 != "fail" { print $2 }' "$res.runs" | sort -g |
		awk -v s="$shape" '{ v[NR] = $1 } END { if (NR) m = v[int((NR + 1) / 2)]; printf "median %s: %s GB/s\n", s, m }' |
		tee -a "$res.txt"
done
awk '$1 == "curl" { c[++nc] = $2 } $1 == "one" { o[++no] = $2 } $1 == "many" { m[++nm] = $2 }
	END { for (i = 1; i <= nc && i <= no && i <= nm; i++)
		printf "rep %d: one/curl %.2f many/curl %.2f one/many %.2f\n", i, o[i] / c[i], m[i] / c[i], o[i] / m[i] }' \
	"$res.runs" | tee -a "$res.txt"

if [ -n "${OO_PERF:-}" ]; then
	for shape in many one; do
		mount_objfs "$URL" "$MNT" "ro${OPTS:+,$OPTS}" || continue
		ls -l "$MNT" >/dev/null
		pid=$OBJFS_PID
		"$OO_PERF" record -a -g -F 499 -o "$TEST_TMP/perf.$shape" -- \
			bash -c "$(declare -f readers); N=$N; MB=$MB; readers $shape $MNT" >/dev/null 2>&1
		unmount_objfs "$MNT" >/dev/null 2>&1
		perf_report() {
			"$OO_PERF" report -i "$TEST_TMP/perf.$shape" --no-children --stdio -g none "$@" \
				2>/dev/null | grep '%' | head -40
		}
		perf_report --sort comm >"$res.perf-$shape-comm.txt"
		perf_report --comms dd --sort sym >"$res.perf-$shape-dd.txt"
		perf_report --pid "$pid" --sort sym >"$res.perf-$shape-objfs.txt"
	done
fi
