#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# faults.sh: objfs reading through a fault-injecting proxy (faultproxy.py)
# placed between it and nginx (and Ceph RGW, when there), every byte checked.
#
#   OBJFS=/path/to/objfs tests/integration/faults.sh
#
# What it proves (figures in docs/reliability.md):
#   1. The checker can fail: a copy with one flipped byte and a cut copy are
#      caught as wrong bytes and short reads.
#   2. Random ranged reads (reader.py below: 8 threads, pread of random
#      offsets and sizes, O_DIRECT or buffered, some sequential runs) with
#      faults of every kind (503 SlowDown bursts, 500s, resets and truncations
#      mid-body, stalled bodies, wrong Content-Range, 200 instead of 206,
#      changed ETags, slow first bytes) injected into all requests at 0%, 1%,
#      5% and 20%: zero wrong bytes, every failure retried away or EIO (any
#      other errno fails), EIOs under half the fault rate (retries work), no
#      pread slower than the bound below (a buffered one: twice it, the
#      kernel asks once more for a page whose readahead failed), faults of
#      every kind injected.
#   3. Each kind alone on every ranged GET: the reads all fail with EIO after
#      the retries (or, for 200-instead-of-206 and short first-byte delays,
#      succeed), never with wrong bytes, within the bound; a stalled read
#      takes at least (retries+1) x timeout (it was retried, not cut early).
#   4. Listings and HEADs under faults (list_ttl=0, entry/attr_timeout=0, one
#      thread): names and sizes right or EIO, within the bound.
#   5. An unresolvable endpoint host (objfs-nonexistent.invalid), HTTP and S3:
#      the mount fails with one message naming the host, within the bound,
#      nothing left mounted.
#   6. With Ceph RGW (tests/deps.sh installs it): the same random reads at 5%
#      through the proxy into a SigV4-checking S3 server.
#   7. The daemon is alive at the end and unmounts cleanly (fusermount3 -u,
#      exit status 0); lib.sh's trap unmounts on every other exit path; no
#      sanitizer report in any objfs log.
#   8. Over HTTPS: nginx with a test CA in front of the proxy,
#      mounts with direct_recv=on (OpenSSL's SSL_read on objfs's own
#      receive path) and =off (libcurl): random reads at 5%, then each
#      kind alone as in 3; what nginx sent and what objfs logged per kind
#      (the fault must reach objfs through nginx, a 200 as a 200).
#
# The bound for one read: (retries + 1) x timeout + the retry backoffs
# (100 ms doubling, capped at 5 s) + slack (4 s, 8 s for sanitizer builds);
# mounts use timeout=2,retries=2, so 10.3 s (14.3 s).
#
# The FIGURES block at the end is what docs/reliability.md records.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse
# only; a missing package is a skip on a developer machine, a failure under
# CI=true), 99 objfs binary missing.
#
# Environment: OBJFS, OBJFS_TEST_KEEP (lib.sh); FAULTS_READS ("RATE:N ..."
# for part 2, default "0:600 0.01:2000 0.05:2000 0.2:1500"; the figures in
# docs/reliability.md used "0:1000 0.01:3000 0.05:3500 0.2:2500"), FAULTS_THREADS
# (8), FAULTS_SEED (1), FAULTS_RGW (1; 0 leaves RGW out), FAULTS_TLS (1; 0
# leaves HTTPS out), FAULTS_TLS_READS (part 8's random reads per mount,
# 500), FAULTS_RGW_READS (random reads through RGW, 1200), RGW_* (rgw.sh).

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=rgw.sh
. "$HERE/rgw.sh"
# shellcheck source=battery.sh
. "$HERE/battery.sh" # t_sanitizer_logs

[ -c /dev/fuse ] || skip "/dev/fuse is missing"

# Missing packages: skip on a developer machine, fail in CI.
need_or_skip() {
	if [ "${CI:-}" = true ]; then
		echo "FAIL: $* (CI=true: tests/deps.sh should have installed it)"
		exit 1
	fi
	skip "$*"
}
PY=/usr/bin/python3 # Debian's: a pyenv python may come first on PATH
[ -x "$PY" ] || need_or_skip "$PY is missing (python3)"
command -v fusermount3 >/dev/null 2>&1 || need_or_skip "fusermount3 is not installed (fuse3)"
[ -x "$NGINX" ] || need_or_skip "nginx is not installed (looked for $NGINX)"
command -v curl >/dev/null 2>&1 || need_or_skip "curl is not installed"
require_objfs

TIMEOUT=2
RETRIES=2
THREADS=${FAULTS_THREADS:-8}
SEED=${FAULTS_SEED:-1}
# Fewer reads than the figures in docs/reliability.md (those counts: see
# the header) keep the whole suite under its 45 minutes on two cores; each
# rate still meets every kind of fault several times.
READS=${FAULTS_READS:-"0:600 0.01:2000 0.05:2000 0.2:1500"}
TLS_READS=${FAULTS_TLS_READS:-500}
RGW_READS=${FAULTS_RGW_READS:-1200}
SLACK=4
if objfs_sanitized; then
	SLACK=8
	# The sanitizer pass looks for memory errors on every fault path; the
	# rates and their statistics are the default build's. A third of the
	# reads still meets each kind of fault many times over (and keeps the
	# whole suite under its time budget on two cores).
	READS=${FAULTS_READS:-"0:200 0.01:700 0.05:800 0.2:600"}
	TLS_READS=${FAULTS_TLS_READS:-200}
	RGW_READS=${FAULTS_RGW_READS:-500}
fi
# (retries+1) x timeout + backoffs (100 ms << attempt-1, capped at 5 s) + slack
BOUND=$("$PY" -c "import sys; t, r, s = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
print(round((r + 1) * t + sum(min(0.1 * 2 ** a, 5.0) for a in range(r)) + s, 2))" \
	"$TIMEOUT" "$RETRIES" "$SLACK")
MOUNT_OPTS="timeout=$TIMEOUT,retries=$RETRIES,chunk_size=256K,cache_size=4M,prefetch_max=2M"
MOUNT_OPTS+=",max_connections=64,attr_timeout=3600,entry_timeout=3600,list_ttl=3600"

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT_META=$TEST_TMP/mnt-meta
MNT_DNS=$TEST_TMP/mnt-dns
MNT_S3=$TEST_TMP/mnt-s3
MNT_TLS=$TEST_TMP/mnt-tls
WORK=$TEST_TMP/work
mkdir -p "$SRC" "$WORK" "$MNT_DNS"

# figure TABLE ROW: one row of a figures table (printed at the end)
figure() {
	printf '%s\n' "$2" >>"$WORK/fig-$1"
}

# per_kind PROXY_JSON: faults per kind, slash-separated, in the header's order
per_kind() {
	"$PY" - "$1" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))["faults"]
