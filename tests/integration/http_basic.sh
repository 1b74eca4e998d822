#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# http_basic.sh: end-to-end battery for objfs over plain HTTP (nginx autoindex).
#
#   OBJFS=/path/to/objfs tests/integration/http_basic.sh
#
# Needs root (or a user who may use fusermount3), /dev/fuse, nginx, python3,
# curl.  Exit status: 0 all passed, 1 something failed, 77 skipped (no FUSE),
# 99 hard error (binary missing).
#
# Environment:
#   OBJFS             binary under test (default ../../src/objfs)
#   OBJFS_TEST_OPTS   extra -o options for every mount (e.g. log_level=debug)
#   OBJFS_TEST_KEEP   1 = keep the temp dir (logs, nginx conf) afterwards
#   OBJFS_TEST_SEED   seed for the random-offset reads (default: random)

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

TO=${OBJFS_TEST_TIMEOUT:-180}     # bound for any single command that reads a lot
SHORT_TO=30                       # bound for metadata operations
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT_HTML=$TEST_TMP/mnt-html
MNT_ONE=$TEST_TMP/mnt-one
MNT_SLOW=$TEST_TMP/mnt-slow
WORK=$TEST_TMP/work
BIG=big.bin
BIG_SIZE=$((64 * 1024 * 1024 + 7))

# opts BASE: BASE joined with $OBJFS_TEST_OPTS
opts() {
	local o=${1:-}
	if [ -n "$EXTRA_OPTS" ]; then
		o=${o:+$o,}$EXTRA_OPTS
	fi
	printf '%s' "$o"
}

# first lines of a file, indented, for failure messages
excerpt() {
	[ -f "$1" ] || return 0
	sed -n '1,20{s/^/    | /;p}' "$1"
}

# sha_file PATH: sha256 of PATH's content (read inside timeout, so a hung
# mount cannot hang the shell); non-zero when the read fails.
sha_file() {
	local out
	out=$(set -o pipefail; timeout "$TO" cat -- "$1" | sha256sum) || return 1
	printf '%s' "${out%% *}"
}

# url_quote STRING: percent-encode everything but unreserved characters
url_quote() {
	python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"
}

# check_unmount LABEL MNT: fusermount3 -u works, the daemon exits 0.
check_unmount() {
	local label=$1 mnt=$2
	if unmount_objfs "$mnt" && [ "$UNMOUNT_HOW" = fusermount3 ] && [ "$UNMOUNT_STATUS" = 0 ] &&
		! is_mounted "$mnt"; then
		pass "$label: fusermount3 -u unmounted it and objfs exited with status 0"
	else
		fail "$label: expected fusermount3 -u to unmount $mnt and objfs to exit 0, got how='$UNMOUNT_HOW' status='$UNMOUNT_STATUS'"
	fi
}

# ---------------------------------------------------------------- test data

make_tree() {
	local f
	mkdir -p "$SRC/d1/d2/d3" "$SRC/dir with space" "$SRC/emptydir" "$WORK" || return 1
	: >"$SRC/empty.bin"
	head -c 1 /dev/urandom >"$SRC/one.bin"
	head -c 4095 /dev/urandom >"$SRC/size4095.bin"
	head -c 4096 /dev/urandom >"$SRC/size4096.bin"
	head -c $((1024 * 1024 + 1)) /dev/urandom >"$SRC/1MiB+1.bin"
	head -c "$BIG_SIZE" /dev/urandom >"$SRC/$BIG"
	for f in "naïve café.txt" "日本語.bin" "100% done.txt" "a+b.txt" "hash#tag.txt" \
		"this&that.txt" "with space.txt" "d1/d2/d3/file" "d1/top.txt" \
		"d1/d2/middle.bin" "dir with space/inner file.txt"; do
		head -c $((1000 + RANDOM % 9000)) /dev/urandom >"$SRC/$f" || return 1
	done
	[ "$(stat -c %s "$SRC/$BIG")" -eq "$BIG_SIZE" ]
}

# ---------------------------------------------------------------- checks

