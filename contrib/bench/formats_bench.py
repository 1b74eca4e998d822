#!/usr/bin/env python3
"""formats_bench.py: the readers of contrib/bench/formats.sh. Each reader
prints one line of key=value words: secs (the timed part), digest (of what
it read: every mode of a case must print the same), and case figures.

  h5 mount PATH NROWS PROCS ROWS SEED PROCS processes, each opens PATH with
                                      h5py and reads ROWS random rows, one
                                      call each (rows of 16 KiB in 4 MiB
                                      chunks: tests/integration/formats.py)
  h5 get URL LOCAL PROCS ROWS SEED    the same rows' bytes as ranged GETs of
                                      URL, one keep-alive connection a
                                      process (offsets from LOCAL's chunks)
  pq-gen PATH ROWS                    parquet: 8 float64 columns c0..c7, 4
                                      row groups, no compression, no
                                      dictionary
  pq-info PATH COL                    chunks= (the column's chunks, bytes)
                                      footer= (the footer and its length and
                                      magic, bytes)
  pq-col PATH COL                     pyarrow.parquet.read_table(columns=[COL])
  pq-footer PATH                      pyarrow.parquet.read_metadata
  st-gen PATH BYTES                   safetensors: a JSON header, then BF16
                                      tensors of ~20 MB (random bytes)
  st-load PATH                        safetensors.torch.load_file; where
                                      safetensors or torch is missing, what
                                      it does with numpy: map the file and
                                      copy each tensor out (how=numpy)
  summary RUNS                        the report's table, from formats.sh's
                                      run lines

Timed parts: from the moment every process is ready (forked, imports done)
to the last one's end; the opening of the file is in it (h5py reads the
file's header), as it is for a data loader's worker.
"""
import hashlib
import json
import multiprocessing as mp
import os
import random
import signal
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "integration"))
import formats  # noqa: E402  (tests/integration/formats.py)

ROW = formats.ROW


def rows_of(seed, p, nrows, count):
    return random.Random(seed * 1000 + p).sample(range(nrows), count)


def h5_offsets(path):
    """The file offset of every row (uncompressed chunks of whole rows)."""
    import h5py
    with h5py.File(path, "r") as f:
        d = f["x"]
        per = d.chunks[0]
        off = [0] * d.shape[0]
        for i in range(d.id.get_num_chunks()):
            info = d.id.get_chunk_info(i)
            r0 = info.chunk_offset[0]
            for r in range(r0, min(r0 + per, d.shape[0])):
                off[r] = info.byte_offset + (r - r0) * ROW
        return off


def h5_worker_mount(p, path, rows, barrier, q):
    import h5py  # after the fork: no HDF5 state shared with the parent
    barrier.wait()
    t0 = time.monotonic()
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        d = f["x"]
        for r in rows:
            h.update(d[r].tobytes())
    q.put((p, t0, time.monotonic(), h.hexdigest()))


def h5_worker_get(p, url, offsets, rows, barrier, q):
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    barrier.wait()
    t0 = time.monotonic()
    h = hashlib.sha256()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for r in rows:
        a = offsets[r]
        c.request("GET", u.path, headers={"Range": "bytes=%d-%d" % (a, a + ROW - 1)})
        resp = c.getresponse()
        body = resp.read()
        if resp.status != 206 or len(body) != ROW:
            raise SystemExit("GET %s bytes=%d-: status %d, %d bytes" % (u.path, a, resp.status, len(body)))
        h.update(body)
    c.close()
    q.put((p, t0, time.monotonic(), h.hexdigest()))


def h5(mode, args):
    if mode == "mount":
        path, nrows = args[0], int(args[1])
        target, first = h5_worker_mount, (path,)
    else:
        # this process opens only the local copy with HDF5 (closed before
        # the fork); the mount's workers open their file after it
        url, offsets = args[0], h5_offsets(args[1])
        nrows = len(offsets)
        target, first = h5_worker_get, (url, offsets)
    procs, count, seed = int(args[2]), int(args[3]), int(args[4])
    ctx = mp.get_context("fork")
    barrier, q = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=target, args=(p,) + first + (rows_of(seed, p, nrows, count), barrier, q),
                      daemon=True) for p in range(procs)]
    for p in ps:
        p.start()
    res = [q.get(timeout=300) for _ in ps]
    for p in ps:
        p.join()
        if p.exitcode:
            raise SystemExit("a worker exited with status %d" % p.exitcode)
    res.sort()  # the digest in process order
    digest = hashlib.sha256("".join(x[3] for x in res).encode()).hexdigest()
    secs = max(x[2] for x in res) - min(x[1] for x in res)
    n = procs * count
    print("secs=%.4f rate=%.1f digest=%s" % (secs, n / secs, digest))


