# shellcheck shell=bash
#
# battery.sh: the file battery every objfs integration test runs against a
# mount (sha256 of every file, sizes, names and types, ls -lR, cp -r, tar,
# find, 8 concurrent readers, random preads, read-only checks), and the
# helpers it needs.  Source it after lib.sh, once these are set:
#
#   SRC        local tree the mount must equal (make_tree builds the standard one)
#   MNT        the mount under test
#   WORK       scratch directory
#   TO         timeout for commands that read a lot; SHORT_TO for metadata
#   EXTRA_OPTS extra -o options for every mount (opts appends them)
#   BIG, BIG_SIZE  name and size of the large file make_tree creates
#
# A backend test builds $SRC, publishes it (nginx serves it, or it is
# uploaded to a bucket), mounts it at $MNT and calls the t_* functions; each
# reports through pass/fail (lib.sh).

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

# files_match ROOT LABEL FILE...: each FILE under ROOT has the size and the
# sha256 of the same FILE under $SRC; one fail line per mismatch.  Returns
# 0 when all match.
files_match() {
	local root=$1 label=$2 f want got bad=0
	shift 2
	for f in "$@"; do
		want="$(stat -c %s -- "$SRC/$f") $(sha_file "$SRC/$f")"
		got="$(timeout "$SHORT_TO" stat -c %s -- "$root/$f" 2>&1) $(sha_file "$root/$f" 2>&1)"
		if [ "$got" != "$want" ]; then
			fail "$label: expected size+sha256 of '$f' to be '$want', got '$got'"
			bad=1
		fi
	done
	return "$bad"
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
