#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# versions.sh: an object replaced on the server while the mount has it open
# or cached gives each reader one version, whole, never a mix or a cut.
#
#   OBJFS=/path/to/objfs tests/integration/versions.sh
#
#   1. Two handles, two versions: handle 1 opens a 16 MiB file (version A)
#      and reads its start; the server replaces it (version B, same size);
#      after attr_timeout handle 2 opens it, reads 8 MiB in and is mapped
#      (MAP_PRIVATE) and read at 0 and 12 MiB; then handle 1 reads at 12
#      MiB. Handle 2 and its mapping must read B, handle 1 A or EIO, never
#      B: the kernel's page cache is one per inode, and B's handle filling
#      it would serve B through A's handle (with B read by direct I/O, the
#      mapping still would), so each version has its own inode.
#   2. A size the kernel was renewed by a listing: `ls -l` twice (the second
#      within list_ttl renews the kernel's attributes), the file grows on
#      the server, and after attr_timeout `cat` must print the whole new
#      content, not cut at the old size the kernel kept while the open
#      pinned the new one.
#   4. (run before 3) A listing of a shorter new version while the old is
#      open: handle 1 opens a 16 MiB file and reads its start, the server
#      replaces it with 4 MiB, `ls -l` after attr_timeout; handle 1 must
#      keep its size (fstat) and read at 8 MiB A or EIO, not end there (as
#      if the listing gave the open inode the new size); a new open reads B.
#   5. (run before 3) An unchanged file held open past attr_timeout: fstat
#      (a HEAD, with an ETag, against the listing's mtime) must keep its
#      inode, and a reopen through /proc/self/fd must work (the two sources
#      taken for two versions would mean a new inode, the reopen ESTALE).
#   6. (run before 3) An HTML index: a file opened and read, the directory
#      listed after attr_timeout (no sizes), the file replaced by a shorter
#      one: fstat of the handle must keep 16 MiB, not the listing's unknown
#      size (0 to the kernel) left on the old inode by the split.
#   3. An HTML index (no sizes): a file mapped and read, then the directory
#      listed again after attr_timeout; the mapping must still read its
#      bytes (an unknown size sent by READDIRPLUS as 0 would make the
#      kernel truncate the pages: SIGBUS).
#
# Needs /dev/fuse, nginx, python3.
# Exit status: 0 all passed, 1 something failed, 77 skipped, 99 hard error.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
mkdir -p "$SRC/d" "$MNT"
python3 - "$SRC" <<'EOF'
import os, sys
src = sys.argv[1]
with open(os.path.join(src, "v.bin"), "wb") as f:
    f.write(b"A" * (16 << 20))
with open(os.path.join(src, "u.bin"), "wb") as f:
    f.write(b"U" * (1 << 20))
with open(os.path.join(src, "d", "h.bin"), "wb") as f:
    f.write(b"A" * (16 << 20))
with open(os.path.join(src, "s.bin"), "wb") as f:
    f.write(b"A" * (16 << 20))
with open(os.path.join(src, "d", "grow.txt"), "wb") as f:
    f.write(b"OLD\n")
with open(os.path.join(src, "d", "map.bin"), "wb") as f:
    f.write(bytes(range(256)) * 4096)
EOF
nginx_start "$SRC" || { echo "cannot start nginx" >&2; exit 99; }
# replace(src, data): a new version of a served file, with another mtime
# (nginx's ETag is made of it), put in place at once
cat >"$TEST_TMP/vhelp.py" <<'EOF'
import os


def replace(src, data):
    tmp = src + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    st = os.stat(src)
    os.utime(tmp, (st.st_atime + 10, st.st_mtime + 10))
    os.rename(tmp, src)
EOF

