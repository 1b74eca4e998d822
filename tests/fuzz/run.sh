#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ with clang (libFuzzer + ASan +
# UBSan) from the project's sources and runs each for a bounded time, seeded
# with tests/fuzz/<target>/. Fails on any crash, leak, undefined behaviour,
# invariant failure (FUZZ_CHECK) or hang (-timeout).
#
# Runs from a configured build directory (it needs that config.h): `make
# check` runs it there. The sanitizer build (--enable-sanitizers) skips it:
# the fuzzers are sanitizer builds of their own, once per suite is enough.
# Without clang/libFuzzer it skips (77), except under CI=true, where
# tests/deps.sh has installed them and their absence is a failure.
#
# Environment:
#   FUZZ_TIME=SECS       seconds per target (default 12: 13 targets, two at a
#                        time, and the build take ~2 minutes on a 2-core machine)
#   FUZZ_JOBS=N          targets fuzzed at once (default: one per core)
#   FUZZ_TARGETS="a b"   only these targets (names as in tests/fuzz/fuzz_<name>.c)
#   FUZZ_ARGS="..."      more libFuzzer flags, e.g. -max_len=65536
#   FUZZ_WORK=DIR        objects, binaries, grown corpora, crash artifacts
#                        (default tests/fuzz-work in the build directory)
# A crash leaves FUZZ_WORK/artifacts/<target>-crash-*; rerun one input with
#   FUZZ_WORK/bin/fuzz_<target> FILE
# and keep it as a regression seed in tests/fuzz/<target>/ once fixed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=$PWD
fuzz_time=${FUZZ_TIME:-12}
work=${FUZZ_WORK:-$build/tests/fuzz-work}

skip_or_fail() {
	if [ "${CI:-}" = true ]; then
		echo "fuzz: FAIL: $1 (CI=true: tests/deps.sh installs clang and libclang-rt-14-dev)"
		exit 1
	fi
	echo "fuzz: SKIP: $1"
	exit 77
}

if [ ! -f "$build/config.h" ]; then
	echo "fuzz: run me from a configured build directory (no config.h in $build)"
	exit 1
fi
if [ -x "$build/config.status" ] && "$build/config.status" --config | grep -q -- '--enable-sanitizers'; then
	echo "fuzz: SKIP: this is the --enable-sanitizers build; the fuzzers run (with ASan+UBSan) in the default one"
	exit 77
fi

CLANG=${CLANG:-$(command -v clang || command -v clang-14 || true)}
[ -n "$CLANG" ] || skip_or_fail "no clang"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
	>"$probe/p.c"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >"$probe/log" 2>&1; then
	cat "$probe/log"
	skip_or_fail "$CLANG cannot link -fsanitize=fuzzer (libclang-rt-14-dev missing?)"
fi

pkgs="libxml-2.0 json-c libcurl libssl libcrypto liburing libxxhash"
if ! pc_cflags=$(pkg-config --cflags $pkgs) || ! pc_libs=$(pkg-config --libs $pkgs); then
	echo "fuzz: FAIL: pkg-config cannot find $pkgs"
	exit 1
fi
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cflags="-std=gnu11 -g -O1 -Wall -Wextra -Wno-missing-field-initializers -pthread $san"
layers="util net store cache side"
cppflags="-I$build -I$top/include -I$here $pc_cflags"
for l in $layers; do cppflags="$cppflags -I$top/src/$l"; done
cppflags="$cppflags -I$top/src" # options.h, for the option parser's target

# The sources of the layers below FUSE, as Makefile.am lists them: a new
# module is fuzzed with the same sources the daemon links.
core=$(for l in $layers; do
	sed -n "/^src_${l}_lib${l}_la_SOURCES/,/[^\\]\$/p" "$top/Makefile.am"
done | tr ' \t\\' '\n\n\n' | grep '\.c$')
# and the option parser, from the top layer (mount.c there needs FUSE)
core="$core src/options.c"
[ -n "$core" ] || { echo "fuzz: FAIL: no core sources found in Makefile.am"; exit 1; }

