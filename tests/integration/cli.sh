#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# cli.sh: the objfs binary's commands and command line on a real mount
# (nginx, direct_io so every read reaches objfs, a disk cache):
#
#   - objfs warmup of a tree fetches exactly the tree's bytes, and a later
#     read of every file (checked byte for byte) fetches nothing more;
#     a file that cannot be read is named and the status is 1; a path off
#     any objfs mount is refused;
#   - objfs stats MOUNT shows the counters (MOUNT or a path under it), -i
#     with -n prints tables with rates, SIGINT ends it with status 0, an
#     unmount under it ends it with a message and status 1, and a
#     directory that is no objfs mount gets a clear message and status 1;
#   - plain objfs prints a short usage and exits 2; --help lists every
#     option; --version names the libraries, and the git commit the build
#     wrote into objfs_git.h (none when not built from a git checkout);
#   - -o stats prints the counters at unmount as a line "stats: ..." on
#     standard output, not as an error.
#
# Needs root (or a user who may use fusermount3), /dev/fuse, nginx, python3,
# curl. Exit status: 0 all passed, 1 something failed, 77 skipped.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
DISK=$TEST_TMP/disk
WORK=$TEST_TMP/work
TO=120
mkdir -p "$SRC/tree/a/b" "$SRC/tree/c" "$SRC/gone" "$WORK"
mkdir -m 700 "$DISK"

# A tree of sizes around page and block edges, and many small files.
python3 - "$SRC/tree" <<'EOF'
import os, random, sys
r = random.Random(7)
sizes = {"a/one.bin": 1, "a/b/page.bin": 4096, "a/b/odd.bin": 4095, "c/empty.bin": 0,
         "c/big.bin": 9 * 1048576 + 7, "mid.bin": 1048577, "../gone/gone.bin": 5000}
for i in range(40):
    sizes["c/small%02d.bin" % i] = 10000 + i
for k, n in sizes.items():
    with open(os.path.join(sys.argv[1], k), "wb") as f:
        f.write(r.randbytes(n))
EOF
nginx_start "$SRC" || { fail "nginx did not start"; summary; exit 1; }

# stat_of KEY: one counter of the mount, from .objfs-stats
stat_of() {
	timeout 30 sed -n "s/^$1 //p" "$MNT/.objfs-stats"
}

# sums of the source tree's files, and of the mount's (PATH), sorted by name
sums() {
	(cd "$1" && timeout "$TO" find . -type f -exec sha256sum {} + | sort -k 2)
}

# ---- the command line, no mount needed
rc=0
"$OBJFS" >"$WORK/plain.out" 2>"$WORK/plain.err" || rc=$?
lines=$(wc -l <"$WORK/plain.err")
if [ "$rc" -eq 2 ] && [ "$lines" -ge 3 ] && [ "$lines" -le 5 ] && grep -q -- '--help' "$WORK/plain.err" &&
	grep -q 'man objfs' "$WORK/plain.err" && [ ! -s "$WORK/plain.out" ]; then
	pass "plain objfs: exit 2 and a $lines-line usage pointing to --help and the man page"
else
	fail "plain objfs: expected exit 2 and a 3-5 line usage on stderr, got exit $rc, $lines lines: $(head -c 300 "$WORK/plain.err")"
fi
"$OBJFS" --help >"$WORK/help" 2>&1
missing=
for o in fill_threads chunk_size endpoint no_sign side_ring_budget cache_dir; do
	grep -q "^  ${o}[= ]" "$WORK/help" || missing="$missing $o"
done
if [ -z "$missing" ] && grep -q '^  stats MOUNT' "$WORK/help" && grep -q '^  warmup PATH' "$WORK/help"; then
	pass "--help lists the commands and the options (fill_threads among them)"
else
	fail "--help: expected the commands and every option, missing:${missing:- a command}"
fi
"$OBJFS" --version >"$WORK/version" 2>&1
missing=
for w in '^objfs [0-9]' '^libfuse [0-9]' '^libcurl [0-9]' '^OpenSSL [0-9]' '^liburing [0-9]' '^CUDA: o[nf]'; do
	grep -q "$w" "$WORK/version" || missing="$missing '$w'"
done
# the commit the build wrote for it (empty when not built from git)
gith=$(dirname "$OBJFS")/../objfs_git.h
if [ -f "$gith" ]; then
	commit=$(sed -n 's/^#define OBJFS_GIT_COMMIT "\(.*\)"$/\1/p' "$gith")
	if [ -n "$commit" ]; then
		grep -q "^objfs [0-9.]* (git $commit)\$" "$WORK/version" || missing="$missing 'git $commit'"
	elif grep -q '(git' "$WORK/version"; then
		missing="$missing 'no commit'"
	fi
