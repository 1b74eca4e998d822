#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# side_gpu.sh: the GPU side API into device memory, end to end: nginx, a
# real mount, libobjfs, CUDA (tests/gpu/gpu_fill does the GPU work and
# compares checksums on the GPU), over HTTP and, where openssl is, over
# HTTPS (TLS 1.3 records decrypted by objfs itself into the ring slots).
# Exits 77 without a usable GPU or FUSE.
#
#   OBJFS=/path/to/objfs tests/gpu/side_gpu.sh
#
# Environment: GPU_FILL (default: next to objfs, ../tests/gpu/gpu_fill),
# SIDE_GPU_MAX (largest fill, default 1073741824), SIDE_GPU_BENCH=1 to add
# the throughput run on a 1 GiB file, SIDE_GPU_OPTS (more mount options for
# the checks, e.g. max_connections=1: fills through joined GETs).

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../integration/lib.sh
. "$HERE/../integration/lib.sh"

skip_unless_fuse
require_objfs
FILL=$(test_binary gpu/gpu_fill GPU_FILL) || exit 99
gpu_probe "$FILL"
MAX=${SIDE_GPU_MAX:-1073741824}

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT_SLOW=$TEST_TMP/mnt-slow
mkdir -p "$SRC"
head -c $((MAX + 64 * 1024 * 1024 + 13)) /dev/urandom >"$SRC/big.bin"
# beside it, for python_check.py's batch of files opened together
head -c 5003 /dev/urandom >"$SRC/small1.bin"
head -c 70000 /dev/urandom >"$SRC/small2.bin"
# and safetensors files for load_safetensors: tensors at offsets no dtype
# aligns (the format does not), and one whose offsets point into its header
python3 - "$SRC" <<'PY'
import json, os, struct, sys
def write(path, header, data):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
write(os.path.join(sys.argv[1], "model.safetensors"),
      {"__metadata__": {"format": "pt"},
       "a": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]},
       "b": {"dtype": "F32", "shape": [2], "data_offsets": [2, 10]},
       "c": {"dtype": "U8", "shape": [3], "data_offsets": [10, 13]},
       "d": {"dtype": "I32", "shape": [2, 2], "data_offsets": [13, 29]},
       "e": {"dtype": "BF16", "shape": [0], "data_offsets": [29, 29]},
       "f": {"dtype": "I64", "shape": [3], "data_offsets": [29, 53]}}, os.urandom(53))
write(os.path.join(sys.argv[1], "bad.safetensors"),
      {"x": {"dtype": "I32", "shape": [2], "data_offsets": [-8, 0]}}, os.urandom(16))
PY

# run_fill LABEL ARGS...: run gpu_fill, pass if it exits 0, show its lines
run_fill() {
	local label=$1 out rc
	shift
	out=$(timeout 300 "$@" 2>&1)
	rc=$?
	printf '%s\n' "$out" | sed 's/^/    | /'
	if [ "$rc" -eq 0 ]; then pass "$label"; else fail "$label (exit $rc)"; fi
}

# an HTTPS server (TLS 1.3) beside it: fills through objfs's own TLS
# record reader (src/net/tls_rx.c), below; left out without openssl
HTTPS_PORT=$(free_port)
if command -v openssl >/dev/null &&
	NGINX_EXTRA_CONF=$(nginx_tls_server "$HTTPS_PORT" "$SRC" "ssl_protocols TLSv1.3;"); then
	export NGINX_EXTRA_CONF
else
	HTTPS_PORT=
fi
nginx_start "$SRC" || exit 99
URL=http://127.0.0.1:$NGINX_PORT
mount_objfs "$URL/data/" "$MNT" "cache_size=4G${SIDE_GPU_OPTS:+,$SIDE_GPU_OPTS}" || exit 99

run_fill "fills of 1 B to $MAX B at odd offsets into odd device offsets (stream memory operations)" \
	"$FILL" sizes "$MNT/big.bin" "$SRC/big.bin" "$MAX"
OBJFS_GPU_NO_MEMOPS=1 run_fill "fills up to 64 MiB through the host-function fallback" \
	"$FILL" sizes "$MNT/big.bin" "$SRC/big.bin" $((65 * 1024 * 1024))
run_fill "stream order: writer kernel, fill, reader kernel on one stream, no host sync" \
	"$FILL" order "$MNT/big.bin" "$SRC/big.bin"
