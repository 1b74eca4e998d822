#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# https_bench.sh: objfs over HTTPS against N curl processes over HTTPS, from
# a server that is not the limit, with the same FUSE runs over plain HTTP
# beside them. One run_device.sh call on a 16-core GPU host, under 8 minutes with the defaults:
#
#   contrib/gpu/run_device.sh exec contrib/bench/https_bench.sh
#
# (anywhere else: OBJFS=build/src/objfs contrib/bench/https_bench.sh).
#
# Why the server: nginx sending through OpenSSL in user space, without
# sendfile, caps loopback HTTPS at 16 streams below what objfs takes, so the
# figure would be nginx's, not objfs's. Here nginx uses kernel
# TLS where the kernel has the tls module (loaded with modprobe when it
# can be): "ssl_conf_command Options KTLS" with "sendfile on" makes nginx
# hand the file to the kernel (SSL_sendfile), which encrypts from the page
# cache; whether it did is read from /proc/net/tls_stat (TlsTxSw, the
# connections with software kTLS transmit, before and after) and reported.
# Without kTLS: a worker per core, 16 KiB TLS records (the most a record
# holds) and large output buffers. Either way a worker per core, TLS 1.3
# with AES-GCM (AES-128 first), an ECDSA P-256 certificate signed by a test
# CA lib.sh makes with openssl (or taken from $HB_TLS_DIR: ca.pem,
# server.pem, server.key for IP 127.0.0.1).
#
# Each figure moves the whole object ($HB_SIZE bytes, default 4 GiB, random
# bytes, nginx's page cache warm) once, with N streams (HB_STREAMS, default
# "1 16"):
#
#   curl-https  N curl processes, one range of size/N each, to /dev/null,
#               over HTTPS: the ceiling. Their CPU (user + system of the
#               children, bash's times) per GB, nginx's, and the machine's
#               busy cores (/proc/stat) are recorded: what limited it.
#   fuse-https  a fresh mount (-o ca_file=, max_connections=N, cold caches),
#               N readers dd bs=1M, each its own range of size/N; the data
#               GETs on objfs's direct path (SSL_read into the cache
#               block), its counters noted in the report
#   gpu-https   (when $GPU_FILL is set, as run_device.sh does) one
#               objfs_gpu_read of the whole object through a fresh mount
#               with max_connections=N,engine_threads=N, as bench_gpu.sh
#   curl-http, fuse-http   the same over plain HTTP, from the same nginx
#
# The modes take turns within each repetition (HB_REPS, default 3), so each
# objfs run has its curl run next to it; reported per N: the median GB/s of
# each mode, the medians of the per-repetition ratios objfs/curl (HTTPS
# runs against curl-https, HTTP ones against curl-http), how far the HTTPS
# FUSE ratio is from the HTTP one (the aim: within 10%), and CPU
# seconds per GB: objfs's daemon (utime + stime from /proc/PID/stat, from
# the mount to the end of the reads) and curl's. A repetition that would
# start past HB_BUDGET seconds (default 420) is not started, so one call
# stays within a time limit; the report says how many ran.
#
# Environment: OBJFS, NGINX, GPU_FILL (optional), HB_PIN (below), OUT (results; default
# ./device-out), HB_SIZE, HB_STREAMS, HB_REPS, HB_BUDGET, HB_OPTS (more mount
# options; direct_recv=off measures libcurl's receive path instead), HB_MODES
# (default "curl-https fuse-https gpu-https curl-http
# fuse-http"), HB_DATA (keep the object here between calls), HB_TLS_DIR,
# HB_LISTEN (more parameters of the HTTPS listen; default reuseport: each
# worker its own socket, the kernel spreading connections over them: one
# shared socket holds 16 curl streams to about half as much; "none" for
# the shared socket).
#
# A/B of builds: a mode written MODE@NAME (e.g. "gpu-https@old") runs the
# objfs binary named by $HB_BIN_NAME ($HB_OLD for @old) in the same turns
# as the others, reported beside them (the per-mode table).
#
# Output: a table on stdout and in $OUT/https_bench.txt, every run in
# $OUT/https_bench.runs ("N MODE GB/s CPU_S_PER_GB [NGINX_CPU_S_PER_GB BUSY_CORES]").

