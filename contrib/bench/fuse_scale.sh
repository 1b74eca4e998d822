#!/bin/bash
# fuse_scale.sh: the FUSE read path at GPU-host scale, in one
# script on the same data, runs alternating objfs and its peers so that
# every objfs figure has a ceiling taken beside it. One device call:
#
#   contrib/gpu/run_device.sh exec contrib/bench/fuse_scale.sh
#
# Shapes:
#   streams  N = 1, 4, 16, 64 readers, each `dd bs=1M` of its own object
#            (distinct names; SCALE_SIZE bytes each) through a fresh mount,
#            against N parallel `curl -o /dev/null` of the same objects;
#            rclone mount (--read-only, HTTP backend) at 16 readers when an
#            rclone binary is found ($RCLONE, or on the PATH).
#   small    16 workers each `cat` their share of SCALE_FILES files of
#            100 KiB (the ImageNet shape) through a fresh mount, against 16
#            curl processes each fetching its share over one keep-alive
#            connection; rclone once.
# With SCALE_NULLFS=/path/to/nullfs (contrib/bench/nullfs.c), each curl
# run is followed by the same readers through nullfs, a FUSE file system
# with nothing behind it and objfs's kernel settings: the floor of FUSE
# through the page cache on the machine, before any byte is fetched.
# Reported: median GB/s (files/s) of each, the median of per-pair ratios
# (each objfs run against the curl run right after it), objfs's bytes
# fetched / bytes read (its `bytes` counter), CPU seconds per GB read
# (utime + stime of the daemon), and its peak RSS (VmHWM) per run.
#
# Environment: OBJFS, NGINX, OUT (default ./device-out), SCALE_READERS
# ("1 4 16 64"), SCALE_SIZE (bytes per object, default 256 MiB), SCALE_REPS
# (3), SCALE_FILES (20000), SCALE_OPTS (mount options; default: none, the
# defaults are what is measured), RCLONE, SCALE_NULLFS, SCALE_PROFILE (1: CPU seconds by
# thread name and the cache counters of each objfs run, into the results).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
READERS=${SCALE_READERS:-1 4 16 64}
SIZE=${SCALE_SIZE:-268435456}
REPS=${SCALE_REPS:-3}
NFILES=${SCALE_FILES:-20000}
RCLONE=${RCLONE:-$(command -v rclone || true)}
bench_results "fuse_scale"

max=0
for n in $READERS; do [ "$n" -gt "$max" ] && max=$n; done
DATA=$TEST_TMP/www
bench_objects "$DATA" "$max" "$SIZE" 1
mkdir -p "$DATA/small"
python3 - "$DATA/small" "$NFILES" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
blob = os.urandom(100 << 10)
for i in range(n):
    with open(os.path.join(d, "f%05d.bin" % i), "wb") as f:
        f.write(blob[i % 4096:] + blob[:i % 4096])  # 100 KiB each, not all alike
