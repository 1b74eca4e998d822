#!/usr/bin/python3
"""faultproxy.py: a fault-injecting HTTP/1.1 proxy for the objfs tests.

It sits between objfs and a real origin (nginx, or Ceph RGW: requests are
forwarded byte for byte, Host header included, so SigV4 signatures still
verify) and breaks a chosen fraction of the responses the way real object
stores and networks break them:

  slowdown   503 with an S3 <Error><Code>SlowDown</Code> body; each one
             starts a burst: the next 1-4 requests get it too
  error500   500, S3 InternalError XML or a plain HTML page
  reset      headers and part of the body, then a TCP reset (SO_LINGER 0)
  truncate   the full Content-Length announced, part of the body, then FIN
  stall      headers and part of the body, then silence (the socket stays
             open until the client gives up, or 4 x --timeout)
  badrange   206 whose Content-Range is not the range asked for: shifted
             or shortened (honest body for the range it names), a header
             naming a different range than the body, or a malformed one
  full200    200 with the whole object instead of 206 (legal HTTP: a
             correct client skips to its offset)
  etag       the object "changed" between chunks: a different ETag and
             Last-Modified on the body, or 412 PreconditionFailed for the
             If-Match objfs sends
  slowfirst  the response starts late: 0.3-0.6 x --timeout (must simply be
             waited for) or 1.5 x --timeout (must time out and be retried)

Kinds are only drawn where they make sense: range kinds (badrange, full200,
etag) for GETs with a Range header, body kinds (reset, truncate, stall) for
GETs, the rest for every request. Every decision comes from one seeded
random generator; the counters say what was injected.

Control (same port, never forwarded): GET /_faultproxy/config?rate=R&kinds=
a,b&seed=N&scope=S sets the fault rate (0-1), the kinds (default: all), and
which requests may be broken (scope=all, the default, or scope=range: only
ranged GETs, so HEADs and listings pass); GET
/_faultproxy/stats answers the counters as JSON (and "inflight": requests
being answered now, so a test can wait for quiet); GET /_faultproxy/reset
zeroes the counters. Options: --upstream HOST:PORT, --listen HOST:PORT (port 0
picks one), --port-file (the chosen port is written there once listening),
--timeout (the client's timeout, seconds: scales stall and slowfirst),
--log (one line per injected fault).

Python 3 standard library only.
"""
import argparse
import email.utils
import http.client
import json
import os
import random
import select
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

KINDS = ("slowdown", "error500", "reset", "truncate", "stall", "badrange",
         "full200", "etag", "slowfirst")
RANGE_KINDS = {"badrange", "full200", "etag"}
BODY_KINDS = {"reset", "truncate", "stall"}
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer",
       "transfer-encoding", "upgrade", "content-length"}
CONTROL = "/_faultproxy/"
MAX_HEADER = 64 << 10


def s3_error(code, message):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message><RequestId>faultproxy</RequestId>'
            '<HostId>faultproxy</HostId></Error>' % (code, message)).encode()


class State:
    """Fault settings and counters, shared by all connections (one lock)."""

    def __init__(self, seed, timeout, log):
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.rate = 0.0
        self.kinds = list(KINDS)
        self.scope = "all"
        self.timeout = timeout
        self.log = log
        self.burst = 0
        self.inflight = 0  # a gauge, not reset with the counters
        self.reset_counters()

    def reset_counters(self):
        self.requests = 0
        self.faults = {k: 0 for k in KINDS}
        self.variants = {}
        self.upstream_errors = 0
        self.client_gone = 0

    def decide(self, method, has_range):
        """The fault kind for one request (None: pass it through) and a
        private random generator for its details."""
        with self.lock:
            self.requests += 1
            sub = random.Random(self.rng.getrandbits(64))
            if self.scope == "range" and not (method == "GET" and has_range):
                return None, sub
            if "slowdown" in self.kinds and self.burst > 0:
                self.burst -= 1
                kind = "slowdown"
            elif self.rate > 0 and self.rng.random() < self.rate:
                ok = [k for k in self.kinds
                      if (k not in RANGE_KINDS or (method == "GET" and has_range)) and
                      (k not in BODY_KINDS or method == "GET")]
                if not ok:
                    return None, sub
                kind = self.rng.choice(ok)
                if kind == "slowdown":
                    self.burst = self.rng.randint(1, 4)
            else:
                return None, sub
            self.faults[kind] += 1
            return kind, sub

    def note(self, kind, variant, line):
        with self.lock:
            key = "%s/%s" % (kind, variant)
            self.variants[key] = self.variants.get(key, 0) + 1
        if self.log:
            self.log.write("%.3f %s %s %s\n" % (time.time(), kind, variant, line))
            self.log.flush()

    def snapshot(self):
        with self.lock:
            return {"requests": self.requests, "rate": self.rate,
                    "kinds": self.kinds, "scope": self.scope, "faults": dict(self.faults),
                    "faults_total": sum(self.faults.values()),
                    "variants": dict(self.variants),
                    "upstream_errors": self.upstream_errors,
                    "client_gone": self.client_gone, "inflight": self.inflight}