set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
SIZE=${HB_SIZE:-4294967296}
STREAMS=${HB_STREAMS:-1 16}
REPS=${HB_REPS:-3}
BUDGET=${HB_BUDGET:-420}
MODES=${HB_MODES:-curl-https fuse-https gpu-https curl-http fuse-http}
NCPU=$(nproc)
TICK=$(getconf CLK_TCK)
T_START=$(now)
bench_results "https_bench"
[ -n "${GPU_FILL:-}" ] || MODES=$(tr ' ' '\n' <<<"$MODES" | grep -v '^gpu' | tr '\n' ' ')

# ---------------------------------------------------------------- TLS

# lib.sh's test CA and its certificate for 127.0.0.1, or those in $HB_TLS_DIR
TLS_DIR=${HB_TLS_DIR:-$TLS_DIR}
TLS=$TLS_DIR
if [ ! -s "$TLS/server.pem" ] && ! command -v openssl >/dev/null; then
	echo "https_bench: no openssl to make the test CA; set HB_TLS_DIR" >&2
	exit 99
fi
tls_leaf server "IP:127.0.0.1,DNS:localhost" || exit 99
CA=$TLS/ca.pem

# kTLS: the module loaded (or built in), and its counters readable
KTLS=0
if [ -d /sys/module/tls ] || grep -qw '^tls' /proc/modules 2>/dev/null ||
	modprobe tls 2>/dev/null; then
	[ -r /proc/net/tls_stat ] && KTLS=1
fi
tls_tx() { awk '$1 == "TlsTxSw" { s += $2 } $1 == "TlsTxDevice" { s += $2 } END { print s + 0 }' \
	/proc/net/tls_stat 2>/dev/null || echo 0; }

# ---------------------------------------------------------------- data, nginx

DATA=${HB_DATA:-$TEST_TMP/www}
mkdir -p "$DATA"
OBJ=$DATA/big.bin
bench_big_object "$OBJ" "$SIZE"

