#!/usr/bin/env python3
"""contrib/python/objfs.py against a real mount: PyTorch tensors and CuPy
arrays (on the GPU, on the framework's current stream) and host buffers,
at odd offsets, compared with the source file. Frameworks that are not
installed are reported and skipped; exit 0 when every case that ran held.

    python_check.py MNTFILE SRCFILE
"""
import os
import sys

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
