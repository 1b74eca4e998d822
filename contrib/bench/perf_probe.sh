#!/bin/bash
# perf_probe.sh: contrib/bench/fuse_probe.sh (its PROBE_* settings) under
# `perf record -a -g`, then where the daemon's CPU went: samples by thread
# name and library, the FUSE workers' and the engine threads' top symbols,
# and the FUSE workers' call graphs, in $OUT (default /tmp/perf_probe).
#
# PERF names the perf binary (default: perf). On a GPU host without one perf
# is carried from the build machine: build-gpu/dev/perf/run, a wrapper that
# sets LD_LIBRARY_PATH for the libraries copied beside it. For symbols run
# an unstripped daemon (OBJFS=.../objfs-sym: its worker threads then carry
# that name). Example, 16 workers over small files:
#
#   OBJFS=$PWD/build-gpu/dev/objfs-sym contrib/gpu/run_device.sh exec bash -c \
#       'PERF=build-gpu/dev/perf/run PROBE_READERS=s16 PROBE_REPS=2 contrib/bench/perf_probe.sh'
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
P=${PERF:-perf}
out=${OUT:-/tmp/perf_probe}
data=${PERF_DATA:-/tmp/perf_probe.data}
mkdir -p "$out"
"$P" record -a -g -F "${PERF_FREQ:-999}" -o "$data" -- bash "$top/contrib/bench/fuse_probe.sh" \
	>"$out/probe.txt" 2>&1
grep -E "^objfs|^curl|^median|threads" "$out/probe.txt"
workers=$(basename "${OBJFS:-objfs}" | cut -c1-15) # the kernel keeps 15 characters
R() { "$P" report -i "$data" --no-children "$@" --stdio 2>/dev/null | grep -v '^#' | grep -v '^$'; }
R --sort comm,dso -g none | head -40 >"$out/comm_dso.txt"
R --comms "$workers" --sort dso,sym -g none | head -150 >"$out/fuse_syms.txt"
R --comms objfs-engine --sort dso,sym -g none | head -150 >"$out/engine_syms.txt"
R --comms "$workers" --sort sym -g caller,0.5,callee,function,percent | head -1500 >"$out/fuse_callers.txt"
head -30 "$out/comm_dso.txt"
