#!/usr/bin/env bash
# Installs the Debian packages objfs needs to build and test, if missing.
# Sourced or run by tests/run.sh and contrib/quickstart.sh; non-interactive.
# Usage: tests/deps.sh [--demo] [--list] [extra-package...]
#   --demo  only what building and running objfs and quickstart's nginx
#           demo need, not the test toolchain (Ceph, clang, valgrind, awscli)
#   --list  print the packages it wants (nginx aside) and install nothing
set -euo pipefail

demo=0
list=0
while [ $# -gt 0 ]; do
	case $1 in
	--demo) demo=1 ;;
	--list) list=1 ;;
	*) break ;;
	esac
	shift
done
need=(build-essential autoconf automake libtool pkg-config
      libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev liburing-dev libxxhash-dev
      libxml2-dev libjson-c-dev python3 curl ca-certificates)
[ "$demo" = 1 ] || need+=(check
      # the Python binding installed by pip and make install (python_pkg.sh)
      python3-setuptools python3-venv python3-pip python3-wheel
      # S3 tests: a single-node Ceph RGW (tests/integration/rgw.sh) and clients
      ceph-mon ceph-osd ceph-base ceph-common radosgw python3-boto3 awscli
      # libFuzzer targets (tests/fuzz/run.sh): clang and its fuzzer runtime
      clang libclang-rt-14-dev
      # hardening tests: certificates (perms.sh), memcheck (valgrind.sh, leaks.sh)
      openssl valgrind
      # system mounts (fstab.sh): mount(8), setpriv, a Prometheus text parser
      mount util-linux python3-prometheus-client
      # Debian packages (deb.sh): dpkg-buildpackage, dh, pybuild, lintian
      dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all lintian
      # real formats through the mount (formats.sh); not gdal-bin (~124 MB)
      python3-h5py python3-numpy python3-netcdf4 python3-zarr sqlite3 zip unzip tar)
need+=("$@")
if [ "$list" = 1 ]; then
	printf '%s\n' "${need[@]}"
	exit 0
fi
missing=()
for p in "${need[@]}"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' ||
		missing+=("$p")
done
# Any nginx flavour will do; install the light one only when none is there.
if ! command -v nginx >/dev/null 2>&1 && ! [ -x /usr/sbin/nginx ]; then
	missing+=(nginx-light)
fi
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
