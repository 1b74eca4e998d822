#!/usr/bin/env python3
"""The objfs Python package (contrib/python/objfs) against a real mount:
PyTorch tensors and CuPy arrays (on the GPU, on the framework's current
stream) and host buffers, at odd offsets, compared with the source file.
Frameworks that are not installed are reported and skipped; exit 0 when
every case that ran held.

    python_check.py MNTFILE SRCFILE

The package of the source tree, or with OBJFS_PY_INSTALLED=1 the one
installed in this Python (tests/integration/python_pkg.sh).
"""
import os
import sys

if os.environ.get("OBJFS_PY_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "contrib", "python"))
import objfs  # noqa: E402

mnt, src = sys.argv[1], sys.argv[2]
size = os.path.getsize(src)
fails = 0
cases = [(0, 1), (7, 4093), (12345, (8 << 20) + 3), (size - 50, 4096), (1, 33 << 20)]


def expect(off, n):
    with open(src, "rb") as f:
        f.seek(off)
        return f.read(min(n, max(0, size - off)))


def report(ok, what):
    global fails
    print("%s: %s" % ("ok" if ok else "NOT OK", what))
    fails += not ok


for off, n in cases:
    b = bytearray(n)
    got = objfs.read_into(mnt, b, off)
    want = expect(off, n)
    report(got == len(want) and bytes(b[:got]) == want, "bytearray, %d bytes at %d" % (n, off))

# A directory of the mount is refused as one, before any request.
try:
    objfs.File(os.path.dirname(mnt))
    report(False, "File(a directory of the mount) raised nothing")
except IsADirectoryError as e:
    report("is a directory" in str(e), "File(a directory of the mount): %s" % e)

# objfs.Session: one batch of host buffers over the file, odd offsets and
# sizes, one past the end, one failing its checks (negative offset).
with objfs.Session(os.path.dirname(mnt)) as s:
    name = os.path.basename(mnt)
    items = [(name, off, bytearray(n)) for off, n in cases + [(size + 3, 10)]]
    got = s.read_into(items)
    ok = all(g == len(expect(off, len(b))) and bytes(b[:g]) == expect(off, len(b))
             for g, (_, off, b) in zip(got, items))
    report(ok, "Session.read_into: %d ranges in one batch (counts %s)" % (len(items), got))
    bad = s.read_into([(name, -1, bytearray(4)), (s.file(name), 5, bytearray(4))], check=False)
    report(bad[0] == -22 and bad[1] == 4, "Session.read_into: a bad entry fails alone (%s)" % bad)

# A batch naming several files for the first time: every file beside the
# source, one range each; a missing one raises ENOENT.
sdir = os.path.dirname(src)
names = sorted(n for n in os.listdir(sdir) if os.path.isfile(os.path.join(sdir, n)))
with objfs.Session(os.path.dirname(mnt)) as s:
    items = [(n, 3, bytearray(1000)) for n in names]
    got = s.read_into(items)
    ok = True
    for g, (n, off, b) in zip(got, items):
        with open(os.path.join(sdir, n), "rb") as f:
            f.seek(off)
            want = f.read(len(b))
        ok &= g == len(want) and bytes(b[:g]) == want
    report(ok and len(names) >= 2, "Session.read_into: %d files opened in one batch (counts %s)"
           % (len(names), got))
    try:
        s.read_into([("no-such-file", 0, bytearray(1)), (names[0], 0, bytearray(1))])
        report(False, "Session.read_into: a missing file raised nothing")
    except OSError as e:
        report(e.errno == 2, "Session.read_into: a missing file raises ENOENT (%s)" % e)

try:
    import torch
    if not torch.cuda.is_available():
        raise ImportError("no CUDA device")
    with objfs.File(mnt) as f:
        for off, n in cases:
            t = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
            t.add_(1)  # pending work on the current stream, before the fill
            got = f.read_into(t, off)
            want = expect(off, n)
            ok = got == len(want) and t[:got].cpu().numpy().tobytes() == want
            report(ok, "torch cuda tensor, %d bytes at %d" % (n, off))
        # a float tensor from the caching allocator, on a side stream
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            t = torch.empty(1 << 20, dtype=torch.float32, device="cuda")
            got = f.read_into(t, 4096)
        report(got == 4 << 20 and t.cpu().numpy().tobytes() == expect(4096, 4 << 20),
               "torch float32 tensor on a side stream")
    import objfs.torch as objfs_torch
    n = 64
    index = [(os.path.basename(mnt), (i * 7919 * 13) % (size - 70000), 65536 + (i % 2) * 0)
             for i in range(n)]
    ds = objfs_torch.ShardDataset(os.path.dirname(mnt), index)
    dl = torch.utils.data.DataLoader(
        ds, batch_sampler=torch.utils.data.BatchSampler(range(n), 16, False),
        collate_fn=objfs_torch.ShardDataset.collate)
    ok, k = True, 0
    for batch in dl:
        for row in batch:
            ok &= row.cpu().numpy().tobytes() == expect(index[k][1], index[k][2])
            k += 1
    report(ok and k == n, "ShardDataset through a DataLoader: %d samples, batches of 16" % k)
    ok, k = True, 0
    for batch in ds.prefetching([list(range(i, i + 16)) for i in range(0, n, 16)]):
        for row in batch:
            ok &= row.cpu().numpy().tobytes() == expect(index[k][1], index[k][2])
            k += 1
    report(ok and k == n, "ShardDataset.prefetching: %d samples" % k)
    # a loop that stops early: the batch in flight is waited for, not dropped
    it = ds.prefetching([list(range(i, i + 16)) for i in range(0, n, 16)], depth=2)
    first = next(it)
    it.close()
    ok = all(first[j].cpu().numpy().tobytes() == expect(index[j][1], index[j][2])
             for j in range(16))
    report(ok, "ShardDataset.prefetching stopped after one batch of four")
    # safetensors: tensors at offsets no dtype aligns, every byte compared
    # (side_gpu.sh writes the files; side_host.sh has none)
    d = os.path.dirname(mnt)
    srcd = os.path.dirname(src)
    if not os.path.exists(os.path.join(srcd, "model.safetensors")):
        print("skip: load_safetensors cases (no model.safetensors beside the source)")
    else:
        base, layout = objfs.safetensors_layout(os.path.join(srcd, "model.safetensors"))
        with open(os.path.join(srcd, "model.safetensors"), "rb") as fsrc:
            raw = fsrc.read()
        got = objfs_torch.load_safetensors(os.path.join(d, "model.safetensors"), "cuda")
        ok = sorted(got) == sorted(t[0] for t in layout)
        for name, dtype, shape, a, b in layout:
            t = got[name]
            ok &= list(t.shape) == shape and t.is_cuda
            ok &= t.contiguous().cpu().view(torch.uint8).numpy().tobytes() == raw[base + a:base + b]
        report(ok, "load_safetensors: %d tensors, unaligned ones too, byte for byte" % len(layout))
        try:
            objfs_torch.load_safetensors(os.path.join(d, "bad.safetensors"), "cuda")
            report(False, "load_safetensors refuses offsets into the header")
        except ValueError as e:
            report(True, "load_safetensors refuses offsets into the header (%s)" % e)
    print("torch %s" % torch.__version__)
except ImportError as e:
    print("skip: PyTorch cases (%s)" % e)

try:
    import cupy
    for off, n in cases:
        a = cupy.zeros(n, dtype=cupy.uint8)
        got = objfs.read_into(mnt, a, off)
        want = expect(off, n)
        report(got == len(want) and cupy.asnumpy(a[:got]).tobytes() == want,
               "cupy array, %d bytes at %d" % (n, off))
except ImportError as e:
    print("skip: CuPy cases (%s)" % e)

try:
    objfs.read_into("/proc/self/status", bytearray(10))
    report(False, "a file outside objfs raises OSError")
except OSError as e:
    report(e.errno == 25, "a file outside objfs raises OSError ENOTTY (%s)" % e)
sys.exit(1 if fails else 0)