# Every file: sha256 through the mount equals the source.
t_sha_all() {
	local root=$1 label=$2 rel want got bad=0 n=0
	while IFS= read -r -d '' rel; do
		rel=${rel#./}
		n=$((n + 1))
		want=$(sha_file "$SRC/$rel")
		if ! got=$(sha_file "$root/$rel"); then
			fail "$label: expected to read '$rel' through the mount, but reading it failed"
			bad=$((bad + 1))
		elif [ "$got" != "$want" ]; then
			fail "$label: expected sha256 of '$rel' to be $want (source), got $got"
			bad=$((bad + 1))
		fi
	done < <(cd "$SRC" && find . -type f -print0)
	if [ "$bad" -eq 0 ]; then
		pass "$label: sha256 of all $n files through the mount equals the source"
	fi
}

# Sizes (stat through mount vs source), file types, and the set of names.
t_tree_shape() {
	local root=$1 label=$2 rel want got bad=0 n=0
	while IFS= read -r -d '' rel; do
		rel=${rel#./}
		n=$((n + 1))
		want=$(stat -c %s -- "$SRC/$rel")
		got=$(timeout "$SHORT_TO" stat -c %s -- "$root/$rel" 2>&1)
		if [ "$got" != "$want" ]; then
			fail "$label: expected stat size of '$rel' to be $want, got '$got'"
			bad=$((bad + 1))
		fi
	done < <(cd "$SRC" && find . -type f -print0)
	[ "$bad" -eq 0 ] && pass "$label: stat sizes of all $n files match the source"

	(cd "$SRC" && find . -mindepth 1 -printf '%y %P\n' | sort) >"$WORK/types.src"
	timeout "$TO" find "$root" -mindepth 1 -printf '%y %P\n' 2>"$WORK/types.err" | sort >"$WORK/types.mnt"
	if diff -u "$WORK/types.src" "$WORK/types.mnt" >"$WORK/types.diff" && [ ! -s "$WORK/types.err" ]; then
		pass "$label: names and types (dir/regular) of all $(wc -l <"$WORK/types.src") entries match"
	else
		fail "$label: expected the same names and types as the source (- source, + mount):"
		excerpt "$WORK/types.diff"
		excerpt "$WORK/types.err"
	fi

	if timeout "$TO" ls -lR "$root" >"$WORK/lslR.out" 2>"$WORK/lslR.err"; then
		pass "$label: ls -lR succeeds"
	else
		fail "$label: expected ls -lR to succeed; stderr:"
		excerpt "$WORK/lslR.err"
	fi
}

t_cp_diff() {
	local copy=$WORK/cp-copy
	rm -rf "$copy"
	mkdir -p "$copy"
	if ! timeout "$TO" cp -r -- "$MNT/." "$copy/" 2>"$WORK/cp.err"; then
		fail "cp -r of the mount: expected success; stderr:"
		excerpt "$WORK/cp.err"
	elif diff -r "$SRC" "$copy" >"$WORK/cp.diff" 2>&1; then
		pass "cp -r of the mount, then diff -r against the source: identical"
	else
		fail "cp -r of the mount: expected diff -r against the source to be empty, got:"
		excerpt "$WORK/cp.diff"
	fi
	rm -rf "$copy"
}

# tar listings: strip "./" and trailing "/", drop ".".
_norm_tar_list() {
	sed -e 's|^\./||' -e 's|/$||' | grep -v -x -e '' -e '\.' | sort
}

t_tar() {
	local x=$WORK/tar-x st
	(cd "$SRC" && find . -mindepth 1 -printf '%P\n' | sort) >"$WORK/tar.src"
	timeout "$TO" tar -C "$MNT" -cf - . 2>"$WORK/tarc.err" | timeout "$TO" tar -tf - >"$WORK/tar.raw" 2>&1
	st=("${PIPESTATUS[@]}")
	_norm_tar_list <"$WORK/tar.raw" >"$WORK/tar.mnt"
	if [ "${st[0]}" -eq 0 ] && [ "${st[1]}" -eq 0 ] && diff -u "$WORK/tar.src" "$WORK/tar.mnt" >"$WORK/tar.diff"; then
		pass "tar c of the mount | tar t lists exactly the $(wc -l <"$WORK/tar.src") source entries"
	else
		fail "tar c | tar t: expected both to exit 0 (got ${st[0]}, ${st[1]}) and to list the source entries (- source, + tar):"
		excerpt "$WORK/tar.diff"
		excerpt "$WORK/tarc.err"
	fi

	rm -rf "$x"
	mkdir -p "$x"
	timeout "$TO" tar -C "$MNT" -cf - . 2>"$WORK/tarc.err" | timeout "$TO" tar -C "$x" -xf - 2>"$WORK/tarx.err"
	st=("${PIPESTATUS[@]}")
	if [ "${st[0]}" -eq 0 ] && [ "${st[1]}" -eq 0 ] && diff -r "$SRC" "$x" >"$WORK/tarx.diff" 2>&1; then
		pass "tar c of the mount, extracted: content identical to the source (diff -r)"
	else
		fail "tar c | tar x: expected exit 0 0 (got ${st[0]} ${st[1]}) and a tree identical to the source:"
		excerpt "$WORK/tarx.diff"
		excerpt "$WORK/tarc.err"
	fi
	rm -rf "$x"
}

t_find_count() {
	local a b
	a=$(find "$SRC" | wc -l)
	b=$(timeout "$TO" find "$MNT" | wc -l)
	if [ "$a" -eq "$b" ]; then
		pass "find count through the mount equals the source ($a)"
	else
		fail "find count: expected $a entries (source), got $b through the mount"
	fi
}

t_concurrent() {
	local files=("$BIG" "$BIG" "$BIG" "$BIG" "1MiB+1.bin" "日本語.bin" "d1/d2/d3/file" "size4095.bin")
	local pids=() i bad=0 want got
	for i in "${!files[@]}"; do
		( sha_file "$MNT/${files[$i]}" >"$WORK/conc.$i" 2>&1 ) &
		pids+=("$!")
	done
	for i in "${!files[@]}"; do
		wait "${pids[$i]}"
		want=$(sha_file "$SRC/${files[$i]}")
		got=$(cat "$WORK/conc.$i")
		if [ "$got" != "$want" ]; then
			fail "concurrent reader $i: expected sha256 $want for '${files[$i]}', got '$got'"
			bad=$((bad + 1))
		fi
	done
	[ "$bad" -eq 0 ] && pass "8 concurrent readers (4 x $BIG + 4 others) all got the right sha256"
}

t_random_reads() {
	local seed=${OBJFS_TEST_SEED:-$RANDOM$RANDOM}
	cat >"$WORK/randread.py" <<'EOF'
import errno, os, random, sys

mnt, src, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
size = os.path.getsize(src)
MAXLEN = 3 << 20
bounds = [k << s for s in (16, 17, 20, 22, 23) for k in range(1, 4)]
bounds = [b for b in bounds if b < size] + [size]
lens = [0, 1, 2, 4095, 4096, 4097, 65535, 65536, 131072, 131073, 1 << 20, (1 << 20) + 1, MAXLEN]

cases = [(0, 0), (0, 1), (0, MAXLEN), (1, MAXLEN), (4095, 2), (size - 1, 1), (size - 1, 10),
         (size - 7, MAXLEN), (size - MAXLEN, MAXLEN), (size, 1), (size, MAXLEN), (size + 1, 10),
         (size + (1 << 20), 4096), (size * 2, 1)]
while len(cases) < count:
    k = rng.randrange(8)
    if k == 0:
        off = rng.randrange(size)                                  # anywhere
    elif k == 1:
        off = rng.randrange(size) | 1                              # unaligned (odd)
    elif k == 2:
        off = max(0, size - rng.randrange(1, 8192))                # near EOF
    elif k == 3:
        off = size + rng.randrange(0, 1 << 20)                     # at / past EOF
    elif k == 4:
        off = max(0, rng.choice(bounds) + rng.randrange(-4096, 4097))  # chunk boundaries
    elif k == 5:
        off = rng.randrange(size // 4096) * 4096                   # page aligned
    elif k == 6:
        off = max(0, size - rng.randrange(1, MAXLEN))              # last few MiB
    else:
        off = rng.randrange(4096)                                  # start of file
    j = rng.randrange(4)
    if j == 0:
        ln = rng.randrange(0, 4097)
    elif j == 1:
        ln = rng.randrange(1, MAXLEN + 1)
    else:
        ln = rng.choice(lens)
    cases.append((off, ln))

fm = os.open(mnt, os.O_RDONLY)
fs = os.open(src, os.O_RDONLY)
bad = 0
for i, (off, ln) in enumerate(cases):
    exp = os.pread(fs, ln, off)
    try:
        got = os.pread(fm, ln, off)
    except OSError as e:
        bad += 1
        print(f"  read #{i} pread(off={off}, len={ln}): expected {len(exp)} bytes, got "
              f"OSError {errno.errorcode.get(e.errno, e.errno)} ({e.strerror})")
        if bad >= 10:
            break
        continue
    if got != exp:
        bad += 1
        diffat = next((p for p in range(min(len(got), len(exp))) if got[p] != exp[p]), None)
        what = ("past EOF must return empty" if off >= size else
                f"first differing byte at +{diffat}" if diffat is not None else "short/long read")
        print(f"  read #{i} pread(off={off}, len={ln}) [size {size}]: expected {len(exp)} bytes, "
              f"got {len(got)} ({what})")
        if bad >= 10:
            break
os.close(fm)
os.close(fs)
print(f"{len(cases)} reads, seed {seed}, {bad} bad")
sys.exit(1 if bad else 0)
EOF
	if timeout "$TO" python3 "$WORK/randread.py" "$MNT/$BIG" "$SRC/$BIG" "$seed" 500 >"$WORK/rand.out" 2>&1; then
		pass "500 random preads of $BIG (unaligned, near/past EOF, up to 3 MiB) match the source: $(tail -n 1 "$WORK/rand.out")"
	else
		fail "random preads: expected every pread through the mount to equal the source (seed $seed, OBJFS_TEST_SEED to repeat):"
		excerpt "$WORK/rand.out"
	fi
}

# ro_expect DESC CMD...: CMD must fail, saying "Read-only file system".
ro_expect() {
	local desc=$1 rc=0
	shift
	timeout "$SHORT_TO" "$@" </dev/null >"$WORK/ro.out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'Read-only file system' "$WORK/ro.out"; then
		pass "read-only: $desc fails with EROFS"
	else
		fail "read-only: expected '$desc' to fail with 'Read-only file system', got exit $rc and:"
		excerpt "$WORK/ro.out"
	fi
}

# the single-quoted "$1" belongs to the inner bash -c
# shellcheck disable=SC2016
t_read_only() {
	local before after
	before=$(sha_file "$SRC/a+b.txt")
	ro_expect "touch mnt/new" touch "$MNT/new"
	ro_expect "touch of an existing file" touch "$MNT/a+b.txt"
	ro_expect "echo x > mnt/file" bash -c 'echo x > "$1"' _ "$MNT/a+b.txt"
	ro_expect "echo x >> mnt/file" bash -c 'echo x >> "$1"' _ "$MNT/a+b.txt"
	ro_expect "echo x > mnt/d1/new" bash -c 'echo x > "$1"' _ "$MNT/d1/new"
	ro_expect "mkdir mnt/x" mkdir "$MNT/x"
	ro_expect "rm mnt/file" rm -- "$MNT/a+b.txt"
	ro_expect "rmdir mnt/emptydir" rmdir -- "$MNT/emptydir"
	ro_expect "mv file within the mount" mv -- "$MNT/a+b.txt" "$MNT/renamed.txt"
	ro_expect "mv directory within the mount" mv -- "$MNT/d1" "$MNT/d1-renamed"
	echo scratch >"$WORK/scratch"
	ro_expect "mv a file into the mount" mv -- "$WORK/scratch" "$MNT/moved-in"
	ro_expect "cp a file into the mount" cp -- "$WORK/scratch" "$MNT/copied-in"
	ro_expect "truncate -s 0 mnt/file" truncate -s 0 "$MNT/a+b.txt"
	ro_expect "chmod 600 mnt/file" chmod 600 "$MNT/a+b.txt"
	ro_expect "ln -s (symlink) in the mount" ln -s target "$MNT/link"
	ro_expect "ln (hard link) in the mount" ln "$MNT/a+b.txt" "$MNT/hardlink"

	cat >"$WORK/ro.py" <<'EOF'
import errno, os, sys

m = sys.argv[1]
f = os.path.join(m, "a+b.txt")
ops = [
    ("open(O_WRONLY)", lambda: os.open(f, os.O_WRONLY)),
    ("open(O_RDWR)", lambda: os.open(f, os.O_RDWR)),
    ("open(O_WRONLY|O_TRUNC)", lambda: os.open(f, os.O_WRONLY | os.O_TRUNC)),
    ("open(O_CREAT) of a new file", lambda: os.open(os.path.join(m, "py-new"), os.O_WRONLY | os.O_CREAT, 0o644)),
    ("mkdir", lambda: os.mkdir(os.path.join(m, "py-dir"))),
    ("unlink", lambda: os.unlink(f)),
    ("rename", lambda: os.rename(f, os.path.join(m, "py-renamed"))),
    ("rmdir", lambda: os.rmdir(os.path.join(m, "emptydir"))),
    ("truncate", lambda: os.truncate(f, 0)),
    ("chmod", lambda: os.chmod(f, 0o600)),
    ("utime", lambda: os.utime(f, (0, 0))),
    ("symlink", lambda: os.symlink("x", os.path.join(m, "py-link"))),
]
bad = 0
for name, op in ops:
    try:
        r = op()
        if isinstance(r, int):
            os.close(r)
        print(f"  {name}: expected EROFS, but it succeeded")
        bad += 1
    except OSError as e:
        if e.errno != errno.EROFS:
            print(f"  {name}: expected EROFS, got {errno.errorcode.get(e.errno, e.errno)} ({e.strerror})")
            bad += 1
print(f"{len(ops)} operations, {bad} bad")
sys.exit(1 if bad else 0)
EOF
	if timeout "$SHORT_TO" python3 "$WORK/ro.py" "$MNT" >"$WORK/ro-py.out" 2>&1; then
		pass "read-only: python open-for-write/create/mkdir/unlink/rename/rmdir/truncate/chmod/utime/symlink all fail with errno.EROFS"
	else
		fail "read-only (python): expected errno.EROFS from every modifying call:"
		excerpt "$WORK/ro-py.out"
	fi

	after=$(sha_file "$MNT/a+b.txt")
	if [ "$after" = "$before" ] && [ "$(sha_file "$SRC/a+b.txt")" = "$before" ] &&
		[ ! -e "$SRC/new" ] && [ ! -e "$SRC/x" ] && [ ! -e "$SRC/renamed.txt" ] && [ -d "$SRC/d1" ]; then
		pass "read-only: after the attempts, the mount and the source are unchanged"
	else
		fail "read-only: expected the mount and source to be unchanged after write attempts (sha before $before, through mount now $after)"
	fi
}

# The /html/ listing flavour: names, types and a few files' size + content.
t_html() {
	local f bad=0 want got
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/html/" "$MNT_HTML" "$(opts)"; then
		fail "HTML listing: expected http://127.0.0.1:$NGINX_PORT/html/ to mount at $MNT_HTML"
		return
	fi
	pass "HTML listing: mounted the /html/ (HTML autoindex) URL"
	(cd "$SRC" && find . -mindepth 1 -printf '%y %P\n' | sort) >"$WORK/html.src"
	timeout "$TO" find "$MNT_HTML" -mindepth 1 -printf '%y %P\n' 2>&1 | sort >"$WORK/html.mnt"
	if diff -u "$WORK/html.src" "$WORK/html.mnt" >"$WORK/html.diff"; then
		pass "HTML listing: names and types of all entries match the source"
	else
		fail "HTML listing: expected the same names and types as the source (- source, + mount):"
		excerpt "$WORK/html.diff"
	fi
	for f in "a+b.txt" "100% done.txt" "hash#tag.txt" "this&that.txt" "naïve café.txt" \
		"日本語.bin" "with space.txt" "dir with space/inner file.txt" "d1/d2/d3/file" \
		"1MiB+1.bin" "empty.bin" "size4096.bin"; do
		want="$(stat -c %s -- "$SRC/$f") $(sha_file "$SRC/$f")"
		got="$(timeout "$SHORT_TO" stat -c %s -- "$MNT_HTML/$f" 2>&1) $(sha_file "$MNT_HTML/$f" 2>&1)"
		if [ "$got" != "$want" ]; then
			fail "HTML listing: expected size+sha256 of '$f' to be '$want', got '$got'"
			bad=$((bad + 1))
		fi
	done
	[ "$bad" -eq 0 ] && pass "HTML listing: sizes (from HEAD) and sha256 of 12 files incl. special names match"
	check_unmount "HTML listing" "$MNT_HTML"
}

# Source URL naming one object: the mount is a directory holding that file.
t_single_file() {
	local name=$1 url want got listing
	url="http://127.0.0.1:$NGINX_PORT/data/$(url_quote "$name")"
	if ! mount_objfs "$url" "$MNT_ONE" "$(opts)"; then
		fail "single file: expected $url to mount at $MNT_ONE"
		return
	fi
	listing=$(timeout "$SHORT_TO" ls -A "$MNT_ONE" 2>&1)
	if [ "$listing" = "$name" ] && [ -d "$MNT_ONE" ]; then
		pass "single file: mount of $url is a directory listing exactly '$name'"
	else
		fail "single file: expected ls of the mount of $url to show exactly '$name', got '$listing'"
	fi
	want=$(sha_file "$SRC/$name")
	got=$(sha_file "$MNT_ONE/$name" 2>&1)
	if [ "$got" = "$want" ] &&
		[ "$(timeout "$SHORT_TO" stat -c %s -- "$MNT_ONE/$name" 2>&1)" = "$(stat -c %s -- "$SRC/$name")" ]; then
		pass "single file: '$name' has the right size and content"
	else
		fail "single file: expected sha256 $want for '$name', got '$got'"
	fi
	check_unmount "single file" "$MNT_ONE"
}

# expect_mount_error DESC MNT ARGS...: objfs (daemonising, no -f) must exit
# non-zero with a message on stderr, and leave nothing mounted.
expect_mount_error() {
	local desc=$1 mnt=$2 rc=0
	shift 2
	remember_mountpoint "$mnt"
	timeout 60 "$OBJFS" "$@" >"$WORK/err.out" 2>"$WORK/err.err" </dev/null || rc=$?
	if is_mounted "$mnt"; then
		fail "error case '$desc': expected no mount at $mnt, but objfs mounted it (exit $rc)"
		timeout 10 fusermount3 -u "$mnt" 2>/dev/null || timeout 10 umount -l "$mnt" 2>/dev/null
	elif [ "$rc" -eq 124 ]; then
		fail "error case '$desc': expected objfs to exit non-zero promptly, but it ran for 60 s"
	elif [ "$rc" -eq 0 ]; then
		fail "error case '$desc': expected a non-zero exit status, got 0"
	elif [ ! -s "$WORK/err.err" ]; then
		fail "error case '$desc': expected a message on stderr, got none (exit $rc)"
	else
		pass "error case '$desc': exit $rc, nothing mounted, stderr: $(head -n 1 "$WORK/err.err")"
	fi
}

t_errors() {
	local m=$TEST_TMP/mnt-err dead_port
	mkdir -p "$m"
	expect_mount_error "malformed URL htp:/x" "$m" "htp:/x" "$m"
	dead_port=$(free_port)
	expect_mount_error "unreachable server (port $dead_port, nothing listening)" "$m" \
		-o retries=0,timeout=5 "http://127.0.0.1:$dead_port/data/" "$m"
	expect_mount_error "unknown option -o bogus=1" "$m" \
		-o bogus=1 "http://127.0.0.1:$NGINX_PORT/data/" "$m"
	expect_mount_error "missing mountpoint directory" "$TEST_TMP/no-such-dir" \
		"http://127.0.0.1:$NGINX_PORT/data/" "$TEST_TMP/no-such-dir"
	if [ -e "$TEST_TMP/no-such-dir" ]; then
		fail "error case 'missing mountpoint': expected objfs not to create $TEST_TMP/no-such-dir"
	fi
}

# Stop nginx while a throttled read of the big file (2 connections at 2 MB/s)
# is in flight: the reader must
# get EIO (never short or wrong data); after a restart the same mount serves
# the file correctly again.
t_server_stop() {
	local want rc=0 prog i res
	want=$(sha_file "$SRC/$BIG")
	cat >"$WORK/reader.py" <<'EOF'
import errno, hashlib, os, sys

path, want, size, progress = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
h = hashlib.sha256()
n = 0
try:
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
            with open(progress + ".tmp", "w") as p:
                p.write(str(n))
            os.replace(progress + ".tmp", progress)
    finally:
        os.close(fd)
except OSError as e:
    print(f"ERRNO {errno.errorcode.get(e.errno, e.errno)} ({e.strerror}) after {n} bytes")
    sys.exit(3 if e.errno == errno.EIO else 4)
got = h.hexdigest()
if n != size:
    print(f"SHORT read returned EOF after {n} of {size} bytes (sha {got})")
    sys.exit(5)
if got != want:
    print(f"CORRUPT {n} bytes with sha {got}, expected {want}")
    sys.exit(6)
print(f"OK {n} bytes, sha {got}")
EOF
	if ! mount_objfs "http://127.0.0.1:$NGINX_PORT/slow/" "$MNT_SLOW" "$(opts retries=1,timeout=5,max_connections=2)"; then
		fail "server stop: expected the /slow/ URL to mount with -o retries=1,timeout=5,max_connections=2"
		return
	fi
	echo 0 >"$WORK/progress"
	timeout 60 python3 "$WORK/reader.py" "$MNT_SLOW/$BIG" "$want" "$BIG_SIZE" "$WORK/progress" \
		>"$WORK/reader.out" 2>&1 &
	local rpid=$!
	# wait for the first MiB, then stop the server at once: the rest of the
	# read needs ~15 s more at 4 MB/s
	for ((i = 0; i < 150; i++)); do
		prog=$(cat "$WORK/progress" 2>/dev/null)
		[ "${prog:-0}" != 0 ] && break
		_pid_alive "$rpid" || break
		sleep 0.1
	done
	prog=$(cat "$WORK/progress" 2>/dev/null)
	if ! _pid_alive "$rpid"; then
		note "reader finished before the stop (progress ${prog:-?} bytes)"
	fi
	nginx_stop
	note "nginx stopped after the reader had ${prog:-?} of $BIG_SIZE bytes"
	wait "$rpid" || rc=$?
	res=$(cat "$WORK/reader.out")
	case $rc in
	3) pass "server stop: the in-flight read failed with EIO: $res" ;;
	0) fail "server stop: expected EIO, but the read completed with correct data ($res) although nginx was stopped when the reader had ${prog:-?} bytes" ;;
	124) fail "server stop: expected EIO, but the reader hung for 60 s (retries=1,timeout=5)" ;;
	5 | 6) fail "server stop: expected EIO, got silently wrong data: $res" ;;
	*) fail "server stop: expected EIO (Input/output error), got exit $rc: $res" ;;
	esac

	if ! nginx_restart_same_port; then
		fail "server stop: expected nginx to restart on port $NGINX_PORT"
		return
	fi
	rc=0
	timeout 120 python3 "$WORK/reader.py" "$MNT_SLOW/$BIG" "$want" "$BIG_SIZE" "$WORK/progress" \
		>"$WORK/reader2.out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		pass "server stop: after restarting nginx the same mount reads $BIG correctly: $(cat "$WORK/reader2.out")"
	else
		fail "server stop: expected a full, correct read after restarting nginx, got exit $rc: $(cat "$WORK/reader2.out")"
	fi
	check_unmount "server stop" "$MNT_SLOW"
}

