#!/bin/bash
# fuse_ab.sh: FUSE read throughput of two objfs builds against curl, in one
# script on the same data, runs alternating A, curl, B, curl, ... so that
# every objfs figure has a ceiling taken beside it. For "is this change
# slower?" checks on a GPU host (one run_device.sh call, ~4 minutes with
# the defaults) or anywhere with nginx.
#
#   OBJFS_A=old/objfs OBJFS_B=new/objfs contrib/bench/fuse_ab.sh
#
# Each run: a fresh mount (cold daemon cache and kernel page cache), N
# readers `dd bs=1M` of N distinct objects at once, GB/s = bytes / wall time
# from the first start to the last end; curl: N parallel `curl -o /dev/null`
# of the same objects. nginx serves from the page cache (warmed first).
# Reported per N: the median GB/s of A, B and curl, and the medians of the
# per-pair ratios A/curl and B/curl (each objfs run against the curl run
# right after it).
#
# With AB_RANDOM=COUNT each reader does COUNT preads of AB_BS bytes (default
# 256 KiB) at random offsets of its object (POSIX_FADV_RANDOM), the figure
# is GB/s of those reads, and curl is left out (its runs are skipped).
#
# Environment: OBJFS_A, OBJFS_B (required), NGINX, OUT (results; default
# ./device-out), AB_READERS ("1 4 16"), AB_SIZE (bytes per object, default
# 512 MiB), AB_REPS (3), AB_OPTS (mount options for both), AB_DATA (keep the
# objects here between calls).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

: "${OBJFS_A:?OBJFS_A: the first objfs binary}" "${OBJFS_B:?OBJFS_B: the second objfs binary}"
OUT=${OUT:-$PWD/device-out}
READERS=${AB_READERS:-1 4 16}
SIZE=${AB_SIZE:-536870912}
REPS=${AB_REPS:-3}
NCPU=$(nproc)
bench_results "fuse_ab${AB_RANDOM:+_random}"

max=0
for n in $READERS; do [ "$n" -gt "$max" ] && max=$n; done
DATA=${AB_DATA:-$TEST_TMP/www}
bench_objects "$DATA" "$max" "$SIZE"
bench_nginx "$DATA" || exit 99
say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; A=$OBJFS_A B=$OBJFS_B"
say "# objects: $max x $SIZE bytes; readers: $READERS; reps: $REPS; opts: ${AB_OPTS:-(defaults)}"


# one_run N MODE: appends "N MODE GB/s" to $res.runs ("fail" on any error).
# Not inside $(...): the mounts it starts belong to this shell (lib.sh).
one_run() {
	local n=$1 mode=$2 mnt=$TEST_TMP/mnt t0 t1 i pids=() bad=0
	if [ "$mode" = curl ] && [ -n "${AB_RANDOM:-}" ]; then
		return
	elif [ "$mode" = curl ]; then
		t0=$(now)
		for ((i = 0; i < n; i++)); do
			curl -sf -o /dev/null "${URL}obj$i.bin" &
			pids+=($!)
		done
	else
		if [ "$mode" = A ]; then OBJFS=$OBJFS_A; else OBJFS=$OBJFS_B; fi
		mount_objfs "$URL" "$mnt" "${AB_OPTS:-}" || { echo "$n $mode fail" >>"$res.runs"; return; }
		t0=$(now)
		for ((i = 0; i < n; i++)); do
			if [ -n "${AB_RANDOM:-}" ]; then
				python3 -c '
import os, random, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
size, bs, rng = os.fstat(fd).st_size, int(sys.argv[3]), random.Random(int(sys.argv[4]))
for _ in range(int(sys.argv[2])):
    if len(os.pread(fd, bs, rng.randrange(0, size - bs))) != bs:
        sys.exit(1)
' "$mnt/obj$i.bin" "$AB_RANDOM" "${AB_BS:-262144}" "$i" &
			else
				dd if="$mnt/obj$i.bin" of=/dev/null bs=1M status=none &
			fi
			pids+=($!)
		done
	fi
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	t1=$(now)
	[ "$mode" = curl ] || unmount_objfs "$mnt" >/dev/null
	local bytes=$((n * SIZE))
	[ -z "${AB_RANDOM:-}" ] || bytes=$((n * AB_RANDOM * ${AB_BS:-262144}))
	bench_record "$((1 - bad))" "$res.runs" "$n $mode" "$(gbps "$bytes" "$t0" "$t1")"
}

for ((r = 0; r < REPS; r++)); do
	for n in $READERS; do
		one_run "$n" A
		one_run "$n" curl
		one_run "$n" B
		one_run "$n" curl
	done
done

python3 - "$res.runs" <<'EOF' | tee -a "$res.txt"
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
print("| readers | A GB/s | B GB/s | curl GB/s | A/curl (pairs) | B/curl (pairs) | B/A |")
print("|---|---|---|---|---|---|---|")
for n in dict.fromkeys(r[0] for r in runs):
    seq = [r for r in runs if r[0] == n]
    val = lambda r: float(r[2]) if r[2] != "fail" else None
    pairs = {"A": [], "B": []}
    for i, r in enumerate(seq):
        if r[1] in pairs and i + 1 < len(seq) and seq[i + 1][1] == "curl":
            a, c = val(r), val(seq[i + 1])
            if a is not None and c:
                pairs[r[1]].append(a / c)
    med = lambda m: statistics.median([val(r) for r in seq if r[1] == m and val(r) is not None] or [0])
    a, b, c = med("A"), med("B"), med("curl")
    pm = lambda m: "%.2f" % statistics.median(pairs[m]) if pairs[m] else "-"
    fails = sum(1 for r in seq if r[2] == "fail")
    print("| %s | %.2f | %.2f | %.2f | %s | %s | %s |%s" % (n, a, b, c, pm("A"), pm("B"),
          "%.2f" % (b / a) if a else "-", " %d failed" % fails if fails else ""))
EOF
nginx_stop
