#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# stress.sh: 32 concurrent readers, half reading whole objects sequentially,
# half reading random ranges, over 20 objects served by nginx, through one
# objfs mount with a small block cache. Every byte read is compared with the
# source; readers are then SIGKILLed mid-read by the hundred; the daemon's
# RSS is sampled from /proc all along and must stay
# under cache_size + 64 MiB (the engine issue's bound); the mount must
# unmount cleanly afterwards.
#
#   OBJFS=/path/to/objfs tests/integration/stress.sh
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no FUSE).
# The RSS bound is not checked for sanitizer builds (ASan's shadow memory
# and quarantine are not objfs's memory); everything else is.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
CACHE_MB=64
SECONDS_TO_RUN=${OBJFS_STRESS_SECONDS:-20}

mkdir -p "$SRC"
python3 - "$SRC" <<'EOF' || { fail "expected to create 20 source objects"; summary; exit 1; }
import os, random, sys
src = sys.argv[1]
rng = random.Random(7)
for i in range(20):
    size = rng.choice([1, 4095, 1 << 20, (3 << 20) + 5, (9 << 20) + 11, (17 << 20) + 3])
    with open(os.path.join(src, f"obj-{i:02d}.bin"), "wb") as f:
        f.write(os.urandom(size))
EOF

if ! nginx_start "$SRC"; then
	fail "expected nginx to start serving $SRC"
	summary
	exit 1
fi
if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" \
	"cache_size=${CACHE_MB}M,chunk_size=1M,prefetch_max=8M"; then
	fail "expected the stress mount to come up"
	summary
	exit 1
fi
PID=$OBJFS_PID

# Sample VmRSS of the daemon every 0.2 s while the readers run.
rss_log=$TEST_TMP/rss.log
rss_sampler "$PID" "$rss_log"
sampler=$RSS_SAMPLER

rc=0
timeout $((SECONDS_TO_RUN + 120)) python3 - "$SRC" "$MNT" "$SECONDS_TO_RUN" <<'EOF' >"$TEST_TMP/readers.out" 2>&1 || rc=$?
import hashlib, os, random, sys, threading, time
src, mnt, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = sorted(os.listdir(src))
stop = time.monotonic() + secs
stats = {"seq": 0, "rand": 0, "bytes": 0}
errors = []
lock = threading.Lock()

def seq_reader(k):
    rng = random.Random(k)
    while time.monotonic() < stop and not errors:
        n = rng.choice(names)
        bs = rng.choice([4096, 65536, 1 << 20, 3 << 20])
        h = hashlib.sha256()
        with open(os.path.join(mnt, n), "rb", buffering=0) as f:
            while True:
                b = f.read(bs)
                if not b:
                    break
                h.update(b)
        with open(os.path.join(src, n), "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        if h.hexdigest() != want:
            errors.append(f"sequential read of {n} (bs {bs}): sha256 differs from the source")
        with lock:
            stats["seq"] += 1

def rand_reader(k):
    rng = random.Random(1000 + k)
    fds = {}
    try:
        while time.monotonic() < stop and not errors:
            n = rng.choice(names)
            if n not in fds:
                fds[n] = (os.open(os.path.join(mnt, n), os.O_RDONLY),
                          os.open(os.path.join(src, n), os.O_RDONLY))
            mfd, sfd = fds[n]
            size = os.fstat(sfd).st_size
            off = rng.randrange(0, size + 100)
            ln = rng.choice([1, 511, 4096, 100000, 1 << 20, 5 << 20])
            got = os.pread(mfd, ln, off)
            want = os.pread(sfd, ln, off)
            if got != want:
                errors.append(f"pread({n}, {ln}, {off}): {len(got)} bytes differ from the "
                              f"source's {len(want)}")
            with lock:
                stats["rand"] += 1
                stats["bytes"] += len(got)
    finally:
        for a, b in fds.values():
            os.close(a)
            os.close(b)

def guard(fn, k):
    try:
        fn(k)
    except OSError as e:
        errors.append(f"{fn.__name__} {k}: {e}")

ts = [threading.Thread(target=guard, args=(seq_reader if i % 2 == 0 else rand_reader, i))
      for i in range(32)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(f"whole-object reads {stats['seq']}, random reads {stats['rand']} "
      f"({stats['bytes']} bytes)")
for e in errors[:10]:
    print("ERROR", e)
sys.exit(1 if errors or stats["seq"] == 0 or stats["rand"] == 0 else 0)
EOF
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
res=$(head -c 2000 "$TEST_TMP/readers.out")
if [ "$rc" -eq 0 ]; then
	pass "32 readers (16 sequential, 16 random) for ${SECONDS_TO_RUN}s over 20 objects, every byte as in the source: $res"
else
	fail "32 readers: expected every byte to match the source, got exit $rc: $res"
fi

# Readers killed mid-read (SIGKILL does not wait for FUSE answers: RELEASE
# can reach the daemon while their READs are still being served), 8 at a
# time, of objects and of the stats file; the daemon must stay up and serve
# correct bytes afterwards.
(
	for ((round = 0; round < 25; round++)); do
		pids=()
		for n in 00 03 07 11 15 19 stats stats; do
			f=$MNT/obj-$n.bin
			[ "$n" = stats ] && f=$MNT/.objfs-stats
			sh -c 'while :; do cat "$1"; done' sh "$f" >/dev/null 2>&1 &
			pids+=($!)
		done
		sleep "0.0$((RANDOM % 9 + 1))"
		for p in "${pids[@]}"; do
			pkill -KILL -P "$p" 2>/dev/null
			kill -KILL "$p" 2>/dev/null
		done
		wait
	done
) 2>/dev/null
if _pid_alive "$PID" && cmp -s "$MNT/obj-19.bin" "$SRC/obj-19.bin"; then
	pass "200 readers killed mid-read (objects and .objfs-stats): objfs still serves correct bytes"
else
	fail "killed readers: expected objfs (pid $PID) alive and obj-19.bin equal to the source"
fi

check_rss_cap "$rss_log" "$CACHE_MB"

if ! _pid_alive "$PID"; then
	fail "expected objfs (pid $PID) to survive the stress run"
else
	check_unmount "stress" "$MNT"
fi
summary
