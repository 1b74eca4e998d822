#!/bin/bash
# million_bench.sh: metadata of a million-key prefix, objfs and
# its peers on the same synthetic S3 server (tests/s3_synth.py: generated
# keys, every request delayed by BENCH_LATENCY_MS to model S3), in one
# script, tools alternating:
#
#   stat     stat of one key on a fresh mount: requests the server counted
#            and seconds (target: <= 3 requests, <= 3 x the latency)
#   head     `ls -f | head -1` on a fresh mount: seconds to the first name
#            (when the line reaches the reader: the target), and to the end
#            of the pipeline (ls ends only at its next write after the
#            reader went, which can be a page later), against one page
#            (the first page fetched alone by curl, median of 3)
#   ls       `ls -l | wc -l` on a fresh mount: seconds, against the bare
#            listing (every page fetched in sequence by a plain client, the
#            floor for any tool that lists the prefix)
#   cpu      the daemon's CPU seconds (user + system) for that `ls -l`:
#            unlike the wall-clock ratio, hardly moved by other load on the
#            machine
#   rss      objfs's RSS idle, after `ls -l`, and after
#            `echo 2 > /proc/sys/vm/drop_caches` (the kernel forgets the
#            inodes)
#
# Peers: s3fs (apt's s3fs) and rclone mount (S3 backend, anonymous), each
# when found ($S3FS, $RCLONE or on the PATH); a missing one is reported.
#
#   contrib/bench/million_bench.sh            (root: FUSE, drop_caches)
#
# Environment: OBJFS, BENCH_KEYS (1000000), BENCH_LATENCY_MS (20),
# BENCH_REPS (1), BENCH_TOOLS (default: objfs and the peers found), OUT
# (./bench-out).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
require_objfs
KEYS=${BENCH_KEYS:-1000000}
LAT=${BENCH_LATENCY_MS:-20}
REPS=${BENCH_REPS:-1}
OUT=${OUT:-$PWD/bench-out}
S3FS=${S3FS:-$(command -v s3fs || true)}
RCLONE=${RCLONE:-$(command -v rclone || true)}
mkdir -p "$OUT"
res=$OUT/million
: >"$res.txt"
say() { printf '%s\n' "$*" | tee -a "$res.txt"; }
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

synth_start bench --keys "$KEYS" --latency-ms "$LAT"
PORT=$PORT_bench
EP=http://127.0.0.1:$PORT
requests() { curl -sf "$EP/__stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(s.values()))'; }
KEY=$(printf 'k%07d' $((KEYS / 2 + 1)))
MNT=$TEST_TMP/mnt
mkdir -p "$MNT"

say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; objfs=$OBJFS; s3fs=${S3FS:-none}; rclone=${RCLONE:-none}"
say "# $KEYS keys flat, ${LAT} ms per request, reps $REPS; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The floor: every page in sequence, as any lister must fetch them.
t0=$(now)
pages=$(python3 - "$EP" <<'EOF'
import sys, urllib.parse, urllib.request, re
ep, tok, n = sys.argv[1], None, 0
while True:
    q = {"list-type": "2", "max-keys": "1000", "delimiter": "/", "encoding-type": "url"}
    if tok:
        q["continuation-token"] = tok
    body = urllib.request.urlopen(ep + "/bkt?" + urllib.parse.urlencode(q)).read().decode()
    n += 1
    m = re.search(r"<NextContinuationToken>([^<]*)<", body)
    if "<IsTruncated>true" not in body or not m:
        break
    tok = m.group(1)
print(n)
EOF
)
t_pages=$(dt "$t0" "$(now)")
say "bare listing: $pages pages in ${t_pages}s"
# One page: the first, alone, as `ls -f` waits for it (median of 3).
t_page=$(for i in 1 2 3; do
	curl -sf -o /dev/null -w '%{time_total}\n' \
		"$EP/bkt?list-type=2&max-keys=1000&delimiter=%2F&encoding-type=url"
done | sort -n | sed -n 2p)
say "one page (the first, curl, median of 3): ${t_page}s"
one_req=$(python3 -c "print($LAT / 1000)")

mount_tool() { # TOOL: mounts the bucket at $MNT; sets PID
	case $1 in
	objfs) mount_objfs s3://bkt "$MNT" "endpoint=$EP,no_sign,path_style,region=us-east-1" >/dev/null &&
		PID=$OBJFS_PID ;;
	s3fs) "$S3FS" bkt "$MNT" -o url="$EP",use_path_request_style,public_bucket=1,stat_cache_expire=60 &&
		sleep 0.5 && PID=$(pgrep -n -x s3fs) ;;
	rclone) env -u AWS_CA_BUNDLE "$RCLONE" mount --read-only --daemon --s3-provider Other \
		--s3-endpoint "$EP" :s3:bkt "$MNT" &&
		sleep 1 && PID=$(pgrep -n -x rclone) ;;
	esac
}
umount_tool() {
	if [ "$1" = objfs ]; then unmount_objfs "$MNT" >/dev/null; else fusermount3 -u "$MNT" || umount -l "$MNT"; fi
	sleep 0.5
}
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

