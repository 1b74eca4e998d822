#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# keys.sh: object names that could escape the mount or confuse tools, end
# to end: nginx (files on disk, crafted JSON and HTML listings, a synthetic
# tree deeper than PATH_MAX), an S3 stub (crafted ListObjectsV2 pages,
# stub.sh) and, where Ceph is installed, a real RGW.
#
#   OBJFS=/path/to/objfs tests/integration/keys.sh
#
# What must hold:
#  - names that are valid file names (control characters, a newline, an
#    escape sequence, DEL, bytes that are not UTF-8, "a..b", a leading dash,
#    a backslash, 255 bytes) are listed as they are and read correctly; ls -b,
#    find -print0 | xargs -0 sha256sum and cat agree with the source;
#  - names that are not (".", "..", "../x", "a/b", "", a NUL, over 255 bytes,
#    "//" runs, keys starting with "/") are left out, never followed: no
#    request ever reaches a URL outside the mounted directory or bucket
#    (nginx's access logs), and no byte from there shows in the mount;
#  - two entries that differ only in a trailing slash (file and directory)
#    give one name of one type, which stats, lists and reads consistently;
#  - a lookup of a name over 255 bytes fails with ENAMETOOLONG;
#  - a tree whose paths pass PATH_MAX lists and reads with find -execdir
#    and openat(); the absolute path gives ENAMETOOLONG, from the kernel;
#  - the S3 keys left out are named at the default log level, one line per
#    listing with the first few keys and why, as are the objects a
#    directory of the same name hides;
#  - a newline in a key cannot forge a log line: every line of every objfs
#    log starts with "objfs: ";
#  - the daemons never crash: each mount unmounts cleanly, exit status 0.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse),
# 99 binary missing.  The RGW part runs when Ceph and boto3 are installed
# (under CI=true they must be: tests/deps.sh installs them).

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=stub.sh
. "$HERE/stub.sh"
# shellcheck source=rgw.sh
. "$HERE/rgw.sh"

skip_unless_fuse
require_objfs

TO=60
SHORT_TO=30
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}
SRC=$TEST_TMP/src           # files on disk with odd names (/data/, /html/)
K=$TEST_TMP/k               # crafted listings and what they point at
MNT=$TEST_TMP/mnt
WORK=$TEST_TMP/work
DEPTH=20                    # synthetic tree: DEPTH levels of 250-byte names
SEG=$(printf 'D%.0s' {1..250})

# shellcheck source=battery.sh
. "$HERE/battery.sh"

mkdir -p "$SRC/sub" "$K/evildir" "$WORK"
stub_isolate_aws

# Valid file names that confuse tools (nginx hides names starting with '.').
ODD=($'ctl-\x01-soh' $'nl-\n-newline' $'tab-\t-tab' $'esc-\x1b[31m-red' $'del-\x7f' $'cr-\r-cr'
	$'bad-utf8-\xff\xfe' 'a..b' 'x..' '-rf' 'back\slash' ' lead' 'trail ' '%2e%2e' 'pct%2Fslash'
	'q?x=1' 'hash#frag' "$(printf 'L%.0s' {1..255})")
for n in "${ODD[@]}"; do
	printf 'content of %q\n' "$n" >"$SRC/$n"
	printf 'in sub: %q\n' "$n" >"$SRC/sub/$n"
done

# tree.py ROOT: one line per entry, sorted: type, the name as Python's repr
# of its bytes (control characters escaped), sha256 of files. Lines that
# differ between a source and its mount name the entry.
cat >"$WORK/tree.py" <<'EOF'
import hashlib, os, sys
root = os.fsencode(sys.argv[1])
out = []
for d, dirs, files in os.walk(root):
    for n in dirs:
        out.append("d %r" % os.path.relpath(os.path.join(d, n), root))
    for n in files:
        p = os.path.join(d, n)
        try:
            with open(p, "rb") as f:
                h = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            h = "ERROR " + os.strerror(e.errno)
        out.append("f %r %s" % (os.path.relpath(p, root), h))
print("\n".join(sorted(out)))
EOF

