#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# s3_rgw.sh: end-to-end test of objfs's S3 backend against a real S3 server,
# a throw-away single-node Ceph RGW on 127.0.0.1 (rgw.sh), which verifies
# every SigV4 signature.
#
#   OBJFS=/path/to/objfs tests/integration/s3_rgw.sh
#
# Seeds buckets with boto3 (s3util.py), mounts them with -o endpoint=, and
# runs the battery of battery.sh (the same checks as http_basic.sh) plus
# S3-only cases: keys with special characters, 2,500 objects under one
# prefix (pagination; ls -l costs listing pages only, no HEAD per file),
# deep prefixes, empty and "dir/" marker objects, a key that is both an
# object and a prefix, keys that cannot be file names, prefix mounts (and
# an empty one), virtual-host addressing, credentials from the environment,
# from a shared credentials file (-o profile=, AWS_PROFILE, mode warning),
# from STS session tokens and from an IMDSv2 stand-in, an object
# overwritten while open, and mount failures (wrong secret, unknown access
# key, unknown bucket, bad bucket name, no credentials, nothing listening,
# no_sign on a private bucket, mangled session token, clock an hour off).
# Then the same RGW behind nginx with TLS (a test CA, -o ca_file=): ranges,
# the tree and every file's sha256, the direct receive path, and a wrong
# secret, an unknown key and an untrusted certificate refused.
# Secrets (secret keys, session token) must never appear in any objfs
# output, even at log_level=debug.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse;
# or Ceph / boto3 missing, except under CI=true, where that is a failure
# because tests/deps.sh installs them), 99 objfs binary missing.
#
# Environment: OBJFS, OBJFS_TEST_OPTS, OBJFS_TEST_KEEP, OBJFS_TEST_SEED (as
# for http_basic.sh); rgw.sh's RGW_* and CEPH_BIN.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=rgw.sh
. "$HERE/rgw.sh"

skip_unless_fuse
require_objfs

TO=${OBJFS_TEST_TIMEOUT:-180}
SHORT_TO=30
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
MNT2=$TEST_TMP/mnt2
WORK=$TEST_TMP/work
BIG=big.bin
BIG_SIZE=$((64 * 1024 * 1024 + 7))
S3UTIL=$HERE/s3util.py
MANY=2500

# shellcheck source=battery.sh
. "$HERE/battery.sh"

# Missing Ceph or boto3: skip on a developer machine, fail in CI.
need_or_skip() {
	if [ "${CI:-}" = true ]; then
		echo "FAIL: $* (CI=true: tests/deps.sh should have installed it)"
		exit 1
	fi
	skip "$*"
}
rgw_check 2>"$TEST_TMP/rgw_check.err" || need_or_skip "$(cat "$TEST_TMP/rgw_check.err")"
python3 -c 'import boto3' 2>/dev/null || need_or_skip "python3-boto3 is not installed"

s3u() {
	timeout "$TO" python3 "$S3UTIL" "$@"
}

# The AWS settings objfs sees: only what each test sets, never the
# invoking user's ~/.aws files, profile, region or instance metadata.
isolate_aws_env() {
	local v
	for v in AWS_PROFILE AWS_DEFAULT_PROFILE AWS_REGION AWS_DEFAULT_REGION AWS_SESSION_TOKEN \
		AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
		unset "$v"
	done
	mkdir -p "$WORK/aws"
	export AWS_CONFIG_FILE=$WORK/aws/no-config
	export AWS_SHARED_CREDENTIALS_FILE=$WORK/aws/no-credentials
	export AWS_EC2_METADATA_DISABLED=true
}

use_env_creds() {
	export AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY
	export AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY
}

# s3opts [MORE]: -o list for a mount of the test RGW
s3opts() {
	opts "endpoint=$RGW_ENDPOINT${1:+,$1}"
}

# ---------------------------------------------------------------- test data

# Names S3 allows that need care on the wire or in SigV4's canonical form.
SPECIAL=("q?mark=1&x=y.txt" "tilde~star*quote'.txt" "pct%2F%20literal%.txt"
	"plus+plus++ +.txt" "semi;colon,comma@at!bang\$dollar.txt" "brackets[1](2){3}.txt"
	"emoji 🙂 ünï.txt" "dir?x #y/inner=1+2&3.txt" "  lead and trail space  .txt")
DEEP="deep/l01/l02/l03/l04/l05/l06/l07/l08/l09/l10/l11/l12/l13/l14/l15/l16/leaf.bin"

make_s3_tree() {
	local f
	make_tree || return 1
	for f in "${SPECIAL[@]}" "$DEEP"; do
		mkdir -p "$(dirname "$SRC/$f")" || return 1
		head -c $((100 + RANDOM % 5000)) /dev/urandom >"$SRC/$f" || return 1
	done
	: >"$SRC/d1/empty-in-dir"
}

seed() {
	s3u mb main pages weird overwrite || return 1
	# the tree; emptydir/ becomes a marker object, and d1/ and d1/d2/ get
	# markers too, which must fold into their directories
	s3u sync "$SRC" main || return 1
	s3u marker main d1/ d1/d2/ || return 1
	s3u many pages "many/" "$MANY" || return 1
	printf 'root object\n' | s3u put pages top.txt - || return 1
	# a key that is an object and a prefix; keys that are no file names
	printf 'object both\n' | s3u put weird both - || return 1
	printf 'inner of both\n' | s3u put weird both/inner - || return 1
	printf 'x' | s3u put weird "bad//empty-segment" - || return 1
	printf 'x' | s3u put weird "dots/./x" - || return 1
	printf 'x' | s3u put weird "dots/../y" - || return 1
	printf 'x' | s3u put weird "long/$(printf 'L%.0s' {1..300})" - || return 1
	printf 'ok\n' | s3u put weird ok.txt - || return 1
	printf 'child\n' | s3u put weird dirobj/child - || return 1
	s3u marker weird dirobj/ only-marker/ || return 1
}

# ---------------------------------------------------------------- checks

