#!/usr/bin/env python3
"""batch_example: training-style input from shard files on an objfs mount.

    python3 batch_example.py /mnt/data 'shard-*.bin' [SAMPLE_BYTES] [BATCH]

Builds a sample index of (file, offset, length) over the shards, then
iterates batches with objfs.torch.ShardDataset: each batch is one
objfs_gpu_readv straight into a [BATCH, SAMPLE_BYTES] uint8 CUDA tensor, the
next batch's read in flight while the current one is used.
"""
import glob
import os
import random
import sys
import time

import torch

from objfs.torch import ShardDataset

mount, pattern = sys.argv[1], sys.argv[2]
L = int(sys.argv[3]) if len(sys.argv) > 3 else 110 * 1024
B = int(sys.argv[4]) if len(sys.argv) > 4 else 256
files = sorted(glob.glob(os.path.join(mount, pattern)))
index = []
for f in files:
    n = os.path.getsize(f)
    index += [(os.path.relpath(f, mount), off, L) for off in range(0, n - L + 1, L)]
random.shuffle(index)
ds = ShardDataset(mount, index)
batches = [list(range(i, min(i + B, len(ds)))) for i in range(0, len(ds), B)]
t0, seen = time.time(), 0
for batch in ds.prefetching(batches[:50]):
    x = batch.float().mean()  # the training step would go here
    seen += len(batch)
torch.cuda.synchronize()
print("%d samples in %.2f s: %.0f samples/s" % (seen, time.time() - t0, seen / (time.time() - t0)))