# same_tree LABEL WANT_ROOT GOT_ROOT: tree.py of both equal
same_tree() {
	local label=$1
	timeout "$TO" python3 "$WORK/tree.py" "$2" >"$WORK/want.tree" 2>&1
	timeout "$TO" python3 "$WORK/tree.py" "$3" >"$WORK/got.tree" 2>&1
	if diff -u "$WORK/want.tree" "$WORK/got.tree" >"$WORK/tree.diff" && [ -s "$WORK/want.tree" ]; then
		pass "$label: the same $(wc -l <"$WORK/want.tree") names, types and sha256 as expected"
	else
		fail "$label: expected the listing below (- expected, + mount):"
		excerpt "$WORK/tree.diff"
	fi
}

# no_escape LABEL ACCESS_LOG...: no request of objfs's left the mounted
# directory or bucket, and no byte from outside shows in the mount
no_escape() {
	local label=$1
	shift
	sleep 0.2 # nginx logs after the response
	if grep -a -i -q -e 'outside' -e '%2e%2e' -e '/\.\./' "$@"; then
		fail "$label: expected no request for anything outside; the server logged:"
		grep -a -i -e 'outside' -e '%2e%2e' -e '/\.\./' "$@" | head -5 | sed 's/^/    | /'
	elif timeout "$TO" grep -r -a -q "$STUB_OUTSIDE_MARK" "$MNT" 2>/dev/null; then
		fail "$label: the content of a file outside the mounted directory is readable through the mount"
	else
		pass "$label: no request left the mounted directory (server log), nothing from outside in the mount"
	fi
}

# ---------------------------------------------------------------- nginx

# Hostile listings: nginx answers /evil/ and /evilhtml/ with crafted
# documents; the files they may legitimately name live in evildir.
echo "ok" >"$K/evildir/ok.txt"
echo "dup is a file" >"$K/evildir/dup"
printf 'ctl name\n' >"$K/evildir/"$'ctl\x01\n'
python3 - "$K/evil.json" <<'EOF'
import json, sys
f = lambda n, s=1: {"name": n, "type": "file", "size": s,
                    "mtime": "Fri, 02 Jan 2026 03:04:05 GMT"}
d = lambda n: {"name": n, "type": "directory", "mtime": "Fri, 02 Jan 2026 03:04:05 GMT"}
ents = [d("."), d(".."), d("../outside"), f("../outside/secret.txt", 21), d("/outside"),
        f("/outside/secret.txt", 21), f("a/b"), f(""), f("nul\u0000byte"), f("L" * 256),
        f("dup", 14), d("dup"), f("ok.txt", 3), f("ctl\u0001\n", 9),
        {"name": "sock", "type": "other"}]
json.dump(ents, open(sys.argv[1], "w"))
EOF
cat >"$K/evil.html" <<EOF
<html><body><h1>Index of /evilhtml/</h1>
<a href="../">../</a> <a href="../outside/secret.txt">1</a> <a href="/outside/secret.txt">2</a>
<a href="http://127.0.0.1:PORT/outside/secret.txt">3</a> <a href="//127.0.0.1:PORT/outside/">4</a>
<a href="%2e%2e/outside/secret.txt">5</a> <a href="..%2Foutside%2Fsecret.txt">6</a>
<a href="sub/../../outside/">7</a> <a href="%2e%2e">8</a> <a href="%2E">9</a> <a href="a%2Fb">10</a>
<a href="nul%00x">11</a> <a href="?C=N;O=D">12</a> <a href="#top">13</a>
<a href="ok.txt">ok</a> <a href="./ok.txt">ok again</a> <a href="/evilhtml/ok.txt">ok absolute</a>
<a href="dup">dup</a> <a href="dup/">dup dir</a> <a href="ctl%01%0A">ctl</a>
<a href="$(printf 'L%.0s' {1..256})">long</a>
</body></html>
EOF
# what the hostile listings must come down to
mkdir -p "$K/evil-want"
cp "$K/evildir/ok.txt" "$K/evildir/dup" "$K/evildir/"$'ctl\x01\n' "$K/evil-want/"

KPORT=$(free_port)
STUB=$K/s3stub
S3PORT=$(free_port)
DIRJSON="{\"name\":\"$SEG\",\"type\":\"directory\",\"mtime\":\"Fri, 02 Jan 2026 03:04:05 GMT\"}"
LEAFJSON='{"name":"leaf.txt","type":"file","size":4,"mtime":"Fri, 02 Jan 2026 03:04:05 GMT"}'

