#!/usr/bin/env python3
"""formats.py: real data formats, written with their own libraries and read
the way their programs read them. formats.sh (and contrib/bench/formats.sh)
runs each reader once on the local copy and once through the mount: the two
answers must be equal, and the mount's .objfs-stats tell what reading cost.

  formats.py gen-h5 PATH ROWS             ROWS rows of 16 KiB (uint8), chunks
                                          of 256 rows (4 MiB), uncompressed
  formats.py h5-rows PATH SEED COUNT      COUNT random rows, one call each
  formats.py h5-run PATH FIRST COUNT      COUNT consecutive rows, one call each
  formats.py gen-sqlite PATH ROWS BLOB    table t(id, v) of ROWS random blobs
                                          of BLOB bytes, 4 KiB pages; prints
                                          the depth of t's B-tree
  formats.py sqlite-points PATH ROWS SEED COUNT   COUNT lookups by rowid
  formats.py sqlite-scan PATH             select sum(length(v)) from t
  formats.py mmap-hash PATH               sha256 of a read-only mapping, in order
  formats.py memmap-sum PATH              numpy.memmap, summed in order
  formats.py gen-nc PATH                  netCDF4 8192x8192 uint8, 1 MiB chunks
  formats.py nc-chunks PATH SEED COUNT    COUNT random whole chunks
  formats.py gen-zarr PATH                zarr 8192x8192 uint8, 1 MiB chunks,
                                          uncompressed, in a zarr.ZipStore
  formats.py zarr-chunks PATH SEED COUNT  COUNT random whole chunks

Readers print one line, their answer (a digest or a sum). Data is random
(os.urandom in big pieces: quick to write, and no cache can compress it);
the choice of rows and chunks is a fixed seed's. Zarr is one zip file
(ZipStore), not a directory of chunk files: nginx's autoindex lists no
dotfiles, so a DirectoryStore's .zarray would not be seen through a mount
of nginx.
"""
import hashlib
import os
import random
import sys
import urllib.parse

ROW = 16 << 10       # an HDF5 row
ROWS_PER_CHUNK = 256  # 4 MiB chunks
GRID = 8192          # netCDF4 / zarr: GRID x GRID bytes
TILE = 1024          # in TILE x TILE chunks (1 MiB)


def random_u8(n):
    import numpy as np
    return np.frombuffer(os.urandom(n), dtype=np.uint8)


def gen_h5(path, rows):
    import h5py
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(rows, ROW), dtype="u1",
                             chunks=(ROWS_PER_CHUNK, ROW))
        for r in range(0, rows, ROWS_PER_CHUNK):
            n = min(ROWS_PER_CHUNK, rows - r)
            d[r:r + n] = random_u8(n * ROW).reshape(n, ROW)


def h5_read(path, rows):
    import h5py
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        d = f["x"]
        for r in rows:
            h.update(d[r].tobytes())
    return h.hexdigest()


def h5_rows(path, seed, count):
    import h5py
    with h5py.File(path, "r") as f:
        nrows = f["x"].shape[0]
    return h5_read(path, random.Random(seed).sample(range(nrows), count))


def sqlite_open(path):
    import sqlite3
    uri = "file:%s?immutable=1" % urllib.parse.quote(os.path.abspath(path))
    return sqlite3.connect(uri, uri=True)


def gen_sqlite(path, rows, blob):
    import sqlite3
    c = sqlite3.connect(path)
    c.executescript("pragma page_size=4096; pragma journal_mode=off; pragma synchronous=off;"
                    "create table t(id integer primary key, v blob);")
    c.execute("with recursive c(x) as (select 1 union all select x + 1 from c where x < ?)"
              " insert into t(v) select randomblob(?) from c", (rows, blob))
    c.commit()
    # every leaf of a B-tree is as deep as the others; a page's path is
    # "/", "/000/", "/000/01a/", ...
    depth = c.execute("select max(length(path) - length(replace(path, '/', '')))"
                      " from dbstat where name = 't'").fetchone()[0]
    c.close()
    return depth


def sqlite_points(path, rows, seed, count):
    c = sqlite_open(path)
    h = hashlib.sha256()
    for i in random.Random(seed).sample(range(1, rows + 1), count):
        h.update(c.execute("select v from t where id = ?", (i,)).fetchone()[0])
    return h.hexdigest()


def mmap_hash(path):
    import mmap
    h = hashlib.sha256()
    with open(path, "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            for off in range(0, len(m), 1 << 20):
                h.update(m[off:off + (1 << 20)])
    return h.hexdigest()


def memmap_sum(path):
    import numpy as np
    a = np.memmap(path, dtype=np.uint8, mode="r")
    step = 4 << 20
    return sum(int(a[off:off + step].sum(dtype=np.uint64)) for off in range(0, a.size, step))


def tiles(seed, count):
    n = GRID // TILE
    return [divmod(k, n) for k in random.Random(seed).sample(range(n * n), count)]


def gen_nc(path):
    import netCDF4
    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        ds.createDimension("y", GRID)
        ds.createDimension("x", GRID)
        v = ds.createVariable("v", "u1", ("y", "x"), chunksizes=(TILE, TILE), fill_value=False)
        for r in range(0, GRID, TILE):
            v[r:r + TILE, :] = random_u8(TILE * GRID).reshape(TILE, GRID)


def nc_chunks(path, seed, count):
    import netCDF4
    h = hashlib.sha256()
    with netCDF4.Dataset(path, "r") as ds:
        v = ds["v"]
        v.set_auto_mask(False)
        for ty, tx in tiles(seed, count):
            h.update(v[ty * TILE:(ty + 1) * TILE, tx * TILE:(tx + 1) * TILE].tobytes())
    return h.hexdigest()


def gen_zarr(path):
    import zarr
    with zarr.ZipStore(path, mode="w") as store:
        z = zarr.create(store=store, shape=(GRID, GRID), chunks=(TILE, TILE), dtype="u1",
                        compressor=None)
        for r in range(0, GRID, TILE):
            z[r:r + TILE, :] = random_u8(TILE * GRID).reshape(TILE, GRID)


def zarr_chunks(path, seed, count):
    import zarr
    h = hashlib.sha256()
    with zarr.ZipStore(path, mode="r") as store:
        z = zarr.open(store, mode="r")
        for ty, tx in tiles(seed, count):
            h.update(z[ty * TILE:(ty + 1) * TILE, tx * TILE:(tx + 1) * TILE].tobytes())
    return h.hexdigest()


def main(argv):
    cmd, a = argv[1], argv[2:]
    ints = [int(x) for x in a[1:]]
    out = {
        "gen-h5": lambda: gen_h5(a[0], *ints),
        "h5-rows": lambda: h5_rows(a[0], *ints),
        "h5-run": lambda: h5_read(a[0], range(ints[0], ints[0] + ints[1])),
        "gen-sqlite": lambda: gen_sqlite(a[0], *ints),
        "sqlite-points": lambda: sqlite_points(a[0], *ints),
        "sqlite-scan": lambda: sqlite_open(a[0]).execute(
            "select sum(length(v)) from t").fetchone()[0],
        "mmap-hash": lambda: mmap_hash(a[0]),
        "memmap-sum": lambda: memmap_sum(a[0]),
        "gen-nc": lambda: gen_nc(a[0]),
        "nc-chunks": lambda: nc_chunks(a[0], *ints),
        "gen-zarr": lambda: gen_zarr(a[0]),
        "zarr-chunks": lambda: zarr_chunks(a[0], *ints),
    }[cmd]()
    if out is not None:
        print(out)


if __name__ == "__main__":
    main(sys.argv)
