#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# python_pkg.sh: the Python binding (contrib/python) installed the ways users
# install it, then used from where it was installed.
#
#  1. make install DESTDIR=D1 INSTALL_PYTHON=no (the default): the daemon,
#     libobjfs.so.0 and objfs.h, and no Python package.
#  2. make install DESTDIR=D2 INSTALL_PYTHON=yes (what --with-python
#     configures): the package lands under D2, recording the library
#     directory.
#  3. make install prefix=P INSTALL_PYTHON=yes: the installed package loads
#     P/lib/libobjfs.so.0 with OBJFS_LIB unset; make uninstall removes it.
#  4. python3 -m venv --system-site-packages, pip install
#     --no-build-isolation --no-index of a copy of contrib/python (offline):
#     objfs, objfs.torch and objfs_torch import from the venv, the version
#     is configure's; without the library LibraryNotFoundError says to set
#     OBJFS_LIB, run make install or install libobjfs0; OBJFS_LIB naming a
#     missing file or a directory says so; tests/check_safetensors.py
#     passes against the installed package.
#  5. With /dev/fuse and nginx: a real mount read through the installed
#     package into host buffers (tests/gpu/python_check.py: odd ranges,
#     batches, every file, compared with the source bytes; a directory of
#     the mount raises IsADirectoryError).
#
# Needs the build tree of $OBJFS and a python3 with venv, pip, setuptools
# and wheel (tests/deps.sh). Runs in the default build only: a sanitizer
# build's libobjfs needs its runtime preloaded into python, and installing
# the same files again checks nothing new.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

require_objfs
TOP_SRC=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "$(dirname "$OBJFS")/.." && pwd)
[ -f "$BUILD/Makefile" ] || skip "no build tree around $OBJFS (make install is tested there)"
objfs_sanitized && skip "sanitizer build: the default build runs this test"
PY=/usr/bin/python3 # Debian's, with python3-venv, -pip, -setuptools, -wheel
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import setuptools, wheel, venv, ensurepip, pip' 2>/dev/null; then
	[ "${CI:-}" = true ] && { echo "FAIL: $PY lacks venv, pip, setuptools or wheel (tests/deps.sh)"; exit 1; }
	skip "$PY lacks venv, pip, setuptools or wheel (tests/deps.sh installs them)"
fi
VERSION=$(sed -n 's/^PACKAGE_VERSION = //p' "$BUILD/Makefile")

# in_make ARGS...: make -s -C BUILD ARGS (its output in $TEST_TMP/make.log)
in_make() {
	make -s -C "$BUILD" "$@" PYTHON="$PY" >"$TEST_TMP/make.log" 2>&1 || {
		sed 's/^/    | /' "$TEST_TMP/make.log" | tail -n 20
		return 1
	}
}
# pkg_files DIR: the binding's installed files under DIR
pkg_files() { find "$1" \( -name objfs_torch.py -o -path '*/objfs/__init__.py' \) 2>/dev/null; }

# 1. The default install: library, header, daemon; no Python.
D1=$TEST_TMP/d1
if in_make install DESTDIR="$D1" INSTALL_PYTHON=no; then
	lib=$(find "$D1" -name libobjfs.so.0 | head -n 1)
	if [ -n "$lib" ] && [ -n "$(find "$D1" -path '*/include/objfs.h')" ] &&
		[ -n "$(find "$D1" -path '*/bin/objfs' -type f)" ] && [ -z "$(pkg_files "$D1")" ]; then
		pass "make install: bin/objfs, ${lib#"$D1"} and include/objfs.h under DESTDIR, no Python package"
	else
		fail "expected objfs, libobjfs.so.0 and objfs.h under $D1 and no Python package, got: $(cd "$D1" && find . -type f | sort | tr '\n' ' ')"
	fi
else
	fail "expected make install DESTDIR=$D1 to succeed"
	lib=
fi

