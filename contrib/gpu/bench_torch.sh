#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# bench_torch.sh: the PyTorch benchmarks of the GPU side API, on a GPU host
# (contrib/gpu/run_device.sh exec contrib/gpu/bench_torch.sh; needs python3
# with torch and CUDA there): (2) a BENCH_ST_GB GiB safetensors file
# (200-odd bf16 tensors) to the GPU, load_safetensors vs the safetensors way
# (read through the mount into host memory, copy each tensor); (3) batches of
# 256 random 110 KiB samples across 1,000 files of 2 MiB, ShardDataset with
# the next batch in flight vs a 16-worker DataLoader reading the mount.
# BENCH_MODES (st_objfs st_base st_one dl_objfs dl_base; MODE@old runs MODE
# with the Python modules in BENCH_OLD_PY), BENCH_REPS, BENCH_ST_GB,
# BENCH_BATCHES, BENCH_OPTS.
# Every measurement is a fresh mount (daemon caches cold; nginx's files in
# the page cache); modes alternate, BENCH_REPS times, their order rotated,
# after BENCH_WARMUP (1) untimed rounds.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../tests/integration/lib.sh
. "$HERE/../../tests/integration/lib.sh"
# shellcheck source=../bench/bench_lib.sh
. "$HERE/../bench/bench_lib.sh"
require_objfs
OUT=${OUT:-$PWD/device-out}
REPS=${BENCH_REPS:-2}
GB=${BENCH_ST_GB:-4}
NB=${BENCH_BATCHES:-40}
OPTS=${BENCH_OPTS:-cache_size=4G}
mkdir -p "$OUT"
res=$OUT/bench_torch.txt
: >"$res"
say() { printf '%s\n' "$*" | tee -a "$res"; }
DATA=$TEST_TMP/www
mkdir -p "$DATA/shards"
seq 0 999 | xargs -P "$(nproc)" -I{} sh -c 'head -c 2097152 /dev/urandom > "$0/s{}.bin"' "$DATA/shards"
# safetensors: the header from Python, then random tensor bytes
python3 - "$DATA/model.safetensors" "$GB" <<'PY'
import json, struct, sys
path, gb = sys.argv[1], int(sys.argv[2])
total, hdr, off, i = gb << 30, {}, 0, 0
while off < total:
    n = min((20 << 20) + 4096 * (i % 7) * 2, total - off) // 2 * 2
    hdr["layer%d.weight" % i] = {"dtype": "BF16", "shape": [n // 2], "data_offsets": [off, off + n]}
    off, i = off + n, i + 1
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
with open(path + ".len", "w") as f:
    f.write(str(off))
PY
n=$(cat "$DATA/model.safetensors.len")
per=$(((n + 15) / 16))
for k in $(seq 0 15); do head -c $((k < 15 ? per : n - 15 * per)) /dev/urandom >"$DATA/part$k" & done
wait
cat "$DATA"/part* >>"$DATA/model.safetensors" && rm -f "$DATA"/part* "$DATA/model.safetensors.len"
cat "$DATA/model.safetensors" "$DATA"/shards/* >/dev/null
bench_nginx "$DATA" || exit 99 # a worker per core, no access log: not the limit
MNT=$TEST_TMP/mnt
say "== bench_torch: (2) $(stat -c %s "$DATA/model.safetensors") byte safetensors; (3) $NB batches of 256 x 110 KiB over 1000 files; -o $OPTS; $(python3 -c 'import torch; print("torch", torch.__version__)')"
read -r -a modes <<<"${BENCH_MODES:-st_objfs st_base st_one dl_objfs dl_base}"
nm=${#modes[@]}
# Rep -1 is a warm-up, not reported: in two calls the first rep of the mode
# that ran first (dl_objfs) ran at 0.70x and 0.27x its median, the first
# use of torch and CUDA on the machine. The order rotates.
for ((rep = -${BENCH_WARMUP:-1}; rep < REPS; rep++)); do
	for ((k = 0; k < nm; k++)); do
		m=${modes[$(((k + (rep < 0 ? 0 : rep)) % nm))]}
		mount_objfs "$URL" "$MNT" "$OPTS" || exit 99
		case $m in
		st_*) arg=("$MNT/model.safetensors") ;;
		*) arg=("$MNT/shards" "$NB") ;;
		esac
		pydir= # MODE@old: the Python modules in BENCH_OLD_PY
		[ "${m%@old}" != "$m" ] && pydir=${BENCH_OLD_PY:?MODE@old needs BENCH_OLD_PY}
		line="rep $rep: $(OBJFS_PYDIR=$pydir timeout 120 python3 "$HERE/bench_torch.py" "${m%@old}" "${arg[@]}" 2>&1 | tail -1)${pydir:+ (@old)}"
		if ((rep < 0)); then echo "warm-up, not counted: $line"; else say "$line"; fi
		unmount_objfs "$MNT" >/dev/null 2>&1
	done
done
