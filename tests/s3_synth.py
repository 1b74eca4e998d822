#!/usr/bin/env python3
"""s3_synth: a synthetic S3 server of N generated keys, for tests and
benchmarks of metadata at scale. Python standard library only.

    s3_synth.py [--keys N] [--layout flat|nested] [--per-dir M]
                [--latency-ms L] [--bucket B] [--size-max S] [--refuse-keys F]

Prints its port on the first line of stdout, then serves on 127.0.0.1:

  - one bucket (B, default "bkt"), path style, no authentication (mount
    it with -o no_sign,path_style);
  - keys: flat "k0000000" ... (N of them), or nested "d0000/k00000" with M
    keys per directory (default 1000); every key's size (1 .. S bytes,
    default 4096) and bytes are a function of its name, so a reader can
    check them: byte i of key K is sha256(K)[i % 32];
  - ListObjectsV2 (list-type=2: prefix, delimiter, continuation-token,
    start-after, max-keys up to 1000, encoding-type=url) and ListObjects
    v1 (marker, NextMarker; s3fs uses it), HEAD and GET of a key (Range:
    bytes=A-B);
  - every request waits L ms first (20 ms models S3), on its own thread;
  - with --refuse-keys F: a request signed with an access key id listed in
    file F (a line each, read at every request; "*" for any) is refused as S3 refuses
    revoked temporary credentials, 400 ExpiredToken (signatures are not
    checked: the key id is read from the Authorization header);
  - GET /__stats: {"list": n, "head": n, "get": n, "other": n, "refused":
    n, "last_key": the last access key id seen} so far;
    GET /__inflight: {"now": n, "max": m}, requests in their latency wait
    now and at most at once (with --latency-ms: how parallel a client is);
    POST /__put?key=K&size=S adds or replaces a key (key= may repeat), POST /__delete?key=K
    removes one (churn tests); POST /__reset zeroes the counters (and max);
    POST /__headfail?key=K answers every later HEAD of K with a bodiless 400,
    as S3 answers a HEAD of an SSE-C object without its key.

The key set is a sorted list searched with bisect: a million keys take
~100 MB and a listing page costs O(page x log N), common prefixes skipped
in one search each.
"""
import argparse
import base64
import bisect
import hashlib
import http.server
import json
import sys
import threading
import time
import urllib.parse
import zlib

LAST_MODIFIED = "2026-01-01T00:00:00.000Z"
HTTP_DATE = "Thu, 01 Jan 2026 00:00:00 GMT"


