#!/bin/bash
# bench_lib.sh: what the FUSE benchmarks share (sourced, after
# tests/integration/lib.sh): objects made once, nginx on the page cache,
# the result files, the clock and GB/s. The FUSE, HTTPS and GPU benchmark
# scripts of contrib/bench and contrib/gpu use it.

# bench_objects DIR COUNT SIZE [LINKED]: DIR/obj0.bin ... of SIZE random
# bytes each, kept when already there. LINKED=1: one random object and
# hard links to it (distinct names for the client, one inode and one copy
# in the page cache for nginx: 64 x 256 MiB costs 256 MiB of memory).
bench_objects() {
	local dir=$1 count=$2 size=$3 linked=${4:-0} i f ncpu
	ncpu=$(nproc)
	mkdir -p "$dir"
	for ((i = 0; i < count; i++)); do
		f=$dir/obj$i.bin
		[ "$(stat -c %s "$f" 2>/dev/null)" = "$size" ] && continue
		if [ "$linked" = 1 ] && [ "$i" -gt 0 ]; then
			ln -f "$dir/obj0.bin" "$f"
			continue
		fi
		python3 - "$f" "$size" <<'PY' &
import os, sys
with open(sys.argv[1], "wb") as f:
    left = int(sys.argv[2])
    while left:
        k = min(left, 16 << 20)
        f.write(os.urandom(k))
        left -= k
PY
		if [ "$linked" = 1 ] || [ $(((i + 1) % ncpu)) = 0 ]; then wait; fi
	done
	wait
	cat "$dir"/obj*.bin >/dev/null
}

# bench_big_object FILE SIZE: FILE of SIZE random bytes, kept when it has
# that size already, written by a process per core (urandom gives ~0.5 GB/s
# a core); its page cache warmed either way.
bench_big_object() {
	local obj=$1 size=$2 ncpu i per
	if [ "$(stat -c %s "$obj" 2>/dev/null)" != "$size" ]; then
		rm -f "$obj"
		ncpu=$(nproc)
		per=$(((size + ncpu - 1) / ncpu))
		for ((i = 0; i < ncpu; i++)); do
			python3 - "$obj" $((i * per)) "$per" "$size" <<'PY' &
import os, sys
path, off, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
n = max(0, min(n, size - off))
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
while n > 0:
    k = min(16 << 20, n)
    os.pwrite(fd, os.urandom(k), off)
    off += k
    n -= k
os.close(fd)
PY
		done
		wait
		truncate -s "$size" "$obj"
	fi
	cat "$obj" >/dev/null
}

# bench_nginx DIR: nginx with one worker per core serving DIR at $URL
bench_nginx() {
	NGINX_PREFIX=$TEST_TMP/nginx
	NGINX_PORT=$(free_port)
	export NGINX_PREFIX NGINX_PORT
	_nginx_write_conf "$NGINX_PREFIX" "$NGINX_PORT" "$1" || return 1
	sed -i "s/^worker_processes .*/worker_processes $(nproc);/; s|access_log .*;|access_log off;|" \
		"$NGINX_PREFIX/nginx.conf"
	_nginx_launch || { echo "nginx did not start" >&2; return 1; }
	URL=http://127.0.0.1:$NGINX_PORT/data/
}

# threads_cpu PID: "name ticks" per thread (FUSE workers are the unnamed "objfs")
threads_cpu() {
	local t
	for t in /proc/"$1"/task/*; do
		printf '%s %s\n' "$(cat "$t/comm" 2>/dev/null)" \
			"$(awk '{ print $14 + $15 }' "$t/stat" 2>/dev/null)"
	done
}
# threads_delta BEFORE AFTER: CPU seconds by thread name between two samples
threads_delta() {
	awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { b[$1] += $2; next } { a[$1] += $2; n[$1]++ }
		END { for (k in a) printf "%s=%.2fs/%d ", k, (a[k] - b[k]) / hz, n[k] }' "$1" "$2"
}

# bench_results NAME: the results go to $OUT/NAME.txt (the report) and
# $OUT/NAME.runs (a line a run), both emptied; $res is $OUT/NAME
bench_results() {
	mkdir -p "$OUT"
	res=$OUT/$1
	: >"$res.txt"
	: >"$res.runs"
}
# say LINE...: printed, and kept in the report
say() { printf '%s
' "$*" | tee -a "$res.txt"; }

now() { date +%s.%N; }
gbps() { awk -v b="$1" -v a="$2" -v c="$3" 'BEGIN { printf "%.3f", b / (c - a) / 1e9 }'; }

# bench_record OK FILE WHAT VALUE [EXTRA]: appends "WHAT VALUE [EXTRA]" to
# FILE when OK is 1, else "WHAT fail"; prints the line.
bench_record() {
	if [ "$1" = 1 ]; then
		echo "$3 $4${5:+ $5}" >>"$2"
	else
		echo "$3 fail" >>"$2"
	fi
	tail -n 1 "$2"
}
