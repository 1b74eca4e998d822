#!/bin/bash
#
# valgrind.sh: every unit test (tests/check_*) under valgrind's memcheck,
# one process per test (CK_FORK=no: Check's forked children would escape
# valgrind), with --leak-check=full: a memory error, or a block definitely,
# indirectly or possibly lost, fails the test.
#
#   make check                      (runs it after the unit tests)
#   tests/valgrind.sh [check_url ...]   by hand, from the build directory
#
# The ASan + UBSan build skips it (77): valgrind cannot run sanitizer
# binaries, and LeakSanitizer checks those same unit tests at exit there.
#
# check_diskcache is left out: valgrind 3.19 keeps its big lock while a
# thread sleeps in io_uring_enter, so the disk thread's wait starves every
# other thread and the test never ends (seen here: one thread in
# io_cqring_wait, the other in valgrind's lock pipe); and memcheck cannot
# see the kernel write a read's buffer through the ring. The ASan suite
# covers it.
#
# --max-threads=4096: check_side's fake store runs each fetch on a thread of
# its own, and a batch of 32,768 ranges has hundreds alive at once on a
# fast machine; valgrind's default of 500 slots aborted it in CI.
#
# Exit status: 0 all clean, 1 a test failed or valgrind found errors, 77
# skipped (sanitizer build; valgrind missing, except under CI=true, where
# tests/deps.sh installs it and its absence fails).

set -u

top=$(cd "$(dirname "${OBJFS:-./src/objfs}")/.." && pwd)   # the build directory
export srcdir=${srcdir:-$(cd "$(dirname "$0")/.." && pwd)}  # check_creds finds its stub there

if ! command -v valgrind >/dev/null 2>&1; then
	if [ "${CI:-}" = true ]; then
		echo "FAIL: valgrind is not installed (CI=true: tests/deps.sh should have installed it)"
		exit 1
	fi
	echo "SKIP: valgrind is not installed"
	exit 77
fi

tests=()
if [ $# -gt 0 ]; then
	for t in "$@"; do tests+=("$top/tests/${t#tests/}"); done
else
	for t in "$top"/tests/check_*; do
		if [ ! -x "$t" ] || [ ! -f "$t" ]; then continue; fi
		case ${t##*/} in
		*.o | check_diskcache) continue ;;
		esac
		tests+=("$t")
	done
fi
if [ ${#tests[@]} -eq 0 ]; then
	echo "ERROR: no unit tests under $top/tests (build them: make check)" >&2
	exit 99
fi
if ldd "${tests[0]}" 2>/dev/null | grep -q 'libasan\|libubsan'; then
	echo "SKIP: sanitizer build (valgrind cannot run ASan binaries; LeakSanitizer checks the unit tests)"
	exit 77
fi

logs=$top/tests/valgrind.d
mkdir -p "$logs" || exit 99
rm -f "$logs"/*.res

# one test under valgrind: its verdict line into $log.res, 0 or 1
run_one() {
	local t=$1 log=$logs/${1##*/}.log start=$SECONDS rc=0 why
	# CK_LOG_FILE_NAME: each test's result as it ends, so a run that hangs
	# still says which tests ended and how (a failed assertion under
	# CK_FORK=no can leave a test's threads behind and hang the rest)
	CK_FORK=no CK_LOG_FILE_NAME="$log.check" timeout 900 valgrind -q --max-threads=4096 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
		--error-exitcode=97 --log-file="$log" "$t" >"$log.out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "PASS: ${t##*/} clean under valgrind ($((SECONDS - start)) s)" >"$log.res"
		return 0
	fi
	case $rc in
	97) why="valgrind found errors" ;;
	124) why="timed out after 900 s" ;;
	*) why="the test itself failed (exit $rc)" ;;
	esac
	{
		echo "FAIL: ${t##*/}: $why; valgrind log $log:"
		sed -n '1,40{s/^/    | /;p}' "$log"
		tail -n 5 "$log.out" | sed 's/^/    | /'
		echo "    the last tests that ended, and every failure:"
		{ grep -v ':P:' "$log.check" 2>/dev/null; tail -n 3 "$log.check" 2>/dev/null; } |
			sed 's/^/    | /'
	} >"$log.res"
	return 1
}

# Valgrind runs a program's threads one at a time, so the tests run side by
# side, one per core (VALGRIND_JOBS to choose). They share nothing (free
# ports, their own temporary directories and socket names).
# shellcheck source=side_by_side.sh
. "$(dirname "$0")/side_by_side.sh"
side_by_side "${VALGRIND_JOBS:-}" run_one "${tests[@]}"
failed=0
for t in "${tests[@]}"; do
	res=$logs/${t##*/}.log.res
	if [ -f "$res" ]; then
		cat "$res"
		grep -q '^PASS' "$res" || failed=$((failed + 1))
	else
		echo "FAIL: ${t##*/}: no verdict (the runner was killed?)"
		failed=$((failed + 1))
	fi
	rm -f "$res"
done
echo "$((${#tests[@]} - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
