#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# wan_conns.sh: one object read through few connections of an S3-like link,
# objfs builds side by side with curl's single stream, alternating. What it
# is for: a store ~20 ms away at ~100 MB/s per connection (S3 as a client
# sees it) with max_connections small, where every ranged GET pays the
# first-byte wait on a connection that then moves nothing; objfs joins
# adjacent ranges waiting for a connection into one GET (engine_direct.c,
# "Joined GETs"), and this measures what that gives, and how many GETs
# went out.
#
#   OBJFS=build/src/objfs WC_OLD=/path/to/other/objfs contrib/bench/wan_conns.sh
#
# nginx serves a random object of $WC_SIZE bytes (default 512 MiB) from
# its page cache; contrib/bench/wanproxy.py in front of it delays each
# request by $WC_DELAY_MS (default 20) and paces each connection to
# $WC_RATE (default 100M bytes/s). Per repetition ($WC_REPS, default 3)
# and per connection count ($WC_CONNS, default "1 4"): curl, one stream
# through the proxy (the ceiling at one connection: one GET of the whole
# object), then objfs (a fresh mount, max_connections=N, dd bs=1M of the
# whole object), then the $WC_OLD build the same way when set. Reported:
# medians of GB/s, of the per-repetition ratios to curl, and the data GETs
# each objfs run sent (requests - requests_joined of .objfs-stats).
# Output: a table on stdout and in $OUT/wan_conns.txt (OUT defaults to
# ./device-out), every run in $OUT/wan_conns.runs.

set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
SIZE=${WC_SIZE:-536870912}
CONNS=${WC_CONNS:-1 4}
REPS=${WC_REPS:-3}
DELAY=${WC_DELAY_MS:-20}
RATE=${WC_RATE:-100M}
bench_results "wan_conns"

DATA=$TEST_TMP/www
mkdir -p "$DATA"
bench_big_object "$DATA/big.bin" "$SIZE"
bench_nginx "$DATA" || exit 99
python3 "$here/wanproxy.py" --listen 127.0.0.1:0 --to "127.0.0.1:$NGINX_PORT" \
	--delay-ms "$DELAY" --rate "$RATE" >"$TEST_TMP/wan.out" 2>&1 &
WAN_PID=$!
for ((i = 0; i < 50; i++)); do
	WAN_PORT=$(awk '$1 == "PORT" { print $2 }' "$TEST_TMP/wan.out")
	[ -n "$WAN_PORT" ] && break
	sleep 0.1
done
[ -n "$WAN_PORT" ] || { echo "wan_conns: wanproxy did not start" >&2; exit 99; }
WAN_URL=http://127.0.0.1:$WAN_PORT/data/
stop_wan() { kill "$WAN_PID" 2>/dev/null; }
trap 'stop_wan' EXIT

say "# wan_conns.sh $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; object $SIZE bytes"
say "# link: wanproxy.py, ${DELAY} ms before each request, $RATE bytes/s per connection"
say "# objfs: $OBJFS${WC_OLD:+; old: $WC_OLD}; connections: $CONNS; reps: $REPS"

# one_run N MODE: appends "N MODE GB/s [GETs]" to $res.runs
one_run() {
	local n=$1 mode=$2 mnt=$TEST_TMP/mnt t0 t1 bad=0 OBJFS=$OBJFS gets
	case $mode in
	curl)
		t0=$(now)
		curl -sSf -o /dev/null "${WAN_URL}big.bin" || bad=1
		t1=$(now)
		bench_record "$((1 - bad))" "$res.runs" "$n $mode" "$(gbps "$SIZE" "$t0" "$t1")"
		return
		;;
	old) OBJFS=$WC_OLD ;;
	esac
	mount_objfs "$WAN_URL" "$mnt" "max_connections=$n" >/dev/null ||
		{ echo "$n $mode fail" >>"$res.runs"; return; }
	t0=$(now)
	dd if="$mnt/big.bin" of=/dev/null bs=1M status=none || bad=1
	t1=$(now)
	gets=$(awk '$1 == "requests" { r = $2 } $1 == "requests_joined" { j = $2 }
		END { print r - j }' "$mnt/.objfs-stats")
	unmount_objfs "$mnt" >/dev/null || bad=1
	bench_record "$((1 - bad))" "$res.runs" "$n $mode" "$(gbps "$SIZE" "$t0" "$t1")" "$gets"
}

modes="curl new"
[ -z "${WC_OLD:-}" ] || modes+=" old"
for ((r = 0; r < REPS; r++)); do
	for n in $CONNS; do
		for m in $modes; do one_run "$n" "$m"; done
	done
done

python3 - "$res.runs" <<'EOF' | tee -a "$res.txt"
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
med = lambda v: statistics.median(v) if v else None
f = lambda x: "%.3f" % x if x is not None else "-"
print("\n| connections | build | GB/s (median) | /curl one stream (pairs) | GETs sent (median) |")
print("|---:|---|---:|---:|---:|")
for n in dict.fromkeys(r[0] for r in runs):
    by = {}
    for r in runs:
        if r[0] == n:
            by.setdefault(r[1], []).append(r)
    curl = [float(r[2]) for r in by.get("curl", []) if r[2] != "fail"]
    for m, rs in by.items():
        ok = [r for r in rs if r[2] != "fail"]
        pr = [float(a[2]) / float(b[2]) for a, b in zip(rs, by.get("curl", []))
              if a[2] != "fail" and b[2] != "fail"]
        gets = [float(r[3]) for r in ok if len(r) > 3]
        print("| %s | %s | %s | %s | %s |" % (n, m, f(med([float(r[2]) for r in ok])),
              f(med(pr)) if m != "curl" else "", "%d" % med(gets) if gets else ""))
EOF
nginx_stop
exit 0
