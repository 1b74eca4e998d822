#!/usr/bin/env bash
# The benchmark in one command: installs what is missing (the peers s3fs,
# rclone and httpdirfs, fio, Ceph RGW, matplotlib), builds objfs, starts a
# throw-away Ceph RGW on loopback for the S3 part, and runs bench.py, which
# serves the same data with nginx and prints the table.
#
#   contrib/bench/run.sh            # full run (2 GiB objects, 100,000-entry ls)
#   contrib/bench/run.sh --quick    # smaller data, shorter runs
#   contrib/bench/run.sh --no-s3    # HTTP only (no Ceph)
#   contrib/bench/run.sh --only objfs,rclone   # a subset of file systems
#
# Results: contrib/bench/out/{results.json,results.md,bench.png}. Needs root
# (FUSE mounts, apt-get) and about 10 GiB free under /tmp for the full run.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
export PATH=$PATH:/usr/sbin:/sbin

s3=1
args=()
for a in "$@"; do
	case $a in
	--no-s3) s3=0 ;;
	*) args+=("$a") ;;
	esac
done

tests/deps.sh fio s3fs rclone httpdirfs python3-matplotlib python3-boto3
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
	./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi
mkdir -p build-bench
(cd build-bench && { [ -f Makefile ] || ../configure -q; } && make -s -j"$(nproc)")

root=${OBJFS_BENCH_ROOT:-/tmp/objfs-bench}
mkdir -p "$root"
if [ "$s3" -eq 1 ]; then
	# shellcheck source=../../tests/integration/rgw.sh
	. tests/integration/rgw.sh
	rgw_check || { echo "bench: Ceph is not installed" >&2; exit 1; }
	rm -rf "$root/rgw"
	RGW_MEM=${RGW_MEM:-$((8 << 30))} rgw_start "$root/rgw"
	args+=(--s3)
fi
# Debian's python3 has the apt-installed boto3 and matplotlib; a python3
# earlier on PATH (pyenv, venv) may have neither.
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
"$py" contrib/bench/bench.py --objfs build-bench/src/objfs --root "$root" \
	--out contrib/bench/out ${args[@]+"${args[@]}"}
