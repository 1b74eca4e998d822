#!/bin/bash
# fuse_probe.sh: where the FUSE read path's time goes with many readers,
# in one device call. fuse_scale.sh says how fast; this says
# why: the same readers under several settings side by side, each objfs run
# followed by curl on the same objects, with
#   - the daemon's counters per run: how long readers waited for blocks in
#     flight (cache_wait_us), prefetches cut short by the cache cap
#     (prefetch_capped), time to first byte percentiles, CPU by thread name;
#   - optionally (PROBE_STACKS=1) the kernel stacks of the readers and of
#     the daemon's threads, sampled every 20 ms and counted by their top
#     frames: a reader in folio_wait_bit waits for a FUSE reply, a worker
#     in fuse_dev_do_read is idle, one in futex_wait waits on a lock or a
#     block.
#
#   contrib/gpu/run_device.sh exec contrib/bench/fuse_probe.sh
#
# PROBE_LOCAL=1 also runs the same readers on the server's own files after
# each pair (page cache, no network): what the readers alone cost, the
# floor of any file system under them.
#
# PROBE_NULLFS=/path/to/nullfs (contrib/bench/nullfs.c) also runs the same
# readers through nullfs after each pair: a FUSE file system
# with nothing behind it and objfs's kernel settings, so what any FUSE
# file system using the page cache gets on this machine before a byte is
# fetched (PROBE_NULLFS_OPTS="direct_io": the same without the page cache;
# "noopen": OPEN answered ENOSYS, no OPEN or RELEASE per file; several
# sets separated by ";" run one after the other, "-" for none).
#
# Environment: PROBE_READERS ("1 16 64"; "sW": W workers cat-ing PROBE_FILES
# files of 100 KiB, default 20000, against W curl processes over keep-alive
# connections), PROBE_SIZE (bytes per object,
# default 512 MiB), PROBE_VARIANTS (";"-separated "label|mount options|
# read_ahead_kb|objfs binary", empty fields keep the defaults: a binary per
# variant compares two builds), PROBE_REPS (1; the variants alternate within
# each rep), PROBE_STACKS, OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
READERS=${PROBE_READERS:-1 16 64}
SIZE=${PROBE_SIZE:-536870912}
VARIANTS=${PROBE_VARIANTS:-defaults||}
mkdir -p "$OUT"
res=$OUT/fuse_probe.txt
: >"$res"
say() { printf '%s\n' "$*" | tee -a "$res"; }

max=0
for n in $READERS; do [ "${n#s}" = "$n" ] && [ "$n" -gt "$max" ] && max=$n; done
DATA=$TEST_TMP/www
[ "$max" = 0 ] || bench_objects "$DATA" "$max" "$SIZE" 1
NFILES=${PROBE_FILES:-20000}
case " $READERS " in *" s"[0-9]*)
	mkdir -p "$DATA/small"
	python3 -c '
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
blob = os.urandom(100 << 10)
for i in range(n):
    with open(os.path.join(d, "f%05d.bin" % i), "wb") as f:
        f.write(blob[i % 4096:] + blob[:i % 4096])
