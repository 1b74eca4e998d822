"""objfs: Python binding (ctypes) of libobjfs, the objfs GPU side API.

Fill a CuPy array or a PyTorch tensor (on the GPU or on the host), or any
writable buffer (bytearray, NumPy array), with bytes of a file on an objfs
mount:

    import torch, objfs
    t = torch.empty(os.path.getsize(path), dtype=torch.uint8, device="cuda")
    n = objfs.read_into(path, t)          # n bytes of the file, from offset 0

Device arrays are filled on the framework's current stream (so the caching
allocators' stream semantics hold) and the call waits for that stream
before returning the byte count. Host buffers are filled directly.

Many ranges of many files of one mount, in one request (objfs_gpu_readv:
the daemon coalesces neighbouring ranges, serves cached bytes, fetches the
rest in parallel; small ranges share ring slots):

    s = objfs.Session("/mnt/data")
    counts = s.read_into([("shard-00017.bin", 4096, t0),   # path (relative to the mount)
                          ("shard-00420.bin", 0, t1),
                          (s.file("shard-00017.bin"), 99, t2)])   # or a File

All files of a process's mount share one connection and one pinned ring
(libobjfs), so opening thousands of shards costs no memory.

libobjfs.so.0 is loaded at the first call, from $OBJFS_LIB when it is set
(that file and no other), else from the loader's path (LD_LIBRARY_PATH,
the ldconfig cache, ctypes.util.find_library), else from the library
directory recorded when `make install` installed this package beside the
library. LibraryNotFoundError (an OSError) says what to do when none
loads. Errors raise OSError with the errno and libobjfs's message; a path
that is a directory raises IsADirectoryError; a short count means the file
ended.
"""

import ctypes
import ctypes.util
import errno
import json
import os
import stat
import struct

__version__ = "0.1.0"
__all__ = ["File", "Session", "read_into", "IOV", "LibraryNotFoundError", "library_path",
           "safetensors_layout", "SAFETENSORS_DTYPES"]

_SONAME = "libobjfs.so.0"
_lib = None
_lib_path = None


class IOV(ctypes.Structure):
    """struct objfs_gpu_iov (objfs.h)."""
    _fields_ = [("h", ctypes.c_void_p), ("buf", ctypes.c_void_p), ("len", ctypes.c_size_t),
                ("off", ctypes.c_int64), ("nread", ctypes.c_ssize_t)]


class LibraryNotFoundError(OSError):
    """libobjfs.so.0 could not be loaded; the message says what to do."""


_HOWTO = ("set OBJFS_LIB=/path/to/libobjfs.so.0 (in a build directory: "
          "lib/.libs/libobjfs.so.0), or run `make install` in your objfs build "
          "(then `ldconfig`), or install the libobjfs0 package")


def _recorded_libdir():
    """The libdir `make install` wrote beside this package, or None."""
    try:
        from ._libdir import LIBDIR
    except ImportError:
        return None
    return LIBDIR


def _open_lib():
    """(CDLL, the name or path it was loaded by); LibraryNotFoundError else."""
    env = os.environ.get("OBJFS_LIB")
    if env:
        if os.path.isdir(env):
            raise LibraryNotFoundError("OBJFS_LIB=%s is a directory; %s" % (env, _HOWTO))
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise LibraryNotFoundError("OBJFS_LIB=%s cannot be loaded (%s); %s"
                                       % (env, e, _HOWTO)) from None
    tried = []
    names = [_SONAME]
    found = ctypes.util.find_library("objfs")
    if found and found != _SONAME:
        names.append(found)
    libdir = _recorded_libdir()
    if libdir:
        names.append(os.path.join(libdir, _SONAME))
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append(str(e))
    raise LibraryNotFoundError("%s not found (%s); %s" % (_SONAME, "; ".join(tried), _HOWTO))


def library_path():
    """The name or path libobjfs was loaded by (loading it if need be)."""
    _load()
    return _lib_path


def _load():
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    lib, name = _open_lib()
    vp, sz, ssz = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ssize_t
    lib.objfs_gpu_open.argtypes = [ctypes.c_int, ctypes.POINTER(vp)]
    lib.objfs_gpu_read.argtypes = [vp, vp, sz, ctypes.c_int64, ctypes.POINTER(ssz)]
    lib.objfs_gpu_read_async.argtypes = [vp, vp, sz, ctypes.c_int64, ctypes.POINTER(ssz), vp]
    lib.objfs_gpu_buf_register.argtypes = [vp, vp, sz]
    lib.objfs_gpu_buf_deregister.argtypes = [vp, vp, sz]
    lib.objfs_gpu_close.argtypes = [vp]
    lib.objfs_gpu_close.restype = None
    lib.objfs_gpu_readv.argtypes = [ctypes.POINTER(IOV), ctypes.c_int]
    lib.objfs_gpu_readv_async.argtypes = [ctypes.POINTER(IOV), ctypes.c_int, vp]
    lib.objfs_gpu_readv.restype = ctypes.c_int
    lib.objfs_gpu_readv_async.restype = ctypes.c_int
    lib.objfs_strerror.argtypes = [ctypes.c_int]
    lib.objfs_strerror.restype = ctypes.c_char_p
    for f in ("objfs_gpu_open", "objfs_gpu_read", "objfs_gpu_read_async",
              "objfs_gpu_buf_register", "objfs_gpu_buf_deregister"):
        getattr(lib, f).restype = ctypes.c_int
    _lib, _lib_path = lib, name
    return lib