# Each special name: a fresh lookup (no readdir before) finds it with the
# right size and content.
t_special_keys() {
	if ! mount_objfs "s3://main" "$MNT2" "$(s3opts)"; then
		fail "special keys: expected s3://main to mount at $MNT2"
		return
	fi
	files_match "$MNT2" "special keys" "${SPECIAL[@]}" "a+b.txt" "100% done.txt" "hash#tag.txt" \
		"this&that.txt" "naïve café.txt" "日本語.bin" "with space.txt" \
		"dir with space/inner file.txt" &&
		pass "special keys: ${#SPECIAL[@]} names with ?=&~*'%+;,@!\$[]#, spaces, unicode (and 8 more) found by direct lookup with the right size and sha256"
	files_match "$MNT2" "deep prefix" "$DEEP" &&
		pass "deep prefix: 17 levels down, '$DEEP' found by direct lookup with the right size and sha256"
	check_unmount "special keys" "$MNT2"
}

# Markers and empty objects, on the main mount.
t_markers() {
	local got
	got=$(timeout "$SHORT_TO" stat -c '%F %s' -- "$MNT/emptydir" "$MNT/empty.bin" "$MNT/d1/empty-in-dir" 2>&1 |
		sed 's/^directory .*/directory/' | tr '\n' '|')
	if [ "$got" = "directory|regular empty file 0|regular empty file 0|" ]; then
		pass "markers: emptydir/ marker object is an (empty) directory; empty objects are empty files"
	else
		fail "markers: expected emptydir a directory and two empty regular files, got '$got'"
	fi
	got=$(timeout "$SHORT_TO" ls -A "$MNT/emptydir" 2>&1)
	if [ -z "$got" ]; then
		pass "markers: the emptydir/ marker itself is not listed inside emptydir"
	else
		fail "markers: expected emptydir to be empty, it lists '$got'"
	fi
}

# 2,500 objects under one prefix: 3 pages of ListObjectsV2.
t_pagination() {
	local out=$WORK/pages.out
	if ! mount_objfs "s3://pages" "$MNT2" "$(s3opts log_level=debug)"; then
		fail "pagination: expected s3://pages to mount at $MNT2"
		return
	fi
	# A file of a directory not listed yet costs a HEAD and a one-key
	# listing per path component, never the directory's listing:
	# many/ and many/f01234, 4 requests. Counted by the server (RGW's access
	# log), not by objfs.
	local r0 r1 h0 h1 sz
	r0=$(rgw_requests pages)
	sz=$(timeout "$SHORT_TO" stat -c %s "$MNT2/many/f01234" 2>&1)
	r1=$(rgw_requests pages)
	if [ "$sz" = "$(python3 -c "import sys; sys.path.insert(0, '$HERE'); from s3util import many_body; print(len(many_body('many/f01234', 1234)))")" ] &&
		[ $((r1 - r0)) -le 4 ]; then
		pass "pagination: stat of one file of the unlisted 2,500-key many/ costs $((r1 - r0)) requests (no listing), size $sz"
	else
		fail "pagination: expected stat many/f01234 to give its size with at most 4 requests, got '$sz' after $((r1 - r0)) requests"
	fi
	# ls -l of 2,500 files and lookups of missing names then need the
	# listing pages only: no HEAD per file, misses answered from the listing.
	r0=$(rgw_requests pages) h0=$(rgw_requests pages HEAD)
	timeout "$TO" ls -l "$MNT2/many" >"$WORK/pages.ls" 2>&1
	timeout "$SHORT_TO" stat "$MNT2/many/no-such-file" "$MNT2/many/f99999" >/dev/null 2>&1
	timeout "$SHORT_TO" stat "$MNT2/many/no-such-file" >/dev/null 2>&1
	r1=$(rgw_requests pages) h1=$(rgw_requests pages HEAD)
	if [ $((r1 - r0)) -le 4 ] && [ "$h1" -eq "$h0" ] &&
		[ "$(grep -c '^-' "$WORK/pages.ls")" -eq "$MANY" ]; then
		pass "pagination: ls -l of $MANY files plus 3 lookups of missing names cost RGW $((r1 - r0)) requests, no HEAD (listing pages only)"
	else
		fail "pagination: expected ls -l of $MANY files and 3 missing lookups to cost at most 4 requests and no HEAD; RGW logged $((r1 - r0)) requests, $((h1 - h0)) HEADs; $(grep -c '^-' "$WORK/pages.ls") files listed"
	fi
	cat >"$WORK/pages.py" <<'EOF'
import os, sys
sys.path.insert(0, sys.argv[3])
from s3util import many_body
mnt, n = sys.argv[1], int(sys.argv[2])
want = [f"f{i:05d}" for i in range(n)]
got = sorted(os.listdir(os.path.join(mnt, "many")))
if got != want:
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    print(f"listing: {len(got)} names, expected {n}; missing {missing}, extra {extra}")
    sys.exit(1)
bad = 0
for i, name in enumerate(want):
    p = os.path.join(mnt, "many", name)
    body = many_body("many/" + name, i)
    st = os.stat(p)
    with open(p, "rb") as f:
        data = f.read()
    if st.st_size != len(body) or data != body:
        bad += 1
        if bad <= 5:
            print(f"{name}: size {st.st_size}, {len(data)} bytes read; expected {len(body)}")
print(f"{n} names listed, {n - bad} with the right size and content")
sys.exit(1 if bad else 0)
EOF
	if timeout "$TO" python3 "$WORK/pages.py" "$MNT2" "$MANY" "$HERE" >"$out" 2>&1; then
		pass "pagination: $(tail -n 1 "$out")"
	else
		fail "pagination: expected all $MANY objects under many/ listed, sized and readable:"
		excerpt "$out"
	fi
	if grep -q "listed 'many/' in 3 page(s): $MANY entries" "$OBJFS_LOG"; then
		pass "pagination: the listing of many/ took 3 ListObjectsV2 pages (continuation tokens)"
	else
		fail "pagination: expected the debug log to show many/ listed in 3 pages of $MANY entries; it has: $(grep "listed 'many/'" "$OBJFS_LOG" | head -n 2)"
	fi
	if [ "$(timeout "$SHORT_TO" cat "$MNT2/top.txt" 2>&1)" = "root object" ] &&
		[ "$(timeout "$SHORT_TO" ls "$MNT2" | tr '\n' ' ')" = "many top.txt " ]; then
		pass "pagination: the bucket root lists exactly 'many' and 'top.txt'"
	else
		fail "pagination: expected root 'many top.txt', got '$(ls -A "$MNT2" 2>&1 | tr '\n' ' ')'"
	fi
	check_unmount "pagination" "$MNT2"
}