tools="objfs"
[ -n "$S3FS" ] && tools="$tools s3fs"
[ -n "$RCLONE" ] && tools="$tools rclone"
tools=${BENCH_TOOLS:-$tools}
for ((rep = 1; rep <= REPS; rep++)); do
	for tool in $tools; do
		# stat of one key, fresh mount
		mount_tool "$tool" || { say "$tool: mount failed"; continue; }
		r0=$(requests)
		t0=$(now)
		sz=$(timeout 600 stat -c %s "$MNT/$KEY" 2>&1)
		t_stat=$(dt "$t0" "$(now)")
		n_stat=$(($(requests) - r0))
		umount_tool "$tool"
		# first name of ls -f, fresh mount
		mount_tool "$tool" || continue
		t0=$(now)
		rm -f "$TEST_TMP/first_at"
		first=$(timeout 900 ls -f "$MNT" |
			{ IFS= read -r l && now >"$TEST_TMP/first_at"; printf '%s\n' "${l:-}"; })
		t_head=$(dt "$t0" "$(now)")
		t_first=$(dt "$t0" "$(cat "$TEST_TMP/first_at" 2>/dev/null || now)")
		umount_tool "$tool"
		# ls -l of everything, fresh mount; RSS around it
		mount_tool "$tool" || continue
		idle=$(rss_kb "$PID")
		c0=$(cpu_ticks "$PID")
		t0=$(now)
		n=$(timeout 1800 ls -l "$MNT" | grep -c '^-')
		t_ls=$(dt "$t0" "$(now)")
		cpu=$(awk -v a="$c0" -v b="$(cpu_ticks "$PID")" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
		after=$(rss_kb "$PID")
		sync
		echo 2 >/proc/sys/vm/drop_caches
		sleep 2
		dropped=$(rss_kb "$PID")
		umount_tool "$tool"
		say "$tool rep $rep: stat ${t_stat}s $n_stat requests (size $sz; $(awk -v a="$t_stat" -v b="$one_req" 'BEGIN { printf "%.1f", a / b }')x one request)" \
			"| ls -f first name '${first}' after ${t_first}s ($(awk -v a="$t_first" -v b="$t_page" 'BEGIN { printf "%.1f", a / b }') pages), pipeline ${t_head}s | ls -l $n entries ${t_ls}s ($(awk -v a="$t_ls" -v b="$t_pages" 'BEGIN { printf "%.2f", a / b }')x the bare listing, daemon CPU ${cpu}s)" \
			"| RSS idle $((idle / 1024)) MiB, after ls -l $((after / 1024)) MiB (+$(((after - idle) / 1024))), after drop_caches $((dropped / 1024)) MiB"
		echo "$tool $rep $t_stat $n_stat $t_head $t_ls $n $idle $after $dropped $cpu $(cut -d' ' -f1 /proc/loadavg) $t_first $t_page" >>"$res.runs"
	done
done
say "# runs: $res.runs (tool rep stat_s stat_requests head_s ls_s entries rss_idle_kb rss_ls_kb rss_dropped_kb ls_cpu_s load1 first_s page_s)"