# S3 stub: real objects with odd keys, and crafted keys that point outside
# the bucket ("../outside/secret.txt": a path-normalising server would
# serve /outside/secret.txt) or cannot be names.
mkdir -p "$STUB/objs/dir" "$STUB/objs/dup"
echo "ok" >"$STUB/objs/ok.txt"
printf 'ctl key\n' >"$STUB/objs/"$'ctl\x01\n'
echo "in dir" >"$STUB/objs/dir/in.txt"
echo "inner of dup" >"$STUB/objs/dup/inner"
echo "object trail" >"$STUB/objs/trail"
s3stub_dir "$STUB" "../outside/secret.txt" "/outside/secret.txt" "a//b" "x/./y" "x/../y" \
	"dup" "trail/" "$(printf 'S%.0s' {1..300})" $'nl\nobjfs: error: forged/../x' ||
	{ echo "ERROR: cannot write the S3 stub's listings" >&2; exit 99; }
mkdir -p "$K/s3-want/dir" "$K/s3-want/dup" "$K/s3-want/trail" "$K/s3-want/a" "$K/s3-want/x" \
	"$K/s3-want/"$'nl\nobjfs: error: forged'
cp "$STUB/objs/ok.txt" "$STUB/objs/"$'ctl\x01\n' "$K/s3-want/"
cp "$STUB/objs/dir/in.txt" "$K/s3-want/dir/"
cp "$STUB/objs/dup/inner" "$K/s3-want/dup/"

NGINX_EXTRA_CONF="
    server {
        listen 127.0.0.1:$KPORT;
        location = /evil/ { default_type application/json; root $K; try_files /evil.json =404; }
        location /evil/ { alias $K/evildir/; autoindex on; autoindex_format json; }
        location = /evilhtml/ { default_type text/html; root $K; try_files /evil.html =404; }
        location /evilhtml/ { alias $K/evildir/; autoindex on; }
        location ~ \"^/deep/([^/]+/){$DEPTH}\$\" {
            default_type application/json;
            return 200 '[$LEAFJSON]';
        }
        location ~ \"^/deep/([^/]+/){0,$((DEPTH - 1))}\$\" {
            default_type application/json;
            return 200 '[$DIRJSON]';
        }
        location ~ \"^/deep/.*/leaf[.]txt\$\" { return 200 'leaf'; }
$(stub_outside_conf "$K")
    }
$(s3stub_server "$S3PORT" bkt "$STUB")"
sed -i "s/PORT/$KPORT/g" "$K/evil.html"
# the marker must exist where the hostile names point
if ! grep -q "$STUB_OUTSIDE_MARK" "$K/outside/secret.txt"; then
	echo "ERROR: stub_outside_conf wrote no marker" >&2
	exit 99
fi
if ! nginx_start "$SRC"; then
	fail "expected nginx to start"
	summary
	exit 1
fi
log "objfs: $OBJFS; nginx $NGINX_PORT, crafted listings $KPORT, S3 stub $S3PORT"

# mount_or_fail LABEL URL [OPTS]
mount_or_fail() {
	mount_objfs "$2" "$MNT" "$(opts "${3:-}")" && return 0
	fail "$1: expected $2 to mount"
	return 1
}