print("/".join(str(f[k]) for k in ("slowdown", "error500", "reset", "truncate", "stall",
                                   "badrange", "full200", "etag", "slowfirst")))
EOF
}

# ---------------------------------------------------------------- helpers

# jget FILE KEY...: the JSON value at FILE[KEY][KEY]... (dicts printed compact)
jget() {
	"$PY" - "$@" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
EOF
}

# fp_start UPSTREAM NAME [PORT]: start faultproxy.py in front of UPSTREAM
# (host:port) on 127.0.0.1:PORT (default: a free one); sets FP_PORT. A
# background job of this shell: lib.sh's cleanup ends it.
fp_start() {
	local up=$1 name=$2 i pf=$WORK/fp-$2.port
	"$PY" "$HERE/faultproxy.py" --upstream "$up" --port-file "$pf" --seed "$SEED" \
		--timeout "$TIMEOUT" --log "$WORK/fp-$name.log" --listen "127.0.0.1:${3:-0}" \
		>"$WORK/fp-$name.out" 2>&1 &
	for ((i = 0; i < 100; i++)); do
		if [ -s "$pf" ]; then
			FP_PORT=$(cat "$pf")
			curl -sf -o /dev/null "http://127.0.0.1:$FP_PORT/_faultproxy/stats" && return 0
		fi
		sleep 0.1
	done
	echo "fp_start: faultproxy.py in front of $up did not come up: $(cat "$WORK/fp-$name.out")" >&2
	return 1
}

# fp PORT ACTION [QUERY]: the proxy's control interface (config, stats, reset);
# the answer (JSON) goes to $WORK/fp.json.
fp() {
	curl -sf -o "$WORK/fp.json" "http://127.0.0.1:$1/_faultproxy/$2${3:+?$3}"
}

# settle PORT: wait (up to 60 s) until the proxy has seen no request in flight
# at three polls in a row, 0.2 s apart (objfs waits at most 200 ms before a
# retry with retries=2), so the counters read next belong to one phase.
settle() {
	local i quiet=0
	for ((i = 0; i < 300; i++)); do
		fp "$1" stats || return 1
		if grep -q '"inflight": 0[,}]' "$WORK/fp.json"; then
			quiet=$((quiet + 1))
			[ "$quiet" -ge 3 ] && return 0
		else
			quiet=0
		fi
		sleep 0.2
	done
	echo "settle: the proxy on port $1 never went quiet" >&2
	return 1
}

# ostat MNT KEY: a counter from MNT/.objfs-stats
ostat() {
	sed -n "s/^$2 \\([0-9]*\\)\$/\\1/p" "$1/.objfs-stats" 2>/dev/null
}

# The reader: random preads through the mount, every byte checked against
# the source, every failure classified, every latency measured.
cat >"$WORK/reader.py" <<'EOF'
"""reader.py: ranged reads through an objfs mount, every byte checked.

Threads share --reads preads over the source's regular files (or --files).
A handle is opened O_DIRECT (every read reaches objfs, not the page cache)
or, one in five, buffered (--direct: always O_DIRECT). An operation is a
pread at a random offset (some ending at EOF, some past it) of 1 byte to
1.5 MiB, or, one in twenty, a run of 8 sequential 128 KiB preads (objfs's
sequential mode and prefetch; --no-seq: none; --in-bounds: no read starts
at or past EOF, so every read needs the server); one in fifty reopens first.
A read must return exactly the source's bytes or fail with EIO; any other
errno is counted as other_errors. Reads are made as careful programs make
them: a short count before EOF is followed by a pread of the rest, because
the kernel's page cache returns the bytes it copied before a page that
failed to read (the next read reports the error, or, the fetch retried,
succeeds). Such a read counts as EIO (short_then_eio) once the bytes it did
return are checked, or as one read of the whole range (short_then_rest);
a short count whose rest cannot be read (EOF before the source's end) is
wrong. Latencies of
opens and of each pread are measured; those over --bound are counted, a
buffered pread against twice it: the kernel reads a page whose readahead
failed once more itself (read_folio) before it gives up, two requests to
objfs one after the other, each within the bound (once in CI under ASan:
a 915,678-byte buffered read, its readahead and then its own retry each
failing after the stalls, 26 s over the two preads of pread_full). Figures
go to --out as JSON.
"""
import argparse, errno, json, mmap, os, random, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--mnt", required=True)
ap.add_argument("--src", required=True)
ap.add_argument("--reads", type=int, required=True)
ap.add_argument("--threads", type=int, default=6)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--bound", type=float, required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--files", default="")
ap.add_argument("--direct", action="store_true")
# local files (the checker's own test): never O_DIRECT, which a disk file
# system refuses at unaligned offsets (EINVAL), while FUSE takes any offset
ap.add_argument("--buffered", action="store_true")
ap.add_argument("--no-seq", action="store_true")
ap.add_argument("--in-bounds", action="store_true")
a = ap.parse_args()

names = [n for n in a.files.split(",") if n] or sorted(
    n for n in os.listdir(a.src)
    if os.path.isfile(os.path.join(a.src, n)) and os.path.getsize(os.path.join(a.src, n)))
data = {}
for n in names:
    with open(os.path.join(a.src, n), "rb") as f:
        data[n] = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)

lock = threading.Lock()
left = [a.reads]
res = {"reads": 0, "ok": 0, "bytes": 0, "eio": 0, "other_errors": 0, "wrong_reads": 0,
       "wrong_bytes": 0, "short_reads": 0, "short_then_eio": 0, "opens": 0, "open_eio": 0,
       "short_then_rest": 0, "over_bound": 0,
       "max_latency_s": 0.0, "max_latency_op": "", "min_eio_latency_s": None,
       "direct_reads": 0, "buffered_reads": 0, "sequential_reads": 0, "past_eof_reads": 0}
lats = []
details = []


def note(msg):
    if len(details) < 20:
        details.append(msg)


def take():
    with lock:
        if left[0] <= 0:
            return False
        left[0] -= 1
        return True


def timed(desc, fn):
    t = time.monotonic()
    try:
        return fn(), None, time.monotonic() - t
    except OSError as e:
        return None, e, time.monotonic() - t


