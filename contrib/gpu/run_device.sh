#!/bin/bash
# run_device.sh: everything the GPU side API needs checked on a GPU host that
# has no compiler, no libfuse, no nginx and no network, in one go.
#
# Here (the build machine), once:
#   echo /.debs/ >> .git/info/exclude
#   mkdir -p .debs && (cd .debs && apt-get download libfuse3-3 fuse3 nginx nginx-common)
#   contrib/gpu/run_device.sh pack      # builds build-gpu/ and build-gpu/dev/
# Then on the device (through the device tool, carry [".debs", "build-gpu/dev"]):
#   contrib/gpu/run_device.sh run       # results and logs under $OUT (or ./device-out)
#   contrib/gpu/run_device.sh bench     # contrib/gpu/bench_gpu.sh, ~3 minutes
#
# "run" unpacks the .debs into /tmp/root, adds any shared library the
# device lacks from build-gpu/dev/fallback (copied from the build machine),
# prints the GPU and driver, then runs tests/integration/side_host.sh (host
# buffers) and tests/gpu/side_gpu.sh (device buffers, with the benchmark).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
dev=$top/build-gpu/dev

pack() {
	set -e
	mkdir -p "$top/build-gpu"
	cd "$top/build-gpu"
	[ -f Makefile ] || ../configure -q --disable-shared --enable-static
	make -s -j2 src/objfs tests/side_client tests/hang_fuse tests/gpu/gpu_fill tests/gpu/gpu_batch
	rm -rf "$dev"
	mkdir -p "$dev/fallback"
	cp src/objfs tests/side_client tests/hang_fuse tests/gpu/gpu_fill tests/gpu/gpu_batch "$dev/"
	strip "$dev/objfs" "$dev/side_client" "$dev/hang_fuse"
	# A shared libobjfs for the Python binding (this build is static).
	gcc -std=gnu11 -O2 -shared -fPIC -fvisibility=hidden -pthread -I. -I../include \
		$(sed -n 's/^CUDA_CPPFLAGS = //p' Makefile) ../lib/client.c ../lib/client_cuda.c \
		$(sed -n 's/^CUDA_LDFLAGS = //p' Makefile) $(sed -n 's/^CUDA_LIBS = //p' Makefile) \
		-Wl,-soname,libobjfs.so.0 -o "$dev/libobjfs.so.0"
	# The copy microbenchmark (contrib/gpu/bench_copies.c).
	gcc -O2 $(sed -n 's/^CUDA_CPPFLAGS = //p' Makefile) ../contrib/gpu/bench_copies.c \
		$(sed -n 's/^CUDA_LDFLAGS = //p' Makefile) $(sed -n 's/^CUDA_LIBS = //p' Makefile) \
		-o "$dev/bench_copies"
	# The ceiling of a warm readv's pipeline, without objfs (contrib/gpu/bench_pipe.c).
	gcc -O2 -pthread -I../src/util $(sed -n 's/^CUDA_CPPFLAGS = //p' Makefile) \
		../contrib/gpu/bench_pipe.c $(sed -n 's/^CUDA_LDFLAGS = //p' Makefile) \
		$(sed -n 's/^CUDA_LIBS = //p' Makefile) -o "$dev/bench_pipe"
	# The FUSE floor (contrib/bench/nullfs.c, fuse_probe.sh's PROBE_NULLFS).
	gcc -O2 $(pkg-config --cflags fuse3) ../contrib/bench/nullfs.c $(pkg-config --libs fuse3) \
		-o "$dev/nullfs"
	# The machine's ceiling for one CPU copy per byte (contrib/bench/memcpy_bw.c).
	gcc -O2 -pthread -I../src/util ../contrib/bench/memcpy_bw.c -o "$dev/memcpy_bw"
	# What taking the credentials costs a signed request (contrib/bench/creds_bench.c).
	gcc -O2 -I../src/store -I../src/util -I. ../contrib/bench/creds_bench.c \
		src/.libs/libobjfscore.a $(pkg-config --libs libcurl fuse3 json-c libxml-2.0 \
		openssl liburing libxxhash) -lpthread -o "$dev/creds_bench"
	for l in $(ldd src/objfs tests/gpu/gpu_fill | awk '$3 ~ /^\// { print $3 }' | sort -u |
		grep -v 'libc\.so\|libm\.so\|libresolv\|ld-linux\|libstdc\|libgcc_s'); do
		cp -L "$l" "$dev/fallback/"
	done
	du -sh "$dev"
}

# setup: unpacks the .debs, finds missing libraries, exports OBJFS & co.
setup() {
	local out=${OUT:-$top/device-out} root=/tmp/root d missing
	mkdir -p "$out" "$root" /var/lib/nginx
	for d in "$top"/.debs/*.deb; do dpkg -x "$d" "$root"; done
	export PATH=$root/usr/bin:$root/usr/sbin:$root/bin:$PATH
	export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	# Only what the device lacks comes from the build machine.
	mkdir -p /tmp/fallback
	for i in 1 2 3 4; do
		missing=$(ldd "$dev/objfs" "$dev/gpu_fill" "$root/usr/sbin/nginx" 2>/dev/null |
			awk '/not found/ { print $1 }' | sort -u)
		[ -n "$missing" ] || break
		for d in $missing; do
			[ -e "$dev/fallback/$d" ] && ln -sf "$dev/fallback/$d" /tmp/fallback/
		done
		export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/tmp/fallback
	done
	{
		echo "== device"; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
		uname -r; grep PRETTY /etc/os-release
		echo "== libraries taken from the build machine:"; ls /tmp/fallback
		ldd "$dev/objfs" "$dev/gpu_fill" | grep 'not found' || echo "(none missing)"
		command -v python3 curl fusermount3 nginx
	} 2>&1 | tee "$out/device.txt"
	# OBJFS may name another daemon binary (bench: compare builds).
	export OBJFS=${OBJFS:-$dev/objfs} SIDE_CLIENT=$dev/side_client GPU_FILL=$dev/gpu_fill GPU_BATCH=$dev/gpu_batch
	export HANG_FUSE=$dev/hang_fuse
	export OBJFS_LIB=$dev/libobjfs.so.0
	export NGINX=$root/usr/sbin/nginx
}

run() {
	local out=${OUT:-$top/device-out} rc=0
	setup
	echo "== side_host.sh"
	"$top/tests/integration/side_host.sh" 2>&1 | tee "$out/side_host.log"
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
	echo "== side_gpu.sh"
	SIDE_GPU_BENCH=${SIDE_GPU_BENCH:-1} "$top/tests/gpu/side_gpu.sh" 2>&1 | tee "$out/side_gpu.log"
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
	return "$rc"
}

# bench: contrib/gpu/bench_gpu.sh (see its header; BENCH_* in the environment).
bench() {
	setup
	"$top/contrib/gpu/bench_gpu.sh"
}

case ${1:-} in
pack) pack ;;
run) run ;;
bench) bench ;;
exec) shift; setup; "$@" ;; # e.g. exec contrib/bench/fuse_ab.sh, with nginx and libraries set up
*) echo "usage: $0 pack|run|bench|exec COMMAND..." >&2; exit 2 ;;
esac