# A key that is an object and a prefix; keys that cannot be file names.
t_weird() {
	local got
	if ! mount_objfs "s3://weird" "$MNT2" "$(s3opts)"; then
		fail "weird keys: expected s3://weird to mount at $MNT2"
		return
	fi
	got=$(cd "$MNT2" && timeout "$SHORT_TO" find . -mindepth 1 -printf '%y %P\n' 2>&1 | sort | tr '\n' '|')
	if [ "$got" = "d bad|d both|d dirobj|d dots|d long|d only-marker|f both/inner|f dirobj/child|f ok.txt|" ]; then
		pass "weird keys: 'both' (object and prefix) is a directory, '//', '.', '..' and 300-byte segments are left out, markers fold into directories"
	else
		fail "weird keys: expected 'd bad|d both|d dirobj|d dots|d long|d only-marker|f both/inner|f dirobj/child|f ok.txt|', got '$got'"
	fi
	if [ "$(timeout "$SHORT_TO" cat "$MNT2/both/inner" 2>&1)" = "inner of both" ] &&
		[ "$(timeout "$SHORT_TO" cat "$MNT2/ok.txt" 2>&1)" = "ok" ]; then
		pass "weird keys: both/inner and ok.txt read correctly"
	else
		fail "weird keys: expected both/inner = 'inner of both' and ok.txt = 'ok'"
	fi
	if grep -q "^objfs: listing '/dots': 2 key(s) left out, not file names objfs can show: 'dots/\.\./' (a '\.\.' segment), 'dots/\./' (a '\.' segment)$" "$OBJFS_LOG" &&
		grep -q "^objfs: listing '/bad': 1 key(s) left out, .*'bad//' (an empty segment" "$OBJFS_LOG" &&
		grep -q "^objfs: listing '/': 1 object(s) not shown, each hidden by a directory of the same name: 'both'$" "$OBJFS_LOG"; then
		pass "weird keys: the log names the keys left out and why, and the object 'both' a directory hides, at the default level"
	else
		fail "weird keys: expected log lines for skipped keys and the hidden object; log:"
		excerpt "$OBJFS_LOG"
	fi
	check_unmount "weird keys" "$MNT2"
}

# s3://bucket/prefix mounts show the subtree.
t_prefix_mount() {
	local pfx=$1 sub=$2 want got
	if ! mount_objfs "s3://main/$pfx" "$MNT2" "$(s3opts)"; then
		fail "prefix mount: expected s3://main/$pfx to mount at $MNT2"
		return
	fi
	want=$(cd "$SRC/$sub" && find . -mindepth 1 -printf '%y %s %P\n' | sed 's/^d [0-9]* /d /' | sort)
	got=$(cd "$MNT2" && timeout "$TO" find . -mindepth 1 -printf '%y %s %P\n' | sed 's/^d [0-9]* /d /' | sort)
	if [ "$got" = "$want" ] && [ -n "$want" ]; then
		want=$(cd "$SRC/$sub" && find . -type f -exec sha256sum {} + | sort)
		got=$(cd "$MNT2" && timeout "$TO" find . -type f -exec sha256sum {} + | sort)
		if [ "$got" = "$want" ]; then
			pass "prefix mount s3://main/$pfx: names, types, sizes and sha256 equal $sub/ of the source"
		else
			fail "prefix mount s3://main/$pfx: expected the sha256 list of $sub/, got: $got"
		fi
	else
		fail "prefix mount s3://main/$pfx: expected the entries of $sub/ (
$want
), got:
$got"
	fi
	check_unmount "prefix mount $pfx" "$MNT2"
}

# Credentials from a shared credentials file with -o profile=, and the
# warning when that file is readable by others.
t_profile() {
	local f=$WORK/aws/credentials got want
	want=$(sha_file "$SRC/1MiB+1.bin")
	cat >"$f" <<EOF
[default]
aws_access_key_id = WRONGDEFAULTKEY
aws_secret_access_key = wrong-default-secret

[objfs]
aws_access_key_id = $RGW_ACCESS_KEY
aws_secret_access_key = $RGW_SECRET_KEY
EOF
	chmod 600 "$f"
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	export AWS_SHARED_CREDENTIALS_FILE=$f
	if mount_objfs "s3://main" "$MNT2" "$(s3opts profile=objfs,log_level=info)"; then
		got=$(sha_file "$MNT2/1MiB+1.bin")
		if [ "$got" = "$want" ] && grep -q "credentials: profile 'objfs' from $f" "$OBJFS_LOG" &&
			! grep -q "readable by other users" "$OBJFS_LOG"; then
			pass "profile: -o profile=objfs with a mode 600 credentials file mounts, reads 1MiB+1.bin correctly, no permission warning"
		else
			fail "profile: expected sha256 $want (got '$got'), a log line \"credentials: profile 'objfs' from $f\" and no warning; log:"
			excerpt "$OBJFS_LOG"
		fi
		check_unmount "profile" "$MNT2"
	else
		fail "profile: expected s3://main to mount with -o profile=objfs from $f"
	fi
	chmod 644 "$f"
	if mount_objfs "s3://main" "$MNT2" "$(s3opts profile=objfs)"; then
		if grep -q "readable by other users: run chmod 600" "$OBJFS_LOG"; then
			pass "profile: a credentials file with mode 644 gives the warning 'readable by other users: run chmod 600'"
		else
			fail "profile: expected a warning about the mode 644 credentials file; log:"
			excerpt "$OBJFS_LOG"
		fi
		check_unmount "profile (mode 644)" "$MNT2"
	else
		fail "profile: expected s3://main to mount (mode 644 file only warns)"
	fi
	chmod 600 "$f"
	# the default profile of that file has a wrong key: it must be used, and fail
	expect_mount_error "credentials file, default profile with an unknown key" "$MNT2" \
		-o "$(s3opts)" s3://main "$MNT2"
	if grep -qi "access key" "$WORK/err.err"; then
		pass "profile: without -o profile= the [default] profile is used (its unknown key is named in the error)"
	else
		fail "profile: expected the [default] profile's unknown key to fail the mount with 'access key'; stderr: $(head -c 300 "$WORK/err.err")"
	fi
	AWS_PROFILE=objfs expect_mount_ok "AWS_PROFILE=objfs picks the profile" s3://main
	export AWS_SHARED_CREDENTIALS_FILE=$WORK/aws/no-credentials
	use_env_creds
}