def pq_gen(path, rows):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    cols = {"c%d" % i: np.frombuffer(os.urandom(rows * 8), dtype=np.float64) for i in range(8)}
    pq.write_table(pa.table(cols), path, row_group_size=(rows + 3) // 4, compression="NONE",
                   use_dictionary=False)


def pq_info(path, col):
    import pyarrow.parquet as pq
    md = pq.ParquetFile(path).metadata
    j = md.schema.names.index(col)
    chunks = sum(md.row_group(g).column(j).total_compressed_size for g in range(md.num_row_groups))
    with open(path, "rb") as f:
        f.seek(-8, os.SEEK_END)
        tail = f.read(8)
    if tail[4:] != b"PAR1":
        raise SystemExit("%s: no parquet footer" % path)
    footer = struct.unpack("<I", tail[:4])[0] + 8
    print("chunks=%d footer=%d" % (chunks, footer))


def pq_col(path, col):
    import numpy as np
    import pyarrow.parquet as pq
    t0 = time.monotonic()
    t = pq.read_table(path, columns=[col])
    secs = time.monotonic() - t0
    a = np.concatenate([c.to_numpy() for c in t.column(col).chunks])
    print("secs=%.4f digest=%s" % (secs, hashlib.sha256(a.tobytes()).hexdigest()))


def pq_footer(path):
    import pyarrow.parquet as pq
    t0 = time.monotonic()
    md = pq.read_metadata(path)
    secs = time.monotonic() - t0
    what = "%s %d %d" % (md.schema.to_arrow_schema(), md.num_rows, md.num_row_groups)
    print("secs=%.4f digest=%s" % (secs, hashlib.sha256(what.encode()).hexdigest()))


def st_fill(path, off, n):
    fd = os.open(path, os.O_WRONLY)
    while n > 0:
        k = min(n, 16 << 20)
        os.pwrite(fd, os.urandom(k), off)
        off, n = off + k, n - k
    os.close(fd)


