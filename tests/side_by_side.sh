# shellcheck shell=bash
#
# side_by_side.sh: sourced by tests/valgrind.sh and tests/fuzz/run.sh, whose
# items (unit tests under valgrind, fuzz targets) are independent processes
# that each keep one core busy: run side by side, one per core, they take
# half the wall time on a 2-core machine for the same work.
#
# side_by_side JOBS FUNC ITEM...: runs `FUNC ITEM` in the background for each
# ITEM, at most JOBS at a time (empty or not a number: one per core), and
# returns when all have ended. FUNC writes its own report; the caller reads
# the reports in order afterwards. The caller must have no other background
# job running (wait -n and wait see them all).
side_by_side() {
	local jobs=$1 fn=$2 running=0 item
	shift 2
	[ "${jobs:-0}" -ge 1 ] 2>/dev/null || jobs=$(nproc 2>/dev/null || echo 2)
	for item in "$@"; do
		if [ "$running" -ge "$jobs" ]; then
			wait -n
			running=$((running - 1))
		fi
		"$fn" "$item" &
		running=$((running + 1))
	done
	wait
}
