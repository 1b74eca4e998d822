#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# load.sh: 64 concurrent readers (4 processes x 16 threads) for a bounded
# time over 200 objects served by nginx, through one mount whose block
# cache holds a fraction of them, then an unmount while they still read.
#
#   OBJFS=/path/to/objfs tests/integration/load.sh
#
# What must hold:
#  - every byte read is right: half the readers read whole objects and
#    compare sha256 with the source's, half compare random preads with the
#    source's bytes; no read fails while mounted (each open drops the
#    file's page cache, POSIX_FADV_DONTNEED, so reads reach the daemon);
#  - the daemon's VmRSS, sampled every 0.2 s, stays under cache_size +
#    OBJFS_RSS_OVERHEAD_MB (lib.sh; README "Memory"); not for sanitizer
#    builds, whose shadow memory and quarantine are no objfs memory;
#  - unmount under load: plain fusermount3 -u is refused (EBUSY: files are
#    open) and leaves the mount serving; fusermount3 -u -z (lazy) detaches
#    it at once; reads of files already open go on and stay right, opens
#    after it fail with ENOENT (the bare mount point); when the readers
#    have closed their files the daemon exits by itself, status 0, at once.
#
# LOAD_SECONDS (default 40, at most 120) is how long the readers run
# before the unmount. Exit status: 0 all passed, 1 something failed,
# 77 skipped (no /dev/fuse), 99 binary missing.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=battery.sh
. "$HERE/battery.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
WORK=$TEST_TMP/work
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}
CACHE_MB=32
OBJECTS=200
SECS=${LOAD_SECONDS:-40}
[ "$SECS" -le 120 ] || SECS=120
PROCS=4
THREADS=16

mkdir -p "$SRC" "$WORK"
python3 - "$SRC" "$OBJECTS" "$WORK/sums.json" <<'EOF' || { fail "expected to create the objects"; summary; exit 1; }
import hashlib, json, os, random, sys
src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(6)
sums = {}
for i in range(n):
    size = rng.choice([0, 1, 4095, 65539, 1 << 20, (1 << 20) + 1, (3 << 20) + 7] +
                      ([(9 << 20) + 5] if i % 20 == 0 else []))
    data = os.urandom(size)
    name = f"obj-{i:03d}.bin"
    with open(os.path.join(src, name), "wb") as f:
        f.write(data)
    sums[name] = hashlib.sha256(data).hexdigest()
json.dump(sums, open(out, "w"))
EOF
TOTAL_MB=$(du -sm "$SRC" | cut -f1)

cat >"$WORK/readers.py" <<'EOF'
import errno, hashlib, json, os, random, sys, threading, time
mnt, src, sums_file, stop_file, nthreads, seed = sys.argv[1:7]
sums = json.load(open(sums_file))
names = sorted(sums)
st = {"whole": 0, "preads": 0, "bytes": 0, "enoent_after": 0, "open_after": 0}
errors, lock = [], threading.Lock()

def unmounting():
    return os.path.exists(stop_file)

