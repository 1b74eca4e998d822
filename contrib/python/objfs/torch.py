"""objfs.torch: PyTorch data loading through objfs's GPU side API (libobjfs).

Two things, both built on objfs.Session (one objfs_gpu_readv per batch: the
daemon coalesces neighbouring ranges, serves cached bytes, fetches the rest
in parallel, and the bytes land in GPU memory through one pinned ring per
process and mount):

ShardDataset -- a map-style Dataset over a sample index of (file, offset,
length) triples; a batch of samples arrives as GPU tensors through one
readv:

    ds = ShardDataset("/mnt/data", index, device="cuda")
    dl = torch.utils.data.DataLoader(
        ds, batch_sampler=torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(ds), 256, drop_last=False),
        collate_fn=ShardDataset.collate, num_workers=0)   # main process
    for batch in dl:             # uint8 [256, L] on the GPU when all lengths are L,
        ...                      # else a list of 1-D uint8 tensors (views of one buffer)

  The DataLoader calls __getitems__ with the batch's indices (PyTorch >= 2.0);
  the GPU work belongs in the main process (num_workers=0): CUDA and the
  side API's session are per process. ds.prefetching(batches) runs batch
  k + 1's readv on a side stream while batch k is used (the current stream
  waits on an event, no host synchronisation).

load_safetensors(path, device) -- a safetensors checkpoint straight into GPU
memory: the header is parsed here, every tensor's bytes are one entry of one
readv into one device buffer (adjacent tensors are adjacent ranges: the
daemon coalesces them, the library merges the copies); returns
{name: tensor} views of that buffer.
"""

import os

import torch

import objfs

__all__ = ["ShardDataset", "load_safetensors"]


def _stream_handle(st):
    return st.cuda_stream


class ShardDataset(torch.utils.data.Dataset):
    """Samples (file, offset, length) of files on one objfs mount, read
    straight into GPU memory, one readv per batch."""

    def __init__(self, mount, index, device="cuda", dtype=torch.uint8):
        self.session = objfs.Session(mount)
        self.index = list(index)
        self.device = torch.device(device)
        self.dtype = dtype

    def __len__(self):
        return len(self.index)

    def _alloc(self, idx):
        """The batch's buffer: (out, flat, entries), @out a [n, L] view of
        one device buffer when every length is L, else a list of 1-D views;
        @entries the readv's (file, offset, pointer, bytes), pointers into
        @flat by arithmetic (no per-tensor inspection)."""
        samples = [self.index[i] for i in idx]
        total = sum(s[2] for s in samples)
        flat = torch.empty(total, dtype=torch.uint8, device=self.device)
        base, entries, off = flat.data_ptr(), [], 0
        for f, foff, n in samples:
            entries.append((f, foff, base + off, n))
            off += n
        n0 = samples[0][2] if samples else 0
        if all(s[2] == n0 for s in samples):
            out = flat.view(len(samples), n0)
        else:
            out, off = [], 0
            for s in samples:
                out.append(flat[off:off + s[2]])
                off += s[2]
        return out, flat, entries

    def _finish(self, out, iov, n, idx):
        for k in range(n):
            c = iov[k].nread
            if c != self.index[idx[k]][2]:
                f, off, ln = self.index[idx[k]]
                raise OSError(-c if c < 0 else 5,
                              "objfs: sample %d (%s at %d, %d bytes): got %d" % (idx[k], f, off, ln, c))
        if self.dtype != torch.uint8:
            out = out.view(self.dtype) if isinstance(out, torch.Tensor) else [v.view(self.dtype) for v in out]
        return out

    def __getitems__(self, idx):
        """One batch: one readv, waited for."""
        idx = list(idx)
        out, flat, entries = self._alloc(idx)
        st = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        iov, n = self.session.submit_ptrs(entries, stream=st.cuda_stream if st else None)
        if st is not None:
            st.synchronize()
        return self._finish(out, iov, n, idx)

    def __getitem__(self, i):
        return self.__getitems__([i])[0]

    @staticmethod
    def collate(batch):
        """The batch as __getitems__ made it (DataLoader's collate_fn)."""
        return batch

    def prefetching(self, batches, depth=1):
        """Yields the batches of @batches (lists of indices) with the next
        @depth batches' readvs already enqueued on a side stream; the current
        stream waits for each batch's event; the host waits for a batch
        only when it is yielded (its counts are checked then)."""
        side = torch.cuda.Stream(device=self.device)
        cur = torch.cuda.current_stream(self.device)
        pending = []
        it = iter(batches)

        def launch():
            idx = next(it, None)
            if idx is None:
                return False
            idx = list(idx)
            with torch.cuda.stream(side):
                out, flat, entries = self._alloc(idx)
                iov, n = self.session.submit_ptrs(entries, stream=_stream_handle(side))
                ev = torch.cuda.Event()
                ev.record(side)
            pending.append((idx, out, flat, iov, n, ev))
            return True

        try:
            for _ in range(depth + 1):
                if not launch():
                    break
            while pending:
                idx, out, flat, iov, n, ev = pending[0]
                cur.wait_event(ev)
                ev.synchronize()  # nread is written by the stream's last host function
                pending.pop(0)
                flat.record_stream(cur)  # the views share its memory
                yield self._finish(out, iov, n, idx)
                launch()
        finally:
            # A loop that stops early, a short sample or a failed launch
            # leaves readvs in flight: their last host function writes
            # each entry's count into iov, which must outlive it.
            for p in pending:
                p[5].synchronize()


_DTYPES = {}
for _n, _a in (("F64", "float64"), ("F32", "float32"), ("F16", "float16"), ("BF16", "bfloat16"),
               ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"), ("I64", "int64"),
               ("I32", "int32"), ("I16", "int16"), ("I8", "int8"), ("U64", "uint64"),
               ("U32", "uint32"), ("U16", "uint16"), ("U8", "uint8"), ("BOOL", "bool")):
    if hasattr(torch, _a):  # U16-U64 need torch >= 2.3, the F8 types 2.1
        _DTYPES[_n] = getattr(torch, _a)


def load_safetensors(path, device="cuda", session=None):
    """{name: tensor on @device} of the safetensors file @path (on an objfs
    mount), its bytes filled by one readv into one device buffer. The
    header is checked first (objfs.safetensors_layout: ValueError for a
    file that breaks the format, before anything is allocated or read)."""
    base, tensors = objfs.safetensors_layout(path)
    for name, dtype, _, _, _ in tensors:
        if dtype not in _DTYPES:
            raise ValueError("%s: tensor %r: dtype %s needs a newer PyTorch" % (path, name, dtype))
    end = max((t[4] for t in tensors), default=0)
    flat = torch.empty(end, dtype=torch.uint8, device=device)
    own = session is None
    s = session or objfs.Session(os.path.dirname(os.path.abspath(path)))
    try:
        h = s.file(os.path.abspath(path))
        items = [(h, base + a, flat[a:b]) for _, _, _, a, b in tensors if b > a]
        counts = s.read_into(items) if items else []
        for (_, off, t), c in zip(items, counts):
            if c != t.numel():
                raise OSError(5, "%s: short read at %d (%d of %d bytes)" % (path, off, c, t.numel()))
    finally:
        if own:
            s.close()
    out = {}
    for name, dtype, shape, a, b in tensors:
        dt = _DTYPES[dtype]
        t = flat[a:b]
        if a % objfs.SAFETENSORS_DTYPES[dtype]:
            t = t.clone()  # the format does not align tensors; a view of another type must be
        out[name] = t.view(dt).reshape(shape)
    return out
