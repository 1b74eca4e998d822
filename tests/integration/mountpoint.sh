#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# mountpoint.sh: objfs refuses a mount point where a mount would hide
# something, and -o nonempty lets it mount there all the same.
#
#   OBJFS=/path/to/objfs tests/integration/mountpoint.sh
#
# What must hold:
#  - a directory that holds entries: objfs exits non-zero, names an entry
#    and -o nonempty on stderr, mounts nothing, the entries stay visible;
#    with log_file= the reason goes to stderr as well as to the file;
#  - with -o nonempty the same directory mounts, shows the source (bytes
#    compared) and shows its own entries again after the unmount;
#  - a directory that is an objfs mount already: a second objfs exits
#    non-zero saying so, nothing stacks (one line in mountinfo), the first
#    mount still reads;
#  - a bind mount of an empty directory (the same device as its parent:
#    only mountinfo tells) is refused alike (as root only).
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse),
# 99 binary missing.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

TO=60
SHORT_TO=30
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}
SRC=$TEST_TMP/src
WORK=$TEST_TMP/work
MNT=$TEST_TMP/mnt

# shellcheck source=battery.sh
. "$HERE/battery.sh"

mkdir -p "$SRC" "$WORK" "$MNT"
head -c 100000 /dev/urandom >"$SRC/blob.bin"
echo "from the server" >"$SRC/served.txt"
if ! nginx_start "$SRC"; then
	fail "expected nginx to start"
	summary
	exit 1
fi
URL="http://127.0.0.1:$NGINX_PORT/data/"
log "objfs: $OBJFS; nginx on $NGINX_PORT"

# mounts_of DIR: how many lines of mountinfo mount something on DIR
mounts_of() {
	awk -v m="$(_mountinfo_escape "$1")" '$5 == m { n++ } END { print n + 0 }' /proc/self/mountinfo
}

# refused LABEL DIR WANT_TEXT [OPTS]: objfs (daemonising) exits non-zero at
# once with WANT_TEXT on stderr, and DIR has as many mounts as before.
refused() {
	local label=$1 dir=$2 want=$3 before rc=0
	before=$(mounts_of "$dir")
	remember_mountpoint "$dir"
	timeout 60 "$OBJFS" ${4:+-o "$4"} "$URL" "$dir" >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
	if [ "$(mounts_of "$dir")" != "$before" ]; then
		fail "$label: expected no new mount on $dir, got $(mounts_of "$dir") (was $before; exit $rc)"
		timeout 10 fusermount3 -u "$dir" 2>/dev/null || timeout 10 umount -l "$dir" 2>/dev/null
	elif [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
		fail "$label: expected objfs to exit non-zero at once, got exit $rc"
	elif ! grep -q -- "$want" "$WORK/err"; then
		fail "$label: expected '$want' on stderr, got: $(head -c 400 "$WORK/err")"
	else
		pass "$label: exit $rc, nothing mounted: $(head -n 1 "$WORK/err")"
	fi
}

# A directory with entries.
t_nonempty() {
	local d=$TEST_TMP/full got
	mkdir -p "$d/sub"
	echo "mine" >"$d/keep.txt"
	refused "non-empty directory" "$d" "is not empty (it holds '[a-z.]*' and more).*-o nonempty"
	# with a log file, the reason still reaches the terminal (and the file)
	refused "non-empty directory, log_file=" "$d" "is not empty" "log_file=$WORK/file.log"
	if grep -q "objfs\[[0-9]*\]: error: mount point '$d' is not empty" "$WORK/file.log" 2>/dev/null; then
		pass "non-empty directory, log_file=: the log file has the line too, with its level"
	else
		fail "non-empty directory, log_file=: expected 'error: mount point ... is not empty' in the log file, got: $(head -c 300 "$WORK/file.log" 2>&1)"
	fi
	if [ "$(cat "$d/keep.txt" 2>&1)" = mine ]; then
		pass "non-empty directory: its own files stay visible"
	else
		fail "non-empty directory: expected $d/keep.txt to read 'mine'"
	fi
	if ! mount_objfs "$URL" "$d" "$(opts nonempty)"; then
		fail "-o nonempty: expected $URL to mount over $d"
		return
	fi
	got=$(timeout "$SHORT_TO" ls "$d" 2>&1 | tr '\n' ' ')
	if [ "$got" = "blob.bin served.txt " ] && [ "$(sha_file "$d/blob.bin")" = "$(sha_file "$SRC/blob.bin")" ]; then
		pass "-o nonempty: mounted over $d; it lists the source and blob.bin reads the same bytes"
	else
		fail "-o nonempty: expected the source's names (blob.bin served.txt) and bytes, got '$got'"
	fi
	check_unmount "-o nonempty" "$d"
	if [ "$(cat "$d/keep.txt" 2>&1)" = mine ]; then
		pass "-o nonempty: after the unmount the directory's own files are back"
	else
		fail "-o nonempty: expected $d/keep.txt to read 'mine' after the unmount"
	fi
}

# A directory objfs is mounted on already: no second mount stacks over it.
t_mounted_twice() {
	if ! mount_objfs "$URL" "$MNT" "$(opts)"; then
		fail "mounted twice: expected the first mount of $URL on $MNT"
		return
	fi
	refused "mounted twice" "$MNT" "is already a mount point (fuse.objfs $URL).*fusermount3 -u"
	if [ "$(mounts_of "$MNT")" = 1 ] && [ "$(sha_file "$MNT/blob.bin")" = "$(sha_file "$SRC/blob.bin")" ]; then
		pass "mounted twice: one mount on $MNT, and it still reads blob.bin correctly"
	else
		fail "mounted twice: expected one working mount on $MNT, got $(mounts_of "$MNT")"
	fi
	check_unmount "mounted twice" "$MNT"
}

# A bind mount: the same device as its parent, a mount point all the same.
t_bind() {
	local e=$TEST_TMP/empty b=$TEST_TMP/bind
	if [ "$(id -u)" -ne 0 ]; then
		note "bind mount: needs root to make one: not tested"
		return
	fi
	mkdir -p "$e" "$b"
	if ! mount --bind "$e" "$b" 2>"$WORK/bind.err"; then
		note "bind mount: mount --bind failed ($(head -c 200 "$WORK/bind.err")): not tested"
		return
	fi
	remember_mountpoint "$b"
	refused "bind mount" "$b" "is already a mount point"
	umount "$b" 2>/dev/null || umount -l "$b"
}

t_nonempty
t_mounted_twice
t_bind
t_sanitizer_logs
summary
