#!/usr/bin/env python3
"""bench_torch.py: the PyTorch benchmarks of the GPU side API, one
measurement per call (contrib/gpu/bench_torch.sh mounts fresh for each and
alternates).

  bench_torch.py st_objfs FILE        load_safetensors(FILE, "cuda") (objfs_torch)
  bench_torch.py st_one FILE          the same bytes with one objfs_gpu_read of the
                                      whole file into one device buffer (no batch):
                                      what the single-file side path gives
  bench_torch.py st_base FILE         safetensors.torch.load_file(FILE, device="cuda")
                                      when installed, else its equivalent: the
                                      file read through the mount into host
                                      memory, each tensor copied with .to("cuda")
  bench_torch.py dl_objfs DIR NB      ShardDataset.prefetching: NB batches of 256
                                      random 110 KiB samples of DIR/s*.bin, the
                                      next batch's readv in flight
  bench_torch.py dl_base DIR NB       DataLoader(16 workers) over the same samples:
                                      os.pread through the mount, default collate,
                                      pin_memory, .cuda(non_blocking=True)

Prints one line: "MODE SECONDS RATE" (GB/s for st_*, samples/s for dl_*;
dl_* time batches 2..NB, the first one starts the pipeline and the workers).
"""
import glob
import json
import os
import random
import struct
import sys
import time

import torch

# OBJFS_PYDIR: another contrib/python to measure (bench_torch.sh MODE@old)
sys.path.insert(0, os.environ.get("OBJFS_PYDIR") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import objfs_torch  # noqa: E402

B, L = 256, 110 * 1024


def _has_safetensors():
    try:
        import safetensors.torch  # noqa: F401
        return True
    except ImportError:
        return False


def st_base(path):
    try:
        import safetensors.torch as st
        return st.load_file(path, device="cuda")
    except ImportError:
        pass
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, v in header.items():
        a, b = v["data_offsets"]
        t = torch.frombuffer(data, dtype=torch.uint8, count=b - a, offset=a)
        out[name] = t.to("cuda").view(objfs_torch._DTYPES[v["dtype"]]).reshape(v["shape"])
    return out


def index_of(d, nsamples, seed):
    files = sorted(glob.glob(os.path.join(d, "s*.bin")))
    sizes = [os.path.getsize(f) for f in files]
    r = random.Random(seed)
    idx = []
    for _ in range(nsamples):
        k = r.randrange(len(files))
        idx.append((os.path.basename(files[k]), r.randrange(sizes[k] - L + 1), L))
    return idx


class PreadDS(torch.utils.data.Dataset):
    def __init__(self, d, index):
        self.d, self.index, self.fds = d, index, {}

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        f, off, n = self.index[i]
        fd = self.fds.get(f)
        if fd is None:
            fd = self.fds[f] = os.open(os.path.join(self.d, f), os.O_RDONLY)
        return torch.frombuffer(bytearray(os.pread(fd, n, off)), dtype=torch.uint8)


def consume(batch):
    return batch.float().mean()  # some GPU work on every batch


def main():
    mode = sys.argv[1]
    if mode in ("st_objfs", "st_base", "st_one"):
        path = sys.argv[2]
        torch.cuda.init()
        torch.empty(1, device="cuda")
        t0 = time.time()
        if mode == "st_one":
            import objfs
            flat = torch.empty(os.path.getsize(path), dtype=torch.uint8, device="cuda")
            with objfs.File(path) as f:
                f.read_into(flat)
            d = {"all": flat}
        else:
            d = objfs_torch.load_safetensors(path, "cuda") if mode == "st_objfs" else st_base(path)
        torch.cuda.synchronize()
        dt = time.time() - t0
        n = sum(t.numel() * t.element_size() for t in d.values())
        via = "" if mode != "st_base" else " (safetensors %s)" % (
            "package" if _has_safetensors() else "not installed: read + .to(cuda)")
        print("%s %.3f %.2f GB/s (%d tensors, %d bytes)%s" % (mode, dt, n / dt / 1e9, len(d), n, via))
        return
    d, nb = sys.argv[2], int(sys.argv[3])
    index = index_of(d, B * nb, 1)
    batches = [list(range(i, i + B)) for i in range(0, B * nb, B)]
    torch.empty(1, device="cuda")
    acc = torch.zeros((), device="cuda")
    if mode == "dl_objfs":
        ds = objfs_torch.ShardDataset(d, index)
        it = ds.prefetching(batches, depth=1)
    else:
        dl = torch.utils.data.DataLoader(PreadDS(d, index), batch_sampler=batches,
                                         num_workers=16, pin_memory=True, prefetch_factor=4)
        it = (b.cuda(non_blocking=True) for b in dl)
    t0 = None
    for k, batch in enumerate(it):
        assert batch.shape == (B, L), batch.shape
        acc += consume(batch)
        if k == 0:
            torch.cuda.synchronize()
            t0 = time.time()
    torch.cuda.synchronize()
    dt = time.time() - t0
    print("%s %.3f %.0f samples/s (%d batches of %d x %d bytes after the first)"
          % (mode, dt, B * (nb - 1) / dt, nb - 1, B, L))


main()