def _check(rc, what):
    if rc < 0:
        msg = _load().objfs_strerror(rc).decode()
        raise OSError(-rc, "%s: %s" % (what, msg))
    return rc


def _describe(array):
    """(pointer, bytes, stream handle or None, wait function or None, keepalive)."""
    mod = type(array).__module__.split(".")[0]
    if mod == "torch":
        if not array.is_contiguous():
            raise ValueError("the tensor must be contiguous")
        nbytes = array.numel() * array.element_size()
        if array.is_cuda:
            import torch
            st = torch.cuda.current_stream(array.device)
            return array.data_ptr(), nbytes, st.cuda_stream, st.synchronize, None
        return array.data_ptr(), nbytes, None, None, None
    if mod == "cupy":
        if not array.flags.c_contiguous:
            raise ValueError("the array must be C-contiguous")
        import cupy
        st = cupy.cuda.get_current_stream()
        return array.data.ptr, array.nbytes, st.ptr, st.synchronize, None
    # anything writable with the buffer protocol: bytearray, NumPy, memoryview
    mv = memoryview(array).cast("B")
    if mv.readonly:
        raise ValueError("the buffer is read-only")
    buf = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(buf), mv.nbytes, None, None, (mv, buf)


class File:
    """A GPU side API handle for one file on an objfs mount."""

    def __init__(self, path_or_fd):
        self._h = None
        own = not isinstance(path_or_fd, int)
        fd = os.open(path_or_fd, os.O_RDONLY) if own else path_or_fd
        h = ctypes.c_void_p()
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory, not a file on an objfs "
                                        "mount (name a file under it)", str(path_or_fd))
            lib = _load()
            _check(lib.objfs_gpu_open(fd, ctypes.byref(h)), "objfs_gpu_open(%r)" % (path_or_fd,))
        finally:
            if own:
                os.close(fd)  # the handle does not need the descriptor
        self._h = h

    def read_into(self, array, offset=0):
        """Fills @array from @offset of the file; returns the byte count."""
        if self._h is None:
            raise ValueError("closed")
        lib = _load()
        ptr, nbytes, stream, wait, keep = _describe(array)
        n = ctypes.c_ssize_t(0)
        if stream is None:
            _check(lib.objfs_gpu_read(self._h, ptr, nbytes, offset, ctypes.byref(n)),
                   "objfs_gpu_read")
        else:
            _check(lib.objfs_gpu_read_async(self._h, ptr, nbytes, offset, ctypes.byref(n),
                                            stream), "objfs_gpu_read_async")
            wait()  # n is written when the stream gets there
            _check(n.value, "objfs_gpu_read_async")
        del keep
        return n.value

    def close(self):
        if self._h is not None:
            _load().objfs_gpu_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Session:
    """Batched reads of many files of one objfs mount (objfs_gpu_readv).

    Files are opened once, on first use, and kept (a handle costs no pinned
    memory: every file of the mount shares the process's one ring).
    """

    def __init__(self, mount="."):
        self.mount = mount
        self._files = {}

    def file(self, path):
        """The File of @path (relative to the mount, or absolute), opened once."""
        f = self._files.get(path)
        if f is None:
            full = path if os.path.isabs(path) else os.path.join(self.mount, path)
            f = self._files[path] = File(full)
        return f

    def submit(self, items, stream=None):
        """Enqueues one batch of (path or File, offset, array) on @stream (a
        CUDA stream handle; None: the first device array's current stream)
        and returns (iov, n, wait): wait() blocks until the stream got there.
        Host-only batches complete before this returns. Arrays must stay
        alive until then (the caller keeps @items)."""
        lib = _load()
        items = list(items)
        n = len(items)
        iov = (IOV * max(n, 1))()
        keep = []
        wait = None
        for i, (f, off, array) in enumerate(items):
            if not isinstance(f, File):
                f = self.file(f)
            ptr, nbytes, st, w, k = _describe(array)
            keep.append(k)
            if st is not None and stream is None:
                stream, wait = st, w
            iov[i].h, iov[i].buf, iov[i].len, iov[i].off = f._h, ptr, nbytes, int(off)
            iov[i].nread = 0
        if stream is None:
            _check(lib.objfs_gpu_readv(iov, n), "objfs_gpu_readv")
        else:
            _check(lib.objfs_gpu_readv_async(iov, n, stream), "objfs_gpu_readv_async")
        iov._keep = keep
        return iov, n, wait or (lambda: None)

    def submit_ptrs(self, entries, stream=None):
        """submit() for (path or File, offset, pointer, bytes) entries whose
        memory the caller keeps alive: no inspection per array, for a batch
        of samples laid out in one buffer (ShardDataset: describing each
        tensor cost ~10 us a sample, a third of a batch's time). @stream: a
        CUDA stream handle, or None to wait here. Returns (iov, n)."""
        lib = _load()
        n = len(entries)
        iov = (IOV * max(n, 1))()
        files = self._files
        for i, (f, off, ptr, nbytes) in enumerate(entries):
            if not isinstance(f, File):
                f = files.get(f) or self.file(f)
            e = iov[i]
            e.h, e.buf, e.len, e.off = f._h, ptr, nbytes, off
        if stream is None:
            _check(lib.objfs_gpu_readv(iov, n), "objfs_gpu_readv")
        else:
            _check(lib.objfs_gpu_readv_async(iov, n, stream), "objfs_gpu_readv_async")
        return iov, n

    def read_into(self, items, check=True):
        """Fills each array of @items, a list of (path or File, offset, array),
        in one batch; returns the byte counts (short only at a file's end).
        With @check, a failed entry raises OSError; otherwise its count is
        the negative errno."""
        iov, n, wait = self.submit(items)
        wait()
        counts = [iov[i].nread for i in range(n)]
        if check:
            for c in counts:
                _check(c, "objfs_gpu_readv entry")
        return counts

    def close(self):
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_into(path_or_fd, array, offset=0):
    """Fills @array (CuPy, PyTorch, or a writable buffer) with the bytes of
    @path_or_fd (a path or a descriptor on an objfs mount) from @offset.
    Returns the byte count (short only at the end of the file)."""
    with File(path_or_fd) as f:
        return f.read_into(array, offset)