# Files on disk with odd names, through the JSON and the HTML listing.
t_disk_names() {
	local flav=$1 label="odd names ($1 listing)" a b
	mount_or_fail "$label" "http://127.0.0.1:$NGINX_PORT/$flav/" "log_level=debug" || return
	same_tree "$label" "$SRC" "$MNT"
	a=$(cd "$SRC" && ls -b . sub)
	b=$(cd "$MNT" && timeout "$SHORT_TO" ls -b . sub 2>&1)
	if [ "$a" = "$b" ]; then
		pass "$label: ls -b shows the same escaped names as for the source"
	else
		fail "$label: expected ls -b to match the source's; got: $(printf '%s' "$b" | head -c 300)"
	fi
	a=$(cd "$SRC" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
	b=$(cd "$MNT" && timeout "$TO" find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
	if [ "$a" = "$b" ]; then
		pass "$label: find -print0 | xargs -0 sha256sum prints the same as for the source"
	else
		fail "$label: expected find | xargs sha256sum to print the same as for the source"
	fi
	a=$(cat "$SRC/"$'esc-\x1b[31m-red' "$SRC/sub/"$'nl-\n-newline')
	b=$(timeout "$SHORT_TO" cat "$MNT/"$'esc-\x1b[31m-red' "$MNT/sub/"$'nl-\n-newline' 2>&1)
	if [ "$a" = "$b" ]; then
		pass "$label: cat of the names with an escape sequence and a newline"
	else
		fail "$label: expected cat to print the sources' content, got '$b'"
	fi
	check_unmount "$label" "$MNT"
}

# Lookups of names no listing can hold: a clear errno.
t_long_lookup() {
	local out
	mount_or_fail "long lookups" "http://127.0.0.1:$NGINX_PORT/data/" || return
	out=$(timeout "$SHORT_TO" python3 -c '
import errno, os, sys
for n in (256, 300, 1000):
    try:
        os.stat(os.path.join(sys.argv[1], "L" * n))
        print(n, "found")
    except OSError as e:
        print(n, errno.errorcode[e.errno])' "$MNT" 2>&1 | tr '\n' ' ')
	if [ "$out" = "256 ENAMETOOLONG 300 ENAMETOOLONG 1000 ENAMETOOLONG " ]; then
		pass "long lookups: names of 256, 300 and 1000 bytes: ENAMETOOLONG"
	else
		fail "long lookups: expected ENAMETOOLONG for 256/300/1000-byte names, got '$out'"
	fi
	check_unmount "long lookups" "$MNT"
}

# Crafted listings: only valid names of the directory itself survive.
t_hostile_listing() {
	local flav=$1 label="hostile $1 listing" t
	: >"$NGINX_PREFIX/access.log"
	mount_or_fail "$label" "http://127.0.0.1:$KPORT/$flav/" "log_level=debug" || return
	same_tree "$label (only ok.txt, dup, ctl\\x01\\n)" "$K/evil-want" "$MNT"
	t=$(timeout "$SHORT_TO" stat -c %F "$MNT/dup" 2>&1)
	if [ "$t" = "regular file" ] && [ "$(timeout "$SHORT_TO" cat "$MNT/dup" 2>&1)" = "dup is a file" ]; then
		pass "$label: 'dup' listed as file and directory: one regular file (the first), it reads"
	else
		fail "$label: expected 'dup' to be one regular file, got '$t'"
	fi
	timeout "$TO" find "$MNT" >/dev/null 2>&1
	no_escape "$label" "$NGINX_PREFIX/access.log"
	check_unmount "$label" "$MNT"
}

# A tree deeper than PATH_MAX (nginx answers any level of /deep/).
t_deep() {
	local label="path over PATH_MAX" max n out pm
	mount_or_fail "$label" "http://127.0.0.1:$KPORT/deep/" || return
	pm=$(getconf PATH_MAX "$MNT")
	max=$(cd "$MNT" && timeout "$TO" find . -printf '%d %p\n' 2>&1 | awk '{ l = length($2); if (l > m) m = l } END { print m + 0 }')
	n=$(cd "$MNT" && timeout "$TO" find . -name leaf.txt -execdir cat {} \; 2>&1)
	if [ "$n" = leaf ] && [ "$max" -gt "$pm" ]; then
		pass "$label: find walks $DEPTH levels to a $max-byte path (PATH_MAX $pm); find -execdir cat reads the leaf"
	else
		fail "$label: expected find to reach a path over $pm bytes ($max) and -execdir cat to print 'leaf', got '$n'"
	fi
	out=$(timeout "$TO" python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
depth = 0
while True:
    names = os.listdir(fd)
    if names == ["leaf.txt"]:
        break
    nfd = os.open(names[0], os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd, depth = nfd, depth + 1
lf = os.open("leaf.txt", os.O_RDONLY, dir_fd=fd)
print(depth, os.read(lf, 100).decode())' "$MNT" 2>&1)
	if [ "$out" = "$DEPTH leaf" ]; then
		pass "$label: openat() down $DEPTH levels reads the leaf"
	else
		fail "$label: expected openat() to reach depth $DEPTH and read 'leaf', got '$out'"
	fi
	local p=$MNT i
	for ((i = 0; i < DEPTH; i++)); do p=$p/$SEG; done
	out=$(timeout "$SHORT_TO" cat "$p/leaf.txt" 2>&1)
	if [[ $out == *"File name too long"* ]]; then
		pass "$label: cat of the absolute path fails with ENAMETOOLONG (the kernel's limit)"
	else
		fail "$label: expected 'File name too long' for the absolute path, got '$(printf '%s' "$out" | tail -c 200)'"
	fi
	check_unmount "$label" "$MNT"
}

t_s3_stub() {
	local label="S3 stub with crafted keys"
	: >"$STUB/access.log"
	if ! AWS_ACCESS_KEY_ID=AKIDKEYS AWS_SECRET_ACCESS_KEY=keys-test-secret \
		mount_or_fail "$label" s3://bkt "endpoint=http://127.0.0.1:$S3PORT,log_level=info"; then
		return
	fi
	same_tree "$label" "$K/s3-want" "$MNT"
	if [ "$(timeout "$SHORT_TO" stat -c %F "$MNT/dup" "$MNT/trail" 2>&1 | tr '\n' ' ')" = "directory directory " ]; then
		pass "$label: 'dup' and 'trail' (objects, and prefixes dup/ and trail/) are directories"
	else
		fail "$label: expected dup and trail to be directories"
	fi
	no_escape "$label" "$STUB/access.log"
	check_unmount "$label" "$MNT"
}

# The keys left out, named at the default log level: one line per listing
# says which and why; the objects hidden by a directory are named too.
t_s3_skips_logged() {
	local label="S3 keys left out, logged" l want
	if ! AWS_ACCESS_KEY_ID=AKIDKEYS AWS_SECRET_ACCESS_KEY=keys-test-secret \
		mount_or_fail "$label" s3://bkt "endpoint=http://127.0.0.1:$S3PORT"; then
		return
	fi
	timeout "$TO" find "$MNT" >/dev/null 2>&1
	timeout "$SHORT_TO" ls -A "$MNT" "$MNT/x" >/dev/null 2>&1 # listed again: kept, not logged again
	check_unmount "$label" "$MNT"
	l=$OBJFS_LOG
	# shellcheck disable=SC2016
	for want in \
		"listing '/': 3 key(s) left out, not file names objfs can show: 'SSSS*\\.\\.\\.' (a name over 255 bytes), '\\.\\./' (a '\\.\\.' segment), '/' (an empty segment: '//', or '/' first)\$" \
		"listing '/a': 1 key(s) left out, not file names objfs can show: 'a//' (an empty segment" \
		"listing '/x': 2 key(s) left out, not file names objfs can show: 'x/\\.\\./' (a '\\.\\.' segment), 'x/\\./' (a '\\.' segment)\$" \
		"listing '/nl?objfs: error: forged': 1 key(s) left out, .*: 'nl?objfs: error: forged/\\.\\./' (a '\\.\\.' segment)\$" \
		"listing '/': 2 object(s) not shown, each hidden by a directory of the same name: 'dup', 'trail'\$"; do
		if [ "$(grep -a -c -- "^objfs: $want" "$l")" = 1 ]; then
			pass "$label: one line at the default level: $(grep -a -m 1 -o -- "^objfs: $want" "$l" | cut -c 1-150)"
		else
			fail "$label: expected exactly one log line matching '^objfs: $want'; the log:"
			grep -a 'listing' "$l" | head -n 8 | cut -c 1-300 | sed 's/^/    | /'
		fi
	done
}

# The same kinds of keys on a real S3 server (RGW checks every signature:
# control characters and dots must be encoded alike on both sides).
t_rgw() {
	local label="RGW keys" out
	rgw_require "$label" || return
	if ! rgw_start "$TEST_TMP/rgw" 2>"$WORK/rgw.err"; then
		fail "$label: expected Ceph RGW to start: $(tail -n 5 "$WORK/rgw.err")"
		return
	fi
	mkdir -p "$K/rgw-src" "$K/rgw-want"
	for n in $'ctl-\x01-soh' $'nl-\n-newline' $'tab-\t-tab' $'esc-\x1b[31m-red' $'del-\x7f' \
		'a..b' 'sp ace' 'pct%2Fx' 'q?x=1&y' 'plus+sign' 'café' $'cafe\xcc\x81'; do
		printf 'rgw %q\n' "$n" >"$K/rgw-src/$n"
	done
	mkdir -p "$K/rgw-src/deep/$(printf 'A%.0s' {1..250})/$(printf 'B%.0s' {1..250})"
	echo "deep" >"$K/rgw-src/deep/$(printf 'A%.0s' {1..250})/$(printf 'B%.0s' {1..250})/$(printf 'C%.0s' {1..250})"
	cp -a "$K/rgw-src/." "$K/rgw-want/"
	mkdir -p "$K/rgw-want/a" "$K/rgw-want/x" "$K/rgw-want/trail" "$K/rgw-want/both"
	echo "in both" >"$K/rgw-want/both/in"
	# shellcheck disable=SC2016
	if ! out=$(timeout "$TO" python3 - "$HERE" "$K/rgw-src" 2>&1 <<'EOF'
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
import s3util
s3 = s3util.client()
s3.create_bucket(Bucket="keys")
src = sys.argv[2]
for d, _, files in os.walk(src):
    for n in files:
        p = os.path.join(d, n)
        s3.put_object(Bucket="keys", Key=os.path.relpath(p, src), Body=open(p, "rb").read())
for k in ("../escape", "/abs", "a//b", "x/./y", "x/../y", "trail", "trail/", "both", "both/in",
          "S" * 300, "long/" + "T" * 300 + "/z"):
    s3.put_object(Bucket="keys", Key=k, Body=b"in both\n" if k == "both/in" else b"crafted\n")
print(sum(1 for _ in s3.get_paginator("list_objects_v2").paginate(Bucket="keys")))
EOF
	); then
		fail "$label: expected boto3 to upload the keys to RGW: $out"
		return
	fi
	mkdir -p "$K/rgw-want/long"
	if ! AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY \
		mount_or_fail "$label" s3://keys "endpoint=$RGW_ENDPOINT,log_level=info"; then
		return
	fi
	same_tree "$label" "$K/rgw-want" "$MNT"
	check_unmount "$label" "$MNT"
	rgw_stop
}

# A newline in a name must not make a line of its own in a log.
t_log_lines() {
	local bad=0 l n=0 forged logged
	for l in "$TEST_TMP"/objfs.*.log; do
		[ -e "$l" ] || continue
		n=$((n + 1))
		if LC_ALL=C grep -a -v -q '^objfs: ' "$l" || LC_ALL=C grep -a -q $'[\x01-\x08\x0b-\x1f\x7f]' "$l"; then
			fail "log lines: $l has a line that does not start with 'objfs: ' or holds a control character:"
			LC_ALL=C grep -a -n -v '^objfs: ' "$l" | head -3 | cat -A | sed 's/^/    | /'
			bad=1
		fi
	done
	forged=$(cat "$TEST_TMP"/objfs.*.log | grep -a -c '^objfs: error: forged')
	logged=$(cat "$TEST_TMP"/objfs.*.log | grep -a -c 'nl?objfs: error: forged')
	if [ "$forged" -gt 0 ]; then
		fail "log lines: the S3 key 'nl\\nobjfs: error: forged/../x' forged $forged log line(s) 'objfs: error: forged...'"
	elif [ "$logged" -eq 0 ]; then
		fail "log lines: expected the S3 stub mount to log the key 'nl\\nobjfs: error: forged/../x' it skipped"
	elif [ "$bad" -eq 0 ]; then
		pass "log lines: all $n objfs logs are one 'objfs: ' line per message; the key with a newline is logged as 'nl?objfs: error: forged...'"
	fi
}

# ---------------------------------------------------------------- main

t_disk_names data
t_disk_names html
t_long_lookup
t_hostile_listing evil
t_hostile_listing evilhtml
t_deep
t_s3_stub
t_s3_skips_logged
t_rgw
t_log_lines
t_sanitizer_logs
summary
