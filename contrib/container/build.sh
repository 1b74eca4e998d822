#!/bin/bash
# build.sh OUTDIR: builds the Debian packages of objfs (debian/: objfs,
# libobjfs0, libobjfs-dev, python3-objfs) from the tree this script lives in, without
# CUDA, and leaves the .deb, .changes and .buildinfo files in OUTDIR.
#
# The build stage of the Dockerfile runs it, and so does
# tests/integration/deb.sh, which installs and mounts what it makes.
#
# It builds a copy of the tree, never the tree itself: in a git checkout
# the tracked files and the untracked ones git does not ignore (so work not
# yet committed is built, and no configured tree, build directory or object
# file comes along), elsewhere everything but .git and build*/. The copy
# lives in a temporary directory that is removed on every exit.
#
# Needs dpkg-dev, debhelper and the Build-Depends of debian/control
# (tests/deps.sh installs them; in a container, apt-get build-dep DIR).
# DEB_BUILD_OPTIONS is passed on (default: parallel=<cores>; the suite adds
# nocheck, as it runs the unit tests itself).
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
top=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
for t in dpkg-buildpackage dpkg-parsechangelog dh; do
	command -v "$t" >/dev/null 2>&1 || {
		echo "build.sh: $t is missing (apt-get install dpkg-dev debhelper)" >&2
		exit 1
	}
done

version=$(dpkg-parsechangelog -l "$top/debian/changelog" -S Version)
work=$(mktemp -d "${TMPDIR:-/tmp}/objfs-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
src=$work/objfs-$version
mkdir "$src"
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# a file deleted but not yet committed is listed too: skipped, not fatal
	(cd "$top" && git ls-files -z -co --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$src"
else
	(cd "$top" && tar --exclude=./.git --exclude='./build*' -cf - .) | tar -xf - -C "$src"
fi
[ -f "$src/debian/rules" ] || {
	echo "build.sh: expected debian/rules in the copy of $top" >&2
	exit 1
}

export DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-parallel=$(nproc 2>/dev/null || echo 1)}
# Debian's own tools only: a python3 earlier on PATH (pyenv, a venv) lacks
# the modules pybuild runs, and would not be the python3 the package is for.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
echo "build.sh: objfs $version from $top in $src (DEB_BUILD_OPTIONS=$DEB_BUILD_OPTIONS)"
(cd "$src" && dpkg-buildpackage -b -us -uc)
n=0
for f in "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo; do
	[ -e "$f" ] || continue
	mv -f "$f" "$out/"
	n=$((n + 1))
done
echo "build.sh: $n files in $out:"
ls -1 "$out"
