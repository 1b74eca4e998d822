#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# quickstart.sh: contrib/quickstart.sh after README's "Building by hand", in
# a copy of the source tree (git's tracked and untracked files, or the tree
# without build directories):
#
#  1. ./autogen.sh && ./configure --with-python && make, in place.
#  2. contrib/quickstart.sh builds there (an out-of-tree configure of a tree
#     configured in place fails: "source directory already configured"),
#     makes no build/, and asks tests/deps.sh --demo for packages (which
#     names no test-only package: Ceph, clang, valgrind, awscli, Check).
#  3. Its mount at ./mnt lists the demo directory's entries and reads every
#     file byte for byte.
#  4. contrib/quickstart.sh stop unmounts ./mnt and stops its nginx.
#  5. make install DESTDIR= of that build installs the Python binding too
#     (--with-python).
#
# Builds objfs once (about two minutes on two cores): the default build only,
# a sanitizer build would build the same again. Needs /dev/fuse, nginx.
# Exit status: 0 all passed, 1 something failed, 77 skipped.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs
objfs_sanitized && skip "sanitizer build: the default build runs this test"
TOP_SRC=$(cd "$HERE/../.." && pwd)
T=$TEST_TMP/tree
mkdir -p "$T"
if git -C "$TOP_SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$TOP_SRC" && git ls-files -z -co --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$T"
elif [ -f "$TOP_SRC/config.status" ]; then
	skip "the source tree is configured in place and is not a git checkout: no clean copy"
else
	tar -C "$TOP_SRC" --exclude='./build*' --exclude=./mnt --exclude=./.demo -cf - . | tar -xf - -C "$T"
fi
if [ ! -x "$T/autogen.sh" ] || [ ! -x "$T/contrib/quickstart.sh" ]; then
	echo "ERROR: no copy of the tree at $T" >&2
	exit 99
fi
at_cleanup "'$T/contrib/quickstart.sh' stop >/dev/null 2>&1"

# 1. README's steps, with the Python binding when pip can install it.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
with_python=--with-python=$PY
if ! "$PY" -c 'import setuptools, wheel, pip' 2>/dev/null; then
	with_python=
	missing_dep "$PY with pip, setuptools and wheel (the --with-python install)"
fi
if (cd "$T" && ./autogen.sh && ./configure -q ${with_python:+"$with_python"} &&
	make -s -j"$(nproc)") >"$TEST_TMP/build.log" 2>&1; then
	pass "in place: ./autogen.sh && ./configure ${with_python:+$with_python }&& make"
else
	fail "expected README's build by hand to work in the copy; it said:"
	sed 's/^/    | /' "$TEST_TMP/build.log" | tail -n 30
	summary
	exit
fi

# 2. quickstart on that tree.
want_pkgs=$(cd "$T" && tests/deps.sh --demo --list | tr '\n' ' ')
case " $want_pkgs" in
*" ceph-"* | *" clang "* | *" valgrind "* | *" awscli "* | *" check "*)
	fail "expected tests/deps.sh --demo to want no test-only package, it wants: $want_pkgs" ;;
*" libfuse3-dev "*" libcurl4-openssl-dev "*)
	pass "tests/deps.sh --demo wants the build and run packages only ($(wc -w <<<"$want_pkgs") packages)" ;;
*) fail "expected tests/deps.sh --demo to want libfuse3-dev and libcurl4-openssl-dev, it wants: $want_pkgs" ;;
esac
grep -q '^tests/deps.sh --demo$' "$T/contrib/quickstart.sh" ||
	fail "expected contrib/quickstart.sh to run tests/deps.sh --demo"
if (cd "$T" && timeout 300 contrib/quickstart.sh) >"$TEST_TMP/qs.log" 2>&1; then
	pass "contrib/quickstart.sh after an in-place build ($(grep -m1 'building in' "$TEST_TMP/qs.log"))"
else
	fail "expected contrib/quickstart.sh to succeed after an in-place build; it said:"
	sed 's/^/    | /' "$TEST_TMP/qs.log" | tail -n 30
fi
if grep -qx "quickstart: building in $T" "$TEST_TMP/qs.log" && [ ! -e "$T/build" ]; then
	pass "it built in place and made no build/"
else
	fail "expected 'quickstart: building in $T' and no $T/build, got: $(grep 'building' "$TEST_TMP/qs.log") $(ls -d "$T/build" 2>/dev/null)"
fi

# 3. The demo mount: the same entries, the same bytes.
MNT=$T/mnt
DATA=$T/.demo/data
if is_mounted "$MNT"; then
	want=$(cd "$DATA" && find . -mindepth 1 | sort)
	got=$(cd "$MNT" && timeout 60 find . -mindepth 1 | sort)
	if [ -n "$want" ] && [ "$got" = "$want" ]; then
		pass "the demo mount lists the demo directory: $(wc -l <<<"$want") entries"
	else
		fail "expected the mount to list the demo directory; diff (source, mount):"
		diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | sed 's/^/    | /' | head -n 20
	fi
	bad=0 n=0
	while IFS= read -r -d '' f; do
		n=$((n + 1))
		timeout 60 cmp -s "$DATA/$f" "$MNT/$f" || { bad=$((bad + 1)); note "differs: $f"; }
	done < <(cd "$DATA" && find . -type f -print0)
	if [ "$n" -gt 0 ] && [ "$bad" -eq 0 ]; then
		pass "every demo file ($n) reads byte for byte through the mount"
	else
		fail "expected all $n demo files to read byte for byte, $bad differ"
	fi
else
	fail "expected quickstart to leave $MNT mounted"
fi

# 4. stop.
pid=$(cat "$T/.demo/nginx/nginx.pid" 2>/dev/null)
(cd "$T" && timeout 60 contrib/quickstart.sh stop) >"$TEST_TMP/stop.log" 2>&1
rc=$?
for ((i = 0; i < 100; i++)); do # nginx exits after its SIGTERM
	{ [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || break
	sleep 0.1
done
if [ "$rc" = 0 ] && ! is_mounted "$MNT" && [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
	pass "contrib/quickstart.sh stop: unmounted, its nginx (pid $pid) gone"
else
	fail "expected quickstart.sh stop to unmount $MNT and stop nginx (pid ${pid:-?}); it said: $(cat "$TEST_TMP/stop.log")"
fi

# 5. --with-python's make install.
if [ -n "$with_python" ]; then
	D=$TEST_TMP/dest
	if make -s -C "$T" install DESTDIR="$D" >"$TEST_TMP/install.log" 2>&1 &&
		[ -n "$(find "$D" -path '*/objfs/_libdir.py')" ] && [ -n "$(find "$D" -name libobjfs.so.0)" ] &&
		[ -n "$(find "$D" -path '*/include/objfs.h')" ]; then
		pass "configured --with-python: make install put the Python binding beside libobjfs and objfs.h"
	else
		fail "expected make install DESTDIR=$D to install the binding, libobjfs.so.0 and objfs.h; got: $(cd "$D" 2>/dev/null && find . -type f | tr '\n' ' ')"
		sed 's/^/    | /' "$TEST_TMP/install.log" | tail -n 20
	fi
fi
summary