def st_gen(path, total):
    hdr, off, i = {}, 0, 0
    while off < total:
        n = min((20 << 20) + 4096 * (i % 7) * 2, total - off) // 2 * 2
        if n == 0:
            break
        hdr["layer%d.weight" % i] = {"dtype": "BF16", "shape": [n // 2], "data_offsets": [off, off + n]}
        off, i = off + n, i + 1
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    base = 8 + len(h)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(base + off)
    procs = min(os.cpu_count() or 1, 16)
    per = -(-off // procs)
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=st_fill, args=(path, base + k * per, max(0, min(per, off - k * per))))
          for k in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode:
            raise SystemExit("st-gen: a writer failed")


def st_load(path):
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
    t0 = time.monotonic()
    if load_file:
        d = load_file(path)
        how = "safetensors"
    else:
        import numpy as np
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            meta = json.loads(f.read(n))
        m = np.memmap(path, dtype=np.uint8, mode="r")
        base = 8 + n
        d = {k: np.array(m[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
             for k, v in sorted(meta.items()) if k != "__metadata__"}
        how = "numpy"
    secs = time.monotonic() - t0
    h = hashlib.sha256()
    for k in sorted(d):
        t = d[k]
        h.update(k.encode())
        h.update(memoryview(t.contiguous().view(torch.uint8).numpy() if how == "safetensors" else t))
    print("secs=%.4f how=%s digest=%s" % (secs, how, h.hexdigest()))


# ------------------------------------------------------------ the report
# formats.sh's run lines: "CASE MODE REP key=value ..." (ok=1 when the
# digest equals the local copy's).
BUDGET = {
    "h5": "fetched <= 4x rows; rows/s >= 0.8x get",
    "pq-col": "fetched <= 1.2x (chunks + footer)",
    "pq-footer": "fetched <= 256 KiB",
    "st": "fetched <= 1.02x; secs <= base",
}


def summary(path):
    runs = []
    for line in open(path):
        w = line.split()
        if len(w) >= 3:
            runs.append((w[0], w[1], int(w[2]), dict(x.split("=", 1) for x in w[3:] if "=" in x)))
    med = lambda xs: statistics.median(xs) if xs else None
    fmt = lambda x, f="%.2f": f % x if x is not None else "-"
    print("vs get/local, vs base: medians of the per-repetition ratios objfs/other, of rate"
          " (rows/s: higher is better) or of secs (lower is better)")
    print()
    print("| case | mode | runs (bad) | fetched/read | requests | secs | rate | vs get/local | vs base | budget |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for case in dict.fromkeys(r[0] for r in runs):
        cr = [r for r in runs if r[0] == case]
        by = {}
        for c, mode, rep, kv in cr:
            by.setdefault(mode, {})[rep] = kv
        for mode in by:
            good = {rep: kv for rep, kv in by[mode].items() if kv.get("ok") == "1"}
            bad = len(by[mode]) - len(good)
            fr = [float(kv["fetched"]) / float(kv["read"]) for kv in good.values() if "fetched" in kv]
            rq = [float(kv["reqs"]) for kv in good.values() if "reqs" in kv]
            secs = [float(kv["secs"]) for kv in good.values()]
            rate = [float(kv["rate"]) for kv in good.values() if "rate" in kv]
            ref = "get" if "get" in by else "local" if "local" in by else None

            def pairs(other, key, inv=False):
                out = []
                for rep, kv in good.items():
                    o = by.get(other, {}).get(rep)
                    if o and o.get("ok") == "1" and key in kv and key in o and float(o[key]):
                        out.append(float(kv[key]) / float(o[key]))
                return med(out)
            key = "rate" if rate else "secs"
            vs_ref = pairs(ref, key) if ref and mode not in (ref,) else None
            vs_base = pairs("base", key) if "base" in by and mode == "objfs" else None
            print("| %s | %s | %d (%d) | %s | %s | %s | %s | %s | %s | %s |" % (
                case, mode, len(by[mode]), bad, fmt(med(fr)), fmt(med(rq), "%.0f"),
                fmt(med(secs), "%.3f"), fmt(med(rate), "%.0f"),
                (fmt(vs_ref) + " " + key) if vs_ref is not None else "-",
                (fmt(vs_base) + " " + key) if vs_base is not None else "-",
                BUDGET.get(case, "") if mode == "objfs" else ""))
            if mode == "objfs":
                verdicts.append(verdict(case, med(fr), vs_ref, vs_base, by, bad))
    print()
    for v in verdicts:
        print(v)


def verdict(case, fr, vs_ref, vs_base, by, bad):
    if bad:
        return "%s: %d run(s) with a wrong answer or an error" % (case, bad)
    if fr is None:
        return "%s: no run" % case
    lim = {"h5": 4.0, "pq-col": 1.2, "st": 1.02}.get(case)
    out = []
    if lim is not None:
        out.append("fetched/read %.2f %s %.2f" % (fr, "<=" if fr <= lim else "> (OVER)", lim))
    if case == "pq-footer":
        fetched = med_key(by["objfs"], "fetched")
        out.append("fetched %d %s 262144" % (fetched, "<=" if fetched <= 262144 else "> (OVER)"))
    if case == "h5" and vs_ref is not None:
        out.append("rows/s %.2fx get %s 0.8" % (vs_ref, ">=" if vs_ref >= 0.8 else "< (UNDER)"))
    if case == "st" and vs_base is not None:
        out.append("secs %.2fx base %s 1.0" % (vs_base, "<=" if vs_base <= 1.0 else "> (SLOWER)"))
    return "%s: %s" % (case, "; ".join(out))


def med_key(runs, key):
    xs = [float(kv[key]) for kv in runs.values() if key in kv and kv.get("ok") == "1"]
    return int(statistics.median(xs)) if xs else -1


def main(argv):
    # formats.sh bounds each run with timeout(1): a TERM ends the workers too
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    cmd, a = argv[1], argv[2:]
    if cmd == "h5":
        h5(a[0], a[1:])
    elif cmd == "pq-gen":
        pq_gen(a[0], int(a[1]))
    elif cmd == "pq-info":
        pq_info(a[0], a[1])
    elif cmd == "pq-col":
        pq_col(a[0], a[1])
    elif cmd == "pq-footer":
        pq_footer(a[0])
    elif cmd == "st-gen":
        st_gen(a[0], int(a[1]))
    elif cmd == "st-load":
        st_load(a[0])
    elif cmd == "summary":
        summary(a[0])
    else:
        raise SystemExit("unknown command %s" % cmd)


if __name__ == "__main__":
    main(sys.argv)