# expect_mount_ok DESC URL [OPTS]: mounts, lists, unmounts.
expect_mount_ok() {
	local desc=$1 url=$2 o=${3:-}
	if mount_objfs "$url" "$MNT2" "$(s3opts "$o")" && timeout "$SHORT_TO" ls "$MNT2" >/dev/null; then
		pass "$desc: mounted $url and listed it"
	else
		fail "$desc: expected $url to mount and list"
	fi
	unmount_objfs "$MNT2" >/dev/null 2>&1
}

# expect_mount_msg DESC REGEX URL [OPTS]: the mount fails, stderr matches
# REGEX (grep -E -i).
expect_mount_msg() {
	local desc=$1 re=$2 url=$3 o=${4:-}
	expect_mount_error "$desc" "$MNT2" -o "$(s3opts "$o")" "$url" "$MNT2"
	cat "$WORK/err.err" >>"$TEST_TMP/objfs.mount-errors.log"
	if grep -E -i -q -- "$re" "$WORK/err.err"; then
		pass "$desc: the message matches /$re/"
	else
		fail "$desc: expected the message to match /$re/, got: $(head -c 400 "$WORK/err.err")"
	fi
}

t_s3_errors() {
	local dead
	mkdir -p "$MNT2"
	AWS_SECRET_ACCESS_KEY=wrong-secret-0123456789 \
		expect_mount_msg "wrong secret" "signature" s3://main
	AWS_ACCESS_KEY_ID=NOSUCHACCESSKEY0000 \
		expect_mount_msg "unknown access key" "access key" s3://main
	# keys the user gave: nothing to resolve again, the key was refused
	if grep -q "resolving them again" "$WORK/err.err" ||
		! grep -q "^objfs: the access key from environment was refused by the store" "$WORK/err.err"; then
		fail "unknown access key: expected 'the access key from environment was refused' and no 'resolving them again', got: $(head -c 400 "$WORK/err.err")"
	else
		pass "unknown access key: the log says the key was refused, not that it is resolved again"
	fi
	expect_mount_msg "S3 endpoint mounted as http://" \
		"access denied \(HTTP 403 AccessDenied\); the server answers as S3 does: to mount the bucket, use s3://main with -o endpoint=$RGW_ENDPOINT\$" \
		"$RGW_ENDPOINT/main/"
	expect_mount_msg "unknown bucket" "bucket 'no-such-bucket' does not exist" s3://no-such-bucket
	expect_mount_msg "invalid bucket name" "bucket name" "s3://a"
	dead=$(free_port)
	expect_mount_msg "nothing listening at the endpoint" "cannot reach|connect" s3://main \
		"endpoint=http://127.0.0.1:$dead,retries=0,timeout=5"
	expect_mount_msg "no_sign on a private bucket" "denied" s3://main "no_sign"
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	expect_mount_msg "no credentials anywhere" "no AWS credentials found.*$WORK/aws/no-credentials" s3://main
	use_env_creds
}

# This machine's clock an hour behind the server's: time() shifted by an
# LD_PRELOAD shim (built here; skipped without a C compiler, which a
# build machine has), RGW answers RequestTimeTooSkewed.
t_clock_skew() {
	local cc=${CC:-cc}
	if ! command -v "$cc" >/dev/null 2>&1; then
		note "clock skew: no C compiler ($cc) to build the time() shim; not tested"
		return
	fi
	cat >"$WORK/skew.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
time_t time(time_t *t)
{
	time_t (*real)(time_t *) = (time_t (*)(time_t *))dlsym(RTLD_NEXT, "time");
	time_t v = real(NULL) - 3600;

	if (t)
		*t = v;
	return v;
}
EOF
	if ! "$cc" -shared -fPIC -o "$WORK/skew.so" "$WORK/skew.c" -ldl 2>"$WORK/skew.err"; then
		fail "clock skew: expected $cc to build the time() shim: $(head -c 300 "$WORK/skew.err")"
		return
	fi
	# an ASan binary wants its runtime first; the shim only replaces time()
	LD_PRELOAD=$WORK/skew.so ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
		expect_mount_msg "clock one hour behind" "RequestTimeTooSkewed.*clock" s3://main
}