class Keys:
    def __init__(self, n, layout, per_dir, size_max):
        self.size_max = size_max
        self.sizes = {}  # keys put at run time: their sizes
        if layout == "flat":
            self.keys = ["k%07d" % i for i in range(n)]
        else:
            self.keys = ["d%04d/k%05d" % (i // per_dir, i % per_dir) for i in range(n)]
        self.lock = threading.Lock()

    def size(self, key):
        if key in self.sizes:
            return self.sizes[key]
        return zlib.crc32(key.encode()) % self.size_max + 1

    def exists(self, key):
        i = bisect.bisect_left(self.keys, key)
        return i < len(self.keys) and self.keys[i] == key

    def put(self, key, size):
        with self.lock:
            if not self.exists(key):
                bisect.insort(self.keys, key)
            self.sizes[key] = size

    def delete(self, key):
        with self.lock:
            i = bisect.bisect_left(self.keys, key)
            if i < len(self.keys) and self.keys[i] == key:
                del self.keys[i]
                self.sizes.pop(key, None)
                return True
            return False

    def list(self, prefix, delimiter, after, max_keys):
        """(contents, prefixes, truncated, last): one page after key @after."""
        contents, prefixes = [], []
        with self.lock:
            keys = self.keys
            i = bisect.bisect_left(keys, prefix)
            if after:
                rest = after[len(prefix):] if after.startswith(prefix) else ""
                d = rest.find(delimiter) if delimiter else -1
                if d >= 0:  # after a common prefix: past every key under it
                    after = prefix + rest[:d + len(delimiter)] + "\U0010ffff"
                i = max(i, bisect.bisect_right(keys, after))
            last = None
            while i < len(keys) and len(contents) + len(prefixes) < max_keys:
                k = keys[i]
                if not k.startswith(prefix):
                    break
                rest = k[len(prefix):]
                d = rest.find(delimiter) if delimiter else -1
                if d >= 0:
                    cp = prefix + rest[:d + len(delimiter)]
                    prefixes.append(cp)
                    last = cp
                    # skip every key under this common prefix in one search
                    i = bisect.bisect_left(keys, cp + "\U0010ffff")
                    continue
                contents.append(k)
                last = k
                i += 1
            truncated = i < len(keys) and keys[i].startswith(prefix)
        return contents, prefixes, truncated, last


def content(key, start, end):
    """Bytes [start, end) of @key."""
    d = hashlib.sha256(key.encode()).digest()
    reps = (end - start) // 32 + 2
    block = (d * reps)
    off = start % 32
    return block[off:off + (end - start)]


def etag(key, size):
    return '"%s"' % hashlib.md5(("%s:%d" % (key, size)).encode()).hexdigest()


def enc(s):
    return urllib.parse.quote(s, safe="/~")


def xml_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3_synth"

    def log_message(self, *args):
        pass

    def count(self, kind):
        with self.server.stats_lock:
            self.server.stats[kind] += 1

    def send(self, code, body=b"", ctype="application/xml", headers=None, head=False):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def error(self, code, s3code, head=False):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                "<Message>%s</Message></Error>" % (s3code, s3code)).encode()
        self.send(code, b"" if head else body, head=head)

    def parse(self):
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        path = urllib.parse.unquote(u.path)
        b = "/" + self.server.bucket
        if path == b or path == b + "/":
            return None, q, u.path
        if path.startswith(b + "/"):
            return path[len(b) + 1:], q, u.path
        return False, q, u.path

    def wait(self):
        if self.server.latency:
            with self.server.stats_lock:
                self.server.inflight += 1
                self.server.inflight_max = max(self.server.inflight_max, self.server.inflight)
            time.sleep(self.server.latency)
            with self.server.stats_lock:
                self.server.inflight -= 1

    def do_POST(self):
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        keys = self.server.keys
        if u.path == "/__put":
            for k in q["key"]:
                keys.put(k, int(q.get("size", ["100"])[0]))
            self.send(200, b"ok\n", "text/plain")
        elif u.path == "/__headfail":
            self.server.head_fail.add(q["key"][0])
            self.send(200, b"ok\n", "text/plain")
        elif u.path == "/__delete":
            self.send(200 if keys.delete(q["key"][0]) else 404, b"", "text/plain")
        elif u.path == "/__reset":
            with self.server.stats_lock:
                for k in self.server.stats:
                    self.server.stats[k] = 0
                self.server.inflight_max = self.server.inflight
            self.send(200, b"ok\n", "text/plain")
        else:
            self.send(404, b"", "text/plain")

    def do_HEAD(self):
        self.get_or_head(True)

    def do_GET(self):
        if self.path == "/__stats":
            with self.server.stats_lock:
                body = json.dumps(dict(self.server.stats, last_key=self.server.last_key)).encode()
            self.send(200, body, "application/json")
            return
        if self.path == "/__inflight":
            with self.server.stats_lock:
                body = json.dumps({"now": self.server.inflight,
                                   "max": self.server.inflight_max}).encode()
            self.send(200, body, "application/json")
            return
        self.get_or_head(False)

    def refused(self):
        auth = self.headers.get("Authorization", "")
        akid = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""
        with self.server.stats_lock:
            self.server.last_key = akid
        if not akid or not self.server.refuse_keys:
            return False
        try:
            with open(self.server.refuse_keys) as f:
                words = f.read().split()
            listed = akid in words or "*" in words
        except OSError:
            listed = False
        if listed:
            self.count("refused")
        return listed

    def get_or_head(self, head):
        key, q, _ = self.parse()
        self.wait()
        if self.refused():
            self.error(400, "ExpiredToken", head)
            return
        if key is False:
            self.count("other")
            self.error(404, "NoSuchBucket", head)
            return
        if key is None:
            if "location" in q:
                self.count("other")
                self.send(200, b'<?xml version="1.0" encoding="UTF-8"?><LocationConstraint/>')
            elif q.get("list-type", [""])[0] == "2":
                self.count("list")
                self.list_objects(q, 2)
            elif not head and not q.get("versioning") and not q.get("acl"):
                self.count("list")
                self.list_objects(q, 1)  # ListObjects (v1), as s3fs sends it
            else:
                self.count("other")
                self.send(200, b"", head=head)
            return
        keys = self.server.keys
        self.count("head" if head else "get")
        if head and key in self.server.head_fail:
            self.error(400, "InvalidRequest", head)  # as S3 answers an SSE-C HEAD without its key
            return
        if not keys.exists(key):
            self.error(404, "NoSuchKey", head)
            return
        size = keys.size(key)
        hdrs = {"ETag": etag(key, size), "Last-Modified": HTTP_DATE, "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if head or not rng:
            body = b"" if head else content(key, 0, size)
            if head:
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.end_headers()
                return
            self.send(200, body, "application/octet-stream", hdrs)
            return
        try:
            a, b = rng.split("=", 1)[1].split("-", 1)
            start = int(a)
            end = min(int(b) + 1 if b else size, size)
        except (ValueError, IndexError):
            self.error(400, "InvalidArgument")
            return
        if start >= size or start >= end:
            self.send(416, b"", headers={"Content-Range": "bytes */%d" % size})
            return
        hdrs["Content-Range"] = "bytes %d-%d/%d" % (start, end - 1, size)
        self.send(206, content(key, start, end), "application/octet-stream", hdrs)

    def list_objects(self, q, version):
        g = lambda k, d="": q.get(k, [d])[0]
        prefix, delimiter = g("prefix"), g("delimiter")
        try:
            max_keys = max(0, min(1000, int(g("max-keys", "1000"))))
        except ValueError:
            self.error(400, "InvalidArgument")
            return
        after = g("start-after") if version == 2 else g("marker")
        token = g("continuation-token") if version == 2 else ""
        if token:
            try:
                after = base64.urlsafe_b64decode(token.encode()).decode()
            except (ValueError, UnicodeDecodeError):
                self.error(400, "InvalidArgument")
                return
        contents, prefixes, truncated, last = self.server.keys.list(prefix, delimiter, after,
                                                                    max_keys)
        use_enc = g("encoding-type") == "url"
        e = enc if use_enc else xml_escape
        keys = self.server.keys
        out = ['<?xml version="1.0" encoding="UTF-8"?>',
               '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
               "<Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>"
               "<MaxKeys>%d</MaxKeys><IsTruncated>%s</IsTruncated>"
               % (self.server.bucket, e(prefix), len(contents) + len(prefixes), max_keys,
                  "true" if truncated else "false")]
        if delimiter:
            out.append("<Delimiter>%s</Delimiter>" % e(delimiter))
        if use_enc:
            out.append("<EncodingType>url</EncodingType>")
        if truncated and last is not None and version == 2:
            out.append("<NextContinuationToken>%s</NextContinuationToken>"
                       % base64.urlsafe_b64encode(last.encode()).decode())
        elif truncated and last is not None:
            out.append("<NextMarker>%s</NextMarker>" % e(last))
        if version == 1:
            out.append("<Marker>%s</Marker>" % e(g("marker")))
        for k in contents:
            size = keys.size(k)
            out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>%s</ETag>"
                       "<Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>"
                       % (e(k), LAST_MODIFIED, xml_escape(etag(k, size)), size))
        for p in prefixes:
            out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % e(p))
        out.append("</ListBucketResult>")
        self.send(200, "".join(out).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--layout", choices=("flat", "nested"), default="flat")
    ap.add_argument("--per-dir", type=int, default=1000)
    ap.add_argument("--latency-ms", type=float, default=0)
    ap.add_argument("--bucket", default="bkt")
    ap.add_argument("--size-max", type=int, default=4096)
    ap.add_argument("--refuse-keys", default="")
    a = ap.parse_args()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.keys = Keys(a.keys, a.layout, a.per_dir, a.size_max)
    srv.latency = a.latency_ms / 1000.0
    srv.bucket = a.bucket
    srv.stats = {"list": 0, "head": 0, "get": 0, "other": 0, "refused": 0}
    srv.refuse_keys = a.refuse_keys
    srv.head_fail = set()
    srv.last_key = ""
    srv.stats_lock = threading.Lock()
    srv.inflight = srv.inflight_max = 0
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