run_fill "cudaMallocAsync pool memory" "$FILL" pool "$MNT/big.bin" "$SRC/big.bin"
export OBJFS_LIB=${OBJFS_LIB:-$(dirname "$OBJFS")/../lib/.libs/libobjfs.so.0}
if [ -e "$OBJFS_LIB" ] && command -v python3 >/dev/null; then
	run_fill "Python binding: PyTorch / CuPy (where installed) and host buffers" \
		python3 "$HERE/python_check.py" "$MNT/big.bin" "$SRC/big.bin"
	if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
		PYTHONPATH=$HERE/../../contrib/python run_fill "example: load a shard into a torch tensor" \
			python3 "$HERE/../../contrib/python/load_shard.py" "$MNT/big.bin"
	fi
else
	note "no shared libobjfs at $OBJFS_LIB or no python3: Python binding not tested"
fi
if [ "${SIDE_GPU_BENCH:-0}" = 1 ]; then
	run_fill "benchmark" "$FILL" bench "$MNT/big.bin"
fi
note "requests: $(grep -E '^(requests|requests_direct|requests_joined) ' "$MNT/.objfs-stats" | tr '\n' ' ')"
if unmount_objfs "$MNT" && [ "$UNMOUNT_STATUS" = 0 ]; then
	pass "unmount after the GPU tests: objfs exited 0"
else
	fail "expected a clean unmount, got how='$UNMOUNT_HOW' status='$UNMOUNT_STATUS'"
fi

# Over HTTPS: kept connections' TLS 1.3 records decrypted by objfs itself
# straight into the ring slots, checksummed on the GPU as above.
if [ -n "$HTTPS_PORT" ]; then
	MNT_TLS=$TEST_TMP/mnt-https
	if mount_objfs "https://127.0.0.1:$HTTPS_PORT/data/" "$MNT_TLS" \
		"ca_file=$TLS_DIR/ca.pem,cache_size=4G"; then
		run_fill "fills over HTTPS, TLS 1.3 records read by objfs (tls_rx)" \
			"$FILL" sizes "$MNT_TLS/big.bin" "$SRC/big.bin" $((256 * 1024 * 1024))
		own=$(awk '$1 == "tls_own_conns" { print $2 }' "$MNT_TLS/.objfs-stats")
		check "over HTTPS: connections whose records objfs read itself (tls_own_conns=$own)" \
			[ "${own:-0}" -ge 1 ]
		check_unmount "https mount after the GPU fills" "$MNT_TLS"
	else
		fail "expected the HTTPS mount to come up"
	fi
else
	note "no openssl: fills over HTTPS not tested"
fi

# Daemon killed mid-fill: throttled mount, so the fill is surely in flight.
# nginx lets each request have its first second's bytes (2 MB) at once:
# 8 MiB slots make 4 MiB GETs, which it throttles.
mount_objfs "$URL/slow/" "$MNT_SLOW" "max_connections=2,ring_slot_size=8M" || exit 99
DAEMON=$OBJFS_PID
"$FILL" kill "$MNT_SLOW/big.bin" >"$TEST_TMP/kill.out" 2>&1 &
KPID=$!
for ((i = 0; i < 300; i++)); do
	grep -q enqueued "$TEST_TMP/kill.out" && break
	sleep 0.1
done
sleep 1
killed_at=$(date +%s.%N)
kill -KILL "$DAEMON"
wait "$KPID"
line=$(grep '^stream' "$TEST_TMP/kill.out")
echo "    | $line"
done_at=${line##* at }
case $line in
"stream completed nread=-5 at "*)
	if awk -v a="$killed_at" -v b="$done_at" 'BEGIN { exit !(b - a < 5) }'; then
		pass "daemon killed mid-fill: the stream completed with -EIO $(awk -v a="$killed_at" -v b="$done_at" 'BEGIN { printf "%.3f", b - a }') s after the kill"
	else
		fail "daemon killed mid-fill: -EIO came, but $(awk -v a="$killed_at" -v b="$done_at" 'BEGIN { print b - a }') s after the kill (want < 5 s)"
	fi
	;;
*) fail "daemon killed mid-fill: expected the stream to complete with nread=-5 (EIO), got '$line'" ;;
esac
summary