def account(desc, dt, bound):
    lats.append(dt)
    if dt > res["max_latency_s"]:
        res["max_latency_s"], res["max_latency_op"] = dt, desc
    if dt > bound:
        res["over_bound"] += 1
        note("over the %.2f s bound: %s took %.2f s" % (bound, desc, dt))


def failed(desc, e, dt):
    """Counts an error; True when it is EIO."""
    if e.errno == errno.EIO:
        m = res["min_eio_latency_s"]
        res["min_eio_latency_s"] = dt if m is None else min(m, dt)
        return True
    res["other_errors"] += 1
    note("%s: %s (expected the bytes or EIO)" % (desc, e))
    return False


def check(name, off, n, got, kind):
    want = data[name][off:off + n]
    res["ok"] += 1
    res["bytes"] += len(got)
    if got == want:
        return
    res["wrong_reads"] += 1
    if len(got) < len(want) and want.startswith(got):
        res["short_reads"] += 1
    diff = sum(1 for x, y in zip(got, want) if x != y) + abs(len(got) - len(want))
    res["wrong_bytes"] += diff
    first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
    note("WRONG %s pread(%d bytes at %d) [%s]: got %d bytes, want %d, %d differ, first "
         "difference at +%s" % (name, n, off, kind, len(got), len(want), diff, first))


def pread_timed(fd, n, off, lat):
    """os.pread; the longest one's seconds in lat[0], also when it fails."""
    t = time.monotonic()
    try:
        return os.pread(fd, n, off)
    finally:
        lat[0] = max(lat[0], time.monotonic() - t)


def pread_full(fd, n, off, size, part, lat):
    """os.pread, and again for the rest after a short count before EOF (see
    the top). Bytes returned before an error are left in part[0]."""
    got = pread_timed(fd, n, off, lat)
    while len(got) < n and off + len(got) < size:
        part[0] = got
        more = pread_timed(fd, n - len(got), off + len(got), lat)
        if not more:
            break
        got += more
    return got


def size_pick(rng):
    r = rng.random()
    if r < 0.4:
        return rng.randint(1, 4096)
    if r < 0.7:
        return rng.randint(4097, 65536)
    if r < 0.9:
        return rng.randint(65537, 512 << 10)
    return rng.randint((512 << 10) + 1, 3 << 19)


def worker(k):
    rng = random.Random(a.seed * 1000 + k)
    fds = {}
    try:
        while True:
            name = rng.choice(names)
            size = len(data[name])
            if name in fds and rng.random() < 0.02:
                os.close(fds.pop(name)[0])
            if name not in fds:
                direct = not a.buffered and (a.direct or rng.random() < 0.8)
                flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
                path = os.path.join(a.mnt, name)
                desc = "open(%s)" % name
                fd, e, dt = timed(desc, lambda: os.open(path, flags))
                with lock:
                    res["opens"] += 1
                    account(desc, dt, a.bound)
                    if e:
                        res["open_eio"] += failed(desc, e, dt)
                if e:
                    if left[0] <= 0:
                        return
                    continue
                fds[name] = (fd, "direct" if direct else "buffered")
            fd, kind = fds[name]
            bound = a.bound * (2 if kind == "buffered" else 1)
            if not a.no_seq and rng.random() < 0.05:
                off, n, steps, kind = rng.randrange(0, size), 128 << 10, 8, "sequential"
            else:
                r, n, steps = rng.random(), size_pick(rng), 1
                if a.in_bounds:
                    off = rng.randrange(0, size)
                elif r < 0.05:
                    off = max(0, size - rng.randint(1, n))        # ends at EOF
                elif r < 0.07:
                    off = size + rng.randint(0, 4096)             # at or past EOF
                else:
                    off = rng.randrange(0, size)
            for i in range(steps):
                if not take():
                    return
                o = off + i * n
                desc = "pread(%s, %d bytes at %d) %s" % (name, n, o, kind)
                part, lat = [b""], [0.0]
                got, e, dt = timed(desc, lambda: pread_full(fd, n, o, size, part, lat))
                with lock:
                    res["reads"] += 1
                    res[kind + "_reads"] += 1
                    if o >= size:
                        res["past_eof_reads"] += 1
                    account(desc, lat[0], bound)
                    if e and part[0]:
                        # the bytes before the error must be right too
                        res["short_then_eio"] += 1
                        check(name, o, len(part[0]), part[0], kind)
                        res["ok"] -= 1
                    if e:
                        res["eio"] += failed(desc, e, dt)
                    else:
                        res["short_then_rest"] += bool(part[0])
                        check(name, o, n, got, kind)
                if e:
                    break
    finally:
        for fd, _ in fds.values():
            os.close(fd)