# part URL OPTS PASS FAIL ARGS... <<SCRIPT: mounts URL with OPTS, runs the
# Python SCRIPT with ARGS (its status is the check, its output the detail),
# unmounts.
part() {
	local url=$1 opts=$2 ok=$3 bad=$4 out
	shift 4
	if ! mount_objfs "$url" "$MNT" "$opts"; then
		fail "expected $url to mount for: $ok"
		return
	fi
	if out=$(PYTHONPATH=$TEST_TMP timeout 120 python3 - "$@" 2>&1); then
		pass "$ok ($out)"
	else
		fail "$bad, got (status $?): $out"
	fi
	unmount_objfs "$MNT" >/dev/null || fail "expected $MNT to unmount"
}

# 1. two handles, two versions
part "http://127.0.0.1:$NGINX_PORT/data/" \
	"attr_timeout=1,entry_timeout=1,list_ttl=1" \
	"two versions open at once: the new handle and its mapping read B, the old handle A or EIO" \
	"expected each handle its own version" \
	"$MNT/v.bin" "$SRC/v.bin" <<'EOF'
import mmap, os, sys, time
from vhelp import replace
mnt, src = sys.argv[1], sys.argv[2]
h1 = os.open(mnt, os.O_RDONLY)
assert os.pread(h1, 4096, 0) == b"A" * 4096, "handle 1's first read"
replace(src, b"B" * (16 << 20))  # another ETag
time.sleep(1.5)  # past attr_timeout: the next open sees version B
h2 = os.open(mnt, os.O_RDONLY)
b2 = os.pread(h2, 4096, 8 << 20)
m = mmap.mmap(h2, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
m2 = m[:4096] + m[12 << 20:(12 << 20) + 4096]  # a page handle 1 read, one it did not
try:
    b1 = os.pread(h1, 4096, 12 << 20)
except OSError as e:
    b1 = "EIO" if e.errno == 5 else str(e)
b2b = os.pread(h2, 4096, 14 << 20)
print("h2 %s map %s%s h1 %s h2-again %s" % (b2[:1], m2[:1], m2[-1:],
      b1 if isinstance(b1, str) else b1[:1], b2b[:1]))
ok = (b2 == b"B" * 4096 and m2 == b"B" * 8192 and b2b == b"B" * 4096 and
      (b1 == "EIO" or b1 == b"A" * 4096))
sys.exit(0 if ok else 1)
EOF

# 2. the size a listing renewed in the kernel
part "http://127.0.0.1:$NGINX_PORT/data/" \
	"attr_timeout=2,entry_timeout=2,list_ttl=2" \
	"a file grown on the server reads whole after a listing renewed its old size" \
	"expected the whole new content" \
	"$MNT/d" "$SRC/d/grow.txt" <<'EOF'
import os, sys, time
from vhelp import replace
d, src = sys.argv[1], sys.argv[2]
os.stat(os.path.join(d, "grow.txt"))
[os.stat(os.path.join(d, n)) for n in os.listdir(d)]   # ls -l
time.sleep(1.2)
[os.stat(os.path.join(d, n)) for n in os.listdir(d)]   # again, within list_ttl
new = b"NEW CONTENT, LONGER\n" * 3
replace(src, new)
time.sleep(1.3)  # past the first listing's attr_timeout, not the second's
with open(os.path.join(d, "grow.txt"), "rb") as f:
    got = f.read()
print("read %d bytes of %d" % (len(got), len(new)))
sys.exit(0 if got == new else 1)
EOF

# 4. a listing of a shorter version while the old one is open
part "http://127.0.0.1:$NGINX_PORT/data/" \
	"attr_timeout=1,entry_timeout=1,list_ttl=1" \
	"a listing of a shorter new version leaves the open handle its size and bytes" \
	"expected the old handle to keep its size and read A or EIO, not end early" \
	"$MNT" "$SRC/s.bin" <<'EOF'
import os, sys, time
from vhelp import replace
mnt, src = sys.argv[1], sys.argv[2]
h1 = os.open(os.path.join(mnt, "s.bin"), os.O_RDONLY)
assert os.pread(h1, 4096, 0) == b"A" * 4096, "handle 1's first read"
replace(src, b"B" * (4 << 20))
time.sleep(1.5)  # past attr_timeout and list_ttl
[os.stat(os.path.join(mnt, n)) for n in os.listdir(mnt)]  # ls -l: READDIRPLUS
size = os.fstat(h1).st_size
try:
    b1 = os.pread(h1, 4096, 8 << 20)
except OSError as e:
    b1 = "EIO" if e.errno == 5 else str(e)
new = open(os.path.join(mnt, "s.bin"), "rb").read()
print("fstat %d, read at 8 MiB %s, a new open reads %d bytes of %s" %
      (size, b1 if isinstance(b1, str) else "%d bytes of %s" % (len(b1), b1[:1]), len(new), new[:1]))
ok = size == 16 << 20 and (b1 == "EIO" or b1 == b"A" * 4096) and new == b"B" * (4 << 20)
sys.exit(0 if ok else 1)
EOF

# 5. an unchanged file held open past attr_timeout stays one inode
part "http://127.0.0.1:$NGINX_PORT/data/" \
	"attr_timeout=1,entry_timeout=30,list_ttl=30" \
	"an unchanged open file keeps its inode past attr_timeout and reopens through /proc" \
	"expected the same inode and a reopen" \
	"$MNT/u.bin" <<'EOF'
import os, sys, time
p = sys.argv[1]
h1 = os.open(p, os.O_RDONLY)
ino1 = os.fstat(h1).st_ino
time.sleep(1.5)
os.fstat(h1)  # a HEAD: its ETag against the listing's mtime
try:
    os.close(os.open("/proc/self/fd/%d" % h1, os.O_RDONLY))
    r = "ok"
except OSError as e:
    r = e.strerror
ino2 = os.stat(p).st_ino
print("reopen %s, inode %d -> %d" % (r, ino1, ino2))
sys.exit(0 if r == "ok" and ino1 == ino2 else 1)
EOF

# 6. an HTML index: an open file replaced after a listing that knows no size
part "http://127.0.0.1:$NGINX_PORT/html/d/" \
	"attr_timeout=1,entry_timeout=1,list_ttl=1" \
	"an open file of an HTML index keeps its size when replaced after a listing" \
	"expected the old handle to keep its size" \
	"$MNT" "$SRC/d/h.bin" <<'EOF'
import os, sys, time
from vhelp import replace
mnt, src = sys.argv[1], sys.argv[2]
h1 = os.open(os.path.join(mnt, "h.bin"), os.O_RDONLY)
assert os.pread(h1, 4096, 0) == b"A" * 4096, "handle 1's first read"
time.sleep(1.5)
os.listdir(mnt)  # the HTML listing: no size
replace(src, b"B" * (4 << 20))
size = os.fstat(h1).st_size
try:
    r = "%d bytes" % len(os.pread(h1, 4096, 8 << 20))
except OSError as e:
    r = e.strerror
print("fstat %d, read at 8 MiB: %s" % (size, r))
sys.exit(0 if size == 16 << 20 and r in ("4096 bytes", "Input/output error") else 1)
EOF

# 3. an HTML index: a mapping survives a listing that knows no size
part "http://127.0.0.1:$NGINX_PORT/html/d/" \
	"attr_timeout=1,entry_timeout=1,list_ttl=1" \
	"an HTML listing after attr_timeout leaves a mapped file readable" \
	"expected the mapping to read its bytes" \
	"$MNT" "$SRC/d/map.bin" <<'EOF'
import mmap, os, sys, time
mnt, src = sys.argv[1], sys.argv[2]
want = open(src, "rb").read()
with open(os.path.join(mnt, "map.bin"), "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    assert m[:16] == want[:16]
    time.sleep(1.5)  # past attr_timeout: the listing knows the name, not the size
    os.listdir(mnt)
    got = m[len(want) // 2:len(want) // 2 + 4096]  # SIGBUS here if the kernel truncated the pages
    print("mapping read %d bytes" % len(got))
    sys.exit(0 if got == want[len(want) // 2:len(want) // 2 + 4096] else 1)
EOF

summary