# 2. --with-python's install, under DESTDIR.
D2=$TEST_TMP/d2
if in_make install DESTDIR="$D2" INSTALL_PYTHON=yes; then
	init=$(pkg_files "$D2" | grep '/objfs/__init__.py$')
	libdir=$(sed -n 's/^libdir = //p' "$BUILD/Makefile")
	prefix=$(sed -n 's/^prefix = //p' "$BUILD/Makefile")
	libdir=${libdir//\$\{exec_prefix\}/$prefix}
	if [ -n "$init" ] && pkg_files "$D2" | grep -q '/objfs_torch.py$' &&
		grep -qx "LIBDIR = \"$libdir\"" "$(dirname "$init")/_libdir.py" &&
		[ -n "$(find "$D2" -name "objfs-$VERSION.dist-info")" ]; then
		pass "make install INSTALL_PYTHON=yes: the package under DESTDIR (${init#"$D2"}), libdir $libdir recorded"
	else
		fail "expected objfs/, objfs_torch.py, objfs-$VERSION.dist-info and _libdir.py ($libdir) under $D2, got: $(cd "$D2" && find . -path '*python*' | tr '\n' ' ')"
	fi
else
	fail "expected make install DESTDIR=$D2 INSTALL_PYTHON=yes to succeed"
fi

# 3. An install into a prefix: the package finds its library by itself.
P=$TEST_TMP/prefix
if in_make install prefix="$P" INSTALL_PYTHON=yes; then
	site=$(dirname "$(dirname "$(pkg_files "$P" | grep '/objfs/__init__.py$')")")
	got=$(cd "$TEST_TMP" && env -u OBJFS_LIB PYTHONPATH="$site" "$PY" -c \
		'import objfs; print(objfs.library_path())' 2>&1)
	if "$PY" -c 'import ctypes; ctypes.CDLL("libobjfs.so.0")' 2>/dev/null; then
		note "libobjfs.so.0 is on this machine's loader path: the recorded libdir is not what loads ($got)"
	elif [ "$got" = "$P/lib/libobjfs.so.0" ]; then
		pass "installed into a prefix, OBJFS_LIB unset: the package loads $got (the libdir it recorded)"
	else
		fail "expected the package in $site to load $P/lib/libobjfs.so.0, got: $got"
	fi
	if in_make uninstall prefix="$P" INSTALL_PYTHON=yes && [ -z "$(find "$P" -type f)" ]; then
		pass "make uninstall removes the package with the rest"
	else
		fail "expected make uninstall to leave no file under $P, left: $(find "$P" -type f | tr '\n' ' ')"
	fi
else
	fail "expected make install prefix=$P INSTALL_PYTHON=yes to succeed"
fi

# 4. pip in a venv, offline, from a copy (pip builds in place).
V=$TEST_TMP/venv
cp -r "$TOP_SRC/contrib/python" "$TEST_TMP/pkg"
rm -rf "$TEST_TMP/pkg/build" "$TEST_TMP/pkg"/*.egg-info
if ! "$PY" -m venv --system-site-packages "$V" >"$TEST_TMP/venv.log" 2>&1; then
	fail "expected python3 -m venv --system-site-packages to work: $(tail -n 3 "$TEST_TMP/venv.log")"
	summary
	exit
fi
if (cd "$TEST_TMP" && PIP_NO_INDEX=1 "$V/bin/python" -m pip install --no-build-isolation \
	--no-index --no-deps --disable-pip-version-check ./pkg) >"$TEST_TMP/pip.log" 2>&1; then
	pass "pip install --no-build-isolation --no-index ./contrib/python in a venv"
else
	fail "expected pip to install the package offline; it said:"
	sed 's/^/    | /' "$TEST_TMP/pip.log" | tail -n 20
fi
# vpy ARGS...: the venv's python, away from the source tree, no OBJFS_LIB
vpy() { (cd "$TEST_TMP" && env -u OBJFS_LIB OBJFS_PY_INSTALLED=1 "$V/bin/python" "$@"); }
got=$(vpy -c 'import objfs, objfs.torch' 2>&1)
case $got in
*"No module named 'torch'"*) torch=0 ;;
"") torch=1 ;;
*) torch=x ;;
esac
got=$(vpy -c '
import sys, objfs
print(objfs.__file__, objfs.__version__)
try:
    import objfs_torch, objfs.torch
    print("alias", objfs_torch is objfs.torch)
except ModuleNotFoundError as e:
    print("alias needs", e.name)' 2>&1)
want_alias="alias True"
[ "$torch" = 0 ] && want_alias="alias needs torch"
if [ "$torch" != x ] && [ "$got" = "$V/lib/$("$PY" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')/site-packages/objfs/__init__.py $VERSION
$want_alias" ]; then
	pass "objfs $VERSION and objfs_torch (objfs.torch$([ "$torch" = 0 ] && echo ', torch not installed')) import from the venv"
else
	fail "expected objfs $VERSION from $V and objfs_torch to be objfs.torch, got: $got"
fi

# The errors that say what to do.
if "$PY" -c 'import ctypes; ctypes.CDLL("libobjfs.so.0")' 2>/dev/null; then
	note "libobjfs.so.0 is on this machine's loader path: the error without it is not tested"
else
	: >"$TEST_TMP/plain"
	got=$(vpy -c '
import sys, objfs
try:
    objfs.read_into(sys.argv[1], bytearray(1))
    print("no error")
except objfs.LibraryNotFoundError as e:
    print(e)' "$TEST_TMP/plain" 2>&1)
	case $got in
	*"libobjfs.so.0 not found"*"set OBJFS_LIB=/path/to/libobjfs.so.0"*"make install"*"libobjfs0 package"*)
		pass "no library: LibraryNotFoundError names OBJFS_LIB, make install and libobjfs0" ;;
	*) fail "expected LibraryNotFoundError naming OBJFS_LIB, make install and libobjfs0, got: $got" ;;
	esac
fi
for bad in "$TEST_TMP/missing/libobjfs.so.0" "$TEST_TMP"; do
	got=$(cd "$TEST_TMP" && OBJFS_LIB=$bad "$V/bin/python" -c '
import objfs
try:
    objfs.library_path()
    print("no error")
except objfs.LibraryNotFoundError as e:
    print(e)' 2>&1)
	case $bad:$got in
	"$TEST_TMP:OBJFS_LIB=$bad is a directory; set OBJFS_LIB=/path/to/libobjfs.so.0"*)
		pass "OBJFS_LIB naming a directory: says so and what to set" ;;
	*/missing/*:"OBJFS_LIB=$bad cannot be loaded ("*"No such file"*"); set OBJFS_LIB=/path/to/libobjfs.so.0"*)
		pass "OBJFS_LIB naming a missing file: says it cannot be loaded, and why" ;;
	*) fail "expected OBJFS_LIB=$bad to be refused with what to do, got: $got" ;;
	esac
done
if out=$(vpy "$TOP_SRC/tests/check_safetensors.py" 2>&1); then
	pass "the installed package passes tests/check_safetensors.py"
else
	fail "expected tests/check_safetensors.py to pass against the installed package:"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/    | /' | head -n 20
fi

# 5. A real mount, read through the installed package into host buffers.
if [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null 2>&1 || [ ! -x "$NGINX" ]; then
	note "no /dev/fuse, fusermount3 or nginx: the mount is not tested"
elif [ -z "$lib" ]; then
	fail "no installed libobjfs.so.0 (step 1 failed): the mount is not tested"
else
	SRC=$TEST_TMP/src
	MNT=$TEST_TMP/mnt
	mkdir -p "$SRC/dir"
	head -c $((9 * 1024 * 1024 + 5)) /dev/urandom >"$SRC/big.bin"
	head -c 1000 /dev/urandom >"$SRC/small.bin"
	head -c 77 /dev/urandom >"$SRC/dir/inner.bin"
	nginx_start "$SRC" || exit 99
	mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$MNT" || exit 99
	if out=$(cd "$TEST_TMP" && OBJFS_LIB=$lib OBJFS_PY_INSTALLED=1 timeout 120 "$V/bin/python" \
		"$TOP_SRC/tests/gpu/python_check.py" "$MNT/big.bin" "$SRC/big.bin" 2>&1) &&
		! grep -q 'NOT OK' <<<"$out"; then
		pass "a real mount through the installed package and ${lib#"$D1"}: every range equals the source"
	else
		fail "expected python_check.py through the installed package to pass; it said:"
	fi
	printf '%s\n' "$out" | sed 's/^/    | /'
	check_unmount "the mount the package read" "$MNT"
fi
summary
