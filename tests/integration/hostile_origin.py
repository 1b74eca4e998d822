#!/usr/bin/env python3
"""A hostile object store for tests/integration/hostile_listing.sh.

Python 3 standard library only. Prints its port on the first line of stdout.
One server, two faces:

  S3, path-style, bucket "bkt" (GET /bkt?list-type=2&prefix=P[&continuation-token=T]):
    prefix ""          a normal page: endless/, loop/, trickle/ and cached.bin
    prefix "endless/"  IsTruncated=true forever: 1,000 fresh keys a page, a
                       fresh NextContinuationToken each time (the 3.5 GB case)
    prefix "loop/"     tokens that cycle: none -> A -> B -> A ...
    prefix "trickle/"  a valid page sent at 1 byte a second
    GET/HEAD /bkt/cached.bin  CACHED_SIZE bytes (byte i = i * 7 mod 256), Range
  HTTP, nginx "autoindex_format json" under /h/:
    /h/            huge/, endless/, trickle/, deep/ and cached.bin
    /h/huge/       HUGE_ENTRIES entries (argv[1], default 1,000,000)
    /h/endless/    an index that never ends: chunked, 1,000 fresh entries a
                   chunk, until the client goes
    /h/trickle/    a valid index sent at 1 byte a second
    /h/deep/...d/  every directory holds one directory "d": a tree as deep
                   as the client walks (inode memory per depth)
    /h/cached.bin  as above

GET /stats returns "requests=N" (lists served), for the tests' own checks.
"""
import http.server
import socketserver
import sys
import time
import urllib.parse

HUGE_ENTRIES = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
CACHED_SIZE = 1 << 20
CACHED = bytes((i * 7) & 255 for i in range(CACHED_SIZE))
DATE = "Mon, 01 Jan 2024 00:00:00 GMT"
ISO = "2024-01-01T00:00:00.000Z"
counts = {"lists": 0}
huge_body = None


def s3_page(prefix, keys, dirs, truncated, token):
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           "<Name>bkt</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>" % (prefix, len(keys) + len(dirs)),
           "<MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><EncodingType>url</EncodingType>",
           "<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false")]
    if token:
        out.append("<NextContinuationToken>%s</NextContinuationToken>" % token)
    for k, size in keys:
        out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified>"
                   '<ETag>"e%d"</ETag><Size>%d</Size></Contents>' % (k, ISO, size, size))
    for d in dirs:
        out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % d)
    out.append("</ListBucketResult>")
    return "".join(out).encode()


def json_index(entries):
    parts = []
    for name, is_dir, size in entries:
        if is_dir:
            parts.append('{ "name":"%s", "type":"directory", "mtime":"%s" }' % (name, DATE))
        else:
            parts.append('{ "name":"%s", "type":"file", "mtime":"%s", "size":%d }'
                         % (name, DATE, size))
    return ("[\n" + ",\n".join(parts) + "\n]\n").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="application/xml", head_only=False):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", DATE)
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def trickle(self, body, ctype):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(1)
        except OSError:
            pass
        self.close_connection = True

    def endless_index(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = 0
        try:
            data = b"[\n"
            while True:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                data = "".join('{ "name":"e%09d-%s", "type":"file", "mtime":"%s", "size":1 },\n'
                               % (n + i, "z" * 40, DATE) for i in range(1000)).encode()
                n += 1000
        except OSError:
            pass
        self.close_connection = True

    def cached(self, head_only):
        rng = self.headers.get("Range")
        self.close_connection = False
        if rng and rng.startswith("bytes="):
            a, b = rng[6:].split("-")
            a, b = int(a), min(int(b), CACHED_SIZE - 1)
            body = CACHED[a:b + 1]
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, CACHED_SIZE))
        else:
            body = CACHED
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"cached1"')
        self.send_header("Last-Modified", DATE)
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET(head_only=True)

    def do_GET(self, head_only=False):
        global huge_body
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        path = urllib.parse.unquote(u.path)
        if path == "/stats":
            return self.reply(200, ("requests=%d\n" % counts["lists"]).encode(), "text/plain")
        if path in ("/bkt/cached.bin", "/h/cached.bin"):
            return self.cached(head_only)
        if path == "/bkt" or path == "/bkt/":
            counts["lists"] += 1
            prefix = q.get("prefix", [""])[0]
            token = q.get("continuation-token", [None])[0]
            if prefix == "":
                return self.reply(200, s3_page("", [("cached.bin", CACHED_SIZE)],
                                               ["endless/", "loop/", "trickle/"], False, None))
            if prefix == "endless/":
                n = int(token[1:]) if token else 0
                keys = [("endless/k%08d-%04d-%s" % (n, i, "x" * 60), 1) for i in range(1000)]
                return self.reply(200, s3_page(prefix, keys, [], True, "t%d" % (n + 1)))
            if prefix == "loop/":
                nxt = "A" if token in (None, "B") else "B"
                keys = [("loop/%s%d" % (token or "0", i), 1) for i in range(10)]
                return self.reply(200, s3_page(prefix, keys, [], True, nxt))
            if prefix == "trickle/":
                return self.trickle(s3_page(prefix, [("trickle/f", 1)], [], False, None),
                                    "application/xml")
            return self.reply(200, s3_page(prefix, [], [], False, None))
        if path.startswith("/h/") and path.endswith("/"):
            counts["lists"] += 1
            if path == "/h/":
                body = json_index([("huge", 1, 0), ("endless", 1, 0), ("trickle", 1, 0),
                                   ("deep", 1, 0), ("cached.bin", 0, CACHED_SIZE)])
            elif path == "/h/huge/":
                if huge_body is None:
                    huge_body = json_index(("f%07d-%s" % (i, "y" * 40), 0, i)
                                           for i in range(HUGE_ENTRIES))
                body = huge_body
            elif path == "/h/endless/":
                return self.endless_index()
            elif path == "/h/trickle/":
                return self.trickle(json_index([("f", 0, 1)]), "application/json")
            elif path.startswith("/h/deep/"):
                body = json_index([("d", 1, 0)])
            else:
                return self.reply(404, b"not found\n", "text/plain")
            return self.reply(200, body, "application/json", head_only)
        return self.reply(404, b"not found\n", "text/plain", head_only)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