EOF
cat "$DATA"/small/* >/dev/null
bench_nginx "$DATA" || exit 99
say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; objfs=$OBJFS; rclone=${RCLONE:-none}"
say "# objects: $max x $SIZE bytes; readers: $READERS; small: $NFILES x 100 KiB, 16 workers; reps: $REPS; opts: ${SCALE_OPTS:-(defaults)}"

MNT=$TEST_TMP/mnt
mkdir -p "$MNT"

# stat_of KEY: a counter of the mount's .objfs-stats
stat_of() { awk -v k="$1" '$1 == k { print $2 }' "$MNT/.objfs-stats"; }
cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hwm_of() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }

# readers N WHERE: N dd readers of distinct objects under WHERE; 0 if all ok
readers() {
	local n=$1 where=$2 i pids=() bad=0
	for ((i = 0; i < n; i++)); do
		dd if="$where/obj$i.bin" of=/dev/null bs=1M status=none &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	return "$bad"
}

# small_workers WHERE: 16 workers cat their share of the small files
small_workers() {
	local where=$1 w pids=() bad=0
	for ((w = 0; w < 16; w++)); do
		# the same name list as curl's (no directory walk in the timing)
		(cd "$where/small" && awk -v w="$w" 'NR % 16 == w' "$TEST_TMP/small.list" |
			xargs cat >/dev/null) &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	return "$bad"
}

# curl_small: 16 curl processes, each its share over one connection
curl_small() {
	local w pids=() bad=0
	for ((w = 0; w < 16; w++)); do
		awk -v w="$w" -v u="${URL}small/" 'NR % 16 == w { print "url = \"" u $0 "\"\noutput = \"/dev/null\"" }' \
			"$TEST_TMP/small.list" >"$TEST_TMP/curl.$w.cfg"
		curl -sf --config "$TEST_TMP/curl.$w.cfg" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	return "$bad"
}
ls "$DATA/small" >"$TEST_TMP/small.list"

# rclone_mount: rclone's FUSE mount of the HTTP source at $MNT (rclone
# 1.60 runs "fusermount"; where only fuse3 is installed a shim names it)
if [ -n "$RCLONE" ] && ! command -v fusermount >/dev/null 2>&1; then
	mkdir -p "$TEST_TMP/shim"
	ln -sf "$(command -v fusermount3)" "$TEST_TMP/shim/fusermount"
	export PATH=$TEST_TMP/shim:$PATH
fi
rclone_mount() {
	# rclone's HTTP backend reads HTML indexes: the same files under /html/
	"$RCLONE" mount --read-only --http-url "${URL%/data/}/html/" :http: "$MNT" \
		>"$TEST_TMP/rclone.log" 2>&1 &
	RPID=$!
	for ((i = 0; i < 100; i++)); do is_mounted "$MNT" && return 0; sleep 0.1; done
	return 1
}
rclone_umount() {
	fusermount3 -u "$MNT" 2>/dev/null
	wait "$RPID" 2>/dev/null
}

# run SHAPE N TOOL: one run, appended to $res.runs as
# "SHAPE N TOOL VALUE [fetched/read cpu_s_per_GB hwm_MiB]" (VALUE "fail")
run() {
	local shape=$1 n=$2 tool=$3 t0=0 t1=1 ok=0 bytes pid c0 c1 f0 f1 v extra=""
	if [ "$shape" = small ]; then bytes=$((NFILES * 102400)); else bytes=$((n * SIZE)); fi
	case $tool in
	objfs)
		mount_objfs "$URL" "$MNT" "${SCALE_OPTS:-}" || { echo "$shape $n $tool fail" >>"$res.runs"; return; }
		pid=$OBJFS_PID
		c0=$(cpu_of "$pid")
		f0=$(stat_of bytes)
		[ -z "${SCALE_PROFILE:-}" ] || threads_cpu "$pid" >"$TEST_TMP/th0"
		t0=$(now)
		if [ "$shape" = small ]; then small_workers "$MNT" && ok=1; else readers "$n" "$MNT" && ok=1; fi
		t1=$(now)
		c1=$(cpu_of "$pid")
		if [ -n "${SCALE_PROFILE:-}" ]; then
			threads_cpu "$pid" >"$TEST_TMP/th1"
			echo "# threads $shape $n: $(threads_delta "$TEST_TMP/th0" "$TEST_TMP/th1")" | tee -a "$res.txt"
			grep -E '^(cache_|prefetch|requests |bytes )' "$MNT/.objfs-stats" | tr '\n' ' ' | sed 's/^/# stats: /' | tee -a "$res.txt"
			echo | tee -a "$res.txt"
		fi
		f1=$(stat_of bytes)
		extra=$(awk -v f=$((f1 - f0)) -v b="$bytes" -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" \
			-v h="$(hwm_of "$pid")" 'BEGIN { printf "%.3f %.2f %d", f / b, c / hz / (b / 1e9), h / 1024 }')
		unmount_objfs "$MNT" >/dev/null
		;;
	curl)
		t0=$(now)
		if [ "$shape" = small ]; then
			curl_small && ok=1
		else
			local i pids=() bad=0
			for ((i = 0; i < n; i++)); do
				curl -sf -o /dev/null "${URL}obj$i.bin" &
				pids+=($!)
			done
			for p in "${pids[@]}"; do wait "$p" || bad=1; done
			[ "$bad" = 0 ] && ok=1
		fi
		t1=$(now)
		;;
	nullfs)
		local w=$((8 * $(nproc))) npid probe=obj0.bin i
		[ "$w" -ge 64 ] || w=64
		[ "$w" -le 512 ] || w=512
		[ "$shape" != small ] || probe=small/f00000.bin
		"$SCALE_NULLFS" "$MNT" "$max" "$SIZE" "$w" "$NFILES" &
		npid=$!
		for ((i = 0; i < 50; i++)); do [ -e "$MNT/$probe" ] && break; sleep 0.1; done
		t0=$(now)
		if [ "$shape" = small ]; then small_workers "$MNT" && ok=1; else readers "$n" "$MNT" && ok=1; fi
		t1=$(now)
		fusermount3 -u "$MNT" || umount -l "$MNT"
		wait "$npid"
		;;
	rclone)
		if ! rclone_mount; then
			echo "$shape $n $tool fail" >>"$res.runs"
			sed 's/^/# rclone: /' "$TEST_TMP/rclone.log" | tail -n 5 | tee -a "$res.txt"
			rclone_umount
			return
		fi
		t0=$(now)
		if [ "$shape" = small ]; then small_workers "$MNT" && ok=1; else readers "$n" "$MNT" && ok=1; fi
		t1=$(now)
		rclone_umount
		;;
	esac
	if [ "$shape" = small ]; then
		v=$(awk -v k="$NFILES" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", k / (b - a) }')
	else
		v=$(gbps "$bytes" "$t0" "$t1")
	fi
	bench_record "$ok" "$res.runs" "$shape $n $tool" "$v" "$extra"
}

for ((r = 0; r < REPS; r++)); do
	for n in $READERS; do
		run streams "$n" objfs
		run streams "$n" curl
		[ -z "${SCALE_NULLFS:-}" ] || run streams "$n" nullfs
	done
	run small 16 objfs
	run small 16 curl
	[ -z "${SCALE_NULLFS:-}" ] || run small 16 nullfs
done
if [ -n "$RCLONE" ]; then
	run streams 16 rclone
	run small 16 rclone
fi

python3 - "$res.runs" <<'EOF' | tee -a "$res.txt"
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
val = lambda r: float(r[3]) if r[3] != "fail" else None
med = lambda xs: statistics.median(xs) if xs else None
fmt = lambda x, f="%.2f": f % x if x is not None else "-"
print("| shape | N | objfs | curl | objfs/curl (pairs) | rclone | objfs/rclone | fetched/read | CPU s/GB | peak RSS MiB | nullfs | nullfs/curl (pairs) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in dict.fromkeys((r[0], r[1]) for r in runs):
    seq = [r for r in runs if (r[0], r[1]) == key]
    pairs = []
    for i, r in enumerate(seq):
        if r[2] == "objfs" and i + 1 < len(seq) and seq[i + 1][2] == "curl":
            a, c = val(r), val(seq[i + 1])
            if a is not None and c:
                pairs.append(a / c)
    o = med([val(r) for r in seq if r[2] == "objfs" and val(r) is not None])
    c = med([val(r) for r in seq if r[2] == "curl" and val(r) is not None])
    rc = med([val(r) for r in seq if r[2] == "rclone" and val(r) is not None])
    nf = med([val(r) for r in seq if r[2] == "nullfs" and val(r) is not None])
    npairs = [val(r) / val(seq[i - 1]) for i, r in enumerate(seq)
              if r[2] == "nullfs" and i > 0 and seq[i - 1][2] == "curl" and val(r) is not None
              and val(seq[i - 1])]
    ext = [r[4:7] for r in seq if r[2] == "objfs" and len(r) >= 7]
    fr = med([float(e[0]) for e in ext]); cpu = med([float(e[1]) for e in ext])
    hwm = max([int(e[2]) for e in ext]) if ext else None
    unit = "files/s" if key[0] == "small" else "GB/s"
    f = "%.0f" if key[0] == "small" else "%.2f"
    fails = sum(1 for r in seq if r[3] == "fail")
    print("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |%s" % (
        key[0], unit, key[1], fmt(o, f), fmt(c, f), fmt(med(pairs)), fmt(rc, f),
        fmt(o / rc if o and rc else None), fmt(fr, "%.3f"), fmt(cpu), fmt(hwm, "%d"),
        fmt(nf, f), fmt(med(npairs)), " %d failed" % fails if fails else ""))
EOF
nginx_stop
