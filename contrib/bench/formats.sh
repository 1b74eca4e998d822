#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# formats.sh: real formats' readers through the mount on a big host: what
# they fetch, and how fast, beside a client that fetches just what they
# read (ranged GETs) or the local copy; modes alternate, a fresh mount for
# every objfs run (nginx serves from the page cache).
#
#   contrib/gpu/run_device.sh exec contrib/bench/formats.sh
#       GPU host (its python3 has h5py, numpy, pyarrow, torch, safetensors;
#       carry .debs and build-gpu/dev: run_device.sh's header); ~3-5 minutes
#   FORMATS_SCALE=small OBJFS=build/src/objfs contrib/bench/formats.sh
#       anywhere with nginx and FUSE: the same cases on small files, a check
#       of the script (~15 s on 2 cores)
#
# Cases (FORMATS_CASES, default "h5 pq st"; the figures are the full scale's):
#   h5   an HDF5 file of 1 GiB (rows of 16 KiB in 4 MiB chunks): 16
#        processes, each its own open, read 300 random rows with h5py (mode
#        objfs), against 16 processes GETting the same 16 KiB ranges over a
#        keep-alive connection each (mode get). Targets: fetched <= 4x the
#        rows, rows/s >= 0.8x get's (the median of the per-pair ratios)
#   pq   a parquet file of 8 float64 columns in 4 row groups (256 MiB):
#        pyarrow read_table of one column (pq-col) against that column's
#        chunks and the footer, from the file's metadata (<= 1.2x); and
#        read_metadata alone (pq-footer: <= 256 KiB)
#   st   a 2.3 GB safetensors file (~20 MB BF16 tensors) loaded with
#        safetensors.torch.load_file (a mapping of the file), through the
#        mount and from the local copy (mode local). Targets: fetched <=
#        1.02x the file; no slower than today's build (FORMATS_BASE)
# A case whose Python modules are missing is left out, with a line saying
# so; for st without safetensors or torch the reader maps the file with
# numpy and copies each tensor out, as load_file does (how=numpy).
# Every answer (a digest of the bytes read) must equal the local copy's.
#
# Environment: FORMATS_SCALE (full, small), FORMATS_REPS (5; small 2),
# FORMATS_PROCS and FORMATS_ROWS (16 and 300; small 4 and 50), FORMATS_OPTS
# (mount options), FORMATS_BASE (a second objfs binary, today's: every
# objfs run is also made with it, mode base), FORMATS_DEADLINE (seconds
# from the start after which no run starts; default 480), OUT (results,
# default ./device-out): $OUT/formats.txt, the report; $OUT/formats.runs, a
# line a run ("CASE MODE REP key=value ..."). Exit status: 0, or 1 when an
# answer differed or a reader failed.

set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$here/../../tests/integration/lib.sh"
# shellcheck source=bench_lib.sh
. "$here/bench_lib.sh"

require_objfs
OUT=${OUT:-$PWD/device-out}
case ${FORMATS_SCALE:-full} in
full) H5_ROWS=65536 PQ_ROWS=4194304 ST_BYTES=2300000000 REPS=${FORMATS_REPS:-5}
	PROCS=${FORMATS_PROCS:-16} ROWS=${FORMATS_ROWS:-300} ;;
small) H5_ROWS=4096 PQ_ROWS=262144 ST_BYTES=67108864 REPS=${FORMATS_REPS:-2}
	PROCS=${FORMATS_PROCS:-4} ROWS=${FORMATS_ROWS:-50} ;;
*) echo "FORMATS_SCALE: full or small" >&2; exit 2 ;;
esac
DEADLINE=${FORMATS_DEADLINE:-480}
BASE=${FORMATS_BASE:-}
OPTS=${FORMATS_OPTS:-}
SEED=37
COL=c3
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "FORMATS_BASE: $BASE is not an executable" >&2; exit 2; }

PY=
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import numpy, h5py' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "formats.sh: no python3 with numpy and h5py" >&2; exit 77; }
# generators get 300 s, a reader 120 s: the deadline plus one stuck run
# stays under 10 minutes
GPY=(timeout 300 "$PY" "$here/formats_bench.py")
BPY=(timeout 120 "$PY" "$here/formats_bench.py")
bench_results formats

DATA=$TEST_TMP/www
MNT=$TEST_TMP/mnt
mkdir -p "$DATA"
say "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cores; objfs=$OBJFS${BASE:+ base=$BASE}; $("$PY" --version)"
say "# scale ${FORMATS_SCALE:-full}: reps $REPS; opts: ${OPTS:-(defaults)}"