# safetensors dtypes and their sizes in bytes (the format's names)
SAFETENSORS_DTYPES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
_SAFETENSORS_HEADER_MAX = 100 << 20


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def safetensors_layout(path):
    """(base, tensors) of the safetensors file @path, checked before any of
    its bytes are used: base is the file offset of the data, tensors a list
    of (name, dtype, shape, begin, end) with [begin, end) relative to base,
    sorted by begin. Raises ValueError for a file that breaks the format:
    a header past the file or over 100 MiB, not a JSON object, an unknown
    dtype, a shape or offsets that are not non-negative integers, a range
    whose length is not the shape's bytes, a range past the file's end, or
    two tensors sharing bytes (a tensor's bytes could otherwise be another
    tensor's or the header's)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("%s: not a safetensors file (%d bytes)" % (path, size))
        n = struct.unpack("<Q", head)[0]
        if n > _SAFETENSORS_HEADER_MAX or 8 + n > size:
            raise ValueError("%s: header of %d bytes in a file of %d" % (path, n, size))
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("%s: header is not JSON: %s" % (path, e)) from None
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    base = 8 + n
    tensors = []
    for name, v in header.items():
        if name == "__metadata__":
            continue
        bad = lambda why: ValueError("%s: tensor %r: %s" % (path, name, why))  # noqa: E731
        if not isinstance(v, dict):
            raise bad("not an object")
        dtype, shape, offs = v.get("dtype"), v.get("shape"), v.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise bad("unknown dtype %r" % (dtype,))
        if not isinstance(shape, list) or not all(_int(d) and d >= 0 for d in shape):
            raise bad("shape %r is not a list of non-negative integers" % (shape,))
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_int(o) for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise bad("data_offsets %r are not 0 <= begin <= end" % (offs,))
        count = 1
        for d in shape:
            count *= d
        if count * SAFETENSORS_DTYPES[dtype] != offs[1] - offs[0]:
            raise bad("%d bytes for shape %r of %s" % (offs[1] - offs[0], shape, dtype))
        if base + offs[1] > size:
            raise bad("bytes [%d, %d) past the end of the file" % (base + offs[0], base + offs[1]))
        tensors.append((name, dtype, shape, offs[0], offs[1]))
    tensors.sort(key=lambda t: (t[3], t[4]))
    prev = None
    for t in tensors:
        if t[3] == t[4]:
            continue
        if prev is not None and t[3] < prev[4]:
            raise ValueError("%s: tensors %r and %r share bytes" % (path, prev[0], t[0]))
        prev = t
    return base, tensors