t0 = time.monotonic()
ts = [threading.Thread(target=worker, args=(i,)) for i in range(a.threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
res["elapsed_s"] = round(time.monotonic() - t0, 2)
lats.sort()
if lats:
    res["p50_latency_s"] = round(lats[len(lats) // 2], 4)
    res["p99_latency_s"] = round(lats[min(len(lats) - 1, len(lats) * 99 // 100)], 4)
res["max_latency_s"] = round(res["max_latency_s"], 3)
res["details"] = details
with open(a.out, "w") as f:
    json.dump(res, f, indent=1, sort_keys=True)
EOF

# phase LABEL MNT PORT QUERY OUT READER-ARGS...: one phase of reads. Waits
# for the proxy to be quiet, configures it (QUERY, plus the seed), zeroes its
# counters, runs the reader (bounded by a generous timeout, so a hang fails
# instead of blocking the suite), waits for quiet again, keeps the proxy's
# counters in OUT.proxy and sets P_RETRIES and P_ERRS, what objfs's retries
# and failed requests counters grew by. Non-zero (after a fail line) when the
# phase could not run.
phase() {
	local label=$1 mnt=$2 port=$3 query=$4 out=$5 rc=0 r0 e0
	shift 5
	if ! { settle "$port" && fp "$port" config "$query&seed=$SEED" && fp "$port" reset; }; then
		fail "$label: expected the proxy on port $port to take its configuration"
		return 1
	fi
	r0=$(ostat "$mnt" retries)
	e0=$(ostat "$mnt" request_errors)
	timeout 900 "$PY" "$WORK/reader.py" --mnt "$mnt" --src "$SRC" --threads "$THREADS" \
		--seed "$SEED" --bound "$BOUND" --out "$out" "$@" >"$out.log" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ] || [ ! -s "$out" ]; then
		fail "$label: expected the reader to finish, got exit $rc: $(tail -c 600 "$out.log")"
		return 1
	fi
	settle "$port"
	fp "$port" stats
	cp "$WORK/fp.json" "$out.proxy"
	P_RETRIES=$(($(ostat "$mnt" retries) - r0))
	P_ERRS=$(($(ostat "$mnt" request_errors) - e0))
}

# details OUT: the reader's first notes, indented
details() {
	jget "$1" details | "$PY" -c 'import json, sys
for d in json.load(sys.stdin)[:8]:
    print("    |", d)'
}

# ---------------------------------------------------------------- test data

# Objects up to 8 MiB (objfs's seek slack) are read through the block cache
# and its prefetch, whatever the offsets; the two larger ones switch to
# random mode, where a miss is fetched as exactly the range asked for. The
# fresh objects are read only by part 3.
"$PY" - "$SRC" <<'EOF' || { fail "expected to create the source objects"; summary; exit 1; }
import os, random, sys
rng = random.Random(6)
sizes = [1, 4095, 70000, 300001, 600000, 900000, (1 << 20) - 1, 1 << 20,
         (3 << 20) + 5, (4 << 20) + 1, (5 << 20) + 11, (6 << 20) + 3, (7 << 20) + 100, 8 << 20]
# past objfs's 8 MiB seek slack: far random reads switch a handle to random
# mode, where misses are fetched range by range, not as cache blocks
sizes += [(24 << 20) + 17, (40 << 20) + 9]
for n, s in (("fresh-fail.bin", (6 << 20) + 7), ("fresh-ok.bin", (5 << 20) + 3),
             ("fresh-stall.bin", (2 << 20) + 1)):
    with open(os.path.join(sys.argv[1], n), "wb") as f:
        f.write(rng.randbytes(s))
for i, s in enumerate(sizes):
    with open(os.path.join(sys.argv[1], "obj-%02d.bin" % i), "wb") as f:
        f.write(rng.randbytes(s))
EOF
RANDOM_FILES=$(cd "$SRC" && printf '%s,' obj-*.bin)

# ---------------------------------------------------------------- 1. checker

t_checker() {
	local bad=$WORK/corrupt out=$WORK/self.json
	mkdir -p "$bad"
	cp "$SRC/obj-04.bin" "$SRC/obj-08.bin" "$bad/"
	printf '\x5a' | dd of="$bad/obj-04.bin" bs=1 seek=123456 conv=notrunc status=none
	[ "$(cmp "$bad/obj-04.bin" "$SRC/obj-04.bin" | wc -l)" = 1 ] || printf '\xa5' |
		dd of="$bad/obj-04.bin" bs=1 seek=123456 conv=notrunc status=none
	truncate -s $((3 << 20)) "$bad/obj-08.bin"
	if timeout 300 "$PY" "$WORK/reader.py" --mnt "$bad" --src "$SRC" --reads 400 --threads 2 \
		--seed 3 --bound 60 --out "$out" --files obj-04.bin,obj-08.bin --buffered >/dev/null 2>&1 &&
		[ "$(jget "$out" wrong_bytes)" -gt 0 ] && [ "$(jget "$out" short_reads)" -gt 0 ]; then
		pass "checker: a copy with one flipped byte and a cut copy give $(jget "$out" wrong_reads) wrong reads ($(jget "$out" short_reads) short) out of 400"
	else
		fail "checker: expected the reader to report wrong bytes and short reads on corrupted copies, got: $(head -c 400 "$out" 2>/dev/null)"
	fi
}

# ---------------------------------------------------------------- 2. rates

# t_rate SERVER MNT PORT RATE N: N random reads through MNT with faults of
# every kind at RATE on every request (HEADs and listings too) by the proxy
# on PORT in front of SERVER.
t_rate() {
	local server=$1 mnt=$2 port=$3 rate=$4 n=$5 out label pct ok=1 eio maxeio faults
	pct=$("$PY" -c "print('%g%%' % (float('$rate') * 100))")
	label="$server, faults at $pct"
	out="$WORK/rate-${server//[^a-zA-Z0-9]/_}-$rate.json"
	phase "$label" "$mnt" "$port" "rate=$rate&kinds=&scope=all" "$out" --reads "$n" \
		--files "$RANDOM_FILES" || return
	eio=$(jget "$out" eio)
	faults=$(jget "$out.proxy" faults_total)
	# with retries working, a read fails only when every attempt of a piece
	# is broken or the ETag changed (not retried): far under the fault rate
	maxeio=$("$PY" -c "import math; print(math.ceil($n * $rate / 2) + 5)")
	if [ "$(jget "$out" reads)" -ne "$n" ]; then
		ok=0
		fail "$label: expected $n reads, the reader did $(jget "$out" reads) ($(jget "$out" open_eio) opens failed with EIO)"
	fi
	if [ "$(jget "$out" wrong_bytes)" -ne 0 ] || [ "$(jget "$out" wrong_reads)" -ne 0 ]; then
		ok=0
		fail "$label: expected zero wrong bytes, got $(jget "$out" wrong_bytes) in $(jget "$out" wrong_reads) reads ($(jget "$out" short_reads) short):"
		details "$out"
	fi
	if [ "$(jget "$out" other_errors)" -ne 0 ]; then
		ok=0
		fail "$label: expected every failure to be EIO, got $(jget "$out" other_errors) other errors:"
		details "$out"
	fi
	if [ "$(jget "$out" over_bound)" -ne 0 ]; then
		ok=0
		fail "$label: expected no open or pread over $BOUND s (a buffered pread: twice that, see reader.py), got $(jget "$out" over_bound) (max $(jget "$out" max_latency_s) s):"
		details "$out"
	fi
	if [ "$rate" = 0 ]; then
		if [ "$eio" -ne 0 ] || [ "$faults" -ne 0 ] || [ "$P_RETRIES" -ne 0 ]; then
			ok=0
			fail "$label: expected no fault, no retry and no EIO, got $faults faults, $P_RETRIES retries, $eio EIOs"
		fi
	else
		if [ "$faults" -eq 0 ] || [ "$P_RETRIES" -le 0 ]; then
			ok=0
			fail "$label: expected faults injected and retried, got $faults faults, $P_RETRIES retries"
		fi
		if [ "$eio" -gt "$maxeio" ]; then
			ok=0
			fail "$label: expected at most $maxeio EIOs (half the fault rate: retries must absorb most faults), got $eio of $n"
		fi
	fi
	if [ "$ok" = 1 ]; then
		pass "$label: $n reads ($(jget "$out" bytes) bytes correct), $faults faults injected, $P_RETRIES retries, $eio EIO (short counts of right bytes before an EIO: $(jget "$out" short_then_eio), before the rest: $(jget "$out" short_then_rest)), max latency $(jget "$out" max_latency_s) s (bound $BOUND s), wrong bytes 0"
	fi
	figure rates "| $server | $pct | $n | $faults | $(per_kind "$out.proxy") | $P_RETRIES | $P_ERRS | $eio | $(jget "$out" p99_latency_s) | $(jget "$out" max_latency_s) | $(jget "$out" wrong_bytes) | $(jget "$out" elapsed_s) |"
}

# ---------------------------------------------------------------- 3. each kind

# t_kind KIND N FILE OUTCOME [MNT TAG]: every ranged GET broken with KIND;
# N reads of FILE (O_DIRECT, random offsets) through MNT (default $MNT;
# TAG names it in the results). OUTCOME: eio (every read fails, every
# failed request after exactly RETRIES retries; none for etag: a changed
# object is not retried), ok (every read right), mixed (some right, some
# requests retried).
t_kind() {
	local kind=$1 n=$2 file=$3 want=$4 mnt=${5:-$MNT} tag=${6:+ ($6)} ok=1 eio good faults retries errs
	local out=$WORK/kind-$1${6:+-${6//[^a-z0-9]/_}}.json
	phase "$kind at 100%$tag" "$mnt" "$FP_PORT" "rate=1&kinds=$kind&scope=range" "$out" \
		--reads "$n" --files "$file" --direct --no-seq --in-bounds || return
	retries=$P_RETRIES
	errs=$P_ERRS
	eio=$(jget "$out" eio)
	good=$(jget "$out" ok)
	faults=$(jget "$out.proxy" faults_total)
	if [ "$(jget "$out" wrong_bytes)" -ne 0 ] || [ "$(jget "$out" other_errors)" -ne 0 ] ||
		[ "$(jget "$out" over_bound)" -ne 0 ] || [ "$(jget "$out" reads)" -ne "$n" ]; then
		ok=0
		fail "$kind at 100%$tag: expected $n reads, each right or EIO within $BOUND s; got $(jget "$out" reads) reads, $(jget "$out" wrong_bytes) wrong bytes, $(jget "$out" other_errors) other errors, $(jget "$out" over_bound) over the bound:"
		details "$out"
	fi
	case $want in
	eio)
		local want_retries=$((errs * RETRIES))
		[ "$kind" = etag ] && want_retries=0
		if [ "$eio" -ne "$n" ] || [ "$errs" -lt 1 ] || [ "$retries" -ne "$want_retries" ]; then
			ok=0
			fail "$kind at 100%$tag: expected all $n reads to fail with EIO and each of the failed requests retried $([ "$kind" = etag ] && echo 0 || echo "$RETRIES") times ($want_retries retries), got $eio EIO, $good right, $errs failed requests, $retries retries, $faults faults"
		fi
		;;
	ok)
		if [ "$good" -ne "$n" ] || [ "$faults" -lt 1 ] || [ "$errs" -ne 0 ]; then
			ok=0
			fail "$kind at 100%$tag: expected all $n reads right (this fault is legal HTTP), got $good right, $eio EIO, $errs failed requests, $faults faults"
		fi
		;;
	mixed)
		if [ "$good" -lt 1 ] || [ "$retries" -lt 1 ]; then
			ok=0
			fail "$kind at 100%$tag: expected short delays waited for (some reads right) and long ones retried, got $good right, $eio EIO, $retries retries"
		fi
		;;
	esac
	if [ "$ok" = 1 ]; then
		pass "$kind at 100%$tag: $n reads, $good right, $eio EIO, $faults faults ($(jget "$out.proxy" variants)), $errs failed requests, $retries retries, max latency $(jget "$out" max_latency_s) s, wrong bytes 0"
	fi
	figure kinds "| $kind$tag | $n | $faults | $errs | $retries | $good | $eio | $(jget "$out" max_latency_s) | $(jget "$out" wrong_bytes) |"
}

# One read, one thread, every body stalled: EIO after the retries, each a
# full timeout: not sooner (the stall was waited for, not cut early), not
# later than the bound.
t_stall_one() {
	local out=$WORK/stall-one.json lo=$(((RETRIES + 1) * TIMEOUT)) lat
	settle "$FP_PORT" && fp "$FP_PORT" config "rate=1&kinds=stall&scope=range&seed=$SEED"
	timeout 300 "$PY" "$WORK/reader.py" --mnt "$MNT" --src "$SRC" --threads 1 --seed 7 \
		--bound "$BOUND" --out "$out" --reads 1 --files fresh-stall.bin --direct --no-seq --in-bounds \
		>/dev/null 2>&1
	fp "$FP_PORT" config "rate=0"
	lat=$(jget "$out" max_latency_s 2>/dev/null)
	if [ "$(jget "$out" eio 2>/dev/null)" = 1 ] &&
		"$PY" -c "import sys; sys.exit(not $lo - 0.3 <= $lat <= $BOUND)"; then
		pass "stall: one stalled read fails with EIO after $lat s ((retries+1) x timeout = $lo s, bound $BOUND s)"
	else
		fail "stall: expected one stalled read to fail with EIO after $lo-$BOUND s, got: $(head -c 400 "$out" 2>/dev/null)"
	fi
	figure other "| one read, every body stalled (1 thread) | EIO after $lat s |"
}

# ---------------------------------------------------------------- 4. metadata

# Listings (root directory) and HEADs (stat) through a mount that caches
# nothing, one thread at a time, faults at 20% on every request; then every
# listing stalled. Each answer right or EIO, within the bound.
t_meta() {
	local out=$WORK/meta.json
	if ! mount_objfs "http://127.0.0.1:$FP_PORT/data/" "$MNT_META" \
		"timeout=$TIMEOUT,retries=$RETRIES,list_ttl=0,attr_timeout=0,entry_timeout=0"; then
		fail "metadata: expected the proxy URL to mount at $MNT_META"
		return
	fi
	fp "$FP_PORT" config "rate=0.2&kinds=&scope=all&seed=$SEED" && fp "$FP_PORT" reset
	timeout 600 "$PY" - "$MNT_META" "$SRC" "$BOUND" "$out" <<'EOF'
import errno, json, os, sys, time
mnt, src, bound, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
want = sorted(os.listdir(src))
r = {"ops": 0, "ok": 0, "eio": 0, "wrong": 0, "other": 0, "max_latency_s": 0.0, "notes": []}

def op(desc, fn, check):
    t = time.monotonic()
    try:
        v = fn()
        e = None
    except OSError as x:
        e = x
    dt = time.monotonic() - t
    r["ops"] += 1
    r["max_latency_s"] = max(r["max_latency_s"], dt)
    if dt > bound:
        r["notes"].append("%s took %.2f s" % (desc, dt))
    if e is None:
        if check(v):
            r["ok"] += 1
        else:
            r["wrong"] += 1
            r["notes"].append("%s: wrong answer %r" % (desc, v))
    elif e.errno == errno.EIO:
        r["eio"] += 1
    else:
        r["other"] += 1
        r["notes"].append("%s: %s" % (desc, e))

for i in range(25):
    op("listdir", lambda: sorted(os.listdir(mnt)), lambda v: v == want)
    n = want[i % len(want)]
    op("stat " + n, lambda: os.stat(os.path.join(mnt, n)).st_size,
       lambda v: v == os.path.getsize(os.path.join(src, n)))
r["max_latency_s"] = round(r["max_latency_s"], 3)
json.dump(r, open(out, "w"))
EOF
	if [ -s "$out" ] && [ "$(jget "$out" wrong)" -eq 0 ] && [ "$(jget "$out" other)" -eq 0 ] &&
		[ "$(jget "$out" notes)" = "[]" ] && [ "$(jget "$out" ok)" -gt 0 ]; then
		pass "metadata at 20%: $(jget "$out" ops) listings and stats, $(jget "$out" ok) right, $(jget "$out" eio) EIO, max latency $(jget "$out" max_latency_s) s"
	else
		fail "metadata at 20%: expected listings and stats right or EIO within $BOUND s, got: $(head -c 600 "$out" 2>/dev/null)"
	fi
	fp "$FP_PORT" stats
	figure other "| listings + stats at 20% (no caching, 1 thread) | $(jget "$out" ops) ops, $(jget "$WORK/fp.json" faults_total) faults, $(jget "$out" ok) right, $(jget "$out" eio) EIO, $(jget "$out" wrong) wrong, max $(jget "$out" max_latency_s) s |"

	fp "$FP_PORT" config "rate=1&kinds=stall&scope=all"
	local t0 rc=0 el
	t0=$(date +%s.%N)
	timeout 120 ls "$MNT_META" >/dev/null 2>"$WORK/ls-stall.err" || rc=$?
	el=$("$PY" -c "import time; print(round(time.time() - $t0, 2))")
	fp "$FP_PORT" config "rate=0"
	if [ "$rc" -ne 0 ] && grep -q 'Input/output error' "$WORK/ls-stall.err" &&
		"$PY" -c "import sys; sys.exit(not $el <= $BOUND)"; then
		pass "metadata: every listing stalled: ls fails with EIO after $el s (bound $BOUND s)"
	else
		fail "metadata: expected ls to fail with EIO within $BOUND s while every listing stalls, got exit $rc after $el s: $(head -c 300 "$WORK/ls-stall.err")"
	fi
	figure other "| ls, every listing stalled | EIO after $el s |"
	check_unmount "metadata" "$MNT_META"
}

# ---------------------------------------------------------------- 5. DNS

# expect_dns_fail LABEL ARGS...: objfs ARGS fails to mount, within the
# bound, with one message naming the unresolvable host; nothing mounted.
expect_dns_fail() {
	local label=$1 rc=0 t0 el msg
	shift
	t0=$(date +%s.%N)
	timeout 120 "$OBJFS" -f "$@" >"$WORK/dns.out" 2>&1 || rc=$?
	el=$("$PY" -c "import time; print(round(time.time() - $t0, 2))")
	msg=$(grep -v '^$' "$WORK/dns.out" | head -n 3)
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! is_mounted "$MNT_DNS" &&
		printf '%s' "$msg" | grep -q 'objfs-nonexistent\.invalid' &&
		"$PY" -c "import sys; sys.exit(not $el <= $BOUND)"; then
		pass "DNS failure ($label): mount refused after $el s: $msg"
	else
		fail "DNS failure ($label): expected exit 1 within $BOUND s naming objfs-nonexistent.invalid, nothing mounted; got exit $rc after $el s: $msg"
	fi
	figure other "| unresolvable host ($label) | exit $rc after $el s: \`${msg#objfs: }\` |"
	if is_mounted "$MNT_DNS"; then
		fusermount3 -u "$MNT_DNS"
	fi
}

t_dns() {
	remember_mountpoint "$MNT_DNS"
	expect_dns_fail "http" -o "timeout=$TIMEOUT,retries=$RETRIES" \
		"http://objfs-nonexistent.invalid:$NGINX_PORT/data/" "$MNT_DNS"
	(
		for v in AWS_PROFILE AWS_DEFAULT_PROFILE AWS_REGION AWS_DEFAULT_REGION AWS_SESSION_TOKEN \
			AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
			unset "$v"
		done
		export AWS_CONFIG_FILE=$WORK/no-aws-config AWS_SHARED_CREDENTIALS_FILE=$WORK/no-aws-creds
		export AWS_EC2_METADATA_DISABLED=true
		expect_dns_fail "s3 endpoint" -o \
			"timeout=$TIMEOUT,retries=$RETRIES,no_sign,endpoint=http://objfs-nonexistent.invalid:7480" \
			"s3://objfs-faults" "$MNT_DNS"
		echo "$PASS_COUNT $FAIL_COUNT" >"$WORK/dns.counts"
	)
	read -r PASS_COUNT FAIL_COUNT <"$WORK/dns.counts"
}

# ---------------------------------------------------------------- 6. RGW

t_rgw() {
	local fp_nginx=$FP_PORT
	if [ "${FAULTS_RGW:-1}" = 0 ]; then
		note "RGW part left out (FAULTS_RGW=0)"
		return
	fi
	rgw_require "RGW part" "$PY" || return
	if ! rgw_start "$TEST_TMP/rgw" 2>"$WORK/rgw_start.err"; then
		fail "RGW: expected a throw-away RGW to start: $(tail -c 600 "$WORK/rgw_start.err")"
		return
	fi
	if ! timeout 300 "$PY" "$HERE/s3util.py" mb faults >/dev/null ||
		! timeout 300 "$PY" "$HERE/s3util.py" sync "$SRC" faults >/dev/null; then
		fail "RGW: expected to seed bucket 'faults'"
		return
	fi
	if ! fp_start "${RGW_ENDPOINT#http://}" rgw; then
		fail "RGW: expected a proxy in front of $RGW_ENDPOINT"
		return
	fi
	if ! AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY \
		AWS_CONFIG_FILE=$WORK/no-aws-config AWS_SHARED_CREDENTIALS_FILE=$WORK/no-aws-creds \
		AWS_EC2_METADATA_DISABLED=true mount_objfs "s3://faults" "$MNT_S3" \
		"$MOUNT_OPTS,endpoint=http://127.0.0.1:$FP_PORT"; then
		fail "RGW: expected s3://faults to mount through the proxy"
		FP_PORT=$fp_nginx
		return
	fi
	t_rate "RGW (S3)" "$MNT_S3" "$FP_PORT" 0.05 "$RGW_READS"
	fp "$FP_PORT" config "rate=0"
	if _pid_alive "$OBJFS_PID"; then
		check_unmount "RGW" "$MNT_S3"
	else
		fail "RGW: expected objfs (pid $OBJFS_PID) alive after the reads"
	fi
	FP_PORT=$fp_nginx
}

# ---------------------------------------------------------------- 8. HTTPS

# The faults over TLS: nginx with lib.sh's test CA in front of
# the same proxy (nginx_tls_server: proxy_pass, nothing buffered), mounted
# with -o ca_file=, once with direct_recv=on (the data GETs read by
# OpenSSL's SSL_read into the cache: the direct path meets the body faults
# and hands error statuses and odd heads to libcurl) and once with
# direct_recv=off (libcurl alone): each kind alone on every ranged GET,
# judged as in part 3, then random reads with every kind at 5%. nginx
# stands between, so a fault could reach objfs changed or not at all (a
# cut upstream body must become a cut TLS stream, a 200 must stay a 200):
# for each kind the figures say what nginx sent (its log: status, body
# bytes of the length announced, request complete) and what objfs made of
# it (its log at log_level=info), and full200 must reach objfs as 200s.
TLS_OK=0
TLS_PORT=
t_tls_kinds() { # MNT TAG
	local mnt=$1 tag=$2 kind n l0 o0 d0 f0 d1 f1 sent saw
	for kind in slowdown error500 reset truncate badrange stall etag slowfirst full200; do
		n=16
		[ "$kind" = stall ] && n=$THREADS
		l0=$(wc -l <"$WORK/tls.log")
		o0=$(wc -l <"$OBJFS_LOG")
		d0=$(ostat "$mnt" requests_direct) f0=$(ostat "$mnt" direct_fallbacks)
		case $kind in
		full200) t_kind "$kind" "$n" fresh-ok.bin ok "$mnt" "$tag" ;;
		slowfirst) t_kind "$kind" "$n" fresh-ok.bin mixed "$mnt" "$tag" ;;
		*) t_kind "$kind" "$n" fresh-fail.bin eio "$mnt" "$tag" ;;
		esac
		d1=$(ostat "$mnt" requests_direct) f1=$(ostat "$mnt" direct_fallbacks)
		sleep 0.3 # nginx logs a request after its end
		# what nginx sent objfs: statuses of ranged GETs, and how many it
		# did not finish (the upstream cut them, or objfs closed first)
		sent=$(tail -n +"$((l0 + 1))" "$WORK/tls.log" | awk '$2 != "\"-\"" {
			st[$1]++; if ($5 != "\"OK\"" || ($4 != "-" && $3 < $4)) cut++ }
			END { for (k in st) printf "%s x%s, ", k, st[k]; printf "%d unfinished", cut }')
		# what objfs said, the two most frequent messages without URL and numbers
		tail -n +"$((o0 + 1))" "$OBJFS_LOG" | grep '^objfs: ' >"$WORK/tls-phase.log"
		saw=$(sed -E 's/^objfs: ([a-z]+: )?([a-z]+:[^ ]+: )?//; s/ \(attempt [0-9]+\)//; s/[0-9]+/N/g' \
			"$WORK/tls-phase.log" | sort | uniq -c | sort -rn | head -n 2 |
			sed -E 's/^ *([0-9]+) (.*)/\1x `\2`/' | paste -sd ';' -)
		figure tls "| $kind | $tag | $sent | ${saw:-nothing} | $((d1 - d0)) / $((f1 - f0)) |"
		# a cut TLS stream met by the direct path itself (engine_direct.c's words)
		case $kind/$tag in
		reset/*direct_recv=on | truncate/*direct_recv=on)
			n=$(grep -c -E 'connection closed in the body|receive failed' "$WORK/tls-phase.log")
			if [ "$n" -gt 0 ] && [ "$f1" = "$f0" ]; then
				pass "$kind at 100% ($tag): the direct path (SSL_read) met the cut TLS stream itself, $n attempts, none handed to libcurl"
			else
				fail "$kind at 100% ($tag): expected the direct path to meet the cut TLS stream, got $n of its messages and $((f1 - f0)) handed to libcurl"
			fi
			;;
		esac
		if [ "$kind" = full200 ]; then
			if [[ $sent == *"200 "* ]]; then
				pass "full200 at 100% ($tag): nginx passed the 200s on as they were (not made 206 again): $sent"
			else
				fail "full200 at 100% ($tag): expected nginx to send objfs the 200s, it sent: $sent"
			fi
		fi
	done
}

t_tls() {
	local direct tag
	if [ "${FAULTS_TLS:-1}" = 0 ]; then
		note "HTTPS part left out (FAULTS_TLS=0)"
		return
	fi
	if [ "$TLS_OK" != 1 ]; then
		missing_dep "HTTPS part: openssl could not make the test CA"
		return
	fi
	for direct in on off; do
		tag="https, direct_recv=$direct"
		if ! mount_objfs "https://127.0.0.1:$TLS_PORT/data/" "$MNT_TLS" \
			"$MOUNT_OPTS,ca_file=$TLS_DIR/ca.pem,direct_recv=$direct,log_level=info"; then
			fail "$tag: expected https://127.0.0.1:$TLS_PORT/data/ to mount at $MNT_TLS"
			continue
		fi
		settle "$FP_PORT"
		fp "$FP_PORT" config "rate=0"
		"$PY" - "$MNT_TLS" <<'EOF' || fail "$tag: expected to open the fresh objects"
import os, sys
for n in ("fresh-fail.bin", "fresh-ok.bin"):
    os.close(os.open(os.path.join(sys.argv[1], n), os.O_RDONLY))
EOF
		# the kinds first, full200 last: a 200 for a range turns the origin
		# over to libcurl for a while (the direct path's rule), and every
		# kind before it is to meet the direct path
		t_tls_kinds "$MNT_TLS" "$tag"
		t_rate "$tag" "$MNT_TLS" "$FP_PORT" 0.05 "$TLS_READS"
		if [ "$direct" = on ] && [ "$(ostat "$MNT_TLS" requests_direct)" -lt 1 ]; then
			fail "$tag: expected data GETs on the direct path, requests_direct is $(ostat "$MNT_TLS" requests_direct)"
		elif [ "$direct" = on ] && [ "$(ostat "$MNT_TLS" tls_own_conns)" -lt 1 ]; then
			fail "$tag: expected kept connections whose TLS records objfs read itself (tls_rx.c), tls_own_conns is $(ostat "$MNT_TLS" tls_own_conns)"
		elif [ "$direct" = off ] && [ "$(ostat "$MNT_TLS" requests_direct)" -ne 0 ]; then
			fail "$tag: expected no GET on the direct path, requests_direct is $(ostat "$MNT_TLS" requests_direct)"
		fi
		fp "$FP_PORT" config "rate=0"
		if _pid_alive "$OBJFS_PID"; then
			check_unmount "$tag" "$MNT_TLS"
		else
			fail "$tag: expected objfs (pid $OBJFS_PID) alive after the fault phases"
		fi
	done
}

# ---------------------------------------------------------------- main

log "objfs: $OBJFS"
log "temp:  $TEST_TMP"
log "mount: -o $MOUNT_OPTS; read bound $BOUND s"
t_checker
# the proxy's port is chosen first: nginx's TLS server (part 8) forwards to it
FP_LISTEN=$(free_port)
if command -v openssl >/dev/null 2>&1 && tls_leaf server "IP:127.0.0.1,DNS:localhost"; then
	TLS_OK=1
	TLS_PORT=$(free_port)
	: >"$WORK/tls.log"
	fmt='$status "$http_range" $body_bytes_sent $sent_http_content_length'
	fmt+=' "$request_completion" $upstream_status'
	# TLS 1.3 (nginx 1.22's default stops at 1.2): kept connections read
	# their records with objfs's own reader (tls_rx.c) through the faults
	NGINX_EXTRA_CONF=$(nginx_tls_server -a "$WORK/tls.log" -f "$fmt" "$TLS_PORT" \
		"http://127.0.0.1:$FP_LISTEN" "ssl_protocols TLSv1.2 TLSv1.3;")
fi
if ! nginx_start "$SRC"; then
	fail "expected nginx to start serving $SRC"
	summary
	exit 1
fi
if ! fp_start "127.0.0.1:$NGINX_PORT" nginx "$FP_LISTEN"; then
	fail "expected faultproxy.py to start in front of nginx"
	summary
	exit 1
fi
log "nginx: 127.0.0.1:$NGINX_PORT, proxy: 127.0.0.1:$FP_PORT${TLS_PORT:+, nginx TLS in front of the proxy: 127.0.0.1:$TLS_PORT}"
if ! mount_objfs "http://127.0.0.1:$FP_PORT/data/" "$MNT" "$MOUNT_OPTS"; then
	fail "expected http://127.0.0.1:$FP_PORT/data/ to mount at $MNT"
	summary
	exit 1
fi
MAIN_PID=$OBJFS_PID
t0=$SECONDS
for spec in $READS; do
	t_rate nginx "$MNT" "$FP_PORT" "${spec%%:*}" "${spec##*:}"
done
note "random reads at every rate: $((SECONDS - t0)) s"
# the fresh objects are opened (and HEADed) before any fault touches them
settle "$FP_PORT"
fp "$FP_PORT" config "rate=0"
"$PY" - "$MNT" <<'EOF' || fail "expected to open the fresh objects"
import os, sys
for n in ("fresh-fail.bin", "fresh-ok.bin", "fresh-stall.bin"):
    os.close(os.open(os.path.join(sys.argv[1], n), os.O_RDONLY))
EOF
for kind in slowdown error500 reset truncate badrange stall etag; do
	n=16
	[ "$kind" = stall ] && n=$THREADS # one round of (retries+1) x timeout
	t_kind "$kind" "$n" fresh-fail.bin eio
done
t_kind full200 16 fresh-ok.bin ok
t_kind slowfirst 16 fresh-ok.bin mixed
t_stall_one
note "up to here: $((SECONDS - t0)) s"
fp "$FP_PORT" config "rate=0"
if _pid_alive "$MAIN_PID"; then
	pass "objfs (pid $MAIN_PID) alive after $((SECONDS - t0)) s of faults"
	check_unmount "main mount" "$MNT"
else
	fail "expected objfs (pid $MAIN_PID) alive after the fault phases"
fi
t1=$SECONDS
t_meta
t_dns
note "metadata and DNS: $((SECONDS - t1)) s"
t1=$SECONDS
t_tls
note "HTTPS: $((SECONDS - t1)) s"
t1=$SECONDS
t_rgw
note "RGW: $((SECONDS - t1)) s"
t_sanitizer_logs

echo
echo "FIGURES for docs/reliability.md: -o $MOUNT_OPTS; $THREADS reader threads;"
echo "read bound $BOUND s; $(nproc) CPUs; $(basename "$OBJFS") $(ldd "$OBJFS" 2>/dev/null | grep -q libasan && echo "(ASan+UBSan build)")"
echo
echo "| server | fault rate | reads | faults injected | slowdown/500/reset/truncate/stall/badrange/full200/etag/slowfirst | objfs retries | failed requests | EIO reads | p99 s | max s | wrong bytes | run s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
cat "$WORK/fig-rates" 2>/dev/null
echo
echo "| kind on every ranged GET | reads | faults injected | failed requests | retries | right | EIO | max s | wrong bytes |"
echo "|---|---|---|---|---|---|---|---|---|"
cat "$WORK/fig-kinds" 2>/dev/null
echo
echo "| check | result |"
echo "|---|---|"
cat "$WORK/fig-other" 2>/dev/null
if [ -s "$WORK/fig-tls" ]; then
	echo
	echo "Over TLS (nginx in front of the proxy): what reached objfs, per kind on every ranged GET"
	echo
	echo "| kind | mount | nginx sent objfs (ranged GETs: status xcount, unfinished) | objfs logged (most frequent, numbers as N) | direct GETs done / handed to libcurl |"
	echo "|---|---|---|---|---|"
	cat "$WORK/fig-tls"
fi
echo
summary