# https_nginx: nginx with the plain server of lib.sh and the HTTPS one
https_nginx() {
	local tls_conf="ssl_buffer_size 16k; output_buffers 4 1m;"
	[ "$KTLS" = 0 ] || tls_conf="ssl_conf_command Options KTLS;"
	HTTPS_PORT=$(free_port)
	local listen=${HB_LISTEN:-reuseport}
	[ "$listen" != none ] || listen=
	NGINX_EXTRA_CONF=$(nginx_tls_server ${listen:+-l "$listen"} "$HTTPS_PORT" "$DATA" "ssl_protocols TLSv1.3;
        ssl_prefer_server_ciphers on;
        ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384;
        ssl_session_cache shared:bench:10m;
        $tls_conf
        sendfile on;
        keepalive_requests 100000;")
	export NGINX_EXTRA_CONF
	bench_nginx "$DATA"
}
# HB_PIN=1: nginx on the upper half of the cores, everything this script
# starts afterwards (curl, objfs, the readers, the GPU client) on the lower
# half. At one stream both ends need a whole core each (nginx encrypting,
# the client decrypting); unpinned, a run whose nginx worker shared a core
# with the client's threads moved 1.2 GB/s, the next one 1.7.
PIN_CLIENT=
if [ "${HB_PIN:-0}" = 1 ] && command -v taskset >/dev/null && [ "$NCPU" -ge 4 ]; then
	taskset -pc "$((NCPU / 2))-$((NCPU - 1))" $$ >/dev/null
	PIN_CLIENT=0-$((NCPU / 2 - 1))
fi
if ! https_nginx && [ "$KTLS" = 1 ]; then
	# an OpenSSL without kTLS refuses the option
	echo "https_bench: nginx refused kTLS ($(tail -n 1 "$NGINX_PREFIX/error.log")); without" >&2
	KTLS=0
	https_nginx || { cat "$NGINX_PREFIX/error.log" >&2; exit 99; }
elif [ -z "$NGINX_PID" ]; then
	cat "$NGINX_PREFIX/error.log" >&2
	exit 99
fi
[ -z "$PIN_CLIENT" ] || taskset -pc "$PIN_CLIENT" $$ >/dev/null
HTTP_URL=$URL
HTTPS_URL=https://127.0.0.1:$HTTPS_PORT/data/
for ((i = 0; i < 50; i++)); do
	curl -sf --cacert "$CA" -o /dev/null "$HTTPS_URL" && break
	sleep 0.1
done
cipher=$(curl -sv --cacert "$CA" -o /dev/null -r 0-0 "${HTTPS_URL}big.bin" 2>&1 |
	sed -n 's/.*SSL connection using \(.*\)$/\1/p' | head -n 1)
[ -n "$cipher" ] || { echo "https_bench: no HTTPS from nginx:" >&2; tail "$NGINX_PREFIX/error.log" >&2; exit 99; }
TX0=$(tls_tx)

say "# https_bench.sh $(date -u +%FT%TZ) $(uname -n), kernel $(uname -r), $NCPU cores${GPU_FILL:+, GPU $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)}"
say "# objfs: $OBJFS; nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), $NCPU workers; $cipher"
say "# object: $SIZE bytes; streams: $STREAMS; reps: $REPS (budget ${BUDGET} s); modes: $MODES; opts: ${HB_OPTS:-(defaults)}"
[ -z "$PIN_CLIENT" ] || say "# pinned: nginx on cores $((NCPU / 2))-$((NCPU - 1)), clients and objfs on $PIN_CLIENT"
say "# kernel TLS: $([ "$KTLS" = 1 ] && echo "tls module present, nginx asked for it (Options KTLS + sendfile)" || echo "no tls module: nginx in user space, ssl_buffer_size 16k, output_buffers 4 1m")"

# ---------------------------------------------------------------- runs

pid_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
nginx_ticks() {
	local p s=0
	for p in $NGINX_PID $(pgrep -P "$NGINX_PID"); do s=$((s + $(pid_ticks "$p"))); done
	echo "$s"
}
# "busy total" ticks of all CPUs; busy_cores BEFORE AFTER: cores busy between
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
busy_cores() {
	awk -v a="$1" -v b="$2" -v n="$NCPU" 'BEGIN { split(a, x, " "); split(b, y, " ");
		printf "%.1f", (y[2] > x[2]) ? n * (y[1] - x[1]) / (y[2] - x[2]) : 0 }'
}
per_gb() { awk -v t="$1" -v hz="$TICK" -v b="$SIZE" 'BEGIN { printf "%.3f", t / hz / (b / 1e9) }'; }
# CPU ticks of this shell's waited-for children (bash's times, second line:
# "XmY.YYYs XmY.YYYs"; into a file, since a pipe would run it in a fork)
children_ticks() {
	times >"$TEST_TMP/times"
	tail -n 1 "$TEST_TMP/times" | awk -v hz="$TICK" '{
		s = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] }
		printf "%d", s * hz }'
}