# An object overwritten (same size, new bytes; then one that grows) while
# open: the old handle gets EIO for bytes it has not read yet, never new or
# mixed bytes; the next open reads the whole new object at once (not after
# attr_timeout=60: the failed read marks the object stale, so that open
# fetches its current ETag and size, and the kernel is told the new size).
t_overwrite() {
	local out=$WORK/ow.out size=$(((32 << 20) + 5))
	head -c "$size" /dev/urandom >"$WORK/ow.a"
	head -c "$size" /dev/urandom >"$WORK/ow.b"
	if ! s3u put overwrite f.bin "$WORK/ow.a" >"$out" 2>&1 ||
		! s3u put overwrite g.bin "$WORK/ow.a" >>"$out" 2>&1; then
		fail "overwrite: expected to upload overwrite/f.bin: $(tail -n 2 "$out")"
		return
	fi
	cat >"$WORK/ow.py" <<'EOF'
import errno, os, sys
sys.path.insert(0, sys.argv[2])
import s3util
mnt, fa, fb = sys.argv[1], sys.argv[3], sys.argv[4]
a = open(fa, "rb").read()
b = open(fb, "rb").read()
size = len(a)
path = os.path.join(mnt, "f.bin")
fd = os.open(path, os.O_RDONLY)
if os.pread(fd, 1 << 20, 0) != a[:1 << 20]:
    sys.exit("first MiB of the original object is wrong")
s3util.client().put_object(Bucket="overwrite", Key="f.bin", Body=b)
eio = ok_old = 0
for off in (30 << 20, 20 << 20, size - 100, 9 << 20):
    try:
        got = os.pread(fd, 65536, off)
    except OSError as e:
        if e.errno != errno.EIO:
            sys.exit(f"old handle, offset {off}: expected EIO, got {errno.errorcode.get(e.errno)}")
        eio += 1
        continue
    if got != a[off:off + 65536]:
        sys.exit(f"old handle, offset {off}: got bytes that are not the original's "
                 f"({'the new object' if got == b[off:off + 65536] else 'a mix or garbage'})")
    ok_old += 1
os.close(fd)
if eio == 0:
    sys.exit(f"old handle: expected EIO after the overwrite, but all {ok_old} reads succeeded "
             "(with original bytes: stale reads of uncached ranges)")
for i in (1, 2):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit(f"open #{i} after the overwrite: expected the new object, got "
                 f"{errno.errorcode.get(e.errno)} (the stale ETag pinned again?)")
    if data != b:
        sys.exit(f"open #{i} after the overwrite: expected the new object's {size} bytes, got "
                 f"{len(data)} bytes, {'the old object' if data == a else 'not the new object'}")
# the same with a size change: the kernel must learn the new size too
g = os.path.join(mnt, "g.bin")
c = b + os.urandom(3 << 20)
fd = os.open(g, os.O_RDONLY)
if os.pread(fd, 1 << 20, 0) != a[:1 << 20]:
    sys.exit("g.bin: first MiB of the original object is wrong")
s3util.client().put_object(Bucket="overwrite", Key="g.bin", Body=c)
try:
    got = os.pread(fd, 65536, 30 << 20)
    if got != a[30 << 20:(30 << 20) + 65536]:
        sys.exit("g.bin: old handle read bytes that are not the original's")
    sys.exit("g.bin: old handle read uncached original bytes after the overwrite")
except OSError as e:
    if e.errno != errno.EIO:
        sys.exit(f"g.bin: old handle: expected EIO, got {errno.errorcode.get(e.errno)}")
os.close(fd)
try:
    with open(g, "rb") as f:
        st = os.fstat(f.fileno())
        data = f.read()
except OSError as e:
    sys.exit(f"g.bin: open after a growing overwrite: {errno.errorcode.get(e.errno)}")
if data != c or st.st_size != len(c):
    sys.exit(f"g.bin: open after a growing overwrite: size {st.st_size}, read {len(data)} "
             f"bytes, expected the new object's {len(c)}"
             f"{' (cut at the old size)' if len(data) == size else ''}")
print(f"old handle: {eio} reads EIO, {ok_old} of cached original bytes; "
      "the next two opens, at once: the new object (also when it grew by 3 MiB)")
EOF
	if ! mount_objfs "s3://overwrite" "$MNT2" "$(s3opts attr_timeout=60,list_ttl=60,chunk_size=1M)"; then
		fail "overwrite: expected s3://overwrite to mount"
		return
	fi
	if timeout "$TO" python3 "$WORK/ow.py" "$MNT2" "$HERE" "$WORK/ow.a" "$WORK/ow.b" >>"$out" 2>&1; then
		pass "overwrite while open: $(tail -n 1 "$out")"
	else
		fail "overwrite while open:"
		excerpt "$out"
	fi
	check_unmount "overwrite" "$MNT2"
}

# Temporary credentials (RGW STS GetSessionToken): AWS_SESSION_TOKEN is sent
# as x-amz-security-token and signed; a mangled token fails the mount with a
# message about the token.  Sets STS_AK, STS_SK, STS_TOKEN for t_imds.
STS_AK='' STS_SK='' STS_TOKEN=''
t_session_token() {
	local want got
	if ! read -r STS_AK STS_SK STS_TOKEN < <(s3u session-token 900 2>"$WORK/sts.err") ||
		[ -z "$STS_TOKEN" ]; then
		fail "session token: expected RGW's STS to hand out temporary credentials: $(tail -n 3 "$WORK/sts.err")"
		return
	fi
	want=$(sha_file "$SRC/one.bin")
	if AWS_ACCESS_KEY_ID=$STS_AK AWS_SECRET_ACCESS_KEY=$STS_SK AWS_SESSION_TOKEN=$STS_TOKEN \
		mount_objfs "s3://main" "$MNT2" "$(s3opts log_level=debug)"; then
		got=$(sha_file "$MNT2/one.bin")
		if [ "$got" = "$want" ] && [ "$(timeout "$SHORT_TO" ls "$MNT2/d1" | wc -l)" -gt 0 ]; then
			pass "session token: temporary credentials from STS mount s3://main, list and read one.bin correctly"
		else
			fail "session token: expected one.bin to read as $want, got '$got'"
		fi
		check_unmount "session token" "$MNT2"
	else
		fail "session token: expected s3://main to mount with AWS_SESSION_TOKEN"
	fi
	AWS_ACCESS_KEY_ID=$STS_AK AWS_SECRET_ACCESS_KEY=$STS_SK AWS_SESSION_TOKEN=x$STS_TOKEN \
		expect_mount_msg "mangled session token" "session token" s3://main
	AWS_ACCESS_KEY_ID=$STS_AK AWS_SECRET_ACCESS_KEY=$STS_SK \
		expect_mount_msg "temporary key without its session token" "denied|access key" s3://main
}

# Joined GETs on S3 (engine_direct.c): with one connection, the ranges of
# a stream waiting for it go out as one GET of their union, signed by the
# first of them (parts signed in other seconds differ only in x-amz-date
# and the Authorization over it; the Range is not signed). RGW checks the
# signature of each union: the file reads byte-exact, with joins and no
# request error.
t_joined() {
	local want got st joined errs
	want=$(sha_file "$SRC/$BIG")
	if mount_objfs "s3://main" "$MNT2" "$(s3opts max_connections=1,chunk_size=1M)"; then
		got=$(sha_file "$MNT2/$BIG")
		st=$(cat "$MNT2/.objfs-stats" 2>/dev/null)
		joined=$(printf '%s\n' "$st" | sed -n 's/^requests_joined //p')
		errs=$(printf '%s\n' "$st" | sed -n 's/^request_errors //p')
		if [ "$got" = "$want" ] && [ "${joined:-0}" -gt 0 ] && [ "$errs" = 0 ]; then
			pass "joined GETs: $BIG over one connection byte-exact, $joined ranges joined into signed unions RGW accepted"
		else
			fail "joined GETs: expected $BIG to read as $want with ranges joined and no request error, got '$got', requests_joined ${joined:-?}, request_errors ${errs:-?}"
		fi
		check_unmount "joined GETs" "$MNT2"
	else
		fail "joined GETs: expected s3://main to mount with max_connections=1"
	fi
}