def whole(rng):
    n = rng.choice(names)
    h, got = hashlib.sha256(), 0
    fd = os.open(os.path.join(mnt, n), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # the daemon serves it, not the page cache
    was = unmounting()
    try:
        while True:
            b = os.read(fd, rng.choice([4096, 65536, 1 << 20]))
            if not b:
                break
            h.update(b)
            got += len(b)
    finally:
        os.close(fd)
    if h.hexdigest() != sums[n]:
        errors.append(f"whole read of {n}: sha256 differs from the source ({got} bytes)")
    with lock:
        st["whole"] += 1
        st["bytes"] += got
        st["open_after"] += was

def preads(rng):
    n = rng.choice(names)
    fd = os.open(os.path.join(mnt, n), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    try:
        with open(os.path.join(src, n), "rb") as s:
            size = os.fstat(s.fileno()).st_size
            for _ in range(8):
                off = rng.randrange(size + 1)
                ln = rng.choice([1, 4096, 100000, 1 << 20])
                got = os.pread(fd, ln, off)
                if got != os.pread(s.fileno(), ln, off):
                    errors.append(f"pread({n}, {ln}, {off}) differs from the source")
                with lock:
                    st["preads"] += 1
                    st["bytes"] += len(got)
    finally:
        os.close(fd)

def reader(k):
    rng = random.Random(seed + str(k))
    fn = whole if k % 2 == 0 else preads
    while not errors:
        try:
            fn(rng)
        except OSError as e:
            if unmounting() and e.errno == errno.ENOENT:
                with lock:
                    st["enoent_after"] += 1
                return          # the mount point is bare now
            errors.append(f"{fn.__name__}: {e}")

ts = [threading.Thread(target=reader, args=(k,)) for k in range(int(nthreads))]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(st))
for e in errors[:5]:
    print("ERROR", e)
sys.exit(1 if errors else 0)
EOF

nginx_start "$SRC" || { fail "expected nginx to start"; summary; exit 1; }
if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" \
	"$(opts "cache_size=${CACHE_MB}M,chunk_size=1M,prefetch_max=8M")"; then
	fail "expected the load mount to come up"
	summary
	exit 1
fi
PID=$OBJFS_PID
log "objfs pid $PID: $OBJECTS objects, $TOTAL_MB MiB, cache_size ${CACHE_MB}M, $((PROCS * THREADS)) readers for ${SECS} s"
rss_sampler "$PID" "$WORK/rss.log"
sampler=$RSS_SAMPLER

STOP=$WORK/unmounting
rpids=()
for ((p = 0; p < PROCS; p++)); do
	python3 "$WORK/readers.py" "$MNT" "$SRC" "$WORK/sums.json" "$STOP" "$THREADS" "p$p" \
		>"$WORK/readers.$p.out" 2>&1 &
	rpids+=($!)
done

sleep "$SECS"
alive=0
for p in "${rpids[@]}"; do _pid_alive "$p" && alive=$((alive + 1)); done
if [ "$alive" -ne "$PROCS" ]; then
	fail "load: expected all $PROCS reader processes to run for ${SECS} s, $alive are left: $(cat "$WORK"/readers.*.out | head -c 600)"
fi

# Unmount under load: plain first (refused while files are open), then lazy.
touch "$STOP"
out=$(timeout 20 fusermount3 -u "$MNT" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && is_mounted "$MNT" && _pid_alive "$PID"; then
	pass "unmount under load: plain fusermount3 -u is refused while files are open ($out), the mount stays"
	t0=$SECONDS
	out=$(timeout 20 fusermount3 -u -z "$MNT" 2>&1)
	rc=$?
	if [ "$rc" -eq 0 ] && ! is_mounted "$MNT"; then
		pass "unmount under load: fusermount3 -u -z detached the mount in $((SECONDS - t0)) s"
	else
		fail "unmount under load: expected fusermount3 -u -z to detach $MNT, got exit $rc: $out"
	fi
elif [ "$rc" -eq 0 ] && ! is_mounted "$MNT"; then
	note "plain fusermount3 -u found no file open at that instant and unmounted"
	pass "unmount under load: fusermount3 -u detached the mount"
else
	fail "unmount under load: expected fusermount3 -u to be refused (EBUSY) or to unmount, got exit $rc ($out), mounted: $(is_mounted "$MNT" && echo yes || echo no)"
fi

# The readers end: their open files are served to the end, new opens find
# the bare mount point.
bad=0
for ((p = 0; p < PROCS; p++)); do
	rc=0
	wait "${rpids[$p]}" || rc=$?
	[ "$rc" -eq 0 ] || bad=$((bad + 1))
done
readers_done=$SECONDS
res=$(cat "$WORK"/readers.*.out)
stats=$(python3 -c '
import json, sys
t = {}
for line in sys.stdin:
    if line.startswith("{"):
        for k, v in json.loads(line).items():
            t[k] = t.get(k, 0) + v
print(" ".join(f"{k}={v}" for k, v in t.items()))' <<<"$res")
if [ "$bad" -eq 0 ] && [[ $stats == *"enoent_after=$((PROCS * THREADS))"* ]]; then
	pass "64 readers over $OBJECTS objects ($TOTAL_MB MiB, cache ${CACHE_MB} MiB): every byte right, no error while mounted, each ended on ENOENT after the unmount ($stats)"
else
	fail "readers: expected every byte right and each of the $((PROCS * THREADS)) to end on ENOENT after the unmount; $bad processes failed ($stats):"
	grep -h '^ERROR' "$WORK"/readers.*.out | head -5 | sed 's/^/    | /'
fi

# The daemon exits once the last file is closed.
for ((i = 0; i < 300; i++)); do
	_pid_alive "$PID" || break
	sleep 0.1
done
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
if _pid_alive "$PID"; then
	fail "unmount under load: expected objfs (pid $PID) to exit once the readers closed their files; still running 30 s later"
else
	xst=0
	wait "$PID" 2>/dev/null || xst=$?
	unset '_MOUNT_PID[$MNT]'
	if [ "$xst" -eq 0 ]; then
		pass "unmount under load: objfs exited with status 0, $((SECONDS - readers_done)) s after the last reader"
	else
		fail "unmount under load: expected objfs to exit with status 0, got $xst; its log:"
		tail -n 30 "$OBJFS_LOG" | sed 's/^/    | /'
	fi
fi

check_rss_cap "$WORK/rss.log" "$CACHE_MB"
t_sanitizer_logs
summary