cases=()
for c in ${FORMATS_CASES:-h5 pq st}; do
	case $c in
	h5)
		timeout 300 "$PY" "$here/../../tests/integration/formats.py" gen-h5 "$DATA/rows.h5" "$H5_ROWS" &&
			cases+=(h5)
		say "# h5: $(stat -c %s "$DATA/rows.h5") bytes, $PROCS processes x $ROWS random rows of 16 KiB"
		;;
	pq)
		if "$PY" -c 'import pyarrow' 2>/dev/null; then
			"${GPY[@]}" pq-gen "$DATA/t.parquet" "$PQ_ROWS" && cases+=(pq-col pq-footer)
			read -r PQ_CHUNKS PQ_FOOTER < <("${BPY[@]}" pq-info "$DATA/t.parquet" "$COL" |
				sed 's/chunks=\([0-9]*\) footer=\([0-9]*\)/\1 \2/')
			say "# pq: $(stat -c %s "$DATA/t.parquet") bytes; column $COL: $PQ_CHUNKS bytes of chunks, footer $PQ_FOOTER"
		else
			say "# pq: left out, $PY has no pyarrow"
		fi
		;;
	st)
		"${GPY[@]}" st-gen "$DATA/model.safetensors" "$ST_BYTES" && cases+=(st)
		say "# st: $(stat -c %s "$DATA/model.safetensors") bytes"
		;;
	*) echo "FORMATS_CASES: h5, pq, st" >&2; exit 2 ;;
	esac
done
cat "$DATA"/* >/dev/null
bench_nginx "$DATA" || exit 99

file_of() {
	case $1 in h5) echo rows.h5 ;; pq-*) echo t.parquet ;; st) echo model.safetensors ;; esac
}
# what the program asks for, in bytes
read_of() {
	case $1 in
	h5) echo $((PROCS * ROWS * 16384)) ;;
	pq-col) echo $((PQ_CHUNKS + PQ_FOOTER)) ;;
	pq-footer) echo "$PQ_FOOTER" ;;
	st) stat -c %s "$DATA/model.safetensors" ;;
	esac
}
# reader CASE MODE ROOT: the case's program on ROOT/its file; one line of
# key=value words
reader() {
	local f
	f=$3/$(file_of "$1")
	case $1:$2 in
	h5:get) "${BPY[@]}" h5 get "$URL$(file_of h5)" "$DATA/rows.h5" "$PROCS" "$ROWS" "$SEED" ;;
	h5:*) "${BPY[@]}" h5 mount "$f" "$H5_ROWS" "$PROCS" "$ROWS" "$SEED" ;;
	pq-col:*) "${BPY[@]}" pq-col "$f" "$COL" ;;
	pq-footer:*) "${BPY[@]}" pq-footer "$f" ;;
	st:*) "${BPY[@]}" st-load "$f" ;;
	esac
}
stat_of() { sed -n "s/^$2 //p" "$1/.objfs-stats"; }

declare -A REF=()
WRONG=0
# one_run CASE MODE REP: a line in $res.runs. Not inside $(...): the
# mount it starts belongs to this shell (lib.sh).
one_run() {
	local case=$1 mode=$2 rep=$3 root=$DATA bin=$OBJFS line b0 r0 extra='' ok=0
	if [ "$mode" = objfs ] || [ "$mode" = base ]; then
		[ "$mode" = base ] && bin=$BASE
		if ! OBJFS=$bin mount_objfs "$URL" "$MNT" "$OPTS"; then
			echo "$case $mode $rep error=mount" | tee -a "$res.runs"
			WRONG=1
			return
		fi
		root=$MNT
		find "$MNT/$(file_of "$case")" -printf '%s\n' >/dev/null
		b0=$(stat_of "$MNT" bytes) r0=$(stat_of "$MNT" requests)
	fi
	line=$(reader "$case" "$mode" "$root" 2>"$TEST_TMP/err" | tail -n 1)
	if [ "$root" = "$MNT" ]; then
		extra="fetched=$(($(stat_of "$MNT" bytes) - b0)) reqs=$(($(stat_of "$MNT" requests) - r0))"
		unmount_objfs "$MNT" >/dev/null 2>&1
	fi
	if [ -n "${REF[$case]:-}" ] && [ "${line##*digest=}" = "${REF[$case]}" ]; then
		ok=1
	else
		WRONG=1
		echo "$case $mode rep $rep: expected digest=${REF[$case]:-?}, got '$line' $(tail -n 2 "$TEST_TMP/err")" >&2
	fi
	echo "$case $mode $rep $line read=$(read_of "$case") $extra ok=$ok" | tee -a "$res.runs"
}

# the local copy's answers
for c in "${cases[@]}"; do
	l=$(reader "$c" local "$DATA" 2>"$TEST_TMP/err" | tail -n 1)
	REF[$c]=${l##*digest=}
	if [ "$l" = "${REF[$c]}" ] || [ -z "${REF[$c]}" ]; then
		say "# $c: the local copy's reader failed: $(tail -n 3 "$TEST_TMP/err")"
		exit 1
	fi
done

for ((rep = 0; rep < REPS; rep++)); do
	for c in "${cases[@]}"; do
		modes=(objfs)
		[ -z "$BASE" ] || modes+=(base)
		case $c in h5) modes+=(get) ;; st) modes+=(local) ;; esac
		n=${#modes[@]}
		for ((k = 0; k < n; k++)); do
			if [ "$SECONDS" -ge "$DEADLINE" ]; then
				say "# deadline (${DEADLINE}s) reached in rep $rep: no more runs"
				break 3
			fi
			one_run "$c" "${modes[$(((k + rep) % n))]}" "$rep"
		done
	done
done

"$PY" "$here/formats_bench.py" summary "$res.runs" | tee -a "$res.txt"
exit "$WRONG"
