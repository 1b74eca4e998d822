#!/bin/bash
# http_index_bench.sh: `ls -l` of a large nginx JSON autoindex through objfs
# against fetching that index with curl, the floor for any client.
#
# nginx (one worker per core, access log off) serves a directory of
# BENCH_ENTRIES empty files at /data/ with `autoindex_format json`. Each rep
# runs, in this order so neither always goes first on a warm machine:
#
#   curl     `curl -s -o /dev/null` of the index: the floor for any client
#            that reads the listing (odd reps run it before objfs, even reps
#            after)
#   objfs    a fresh mount of the same URL, `ls -l | wc -l`: seconds, and
#            the daemon's CPU seconds (user + system) for it
#   warm     `ls -l` once more on the same mount (its listing and the
#            kernel's attributes still fresh: nothing fetched): what ls
#            costs on the mount itself, after the fetch; fetch + warm is
#            the floor of the cold `ls -l`
#   local    `ls -l` of the same files on the local disk: what ls itself
#            costs for this many entries (statx, getxattr, sort, format)
#
# and prints the pair's ratio; the last line is the median of the ratios.
#
#   contrib/bench/http_index_bench.sh            (root: FUSE)
#
# Environment: OBJFS, BENCH_ENTRIES (100000), BENCH_REPS (5), BENCH_OPTS
# (extra -o options for objfs), OUT (./bench-out).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"
require_objfs
N=${BENCH_ENTRIES:-100000}
REPS=${BENCH_REPS:-5}
OUT=${OUT:-$PWD/bench-out}
bench_results "http_index"
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

data=$TEST_TMP/idx
python3 - "$data" "$N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(n):
    open(os.path.join(d, "file%07d.dat" % i), "w").close()
PY
bench_nginx "$data" || exit 1
MNT=$TEST_TMP/mnt
mkdir -p "$MNT"
bytes=$(curl -s -o /dev/null -w '%{size_download}' "$URL")
say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; objfs=$OBJFS $(git -C "$here" rev-parse --short HEAD 2>/dev/null)"
say "# $N entries, index $bytes bytes at $URL; reps $REPS; objfs options: ${BENCH_OPTS:-none}"

run_curl() { # T_CURL, and T_TTFB: how much of it nginx spent building the index
	local t0
	t0=$(now)
	T_TTFB=$(curl -s -o /dev/null -w '%{time_starttransfer}' "$URL")
	T_CURL=$(dt "$t0" "$(now)")
}
run_objfs() {
	local t0 c0 c1 opts=ro
	[ -n "${BENCH_OPTS:-}" ] && opts="$opts,$BENCH_OPTS"
	mount_objfs "$URL" "$MNT" "$opts" >/dev/null || { T_LS=fail; return; }
	c0=$(cpu_ticks "$OBJFS_PID")
	t0=$(now)
	N_LS=$(ls -l "$MNT" | grep -c '^-')
	T_LS=$(dt "$t0" "$(now)")
	c1=$(cpu_ticks "$OBJFS_PID")
	CPU_LS=$(awk -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
	t0=$(now)
	ls -l "$MNT" | grep -c '^-' >/dev/null
	T_WARM=$(dt "$t0" "$(now)")
	unmount_objfs "$MNT" >/dev/null
}

run_local() {
	local t0
	t0=$(now)
	ls -l "$data" | grep -c '^-' >/dev/null
	T_LOCAL=$(dt "$t0" "$(now)")
}

run_curl # warm nginx's cache of the directory
for ((rep = 1; rep <= REPS; rep++)); do
	if ((rep % 2)); then run_curl; run_objfs; else run_objfs; run_curl; fi
	run_local
	[ "$T_LS" = fail ] && { say "rep $rep: mount failed"; continue; }
	ratio=$(awk -v a="$T_LS" -v b="$T_CURL" 'BEGIN { printf "%.2f", a / b }')
	say "rep $rep: curl ${T_CURL}s (first byte ${T_TTFB}s) | objfs ls -l $N_LS entries ${T_LS}s (daemon CPU ${CPU_LS}s) | ${ratio}x" \
		"| warm ls -l ${T_WARM}s (cold / (curl + warm) $(awk -v a="$T_LS" -v b="$T_CURL" -v c="$T_WARM" 'BEGIN { printf "%.2f", a / (b + c) }')x)" \
		"| local ls -l ${T_LOCAL}s | load $(cut -d' ' -f1 /proc/loadavg)"
	echo "$rep $T_CURL $T_LS $CPU_LS $N_LS $ratio $T_LOCAL $T_WARM" >>"$res.runs"
done
median() { awk -v c="$1" '{ print $c }' "$res.runs" | sort -n | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : "none" }'; }
say "median ratio: $(median 6)x (curl median $(median 2)s, objfs median $(median 3)s," \
	"daemon CPU median $(median 4)s, warm ls -l median $(median 8)s, local ls -l median $(median 7)s)"
say "# runs: $res.runs (rep curl_s ls_s daemon_cpu_s entries ratio local_ls_s warm_ls_s)"
