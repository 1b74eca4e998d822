#!/usr/bin/env python3
"""Unit tests of objfs.safetensors_layout (contrib/python/objfs), the
header check load_safetensors runs before it allocates or reads anything:
valid layouts come back exactly; every file that breaks the format (offsets
into the header, reversed or overlapping ranges, a shape that is not the
bytes, sizes past the file) raises ValueError. No GPU, no PyTorch, no
libobjfs needed. Exit 0 when all hold, 1 otherwise.
"""
import json
import os
import struct
import sys
import tempfile

# the source tree's package, or with OBJFS_PY_INSTALLED=1 the installed one
if os.environ.get("OBJFS_PY_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "contrib", "python"))
import objfs  # noqa: E402

fails = 0
tmp = tempfile.mkdtemp(prefix="objfs-st-")


def write(header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    path = os.path.join(tmp, "f%d.safetensors" % write.n)
    write.n += 1
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path


write.n = 0


def report(ok, what):
    global fails
    print("%s: %s" % ("ok" if ok else "NOT OK", what))
    fails += not ok


def refused(what, header, data=b"\0" * 64, raw_header=None, path=None):
    path = path or write(header, data, raw_header)
    try:
        got = objfs.safetensors_layout(path)
        report(False, "%s: refused (got %r)" % (what, got))
    except ValueError as e:
        report(True, "%s: refused (%s)" % (what, e))


def t(dtype, shape, a, b):
    return {"dtype": dtype, "shape": shape, "data_offsets": [a, b]}


# a valid file: metadata, unaligned offsets, an empty tensor, every dtype size
hdr = {"__metadata__": {"format": "pt"}, "w": t("F32", [2, 2], 3, 19), "b": t("F16", [1], 1, 3),
       "flag": t("BOOL", [1], 0, 1), "none": t("BF16", [0], 19, 19),
       "ids": t("U32", [2], 19, 27), "big": t("U64", [1], 27, 35)}
p = write(hdr, b"\1" * 35)
base, layout = objfs.safetensors_layout(p)
report(base == 8 + len(json.dumps(hdr).encode()), "base is 8 + the header's length")
report([x[0] for x in layout] == ["flag", "b", "w", "none", "ids", "big"],
       "tensors sorted by offset, metadata left out")
report(layout[2] == ("w", "F32", [2, 2], 3, 19), "a tensor's dtype, shape and range as given")
# adjacent and empty tensors share no bytes
p = write({"a": t("U8", [4], 0, 4), "e": t("U8", [0], 4, 4), "f": t("U8", [0], 4, 4),
           "b": t("U8", [4], 4, 8)}, b"\0" * 8)
report(len(objfs.safetensors_layout(p)[1]) == 4, "adjacent tensors and empty ones at one offset")
report(objfs.safetensors_layout(write({}, b""))[1] == [], "no tensors at all")

# offsets that break the format
refused("a negative begin (bytes of the header)", {"x": t("I32", [2], -8, 0)})
refused("both offsets negative", {"x": t("I32", [1], -8, -4), "y": t("U8", [16], 0, 16)})
refused("end before begin", {"x": t("U8", [0], 8, 4)})
refused("offsets not integers", {"x": t("U8", [4], 0.0, 4)})
refused("offsets as booleans", {"x": t("U8", [1], False, True)})
refused("three offsets", {"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}})
refused("no offsets", {"x": {"dtype": "U8", "shape": [1]}})
refused("past the end of the file", {"x": t("U8", [65], 0, 65)})
refused("an end of 2^40 (allocated before the fix)", {"x": t("U8", [1 << 40], 0, 1 << 40)})
refused("overlapping tensors", {"x": t("U8", [8], 0, 8), "y": t("U8", [8], 4, 12)})
refused("one tensor inside another", {"x": t("U8", [16], 0, 16), "y": t("U8", [4], 4, 8)})
# shapes and dtypes
refused("a negative dimension", {"x": t("U8", [-1], 0, 4)})
refused("a boolean dimension", {"x": t("U8", [True], 0, 1)})
refused("a shape that is not a list", {"x": t("U8", 4, 0, 4)})
refused("bytes that are not the shape's", {"x": t("F32", [2], 0, 12)})
refused("an unknown dtype", {"x": t("F7", [1], 0, 1)})
refused("a tensor that is not an object", {"x": [0, 1]})
# the header itself
refused("a header that is not JSON", None, raw_header=b"{nope")
refused("a header that is not UTF-8", None, raw_header=b'{"\xff": 1}')
refused("a header that is a list", None, raw_header=b"[]")
p = os.path.join(tmp, "short.safetensors")
with open(p, "wb") as f:
    f.write(struct.pack("<Q", 1000) + b"{}")
refused("a header longer than the file", None, path=p)
p = os.path.join(tmp, "huge.safetensors")
with open(p, "wb") as f:
    f.write(struct.pack("<Q", 1 << 62))
refused("a header length of 2^62", None, path=p)
p = os.path.join(tmp, "tiny.safetensors")
with open(p, "wb") as f:
    f.write(b"\1\2\3")
refused("a file of 3 bytes", None, path=p)

for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)
sys.exit(1 if fails else 0)
