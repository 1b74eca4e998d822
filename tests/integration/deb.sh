#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# deb.sh: the Debian packages, built, installed and used as a user would:
#
#   - contrib/container/build.sh (the Dockerfile's build stage) builds
#     objfs, libobjfs0, libobjfs-dev and python3-objfs from a copy of this
#     tree, without CUDA (no libcudart in any dependency or DT_NEEDED);
#     each package holds its files (daemon, man pages, objfs@.service,
#     library, header, objfs.pc, the Python package); lintian reports no
#     error;
#   - apt-get installs them; /usr/bin/objfs --version answers the
#     changelog's version, and the Dockerfile's ENTRYPOINT is that binary;
#   - mount -t fuse.objfs and an fstab line (mount --fstab) mount an nginx
#     directory through the installed daemon (the process serving the
#     mount runs /usr/bin/objfs): files read byte-exact; umount ends it;
#   - a program built with pkg-config objfs against the installed header
#     and library, and /usr/bin/python3 with the installed objfs module,
#     read a file of that mount through the side API into host memory,
#     byte-exact;
#   - the installed objfs@.service names binaries that exist;
#   - the packages are purged at the end, and on every exit (trap), so the
#     rest of the suite sees the machine as it was.
#
# A whole package build: it runs in the default build's pass only (the
# --enable-sanitizers build skips it: the packages do not depend on which
# build runs the suite).
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (sanitizer
# build; no FUSE; not root, no packaging tools or objfs packages already
# installed, except under CI=true where those fail), 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

# skip_or_fail WHY: a prerequisite tests/deps.sh provides is missing
skip_or_fail() {
	[ "${CI:-}" = true ] && { echo "FAIL: $* (CI=true: tests/deps.sh provides it)"; exit 1; }
	skip "$*"
}

if [ -x ./config.status ] && ./config.status --config | grep -q -- '--enable-sanitizers'; then
	skip "the --enable-sanitizers build: the packages are built and tested in the default pass"
fi
if objfs_sanitized; then
	skip "$OBJFS is a sanitizer build: the packages are built and tested in the default pass"
fi
skip_unless_fuse
[ "$(id -u)" -eq 0 ] || skip_or_fail "needs root to install packages and for mount(8)"
for t in dpkg-buildpackage dh dh_autoreconf apt-get mount umount cc pkg-config objdump; do
	command -v "$t" >/dev/null 2>&1 || skip_or_fail "$t is not installed"
done
PKGS=(objfs libobjfs0 libobjfs-dev python3-objfs)
installed() {
	dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^.[iUFHWt]'
}
for p in "${PKGS[@]}"; do
	if installed "$p"; then
		skip_or_fail "the package $p is installed: this test installs and purges its own" \
			"(dpkg --purge ${PKGS[*]} to run it)"
	fi
done
# mount.fuse3 runs the objfs found first on /usr/local/bin:/bin:/usr/bin
if [ -e /usr/local/bin/objfs ]; then
	skip_or_fail "/usr/local/bin/objfs exists: mount(8) would run it, not the packaged /usr/bin/objfs"
fi

VERSION=$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version) || exit 99
UPSTREAM=${VERSION%-*}
ARCH=$(dpkg --print-architecture)
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
DEBS=$TEST_TMP/debs
SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
WORK=$TEST_TMP/work
mkdir -p "$SRC/sub" "$MNT" "$WORK"

# ---------------------------------------------------------------- build
blog=$TEST_TMP/build.log
if DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" TMPDIR=$TEST_TMP \
	"$TOP/contrib/container/build.sh" "$DEBS" >"$blog" 2>&1; then
	pass "build.sh built the packages ($(cd "$DEBS" && echo *.deb))"
else
	fail "expected contrib/container/build.sh to build the packages; the last lines of its log:"
	tail -n 40 "$blog"
	summary
	exit 1
fi
deb() {
	local a=$ARCH
	[[ $1 == python3-* ]] && a=all
	echo "$DEBS/${1}_${VERSION}_$a.deb"
}
for p in "${PKGS[@]}"; do
	[ -f "$(deb "$p")" ] || { fail "expected $(deb "$p")"; summary; exit 1; }
done