mkdir -p "$work/obj" "$work/bin" "$work/artifacts" "$work/corpus"
# Rebuild everything when any header or this script changed; otherwise
# only sources newer than their object.
stamp=$work/obj/.stamp
newest_dep=$(ls -t "$top"/src/*/*.h "$top"/include/*.h "$top"/include/objfs/*.h "$here"/*.h "$build/config.h" "$0" | head -n1)
if [ ! -f "$stamp" ] || [ "$newest_dep" -nt "$stamp" ]; then
	rm -f "$work"/obj/*.o
fi
echo "fuzz: building the core with $CLANG (libFuzzer, ASan, UBSan)"
objs=()
pids=()
jobs=$(nproc 2>/dev/null || echo 2)
for src in $core; do
	o=$work/obj/$(basename "${src%.c}").o
	objs+=("$o")
	if [ ! -f "$o" ] || [ "$top/$src" -nt "$o" ]; then
		"$CLANG" $cflags -fsanitize=fuzzer-no-link $cppflags -c "$top/$src" -o "$o" &
		pids+=($!)
		if [ ${#pids[@]} -ge "$jobs" ]; then
			wait "${pids[0]}" || { echo "fuzz: FAIL: compiling $src"; exit 1; }
			pids=("${pids[@]:1}")
		fi
	fi
done
for p in "${pids[@]}"; do
	wait "$p" || { echo "fuzz: FAIL: compiling the core"; exit 1; }
done
touch "$stamp"
# The client library, as configured (with CUDA where found): linked into
# the side-API client target.
mkvar() { sed -n "s/^$1 = //p" "$build/Makefile"; }
cuda_cppflags=$(mkvar CUDA_CPPFLAGS)
cuda_libs="$(mkvar CUDA_LDFLAGS) $(mkvar CUDA_LIBS)"
client_objs=()
for src in lib/client.c lib/client_cuda.c; do
	o=$work/obj/lib_$(basename "${src%.c}").o
	client_objs+=("$o")
	"$CLANG" $cflags -fsanitize=fuzzer-no-link $cppflags $cuda_cppflags -c "$top/$src" \
		-o "$o" || { echo "fuzz: FAIL: compiling libobjfs ($src)"; exit 1; }
done

targets=${FUZZ_TARGETS:-$(cd "$here" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')}

# fuzz_one T: builds and runs target T; its report into $work/T.res, 0 or 1
fuzz_one() {
	local t=$1 bin=$work/bin/fuzz_$1 seeds=$here/$1 rc extra=()
	[ "$t" = side_client ] && extra=("${client_objs[@]}" $cuda_libs)
	exec >"$work/$t.res" 2>&1
	if ! "$CLANG" $cflags -fsanitize=fuzzer $cppflags "$here/fuzz_$t.c" \
		"${objs[@]}" "${extra[@]}" $pc_libs -lm -o "$bin"; then
		echo "fuzz: FAIL: building fuzz_$t"
		return 1
	fi
	[ -d "$seeds" ] || { echo "fuzz: FAIL: no seed corpus $seeds"; return 1; }
	mkdir -p "$work/corpus/$t"
	echo "fuzz: $t for ${fuzz_time}s ($(ls "$seeds" | wc -l) seeds)"
	# New inputs go to the first (scratch) directory, never into the source tree.
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_odr_violation=0:allocator_may_return_null=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	"$bin" -max_total_time="$fuzz_time" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
		-print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" ${FUZZ_ARGS:-} \
		"$work/corpus/$t" "$seeds" >"$work/$t.log" 2>&1
	rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "fuzz: FAIL: $t (exit $rc); last lines of $work/$t.log:"
		tail -n 60 "$work/$t.log"
		return 1
	fi
	grep -E '^stat::number_of_executed_units|^Done ' "$work/$t.log" | tr '\n' ' '
	echo
}

# The targets run side by side, one per core (FUZZ_JOBS to choose): each is
# one process fuzzing for its own fuzz_time, so the fuzzing done is the same.
# shellcheck source=../side_by_side.sh
. "$here/../side_by_side.sh"
for t in $targets; do rm -f "$work/$t.res"; done
# shellcheck disable=SC2086 # one target per word
side_by_side "${FUZZ_JOBS:-}" fuzz_one $targets
failed=0
for t in $targets; do
	if [ -f "$work/$t.res" ]; then
		cat "$work/$t.res"
		grep -q '^fuzz: FAIL' "$work/$t.res" && failed=$((failed + 1))
	else
		echo "fuzz: FAIL: $t left no report"
		failed=$((failed + 1))
	fi
done
if [ "$failed" -ne 0 ]; then
	echo "fuzz: $failed target(s) failed"
	exit 1
fi
echo "fuzz: all targets ran clean"