# one_run N MODE: appends "N MODE GB/s CPU/GB [nginx CPU/GB]" to $res.runs
# ("fail" instead of GB/s on any error). Not inside $(...): the mounts it
# starts belong to this shell (lib.sh).
one_run() {
	local n=$1 mode=$2 mnt=$TEST_TMP/mnt url opts t0 t1 c0 c1 x0 x1 b0 b1 i bad=0 out gb per
	local tag=$2 OBJFS=$OBJFS # mount_objfs (lib.sh) starts $OBJFS
	case $mode in *@*)
		local var=HB_BIN_${mode#*@}
		[ "${mode#*@}" != old ] || var=HB_OLD
		OBJFS=${!var:?$mode needs $var}
		mode=${mode%@*}
		;;
	esac
	per=$(((SIZE + n - 1) / n))
	url=$HTTP_URL
	opts=max_connections=$n
	case $mode in *-https)
		url=$HTTPS_URL
		opts+=,ca_file=$CA
		;;
	esac
	[ -z "${HB_OPTS:-}" ] || opts+=,$HB_OPTS
	case $mode in
	curl-*)
		x0=$(nginx_ticks)
		b0=$(busy_ticks)
		t0=$(now)
		c1=$(
			# a subshell: its children are the curls alone
			pids=()
			for ((i = 0; i < n; i++)); do
				lo=$((i * per)) hi=$((i * per + per - 1))
				[ "$hi" -lt "$SIZE" ] || hi=$((SIZE - 1))
				curl -sSf --cacert "$CA" -o /dev/null -r "$lo-$hi" "${url}big.bin" &
				pids+=($!)
			done
			st=0
			for p in "${pids[@]}"; do wait "$p" || st=1; done
			[ "$st" = 0 ] && children_ticks
		)
		t1=$(now)
		x1=$(nginx_ticks)
		b1=$(busy_ticks)
		[ -n "$c1" ] || bad=1
		bench_record "$((1 - bad))" "$res.runs" "$n $tag" "$(gbps "$SIZE" "$t0" "$t1")" \
			"$(per_gb "${c1:-0}") $(per_gb $((x1 - x0))) $(busy_cores "$b0" "$b1")"
		;;
	fuse-*)
		mount_objfs "$url" "$mnt" "$opts" || { echo "$n $tag fail" >>"$res.runs"; return; }
		local pids=() mb=$((per >> 20))
		t0=$(now)
		for ((i = 0; i < n; i++)); do
			dd if="$mnt/big.bin" of=/dev/null bs=1M skip=$((i * mb)) count="$mb" \
				status=none &
			pids+=($!)
		done
		for i in "${pids[@]}"; do wait "$i" || bad=1; done
		t1=$(now)
		c1=$(pid_ticks "$OBJFS_PID")
		# which receive path carried the data (objfs's own, or libcurl's)
		echo "# N=$n $tag: $(grep -E '^(requests|requests_direct|direct_fallbacks|requests_joined|tls_own_conns) ' \
			"$mnt/.objfs-stats" | tr '\n' ' ')" >>"$res.txt"
		unmount_objfs "$mnt" >/dev/null || bad=1
		bench_record "$((1 - bad))" "$res.runs" "$n $tag" "$(gbps $((mb * n << 20)) "$t0" "$t1")" \
			"$(per_gb "$c1")"
		;;
	gpu-*)
		mount_objfs "$url" "$mnt" "$opts,engine_threads=$n" ||
			{ echo "$n $tag fail" >>"$res.runs"; return; }
		c0=$(pid_ticks "$OBJFS_PID")
		out=$(timeout 300 "$GPU_FILL" bench1 gpu "$mnt/big.bin" 2>&1)
		c1=$(pid_ticks "$OBJFS_PID")
		echo "# N=$n $tag: $(grep -E '^(requests|requests_direct|direct_fallbacks|requests_joined|tls_own_conns) ' \
			"$mnt/.objfs-stats" | tr '\n' ' ')" >>"$res.txt"
		unmount_objfs "$mnt" >/dev/null
		gb=$(printf '%s\n' "$out" | awk '$1 == "bench1" && NF >= 5 { print $3 }')
		[ -n "$gb" ] || { bad=1; printf '%s\n' "$out" | sed 's/^/    | /' >&2; }
		bench_record "$((1 - bad))" "$res.runs" "$n $tag" "$gb" "$(per_gb $((c1 - c0)))"
		;;
	esac
}

reps_done=0
for ((r = 0; r < REPS; r++)); do
	el=$(awk -v a="$T_START" -v b="$(now)" 'BEGIN { printf "%d", b - a }')
	if [ "$r" -gt 0 ] && [ "$el" -ge "$BUDGET" ]; then
		say "# stopped after $r repetitions: ${el} s of the ${BUDGET} s budget gone"
		break
	fi
	for n in $STREAMS; do
		for m in $MODES; do one_run "$n" "$m"; done
	done
	reps_done=$((r + 1))