class Response:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def set_header(self, name, value):
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()]
        if value is not None:
            self.headers.append((name, value))


def parse_range(value):
    """'bytes=A-B' -> (A, B), else None."""
    if not value or not value.startswith("bytes="):
        return None
    a, _, b = value[6:].partition("-")
    try:
        return int(a), int(b)
    except ValueError:
        return None


class Handler(socketserver.BaseRequestHandler):
    """One client connection: requests in order, keep-alive, one upstream
    connection reused for all of them."""

    def setup(self):
        self.st = self.server.state
        self.sock = self.request
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")
        self.up = None

    def finish(self):
        if self.up:
            self.up.close()
        try:
            self.rfile.close()
        except OSError:
            pass

    def handle(self):
        try:
            while self.one_request():
                pass
        except (OSError, ValueError):
            pass

    # -- client side

    def read_request(self):
        line = self.rfile.readline(MAX_HEADER)
        if not line:
            return None
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3:
            return None
        headers, size = [], 0
        while True:
            h = self.rfile.readline(MAX_HEADER)
            size += len(h)
            if not h or size > MAX_HEADER:
                return None
            if h in (b"\r\n", b"\n"):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers.append((k.strip(), v.strip()))
        body = b""
        for k, v in headers:
            if k.lower() == "content-length" and int(v) > 0:
                body = self.rfile.read(int(v))
        return parts[0], parts[1], parts[2], headers, body

    def send_head(self, resp, length):
        out = ["HTTP/1.1 %d %s" % (resp.status, resp.reason)]
        out += ["%s: %s" % (k, v) for k, v in resp.headers if k.lower() not in HOP]
        if length is not None:
            out.append("Content-Length: %d" % length)
        out.append("Connection: keep-alive")  # even when a fault closes it
        self.sock.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))

    def send(self, method, resp):
        if method == "HEAD":
            cl = resp.header("content-length")
            self.send_head(resp, int(cl) if cl is not None else None)
        else:
            self.send_head(resp, len(resp.body))
            self.sock.sendall(resp.body)

    def wait_gone(self, seconds):
        """Waits up to @seconds for the client to close; True if it did."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                try:
                    if not self.sock.recv(65536, socket.MSG_PEEK):
                        with self.st.lock:
                            self.st.client_gone += 1
                        return True
                except OSError:
                    return True
                time.sleep(0.05)

    # -- upstream side

    def upstream(self, method, target, headers, body):
        """Forwards one request; returns a Response with the whole body."""
        for attempt in range(2):
            if self.up is None:
                self.up = http.client.HTTPConnection(*self.server.upstream, timeout=60)
            try:
                self.up.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    if k.lower() not in HOP:
                        self.up.putheader(k, v)
                if body:
                    self.up.putheader("Content-Length", str(len(body)))
                self.up.endheaders(body or None)
                r = self.up.getresponse()
                data = r.read() if method != "HEAD" else b""
                resp = Response(r.status, r.reason, list(r.getheaders()), data)
                if r.will_close:
                    self.up.close()
                    self.up = None
                return resp
            except (OSError, http.client.HTTPException):
                self.up.close()
                self.up = None
                if attempt:
                    with self.st.lock:
                        self.st.upstream_errors += 1
                    return Response(502, "Bad Gateway", [], b"faultproxy: upstream failed\n")
        return None

    # -- one request

    def one_request(self):
        req = self.read_request()
        if req is None:
            return False
        method, target, _, headers, body = req
        if target.startswith(CONTROL):
            self.control(target)
            return True
        rng_hdr = next((v for k, v in headers if k.lower() == "range"), None)
        kind, rnd = self.st.decide(method, rng_hdr is not None)
        line = "%s %s %s" % (method, target, rng_hdr or "-")
        with self.st.lock:
            self.st.inflight += 1
        try:
            if kind is None:
                self.send(method, self.upstream(method, target, headers, body))
                return True
            return getattr(self, "fault_" + kind)(rnd, method, target, headers, body,
                                                  rng_hdr, line)
        finally:
            with self.st.lock:
                self.st.inflight -= 1

    def control(self, target):
        u = urllib.parse.urlsplit(target)
        # keep_blank_values: "kinds=" (all kinds again) must not be dropped
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        what = u.path[len(CONTROL):]
        code, out = 200, None
        if what == "config":
            with self.st.lock:
                if "rate" in q:
                    self.st.rate = float(q["rate"][0])
                if "kinds" in q:
                    ks = [k for k in q["kinds"][0].split(",") if k]
                    bad = [k for k in ks if k not in KINDS]
                    if bad:
                        code = 400
                    else:
                        self.st.kinds = ks or list(KINDS)
                if "scope" in q:
                    if q["scope"][0] in ("all", "range"):
                        self.st.scope = q["scope"][0]
                    else:
                        code = 400
                if "seed" in q:
                    self.st.rng.seed(int(q["seed"][0]))
                self.st.burst = 0
        elif what == "reset":
            with self.st.lock:
                self.st.reset_counters()
        elif what != "stats":
            code = 404
        out = json.dumps(self.st.snapshot(), sort_keys=True).encode() + b"\n"
        self.send("GET", Response(code, "OK" if code == 200 else "Error",
                                  [("Content-Type", "application/json")], out))

    # -- the faults; each returns whether the connection stays open

    def fault_slowdown(self, rnd, method, target, headers, body, rh, line):
        self.st.note("slowdown", "503", line)
        self.send(method, Response(503, "Slow Down", [("Content-Type", "application/xml")],
                                   s3_error("SlowDown", "Please reduce your request rate.")))
        return True

    def fault_error500(self, rnd, method, target, headers, body, rh, line):
        if rnd.random() < 0.5:
            self.st.note("error500", "s3-xml", line)
            r = Response(500, "Internal Server Error", [("Content-Type", "application/xml")],
                         s3_error("InternalError", "We encountered an internal error. "
                                  "Please try again."))
        else:
            self.st.note("error500", "html", line)
            r = Response(500, "Internal Server Error", [("Content-Type", "text/html")],
                         b"<html><body><h1>500 Internal Server Error</h1></body></html>\n")
        self.send(method, r)
        return True

    def cut_body(self, rnd, method, target, headers, body, kind, line):
        """Headers with the full Content-Length, then a strict prefix of the body."""
        resp = self.upstream(method, target, headers, body)
        n = len(resp.body)
        k = rnd.randrange(0, n) if n else 0
        self.st.note(kind, "after-%s" % ("0" if k == 0 else "part"), line + " %d/%d" % (k, n))
        self.send_head(resp, n)
        if k:
            self.sock.sendall(resp.body[:k])

    def fault_reset(self, rnd, method, target, headers, body, rh, line):
        self.cut_body(rnd, method, target, headers, body, "reset", line)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()
        return False

    def fault_truncate(self, rnd, method, target, headers, body, rh, line):
        self.cut_body(rnd, method, target, headers, body, "truncate", line)
        self.sock.shutdown(socket.SHUT_WR)
        return False

    def fault_stall(self, rnd, method, target, headers, body, rh, line):
        self.cut_body(rnd, method, target, headers, body, "stall", line)
        self.wait_gone(4 * self.st.timeout)
        return False

    def fault_slowfirst(self, rnd, method, target, headers, body, rh, line):
        if rnd.random() < 0.7:
            delay = rnd.uniform(0.3, 0.6) * self.st.timeout
            self.st.note("slowfirst", "short", line + " %.2fs" % delay)
        else:
            delay = 1.5 * self.st.timeout
            self.st.note("slowfirst", "past-timeout", line + " %.2fs" % delay)
        if self.wait_gone(delay):
            return False
        self.send(method, self.upstream(method, target, headers, body))
        return True

    def fault_full200(self, rnd, method, target, headers, body, rh, line):
        resp = self.upstream(method, target, [(k, v) for k, v in headers
                                              if k.lower() != "range"], body)
        self.st.note("full200", "whole-object", line)
        self.send(method, resp)
        return True

    def fault_etag(self, rnd, method, target, headers, body, rh, line):
        if rnd.random() < 0.5:
            self.st.note("etag", "412", line)
            self.send(method, Response(412, "Precondition Failed",
                                       [("Content-Type", "application/xml")],
                                       s3_error("PreconditionFailed", "At least one of the "
                                                "pre-conditions you specified did not hold")))
            return True
        resp = self.upstream(method, target, headers, body)
        old = resp.header("etag") or '"none"'
        resp.set_header("ETag", '"%016x-changed"' % rnd.getrandbits(64))
        # a changed object has a new mtime too (objfs pins an HTTP index's
        # mtime where the listing gave no ETag)
        resp.set_header("Last-Modified", email.utils.formatdate(
            1e9 + rnd.getrandbits(28), usegmt=True))
        self.st.note("etag", "changed", line + " was " + old)
        self.send(method, resp)
        return True

    def fault_badrange(self, rnd, method, target, headers, body, rh, line):
        asked = parse_range(rh)
        resp = self.upstream(method, target, headers, body)
        cr = resp.header("content-range") or ""
        total = cr.rpartition("/")[2]
        if resp.status != 206 or asked is None or not total.isdigit():
            self.send(method, resp)  # nothing to bend: pass it on
            return True
        a, b = asked
        size = int(total)
        b = min(b, size - 1)
        variant = rnd.choice(["shift", "short", "lie", "malformed"])
        if variant == "shift" and size > 1:
            # an honest 206 for a different range of the same length
            if b + 1 < size:
                d = rnd.randint(1, min(size - 1 - b, 1 << 20))
            elif a > 0:
                d = -rnd.randint(1, min(a, 1 << 20))
            else:
                d = 0
            if d == 0:
                variant = "malformed"
            else:
                hs = [(k, v) for k, v in headers if k.lower() != "range"]
                hs.append(("Range", "bytes=%d-%d" % (a + d, b + d)))
                resp = self.upstream(method, target, hs, body)
        elif variant == "short" and b > a:
            hs = [(k, v) for k, v in headers if k.lower() != "range"]
            hs.append(("Range", "bytes=%d-%d" % (a, rnd.randint(a, b - 1))))
            resp = self.upstream(method, target, hs, body)
        elif variant == "lie":
            # the body is right, the header names other bytes
            resp.set_header("Content-Range", "bytes %d-%d/%d" % (a + 1, b + 1, size))
        else:
            variant = "malformed"
        if variant == "malformed":
            resp.set_header("Content-Range", rnd.choice(
                ["bytes */%d" % size, "bytes %d-%d" % (a, b), "bytes x-y/z",
                 "items %d-%d/%d" % (a, b, size), ""]))
        self.st.note("badrange", variant, line + " -> " + str(resp.header("content-range")))
        self.send(method, resp)
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the real server")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--port-file")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--log")
    a = ap.parse_args()
    uh, _, up = a.upstream.rpartition(":")
    lh, _, lp = a.listen.rpartition(":")
    log = open(a.log, "a", encoding="utf-8") if a.log else None
    st = State(a.seed, a.timeout, log)
    st.rate = a.rate
    st.kinds = [k for k in a.kinds.split(",") if k]
    for k in st.kinds:
        if k not in KINDS:
            ap.error("unknown fault kind %r (known: %s)" % (k, ", ".join(KINDS)))
    srv = Server((lh, int(lp)), Handler)
    srv.state = st
    srv.upstream = (uh, int(up))
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w", encoding="ascii") as f:
            f.write("%d\n" % port)
        os.replace(a.port_file + ".tmp", a.port_file)
    print("faultproxy: 127.0.0.1:%d -> %s:%s" % (port, uh, up), flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
