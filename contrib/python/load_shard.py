#!/usr/bin/env python3
"""Example: load a dataset shard from an objfs mount straight into a GPU
tensor, then check it against an ordinary read of the same file.

    PYTHONPATH=contrib/python python3 contrib/python/load_shard.py /mnt/data/shard-0001.tar
"""
import hashlib
import os
import sys
import time

import torch

import objfs

path = sys.argv[1]
size = os.path.getsize(path)
shard = torch.empty(size, dtype=torch.uint8, device="cuda")
t0 = time.perf_counter()
n = objfs.read_into(path, shard)
dt = time.perf_counter() - t0
print("loaded %d bytes of %s into %s in %.3f s (%.2f GB/s)" % (n, path, shard.device, dt,
                                                             n / dt / 1e9))
with open(path, "rb") as f:
    want = hashlib.sha256(f.read()).hexdigest()
got = hashlib.sha256(shard.cpu().numpy().tobytes()).hexdigest()
print("sha256 %s (%s)" % (got, "matches read()" if got == want else "DIFFERS from read()"))
sys.exit(0 if n == size and got == want else 1)