# stub_up WHAT: starts tests/imds_stub.py (its environment: the caller's
# VAR=value prefixes) handing out RGW's temporary credentials; sets
# STUB_PID and STUB_PORT. Non-zero, with a failure named after WHAT, when
# it does not start.
STUB_PID='' STUB_PORT=''
stub_up() {
	local i
	IMDS_STUB_ACCESS_KEY=$STS_AK IMDS_STUB_SECRET_KEY=$STS_SK IMDS_STUB_SESSION_TOKEN=$STS_TOKEN \
		python3 "$HERE/../imds_stub.py" >"$WORK/stub.port" 2>"$WORK/stub.err" &
	STUB_PID=$!
	STUB_PORT=''
	for ((i = 0; i < 50; i++)); do
		STUB_PORT=$(head -n 1 "$WORK/stub.port" 2>/dev/null)
		[ -n "$STUB_PORT" ] && return 0
		sleep 0.1
	done
	fail "$1: expected tests/imds_stub.py to start; stderr: $(head -c 300 "$WORK/stub.err")"
	kill "$STUB_PID" 2>/dev/null
	return 1
}

# Credentials from (a loopback stand-in for) EC2 instance metadata, IMDSv2:
# RGW's temporary credentials with a session token, checked by the real
# server.
t_imds() {
	local pid port want got
	if [ -z "$STS_TOKEN" ]; then
		fail "imds: needs the temporary credentials t_session_token gets"
		return
	fi
	# what a role's instance credentials look like: temporary, with a token
	stub_up imds || return
	pid=$STUB_PID port=$STUB_PORT
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_EC2_METADATA_DISABLED
	export AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$port
	want=$(sha_file "$SRC/size4095.bin")
	if mount_objfs "s3://main" "$MNT2" "$(s3opts log_level=info)"; then
		got=$(sha_file "$MNT2/size4095.bin")
		if [ "$got" = "$want" ] &&
			grep -q "credentials: instance metadata role 'objfs-test-role'" "$OBJFS_LOG"; then
			pass "imds: with no environment keys and no files, temporary credentials + session token come from IMDSv2 (loopback stand-in) and RGW accepts them"
		else
			fail "imds: expected sha256 $want (got '$got') and a log line naming the instance role; log:"
			excerpt "$OBJFS_LOG"
		fi
		check_unmount "imds" "$MNT2"
	else
		fail "imds: expected s3://main to mount with credentials from $AWS_EC2_METADATA_SERVICE_ENDPOINT"
	fi
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	unset AWS_EC2_METADATA_SERVICE_ENDPOINT
	export AWS_EC2_METADATA_DISABLED=true
	use_env_creds
}

# Cloud credential sources, each checked by the real server:
# credential_process printing the RGW user's keys; a container endpoint,
# web identity (AssumeRoleWithWebIdentity) and a role_arn profile
# (AssumeRole signed with a source profile's keys) through the loopback
# stand-in tests/imds_stub.py, which hands out RGW's real temporary
# credentials (RGW's own STS needs roles and an OIDC provider that this
# throw-away cluster does not set up). Every mount runs at log_level=debug,
# so t_secret_not_logged searches these logs too.
creds_mount() { # DESC OPTS REGEX: mounts, reads size4095.bin, finds REGEX in the log
	local desc=$1 o=$2 re=$3 want got
	want=$(sha_file "$SRC/size4095.bin")
	if mount_objfs "s3://main" "$MNT2" "$(s3opts "log_level=debug${o:+,$o}")"; then
		got=$(sha_file "$MNT2/size4095.bin")
		if [ "$got" = "$want" ] && grep -q -E -- "$re" "$OBJFS_LOG"; then
			pass "cloud creds: $desc: RGW accepts them, size4095.bin reads correctly, the log names the source"
		else
			fail "cloud creds: $desc: expected sha256 $want (got '$got') and a log line /$re/; log:"
			excerpt "$OBJFS_LOG"
		fi
		check_unmount "cloud creds ($desc)" "$MNT2"
	else
		fail "cloud creds: $desc: expected s3://main to mount"
	fi
}

