#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, builds,
# runs the unit and integration tests, then the same suite again with an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Exits non-zero on any
# failure. Integration tests that need /dev/fuse skip (77) without it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=$(nproc 2>/dev/null || echo 2)

tests/deps.sh
export PATH=$PATH:/usr/sbin:/sbin

if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
	./autogen.sh >/dev/null 2>&1 || ./autogen.sh
fi

passed=0
failed=0
skipped=0

# build NAME BUILDDIR [configure args...]: configure and make; 0 or 1
build() {
	local name=$1 dir=$2
	shift 2
	echo "=== $name: configure and build in $dir"
	mkdir -p "$dir"
	(cd "$dir" && "$top/configure" -q "$@" && make -s -j"$jobs") || {
		echo "=== $name: BUILD FAILED"
		return 1
	}
}

# check NAME BUILDDIR: make check there, then each test's verdict
check() {
	local name=$1 dir=$2
	echo "=== $name: make check"
	local rc=0
	(cd "$dir" && make -s check -j1) || rc=$?
	local log
	for log in "$dir"/tests/*.log "$dir"/tests/integration/*.log "$dir"/tests/gpu/*.log \
		"$dir"/tests/fuzz/*.log; do
		[ -f "$log" ] || continue
		case "$log" in */test-suite.log) continue ;; esac
		local res
		res=$(sed -n 's/^:test-result: //p' "${log%.log}.trs" 2>/dev/null | head -n1)
		case "$res" in
		PASS) passed=$((passed + 1)) ;;
		SKIP) skipped=$((skipped + 1)) ;;
		*) failed=$((failed + 1))
		   echo "----- $log ($res)"
		   grep -E -A8 '^(FAIL|not ok|ERROR)' "$log" | head -n 60 || true
		   echo "----- (last lines)"
		   tail -n 60 "$log" ;;
		esac
		echo "$name: ${res:-?} ${log#"$dir"/}"
	done
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		failed=$((failed + 1))
	fi
}

# The sanitizer build compiles at the lowest priority while the default
# build's tests run (they leave a core idle most of the time; niced, the
# compiler takes only what they leave): its ~2 minutes come off the suite.
build "default" "$top/build-test" || failed=$((failed + 1))
mkdir -p "$top/build-asan"
asan_log=$top/build-asan/build.log
asan_status=$top/build-asan/build.status
rm -f "$asan_status"
# The build's status goes to a file: bash has answered "wait: pid N is not
# a child of this shell" for a build that had ended long before (the
# suite then counted a build failure that was not one).
nice -n 19 bash -c "$(declare -f build); top='$top' jobs=$jobs build 'asan+ubsan' '$top/build-asan' --enable-sanitizers; echo \$? >'$asan_status'" \
	>"$asan_log" 2>&1 &
asan_build=$!
[ "$failed" -ne 0 ] || check "default" "$top/build-test"
wait "$asan_build" 2>/dev/null || true
asan_ok=0
[ "$(cat "$asan_status" 2>/dev/null)" = 0 ] && asan_ok=1
cat "$asan_log"
if [ "$asan_ok" = 1 ]; then
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_odr_violation=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		check "asan+ubsan" "$top/build-asan"
else
	failed=$((failed + 1))
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