# has PKG PATH...: the package holds every PATH
has() {
	local p=$1 f missing=()
	shift
	dpkg-deb -c "$(deb "$p")" | awk '{ print $6 }' | sed 's|^\./|/|' >"$WORK/$p.list"
	for f in "$@"; do
		grep -qxF "$f" "$WORK/$p.list" || missing+=("$f")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		pass "$p holds $*"
	else
		fail "expected $p to hold ${missing[*]}; it holds: $(tr '\n' ' ' <"$WORK/$p.list")"
	fi
}
has objfs /usr/bin/objfs /usr/share/man/man1/objfs.1.gz /lib/systemd/system/objfs@.service
has libobjfs0 "/usr/lib/$MA/libobjfs.so.0"
has libobjfs-dev /usr/include/objfs.h "/usr/lib/$MA/libobjfs.so" "/usr/lib/$MA/pkgconfig/objfs.pc" \
	/usr/share/man/man3/objfs_gpu_readv.3.gz
has python3-objfs /usr/lib/python3/dist-packages/objfs/__init__.py \
	/usr/lib/python3/dist-packages/objfs/torch.py /usr/lib/python3/dist-packages/objfs_torch.py
dep_objfs=$(dpkg-deb -f "$(deb objfs)" Depends)
dep_lib=$(dpkg-deb -f "$(deb libobjfs0)" Depends)
dpkg-deb -x "$(deb libobjfs0)" "$WORK/lib0"
needed=$(objdump -p "$WORK/lib0/usr/lib/$MA/libobjfs.so.0" 2>&1 | awk '$1 == "NEEDED" { print $2 }' | tr '\n' ' ')
if [[ "$dep_objfs" == *fuse3* && "$dep_objfs" == *libcurl* && "$dep_objfs" == *liburing* &&
	"$dep_objfs$dep_lib$needed" != *cuda* && "$needed" == *libc.so* ]]; then
	pass "without CUDA: objfs depends on $dep_objfs; libobjfs0 on $dep_lib; libobjfs.so.0 needs $needed"
else
	fail "expected objfs to depend on fuse3, libcurl and liburing and nothing on CUDA, got objfs: $dep_objfs; libobjfs0: $dep_lib; NEEDED: $needed"
fi
if command -v lintian >/dev/null 2>&1; then
	lintian --no-cfg "$DEBS"/objfs_"${VERSION}"_"$ARCH".changes >"$WORK/lintian.txt" 2>&1
	if grep -q '^E: ' "$WORK/lintian.txt"; then
		fail "expected no lintian error, got: $(grep '^E: ' "$WORK/lintian.txt" | head -n 20)"
	else
		pass "lintian: no error ($(grep -c '^[WIP]: ' "$WORK/lintian.txt") warnings and notes)"
	fi
else
	missing_dep "lintian"
fi