show_source() { # DESC EXPECTED [OPTS]: objfs --show-credential-source names it
	local desc=$1 want=$2 o=${3:-} out
	out=$("$OBJFS" ${o:+-o "$o"} --show-credential-source s3://main 2>&1)
	if [[ $out == *"$want"* ]] && [[ $out != *"$RGW_SECRET_KEY"* ]] &&
		{ [ -z "$STS_SK" ] || [[ $out != *"$STS_SK"* ]]; }; then
		pass "cloud creds: --show-credential-source names $desc: $out"
	else
		fail "cloud creds: --show-credential-source: expected '$want' for $desc, got: $out"
	fi
}

t_cloud_creds() {
	local cfg=$WORK/aws/cloud-config crd=$WORK/aws/cloud-credentials pid port
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	# credential_process: the RGW user's keys, as an SSO or vault helper prints them
	printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s"}\n' \
		"$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" >"$WORK/aws/helper.json"
	chmod 600 "$WORK/aws/helper.json"
	printf '%s\n' '#!/bin/sh' 'echo "helper: fetching for $1" >&2' \
		"cat '$WORK/aws/helper.json'" >"$WORK/aws/helper.sh"
	chmod 700 "$WORK/aws/helper.sh"
	printf '%s\n' "[profile proc]" "credential_process = $WORK/aws/helper.sh 'the proc profile'" "" \
		"[profile broken]" "credential_process = /bin/false" "" \
		"[profile role]" "role_arn = arn:aws:iam::1:role/objfs-reader" \
		"source_profile = rgwsrc" "role_session_name = objfs-test" >"$cfg"
	printf '%s\n' "[rgwsrc]" "aws_access_key_id = $RGW_ACCESS_KEY" \
		"aws_secret_access_key = $RGW_SECRET_KEY" >"$crd"
	chmod 600 "$cfg" "$crd"
	export AWS_CONFIG_FILE=$cfg AWS_SHARED_CREDENTIALS_FILE=$crd
	creds_mount "credential_process" "profile=proc" "credentials: credential_process"
	if grep -q "credential_process stderr: helper: fetching for the proc profile" "$OBJFS_LOG"; then
		pass "cloud creds: the helper's stderr is in the log"
	else
		fail "cloud creds: expected the helper's stderr line in the log"
	fi
	show_source "credential_process" "credential_process" "profile=proc"
	expect_mount_msg "cloud creds: a failing credential_process" \
		"credential_process.*/bin/false.*exit status 1" s3://main "profile=broken"
	if [ -z "$STS_TOKEN" ]; then
		fail "cloud creds: the STS sources need the temporary credentials t_session_token gets"
		return
	fi
	STS_STUB_WEB_TOKEN=eyJ.objfs-test.token stub_up "cloud creds" || return
	pid=$STUB_PID port=$STUB_PORT
	export AWS_ENDPOINT_URL_STS=http://127.0.0.1:$port
	# a role_arn profile: AssumeRole signed with the source profile's keys
	creds_mount "AssumeRole (role_arn + source_profile)" "profile=role" \
		"credentials: assumed role \\(STS AssumeRole\\), role arn:aws:iam::1:role/objfs-reader"
	if curl -sf "http://127.0.0.1:$port/counts" | grep -q "\"last_signer\": \"$RGW_ACCESS_KEY\""; then
		pass "cloud creds: AssumeRole was signed with the source profile's key"
	else
		fail "cloud creds: expected the stand-in to have seen AssumeRole signed by $RGW_ACCESS_KEY: $(curl -s "http://127.0.0.1:$port/counts")"
	fi
	# web identity, as EKS IRSA sets it up
	printf 'eyJ.objfs-test.token\n' >"$WORK/aws/web-token"
	export AWS_WEB_IDENTITY_TOKEN_FILE=$WORK/aws/web-token AWS_ROLE_ARN=arn:aws:iam::1:role/irsa
	creds_mount "web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN)" "" \
		"credentials: web identity \\(STS AssumeRoleWithWebIdentity\\), role arn:aws:iam::1:role/irsa"
	show_source "web identity" "web identity (STS AssumeRoleWithWebIdentity) (temporary, expires"
	printf 'not-the-token\n' >"$WORK/aws/web-token"
	expect_mount_msg "cloud creds: a web identity token STS refuses" "InvalidIdentityToken" s3://main
	unset AWS_WEB_IDENTITY_TOKEN_FILE AWS_ROLE_ARN
	# container credentials, as EKS Pod Identity sets them up
	printf 'stub-container-token\n' >"$WORK/aws/pod-token"
	export AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:$port/container/creds
	export AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=$WORK/aws/pod-token
	export AWS_CONFIG_FILE=$WORK/aws/no-config AWS_SHARED_CREDENTIALS_FILE=$WORK/aws/no-credentials
	creds_mount "container endpoint (FULL_URI + token file)" "" \
		"credentials: container endpoint with an authorization token"
	show_source "container credentials" "container credentials"
	export AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.169.254/latest
	expect_mount_msg "cloud creds: a container URI outside the allowed hosts" "loopback" s3://main
	unset AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE AWS_ENDPOINT_URL_STS
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	use_env_creds
}

# Virtual-host addressing (BUCKET.localhost; curl resolves *.localhost to
# loopback and RGW's "rgw dns name" is localhost): Host is signed too.
t_vhost() {
	if ! mount_objfs "s3://main" "$MNT2" \
		"$(opts "endpoint=http://localhost:${RGW_ENDPOINT##*:},virtual_host,log_level=info")"; then
		fail "virtual host: expected s3://main to mount with -o virtual_host"
		return
	fi
	if grep -q "at http://main.localhost:${RGW_ENDPOINT##*:} (virtual-host style" "$OBJFS_LOG"; then
		pass "virtual host: requests go to http://main.localhost:${RGW_ENDPOINT##*:}"
	else
		fail "virtual host: expected the log to say virtual-host style at main.localhost; log:"
		excerpt "$OBJFS_LOG"
	fi
	files_match "$MNT2" "virtual host" "q?mark=1&x=y.txt" "d1/d2/d3/file" "$DEEP" "1MiB+1.bin" &&
		pass "virtual host: 4 files (special name, deep, 1 MiB+1) have the right size and sha256"
	check_unmount "virtual host" "$MNT2"
}

# A prefix with nothing under it mounts empty, with a warning.
t_empty_prefix() {
	if ! mount_objfs "s3://main/no/such/prefix" "$MNT2" "$(s3opts)"; then
		fail "empty prefix: expected s3://main/no/such/prefix to mount (empty)"
		return
	fi
	if [ -z "$(timeout "$SHORT_TO" ls -A "$MNT2" 2>&1)" ] &&
		grep -q "nothing to show under prefix 'no/such/prefix/' of bucket 'main'" "$OBJFS_LOG"; then
		pass "empty prefix: s3://main/no/such/prefix mounts empty and warns 'nothing to show under prefix'"
	else
		fail "empty prefix: expected an empty mount and a warning; ls: '$(ls -A "$MNT2" 2>&1)'; log:"
		excerpt "$OBJFS_LOG"
	fi
	check_unmount "empty prefix" "$MNT2"
}

# The secret key must not be in any output of objfs, at any log level.
t_secret_not_logged() {
	local l n=0 hit=0
	for l in "$TEST_TMP"/objfs.*.log; do
		[ -e "$l" ] || continue
		n=$((n + 1))
		if grep -q -F -- "$RGW_SECRET_KEY" "$l"; then
			fail "secrets: the secret key appears in $l"
			hit=1
		fi
		if [ -n "$STS_TOKEN" ] && grep -q -F -e "$STS_SK" -e "${STS_TOKEN:0:40}" "$l"; then
			fail "secrets: the temporary secret key or the session token appears in $l"
			hit=1
		fi
	done
	if [ -z "$MAIN_LOG" ] || ! grep -q "^objfs: listed '" "$MAIN_LOG"; then
		fail "secrets: expected the main mount's log ($MAIN_LOG) to hold debug lines to search"
	elif [ "$hit" -eq 0 ]; then
		pass "secrets: the secret key${STS_TOKEN:+, the temporary secret and the session token} are in none of the $n objfs logs and mount error outputs (main and session-token mounts at log_level=debug)"
	fi
}

# RGW behind TLS: nginx with lib.sh's test CA in front of the
# same RGW (proxy_pass, the Host header kept: the signatures objfs makes for
# https://127.0.0.1:PORT verify at RGW), mounted with -o ca_file=. On a fresh
# mount, ranges of the 64 MiB object read far apart (dd skip: each fetched
# as its own ranged GET), then the names, types and sizes of the whole
# tree and the sha256 of every file; the data GETs on the direct path
# (OpenSSL's SSL_read into the cache), none handed to libcurl; every
# request of the mount through nginx's TLS server and accepted by RGW; a
# wrong secret and an unknown access key refused with their messages, and
# the CA not given refused naming the certificate.
t_https() {
	local port log=$WORK/https.log want got n=0 bad=0 r skip count bs direct fb
	if ! command -v openssl >/dev/null 2>&1; then
		missing_dep "https: openssl is not installed; RGW over TLS"
		return
	fi
	port=$(free_port)
	NGINX_EXTRA_CONF=$(nginx_tls_server -a "$log" -f '$status $request_method $request_uri' \
		"$port" "$RGW_ENDPOINT")
	if ! nginx_start "$SRC"; then
		fail "https: expected nginx with TLS in front of $RGW_ENDPOINT to start"
		return
	fi
	local RGW_ENDPOINT=https://127.0.0.1:$port plain_opts=$EXTRA_OPTS
	local EXTRA_OPTS=${EXTRA_OPTS:+$EXTRA_OPTS,}ca_file=$TLS_DIR/ca.pem
	if ! mount_objfs "s3://main" "$MNT2" "$(s3opts log_level=info)"; then
		fail "https: expected s3://main to mount from $RGW_ENDPOINT with ca_file"
		return
	fi
	for r in 1M:40:3 4096:3001:77 1M:64:1 1M:7:2 65536:17:5; do
		IFS=: read -r bs skip count <<<"$r"
		want=$(dd if="$SRC/$BIG" bs="$bs" skip="$skip" count="$count" status=none | sha256sum)
		got=$(timeout "$SHORT_TO" dd if="$MNT2/$BIG" bs="$bs" skip="$skip" count="$count" \
			status=none 2>&1 | sha256sum)
		n=$((n + 1))
		if [ "$got" != "$want" ]; then
			fail "https: expected dd bs=$bs skip=$skip count=$count of $BIG to equal the source's bytes"
			bad=1
		fi
	done
	[ "$bad" = 0 ] && pass "https: $n ranges of the $BIG_SIZE-byte $BIG read far apart (dd skip) equal the source's bytes"
	t_tree_shape "$MNT2" "https"
	t_sha_all "$MNT2" "https"
	direct=$(sed -n 's/^requests_direct //p' "$MNT2/.objfs-stats")
	fb=$(sed -n 's/^direct_fallbacks //p' "$MNT2/.objfs-stats")
	# S3's data GETs follow no redirect; until 3e86e6d that kept every one
	# of them off the direct path, over http as over https
	if [ "${direct:-0}" -gt 0 ] && [ "${fb:-1}" = 0 ]; then
		pass "https: $direct data GETs on the direct path (SSL_read, signed), none handed to libcurl"
	else
		fail "https: expected data GETs on the direct path and no fallbacks, got requests_direct=$direct direct_fallbacks=$fb"
	fi
	check_unmount "https" "$MNT2"
	sleep 0.5 # nginx writes its access log line after the response
	# 404 for a HEAD is a lookup of a name that is a directory
	got=$(awk '$1 !~ /^2/ && !($1 == 404 && $2 == "HEAD")' "$log" | head -n 3)
	n=$(awk '$1 == 206 && $2 == "GET"' "$log" | wc -l)
	if [ "$n" -gt 0 ] && [ -z "$got" ]; then
		pass "https: all $(wc -l <"$log") requests of the mount went through nginx's TLS server ($n ranged GETs) and RGW accepted their signatures (no 4xx but the 404s of HEADs of directories, no 5xx)"
	else
		fail "https: expected the mount's requests in nginx's TLS log, ranged GETs among them, and no error but 404s of HEADs; got $(wc -l <"$log" 2>/dev/null) lines, $n ranged GETs, errors: $got"
	fi
	AWS_SECRET_ACCESS_KEY=wrong-secret-0123456789 \
		expect_mount_msg "https, wrong secret" "signature" s3://main
	AWS_ACCESS_KEY_ID=NOSUCHACCESSKEY0000 \
		expect_mount_msg "https, unknown access key" "access key" s3://main
	EXTRA_OPTS=$plain_opts \
		expect_mount_msg "https, the test CA not given" "TLS certificate.*not trusted" s3://main "retries=0"
	nginx_stop
}

# ---------------------------------------------------------------- main

MAIN_PID=
MAIN_LOG=

log "objfs: $OBJFS"
log "temp:  $TEST_TMP"
isolate_aws_env
if ! make_s3_tree; then
	fail "expected to create the source tree in $SRC"
	summary
	exit 1
fi
if ! rgw_start "$TEST_TMP/rgw"; then
	fail "expected Ceph RGW to start (see the log excerpts above)"
	summary
	exit 1
fi
log "rgw:   $RGW_ENDPOINT"
t0=$SECONDS
if ! seed >"$WORK/seed.out" 2>&1; then
	fail "expected to seed the buckets through $RGW_ENDPOINT:"
	excerpt "$WORK/seed.out"
	summary
	exit 1
fi
note "seeded in $((SECONDS - t0)) s: $(tr '\n' ' ' <"$WORK/seed.out")"
use_env_creds

if mount_objfs "s3://main" "$MNT" "$(s3opts log_level=debug)"; then
	MAIN_PID=$OBJFS_PID
	MAIN_LOG=$OBJFS_LOG
	pass "mounted s3://main from $RGW_ENDPOINT at $MNT with credentials from the environment (objfs pid $MAIN_PID)"
	t_concurrent
	t_random_reads
	t_sha_all "$MNT" "S3"
	t_tree_shape "$MNT" "S3"
	t_cp_diff
	t_tar
	t_find_count
	t_read_only
	t_markers
else
	fail "expected s3://main to mount at $MNT; skipping the tests that need it"
fi

t_special_keys
t_pagination
t_weird
t_prefix_mount d1 d1
t_prefix_mount "d1/d2/" d1/d2
t_prefix_mount "dir with space" "dir with space"
t_prefix_mount "dir?x #y" "dir?x #y"
t_empty_prefix
t_vhost
t_profile
t_session_token
t_joined
t_imds
t_cloud_creds
t_s3_errors
t_clock_skew
t_overwrite
t_https

if [ -n "$MAIN_PID" ]; then
	if _pid_alive "$MAIN_PID"; then
		check_unmount "final (main mount, pid $MAIN_PID)" "$MNT"
	else
		fail "final: expected objfs (pid $MAIN_PID) to be still serving $MNT before unmount, but it has exited"
	fi
fi
t_secret_not_logged
t_sanitizer_logs

summary