t_sanitizer_logs() {
	local l found=0
	for l in "$TEST_TMP"/objfs.*.log; do
		[ -e "$l" ] || continue
		if grep -E -q 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' "$l"; then
			fail "objfs log $l: expected no sanitizer reports, found:"
			grep -E -m 5 'Sanitizer|runtime error:' "$l" | sed 's/^/    | /'
			found=1
		fi
	done
	[ "$found" -eq 0 ] && pass "no sanitizer reports in the objfs logs"
}

# ---------------------------------------------------------------- main

MAIN_PID=

log "objfs: $OBJFS"
log "temp:  $TEST_TMP"
if ! make_tree; then
	fail "expected to create the source tree in $SRC"
	summary
	exit 1
fi
if ! nginx_start "$SRC"; then
	fail "expected nginx to start serving $SRC"
	summary
	exit 1
fi
log "nginx: http://127.0.0.1:$NGINX_PORT/ (pid $NGINX_PID)"

if mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" "$(opts)"; then
	MAIN_PID=$OBJFS_PID
	pass "mounted http://127.0.0.1:$NGINX_PORT/data/ at $MNT (objfs pid $MAIN_PID)"
	# cold-cache tests first
	t_concurrent
	t_random_reads
	t_sha_all "$MNT" "JSON listing"
	t_tree_shape "$MNT" "JSON listing"
	t_cp_diff
	t_tar
	t_find_count
	t_read_only
else
	fail "expected http://127.0.0.1:$NGINX_PORT/data/ to mount at $MNT; skipping the tests that need it"
fi

t_html
t_single_file "a+b.txt"
t_single_file "100% done.txt"
t_single_file "日本語.bin"
t_errors
t_server_stop

if [ -n "$MAIN_PID" ]; then
	if _pid_alive "$MAIN_PID"; then
		check_unmount "final (main mount, pid $MAIN_PID)" "$MNT"
	else
		fail "final: expected objfs (pid $MAIN_PID) to be still serving $MNT before unmount, but it has exited"
	fi
fi
t_sanitizer_logs

summary