# ---------------------------------------------------------------- install
# purge_ours: purges what is installed of PKGS (apt-get awaits the dpkg lock)
purge_ours() {
	local p left=()
	for p in "${PKGS[@]}"; do
		installed "$p" && left+=("$p")
	done
	[ ${#left[@]} -eq 0 ] ||
		apt-get purge -y -qq -o DPkg::Lock::Timeout=300 "${left[@]}" >"$TEST_TMP/purge.log" 2>&1
}
at_cleanup purge_ours
if apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 \
	"$(deb objfs)" "$(deb libobjfs0)" "$(deb libobjfs-dev)" "$(deb python3-objfs)" \
	>"$WORK/install.log" 2>&1 && installed objfs && installed libobjfs0 &&
	installed libobjfs-dev && installed python3-objfs; then
	pass "apt-get installed ${PKGS[*]} $VERSION"
else
	fail "expected apt-get to install ${PKGS[*]}: $(tail -n 20 "$WORK/install.log")"
	summary
	exit 1
fi
out=$(/usr/bin/objfs --version 2>&1)
first=$(printf '%s\n' "$out" | head -n1)
if [[ "$first" =~ ^objfs\ ${UPSTREAM//./\\.}( |$) ]] && ! printf '%s\n' "$out" | grep -q '^CUDA: on'; then
	pass "/usr/bin/objfs --version: $(printf '%s' "$out" | tr '\n' ';')"
else
	fail "expected /usr/bin/objfs --version to begin 'objfs $UPSTREAM' (and no CUDA), got: $out"
fi
entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)".*/\1/p' "$TOP/Dockerfile")
if [ -n "$entry" ] && [ -x "$entry" ] && [ "$(dpkg -S "$entry" 2>/dev/null)" = "objfs: $entry" ]; then
	pass "the Dockerfile's ENTRYPOINT $entry is the objfs package's daemon"
else
	fail "expected the Dockerfile's ENTRYPOINT ($entry) to be a binary of the objfs package"
fi

# ---------------------------------------------------------------- mount
for f in a b; do
	head -c $((5 << 20)) /dev/urandom >"$SRC/$f.bin"
done
head -c 100001 /dev/urandom >"$SRC/sub/c.bin"
nginx_start "$SRC" || exit 99
URL=http://127.0.0.1:$NGINX_PORT/data/

# served_by_package: the daemon serving $MNT runs /usr/bin/objfs
served_by_package() {
	local pid
	pid=$(pgrep -f -- "objfs .*$MNT" | head -n1)
	[ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe")" = /usr/bin/objfs ] && DAEMON=$pid
}

# umount_all LABEL: umount $MNT, the daemon exits
umount_all() {
	local i
	if timeout 10 umount "$MNT"; then
		for ((i = 0; i < 100; i++)); do
			kill -0 "$DAEMON" 2>/dev/null || break
			sleep 0.1
		done
	fi
	if ! is_mounted "$MNT" && ! kill -0 "$DAEMON" 2>/dev/null; then
		pass "$1: umount unmounted it and the daemon (pid $DAEMON) exited"
	else
		fail "$1: expected umount to unmount $MNT and end the daemon $DAEMON"
		umount -l "$MNT" 2>/dev/null
	fi
}

# mount(8) runs in the foreground, never in $(...): a signal then waits
# for it, and the trap's cleanup sees (and unmounts) what it mounted.
DAEMON=
if timeout 30 mount -t fuse.objfs "$URL" "$MNT" >"$WORK/mount.out" 2>&1 && is_mounted "$MNT"; then
	if served_by_package && cmp "$MNT/a.bin" "$SRC/a.bin" && cmp "$MNT/sub/c.bin" "$SRC/sub/c.bin"; then
		pass "mount -t fuse.objfs: served by /usr/bin/objfs (pid $DAEMON); a.bin, sub/c.bin byte-exact"
	else
		fail "mount -t fuse.objfs: expected /usr/bin/objfs serving the source's bytes (daemon: ${DAEMON:-none})"
	fi

	# libobjfs-dev + libobjfs0: a program built with pkg-config objfs
	cat >"$WORK/sidecat.c" <<'EOF'
/* sidecat FILE: FILE (on an objfs mount) to stdout through libobjfs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <objfs.h>

int main(int argc, char **argv)
{
	struct objfs_gpu *h;
	off_t off = 0;
	ssize_t n;
	char *buf = malloc(1 << 20);
	int fd, rc;

	if (argc != 2 || !buf || (fd = open(argv[1], O_RDONLY)) < 0)
		return 2;
	rc = objfs_gpu_open(fd, &h);
	close(fd);
	if (rc) {
		fprintf(stderr, "objfs_gpu_open: %s\n", objfs_strerror(rc));
		return 1;
	}
	do {
		rc = objfs_gpu_read(h, buf, 1 << 20, off, &n);
		if (rc) {
			fprintf(stderr, "objfs_gpu_read: %s\n", objfs_strerror(rc));
			return 1;
		}
		if (n > 0 && fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
			return 1;
		off += n;
	} while (n > 0);
	objfs_gpu_close(h);
	free(buf);
	return 0;
}
EOF
	# shellcheck disable=SC2046 # pkg-config's words
	if (cd "$WORK" && env -u PKG_CONFIG_PATH cc -Wall -Werror -o sidecat sidecat.c \
		$(env -u PKG_CONFIG_PATH pkg-config --cflags --libs objfs)) >"$WORK/cc.log" 2>&1; then
		lib=$(env -u LD_LIBRARY_PATH ldd "$WORK/sidecat" | awk '$1 == "libobjfs.so.0" { print $3 }')
		if env -u LD_LIBRARY_PATH "$WORK/sidecat" "$MNT/b.bin" >"$WORK/b.out" 2>"$WORK/sidecat.err" &&
			cmp -s "$WORK/b.out" "$SRC/b.bin" &&
			[ "$(readlink -f "$lib")" = "$(readlink -f "/usr/lib/$MA/libobjfs.so.0")" ]; then
			pass "libobjfs-dev: built with pkg-config objfs, linked to $lib, read b.bin (5 MiB) through the side API byte-exact"
		else
			fail "libobjfs-dev: expected the program (libobjfs at '$lib', want /usr/lib/$MA/libobjfs.so.0) to read b.bin byte-exact: $(head -c 300 "$WORK/sidecat.err")"
		fi
	else
		fail "libobjfs-dev: expected a program to build with pkg-config objfs: $(head -c 600 "$WORK/cc.log")"
	fi
	# python3-objfs: the system python3, the installed module, libobjfs0
	if (cd / && env -u PYTHONPATH -u OBJFS_LIB -u LD_LIBRARY_PATH /usr/bin/python3 - \
		"$MNT/sub/c.bin" "$WORK/c.py.out" >"$WORK/py.log" 2>&1) <<'EOF'
import sys, objfs
buf = bytearray(200000)
n = objfs.read_into(sys.argv[1], buf)
open(sys.argv[2], "wb").write(buf[:n])
print(objfs.__file__, objfs.library_path())
EOF
	then
		read -r pyfile pylib <"$WORK/py.log"
		if cmp -s "$WORK/c.py.out" "$SRC/sub/c.bin" &&
			[ "$pyfile" = /usr/lib/python3/dist-packages/objfs/__init__.py ]; then
			pass "python3-objfs: $pyfile read sub/c.bin (100001 bytes) through $pylib byte-exact"
		else
			fail "python3-objfs: expected the installed module to read sub/c.bin byte-exact, got $(cat "$WORK/py.log")"
		fi
	else
		fail "python3-objfs: expected /usr/bin/python3 to read through the installed module: $(tail -n 5 "$WORK/py.log")"
	fi
	umount_all "mount -t fuse.objfs"
else
	fail "mount -t fuse.objfs: expected $URL mounted on $MNT by the installed objfs, got: $(cat "$WORK/mount.out")"
fi

FSTAB=$TEST_TMP/fstab
printf '%s %s fuse.objfs ro,noauto,_netdev,nofail,allow_other 0 0\n' "$URL" "$MNT" >"$FSTAB"
if timeout 30 mount --fstab "$FSTAB" "$MNT" >"$WORK/mount.out" 2>&1 && is_mounted "$MNT"; then
	if served_by_package && cmp "$MNT/b.bin" "$SRC/b.bin"; then
		pass "fstab line: served by /usr/bin/objfs (pid $DAEMON); b.bin byte-exact"
	else
		fail "fstab line: expected /usr/bin/objfs serving the source's bytes (daemon: ${DAEMON:-none})"
	fi
	umount_all "fstab line"
else
	fail "fstab line: expected mount --fstab to mount $URL on $MNT, got: $(cat "$WORK/mount.out")"
fi

# ---------------------------------------------------------------- systemd
unit=/lib/systemd/system/objfs@.service
start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit" 2>/dev/null)
stop=$(sed -n 's/^ExecStop=\([^ ]*\).*/\1/p' "$unit" 2>/dev/null)
if [ -n "$start" ] && [ -x "$start" ] && [ -n "$stop" ] && [ -x "$stop" ]; then
	pass "objfs@.service: ExecStart $start and ExecStop $stop are installed"
else
	fail "expected $unit with ExecStart and ExecStop naming installed binaries, got '$start' and '$stop'"
fi

# ---------------------------------------------------------------- purge
purge_ours
left=()
for p in "${PKGS[@]}"; do
	installed "$p" && left+=("$p")
done
if [ ${#left[@]} -eq 0 ] && [ ! -e /usr/bin/objfs ] && [ ! -e "/usr/lib/$MA/libobjfs.so.0" ] &&
	[ ! -e "$unit" ] && [ ! -e /usr/lib/python3/dist-packages/objfs ]; then
	pass "purged: no package, /usr/bin/objfs, libobjfs.so.0, objfs@.service or Python module left"
else
	fail "expected the packages purged and their files gone, still there: ${left[*]} $(ls /usr/bin/objfs "$unit" 2>/dev/null)"
fi
summary