fi
if [ -z "$missing" ]; then
	pass "--version: $(head -n 1 "$WORK/version"); libraries and CUDA named"
else
	fail "--version: expected$missing in: $(tr '\n' '|' <"$WORK/version")"
fi

# ---- objfs stats and warmup refuse what is not an objfs mount
rc=0
"$OBJFS" stats "$SRC" >"$WORK/nostats.out" 2>"$WORK/nostats.err" || rc=$?
if [ "$rc" -eq 1 ] && grep -q "$SRC is not on an objfs mount" "$WORK/nostats.err"; then
	pass "objfs stats on a plain directory: exit 1, '$(head -n 1 "$WORK/nostats.err")'"
else
	fail "objfs stats on a plain directory: expected exit 1 and 'is not on an objfs mount', got exit $rc: $(head -c 200 "$WORK/nostats.err")"
fi
rc=0
"$OBJFS" warmup "$SRC/tree" >"$WORK/nowarm.out" 2>"$WORK/nowarm.err" || rc=$?
if [ "$rc" -eq 1 ] && grep -q "is not on an objfs mount" "$WORK/nowarm.err"; then
	pass "objfs warmup of a plain directory: exit 1, refused"
else
	fail "objfs warmup of a plain directory: expected exit 1 and a refusal, got exit $rc: $(head -c 200 "$WORK/nowarm.err")"
fi

# ---- warmup on a mount: the tree's bytes fetched once, then nothing more
if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" \
	"direct_io,stats,cache_dir=$DISK,list_ttl=inf,attr_timeout=inf,entry_timeout=inf"; then
	fail "mount of http://127.0.0.1:$NGINX_PORT/data/ at $MNT"
	summary
	exit 1
fi
# listings first: what warmup then fetches is file bytes only (list_ttl=inf)
timeout "$TO" find "$MNT" >/dev/null
rm -f "$SRC/gone/gone.bin" # listed, then gone from the server: its read fails
before=$(stat_of bytes)
rc=0
timeout "$TO" "$OBJFS" warmup -p 8 "$MNT/tree" >"$WORK/warm.out" 2>"$WORK/warm.err" || rc=$?
after=$(stat_of bytes)
want=$(find "$SRC/tree" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
if [ "$rc" -eq 0 ] && [ ! -s "$WORK/warm.err" ] && grep -q '^warmup: 46 files, 10.4 MiB in ' "$WORK/warm.out"; then
	pass "warmup of the tree: exit 0, $(cat "$WORK/warm.out")"
else
	fail "warmup of the tree: expected exit 0, no message and a summary of 46 files; got exit $rc, stderr: $(head -c 300 "$WORK/warm.err"), stdout: $(cat "$WORK/warm.out")"
fi
if [ -n "$before" ] && [ $((after - before)) -eq "$want" ]; then
	pass "warmup fetched $((after - before)) bytes: the tree's size"
else
	fail "warmup: expected the bytes counter to grow by the tree's $want bytes, got $before -> $after"
fi
sums "$SRC/tree" >"$WORK/src.sums"
sums "$MNT/tree" >"$WORK/mnt.sums"
again=$(stat_of bytes)
if cmp -s "$WORK/src.sums" "$WORK/mnt.sums" && [ "$(wc -l <"$WORK/src.sums")" -eq 46 ]; then
	pass "after warmup: all 46 files read through the mount match the source"
else
	fail "after warmup: expected the mount's files to match the source's (- source, + mount):"
	diff -u "$WORK/src.sums" "$WORK/mnt.sums" | head -n 20
fi
if [ "$again" = "$after" ]; then
	pass "after warmup: reading every file again fetched nothing (bytes stays $after)"
else
	fail "after warmup: expected reading the tree again to fetch nothing, bytes went $after -> $again"
fi
rc=0
timeout "$TO" "$OBJFS" warmup -q "$MNT/gone" "$MNT/tree/a" >"$WORK/warm2.out" 2>"$WORK/warm2.err" || rc=$?
if [ "$rc" -eq 1 ] && grep -q "^objfs warmup: $MNT/gone/gone.bin: " "$WORK/warm2.err" &&
	[ "$(wc -l <"$WORK/warm2.err")" -eq 1 ] &&
	grep -q '^warmup: 4 files, .*, 1 failed (named above)$' "$WORK/warm2.out"; then
	pass "warmup: a file gone from the server named ($(cat "$WORK/warm2.err")), the others read, exit 1"
else
	fail "warmup: expected exit 1, gone.bin named alone and a summary of 4 files, 1 failed; got exit $rc, stderr: $(head -c 300 "$WORK/warm2.err"), stdout: $(cat "$WORK/warm2.out")"
fi

# ---- objfs stats on the mount
rc=0
timeout 30 "$OBJFS" stats "$MNT/tree/c" >"$WORK/stats.out" 2>"$WORK/stats.err" || rc=$?
if [ "$rc" -eq 0 ] && grep -q '^  requests  *[0-9]' "$WORK/stats.out" &&
	grep -q '^  cache_fetch_bytes  *[0-9.]* [KMG]iB$' "$WORK/stats.out" &&
	grep -q '^  disk_cache_writes  *[0-9]' "$WORK/stats.out" && grep -q '^memory cache$' "$WORK/stats.out"; then
	pass "objfs stats (a path under the mount): the counters in sections, units for people"
else
	fail "objfs stats: expected exit 0 and a table with requests, cache_fetch_bytes, disk_cache_writes; got exit $rc: $(head -c 400 "$WORK/stats.out") $(cat "$WORK/stats.err")"
fi
rc=0
timeout 60 "$OBJFS" stats -i 0.2 -n 3 "$MNT" >"$WORK/stats3.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c "^$MNT  [0-9:]*\$" "$WORK/stats3.out")" -eq 3 ] &&
	[ "$(grep -c 'per second' "$WORK/stats3.out")" -eq 2 ] && ! grep -q $'\033' "$WORK/stats3.out" &&
	grep -q '^  requests  *[0-9]*  *[0-9.]*/s$' "$WORK/stats3.out"; then
	pass "objfs stats -i 0.2 -n 3: three tables as plain lines, the later two with rates"