' "$DATA/small" "$NFILES"
	cat "$DATA"/small/* >/dev/null
	ls "$DATA/small" >"$TEST_TMP/small.list"
	;;
esac
bench_nginx "$DATA" || exit 99
MNT=$TEST_TMP/mnt
mkdir -p "$MNT"
say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo); objfs=$OBJFS"
say "# objects: $max x $SIZE bytes; readers: $READERS; variants: $VARIANTS"

stats() { grep -E '^(cache_|prefetch|requests |bytes |ttfb)' "$MNT/.objfs-stats"; }
# bdi_of MNT: the mount's /sys/class/bdi entry
bdi_of() {
	awk -v m="$1" '$5 == m { print $3 }' /proc/self/mountinfo | tail -n 1
}

# sampler PIDFILE DAEMON: every 20 ms while PIDFILE exists, the top kernel
# frames of each pid listed in PIDFILE (readers) and of each thread of
# DAEMON, one line each (Python: no process started per sample)
sampler() {
	python3 -c '
import os, sys, time
pids, d = sys.argv[1], sys.argv[2]
def top(path, n=4):
    try:
        with open(path) as f:
            return "<".join(l.split()[1].split("+")[0] for l in f.readlines()[:n])
    except (OSError, IndexError):
        return None
out = []
while os.path.exists(pids):
    try:
        readers = open(pids).read().split()
    except OSError:
        break
    # the small-file workers are shells: sample their cat processes
    for p in os.listdir("/proc"):
        if p.isdigit() and p not in readers:
            try:
                if open("/proc/%s/comm" % p).read().strip() in ("cat", "dd"):
                    readers.append(p)
            except OSError:
                pass
    for p in readers:
        s = top("/proc/%s/stack" % p, 7)
        if s is not None:
            out.append("reader " + s)
    for t in os.listdir("/proc/%s/task" % d):
        try:
            comm = open("/proc/%s/task/%s/comm" % (d, t)).read().strip()
        except OSError:
            continue
        s = top("/proc/%s/task/%s/stack" % (d, t))
        if s is not None:
            out.append(comm + " " + s)
    time.sleep(0.02)
print("\n".join(out))
' "$1" "$2"
}

# machine_cpu: "busy total" jiffies of the whole machine; busy_cores A B
machine_cpu() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
busy_cores() {
	echo "$1 $2" | awk -v n="$(nproc)" '{ printf "%.1f", ($3 - $1) / ($4 - $2) * n }'
}
# nginx_cpu: CPU seconds used so far by nginx's workers
nginx_cpu() {
	local p
	for p in $(pgrep -f "nginx: worker"); do awk '{ print $14 + $15 }' "/proc/$p/stat"; done |
		awk -v hz="$(getconf CLK_TCK)" '{ s += $1 } END { printf "%.1f", s / hz }'
}

# readers_start N WHERE: N dd readers of distinct objects, or with N "sW"
# W workers each cat-ing its share of the small files; pids in pids[]
readers_start() {
	local n=$1 where=$2 i
	if [ "${n#s}" != "$n" ]; then
		for ((i = 0; i < ${n#s}; i++)); do
			(cd "$where/small" && awk -v w="$i" -v k="${n#s}" 'NR % k == w' \
				"$TEST_TMP/small.list" | xargs cat >/dev/null) &
			pids+=($!)
		done
		return
	fi
	for ((i = 0; i < n; i++)); do
		dd if="$where/obj$i.bin" of=/dev/null bs=1M status=none &
		pids+=($!)
	done
}

# curl_start N: the curl counterpart of readers_start
curl_start() {
	local n=$1 i
	if [ "${n#s}" != "$n" ]; then
		for ((i = 0; i < ${n#s}; i++)); do
			awk -v w="$i" -v k="${n#s}" -v u="${URL}small/" 'NR % k == w {
				print "url = \"" u $0 "\"\noutput = \"/dev/null\"" }' \
				"$TEST_TMP/small.list" >"$TEST_TMP/curl.$i.cfg"
			curl -sf --config "$TEST_TMP/curl.$i.cfg" &
			pids+=($!)
		done
		return
	fi
	for ((i = 0; i < n; i++)); do
		curl -sf -o /dev/null "${URL}obj$i.bin" &
		pids+=($!)
	done
}

# one N LABEL OPTS RA [BINARY]: N readers through objfs, then N curl streams
one() {
	local n=$1 label=$2 opts=$3 ra=$4 i pids=() bad=0 spid="" m0 m1 t0 t1 c0 c1 bytes bdi
	local OBJFS=${5:-$OBJFS} # mount_objfs mounts with this one
	if [ "${n#s}" != "$n" ]; then bytes=$((NFILES * 102400)); else bytes=$((n * SIZE)); fi
	mount_objfs "$URL" "$MNT" "$opts" || { say "$label $n mount failed"; return; }
	if [ -n "$ra" ]; then
		bdi=$(bdi_of "$MNT")
		echo "$ra" >"/sys/class/bdi/$bdi/read_ahead_kb" || say "# cannot set read_ahead_kb"
	fi
	stats >"$TEST_TMP/s0"
	threads_cpu "$OBJFS_PID" >"$TEST_TMP/th0"
	c0=$(awk '{ print $14 + $15 }' "/proc/$OBJFS_PID/stat")
	m0=$(machine_cpu)
	t0=$(now)
	readers_start "$n" "$MNT"
	if [ -n "${PROBE_STACKS:-}" ] && [ "$n" != 1 ]; then
		echo "${pids[*]}" >"$TEST_TMP/pids"
		sampler "$TEST_TMP/pids" "$OBJFS_PID" >"$TEST_TMP/stacks" &
		spid=$!
	fi
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	t1=$(now)
	m1=$(machine_cpu)
	rm -f "$TEST_TMP/pids"
	[ -z "$spid" ] || wait "$spid"
	c1=$(awk '{ print $14 + $15 }' "/proc/$OBJFS_PID/stat")
	threads_cpu "$OBJFS_PID" >"$TEST_TMP/th1"
	stats >"$TEST_TMP/s1"
	unmount_objfs "$MNT" >/dev/null
	say "objfs $label N=$n $(gbps "$bytes" "$t0" "$t1") GB/s ok=$((1 - bad)) cpu_s/GB=$(awk -v c=$((c1 - c0)) -v b="$bytes" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", c / hz / (b / 1e9) }')"
	say "  machine: $(busy_cores "$m0" "$m1") of $(nproc) cores busy, nginx $(nginx_cpu) CPU s in all"
	say "  threads: $(threads_delta "$TEST_TMP/th0" "$TEST_TMP/th1")"
	say "  stats: $(awk 'NR == FNR { b[$1] = $2; next } { d = ($1 ~ /^ttfb|^cache_bytes|^cache_cap/) ? $2 : $2 - b[$1]; printf "%s=%s ", $1, d }' "$TEST_TMP/s0" "$TEST_TMP/s1")"
	if [ -s "$TEST_TMP/stacks" ] 2>/dev/null && [ -n "${PROBE_STACKS:-}" ] && [ "$n" != 1 ]; then
		say "  stacks (samples, who, top frames):"
		sort "$TEST_TMP/stacks" | uniq -c | sort -rn | head -n 25 | sed 's/^/    /' | tee -a "$res"
		rm -f "$TEST_TMP/stacks"
	fi
	pids=()
	m0=$(machine_cpu)
	t0=$(now)
	curl_start "$n"
	for p in "${pids[@]}"; do wait "$p"; done
	t1=$(now)
	m1=$(machine_cpu)
	say "curl  $label N=$n $(gbps "$bytes" "$t0" "$t1") GB/s, $(busy_cores "$m0" "$m1") cores busy"
	[ -n "${PROBE_LOCAL:-}" ] || return 0
	pids=()
	t0=$(now)
	readers_start "$n" "$DATA"
	for p in "${pids[@]}"; do wait "$p"; done
	t1=$(now)
	say "local $label N=$n $(gbps "$bytes" "$t0" "$t1") GB/s (the same readers on the server's files)"
}

# nullfs_run N LABEL: the same readers through nullfs (PROBE_NULLFS), once
# per option set of PROBE_NULLFS_OPTS
nullfs_run() {
	local n=$1 label=$2 sets o
	[ -n "${PROBE_NULLFS:-}" ] || return 0
	IFS=';' read -r -a sets <<<"${PROBE_NULLFS_OPTS:--}"
	for o in "${sets[@]}"; do
		[ "$o" != - ] || o=
		nullfs_one "$n" "$label${o:++$o}" "$o"
	done
}

nullfs_one() {
	local n=$1 label=$2 o=$3 pids=() npid i m0 m1 t0 t1 w=$((8 * $(nproc))) bytes probe=obj0.bin
	if [ "${n#s}" = "$n" ]; then bytes=$((n * SIZE)); else bytes=$((NFILES * 102400)) probe=small/f00000.bin; fi
	# objfs's FUSE workers: 8 per core, 64-512
	[ "$w" -ge 64 ] || w=64
	[ "$w" -le 512 ] || w=512
	"$PROBE_NULLFS" "$MNT" "$max" "$SIZE" "$w" "$NFILES" "$o" &
	npid=$!
	for ((i = 0; i < 50; i++)); do
		[ -e "$MNT/$probe" ] && break
		sleep 0.1
	done
	m0=$(machine_cpu)
	t0=$(now)
	readers_start "$n" "$MNT"
	for p in "${pids[@]}"; do wait "$p"; done
	t1=$(now)
	m1=$(machine_cpu)
	fusermount3 -u "$MNT" || umount -l "$MNT"
	wait "$npid"
	say "nullfs $label N=$n $(gbps "$bytes" "$t0" "$t1") GB/s, $(busy_cores "$m0" "$m1") cores busy (FUSE, nothing behind it${o:+, $o})"
}

IFS=';' read -r -a vlist <<<"$VARIANTS"
for ((rep = 0; rep < ${PROBE_REPS:-1}; rep++)); do
	for n in $READERS; do
		for v in "${vlist[@]}"; do
			IFS='|' read -r label opts ra bin <<<"$v"
			one "$n" "$label" "$opts" "$ra" "$bin"
			nullfs_run "$n" "$label"
		done
	done
done
nginx_stop
# medians per (variant, N), and of objfs/curl over the pairs
awk '$1 == "objfs" { o = $2 " " $3; v[o] = v[o] " " $4; prev = $4 } $1 == "curl" { c = $2 " " $3; r[c] = r[c] " " (prev / $4); pc = $4 }
	$1 == "nullfs" { k = $2 " " $3; nv[k] = nv[k] " " $4; nr[k] = nr[k] " " ($4 / pc) }
	function med(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	END { for (k in v) printf "median %s: objfs %.2f GB/s, objfs/curl %.2f (%s)\n", k, med(v[k]), med(r[k]), r[k]
		for (k in nv) printf "median %s: nullfs %.2f GB/s, nullfs/curl %.2f (%s)\n", k, med(nv[k]), med(nr[k]), nr[k] }' "$res" | sort | tee -a "$res"