done
TX1=$(tls_tx)
if [ "$KTLS" = 1 ] && [ "$TX1" -gt "$TX0" ]; then
	say "# kernel TLS active: $((TX1 - TX0)) connections sent with kTLS (/proc/net/tls_stat TlsTxSw)"
else
	say "# kernel TLS not active (/proc/net/tls_stat TlsTxSw $TX0 -> $TX1): nginx encrypted in user space"
fi

python3 - "$res.runs" "$reps_done" "$NCPU" <<'EOF' | tee -a "$res.txt"
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
med = lambda v: statistics.median(v) if v else None
f = lambda x, d=2: ("%.*f" % (d, x)) if x is not None else "-"
print("\n%s repetitions; GB/s and CPU seconds per GB are medians; pairs: medians of the "
      "per-repetition ratios\n" % sys.argv[2])
print("| N | curl https GB/s | fuse https GB/s | fuse/curl https (pairs) | gpu https GB/s "
      "| gpu/curl https (pairs) | curl http GB/s | fuse http GB/s | fuse/curl http (pairs) "
      "| https ratio / http ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
cpu = []
for n in dict.fromkeys(r[0] for r in runs):
    seq = [r for r in runs if r[0] == n]
    by = {}
    for i, r in enumerate(seq):
        by.setdefault(r[1], []).append(r)
    def vals(m, k=2):
        return [float(r[k]) for r in by.get(m, []) if r[2] != "fail" and len(r) > k]
    def pairs(m, c):
        a, b = by.get(m, []), by.get(c, [])
        out = [float(x[2]) / float(y[2]) for x, y in zip(a, b)
               if x[2] != "fail" and y[2] != "fail" and float(y[2]) > 0]
        return med(out)
    fh, fp = pairs("fuse-https", "curl-https"), pairs("fuse-http", "curl-http")
    gh = pairs("gpu-https", "curl-https")
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        n, f(med(vals("curl-https"))), f(med(vals("fuse-https"))), f(fh),
        f(med(vals("gpu-https"))), f(gh), f(med(vals("curl-http"))),
        f(med(vals("fuse-http"))), f(fp), f(fh / fp if fh and fp else None)))
    for m in by:
        c = med(vals(m, 3))
        ng = med(vals(m, 4))
        fails = sum(1 for r in by[m] if r[2] == "fail")
        busy = med(vals(m, 5))
        cpu.append("| %s | %s | %s | %s | %s |%s" % (n, m, f(c), f(ng) if m.startswith("curl") else "",
                   f(busy, 1) if m.startswith("curl") else "",
                   " %d failed" % fails if fails else ""))
print("\nEvery mode, medians (MODE@old: the HB_OLD build); ratios: pairs with the same "
      "repetition's curl run of the same protocol\n")
print("| N | mode | GB/s | /curl (pairs) | CPU s/GB |")
print("|---:|---|---:|---:|---:|")
for n in dict.fromkeys(r[0] for r in runs):
    seq = [r for r in runs if r[0] == n]
    by = {}
    for r in seq:
        by.setdefault(r[1], []).append(r)
    for m in by:
        ok = [r for r in by[m] if r[2] != "fail"]
        c = "curl-https" if "https" in m else "curl-http"
        pr = [float(x[2]) / float(y[2]) for x, y in zip(by[m], by.get(c, []))
              if x[2] != "fail" and y[2] != "fail" and float(y[2]) > 0]
        print("| %s | %s | %s | %s | %s |" % (n, m, f(med([float(r[2]) for r in ok])),
              f(med(pr)) if not m.startswith("curl") else "",
              f(med([float(r[3]) for r in ok if len(r) > 3]))))
print("\nCPU seconds per GB received: objfs's daemon (fuse, gpu) or the curl processes "
      "(curl); for the curl runs nginx's, and the machine's busy cores (all busy: the "
      "ceiling is CPU, client and server together)\n")
print("| N | mode | CPU s/GB | nginx CPU s/GB | cores busy (of %d) |" % int(sys.argv[3]))
print("|---:|---|---:|---:|---:|")
print("\n".join(cpu))
EOF
nginx_stop
exit 0