else
	fail "objfs stats -i 0.2 -n 3: expected 3 plain tables, 2 with rates; got exit $rc: $(head -c 600 "$WORK/stats3.out")"
fi
"$OBJFS" stats -i 0.2 "$MNT" >"$WORK/int.out" 2>&1 &
spid=$!
for ((i = 0; i < 100; i++)); do
	[ "$(grep -c "^$MNT  " "$WORK/int.out")" -ge 2 ] && break
	sleep 0.1
done
kill -INT "$spid"
rc=0
wait "$spid" || rc=$?
if [ "$rc" -eq 0 ] && grep -q '^  requests ' "$WORK/int.out"; then
	pass "objfs stats -i: SIGINT ends it with status 0"
else
	fail "objfs stats -i: expected status 0 after SIGINT, got $rc: $(tail -c 300 "$WORK/int.out")"
fi

# ---- -o stats at unmount; objfs stats -i sees the mount go away
"$OBJFS" stats -i 0.2 "$MNT" >"$WORK/gone.out" 2>"$WORK/gone.err" &
spid=$!
for ((i = 0; i < 100; i++)); do
	[ -s "$WORK/gone.out" ] && break
	sleep 0.1
done
log=$OBJFS_LOG
unmount_objfs "$MNT"
rc=0
for ((i = 0; i < 100; i++)); do
	_pid_alive "$spid" || break
	sleep 0.1
done
if _pid_alive "$spid"; then
	kill -KILL "$spid"
	fail "objfs stats -i: expected it to end once the mount went away; it ran on"
else
	wait "$spid" || rc=$?
	if [ "$rc" -eq 1 ] && grep -q "$MNT: the mount went away" "$WORK/gone.err"; then
		pass "objfs stats -i: the unmount ends it, status 1, '$(head -n 1 "$WORK/gone.err")'"
	else
		fail "objfs stats -i: expected status 1 and 'the mount went away' after the unmount, got $rc: $(cat "$WORK/gone.err")"
	fi
fi
if grep -q '^stats: requests=[0-9]*,request_errors=' "$log" && ! grep -q 'error: stats' "$log" &&
	grep -q 'cache_wait_us=[0-9]*,prefetch_capped=' "$log"; then
	pass "-o stats: the counters at unmount on standard output, not logged as an error"
else
	fail "-o stats: expected a line 'stats: requests=...' and no 'error: stats' in $log: $(grep stats "$log" | head -c 300)"
fi

t_sanitizer_logs() {
	local l
	for l in "$TEST_TMP"/objfs.*.log; do
		[ -e "$l" ] || continue
		if grep -E -q 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' "$l"; then
			fail "objfs log $l: sanitizer report: $(grep -E -m 3 'Sanitizer|runtime error:' "$l")"
		fi
	done
}
t_sanitizer_logs
summary
