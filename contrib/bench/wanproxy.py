#!/usr/bin/env python3
"""wanproxy: a TCP proxy that makes a loopback server look like S3 over a WAN.

netem needs a kernel with the sch_netem qdisc, which many hosts and
containers lack, so the conditions S3 clients see are emulated in user
space, per connection:

  * first-byte latency: every chunk of request bytes from the client waits
    --delay-ms before it is forwarded, so every response (also the second,
    third, ... on a kept-alive connection) starts that much later;
  * bandwidth: bytes from the server are paced with a token bucket at
    --rate bytes/s per connection (S3 gives roughly 50-100 MB/s per stream).

One thread per direction per connection; the GIL is released in recv/send,
so a few hundred MB/s in total pass through on loopback. The proxy's own
ceiling is measured in the same benchmark run (curl through the proxy with
no delay and no cap is never the reference: curl is always measured
through the same proxy as the file systems).

  wanproxy.py --listen 127.0.0.1:0 --to 127.0.0.1:8080 --delay-ms 20 --rate 50M
Prints "PORT <n>" on stdout once listening.
"""
import argparse
import socket
import sys
import threading
import time

BUF = 256 << 10


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def pipe(src, dst, delay, rate):
    """Copies src to dst until EOF; delay before each chunk, or pacing."""
    next_ok = 0.0
    try:
        while True:
            data = src.recv(BUF)
            if not data:
                break
            if delay:
                time.sleep(delay)
            if rate:
                now = time.monotonic()
                next_ok = max(next_ok, now) + len(data) / rate
                if next_ok > now:
                    time.sleep(next_ok - now)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(args):
    host, port = args.listen.rsplit(":", 1)
    thost, tport = args.to.rsplit(":", 1)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(256)
    print("PORT", ls.getsockname()[1], flush=True)
    delay = args.delay_ms / 1000.0
    rate = parse_size(args.rate) if args.rate else 0
    while True:
        c, _ = ls.accept()
        try:
            s = socket.create_connection((thost, int(tport)))
        except OSError:
            c.close()
            continue
        for so in (c, s):
            so.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pipe, args=(c, s, delay, 0), daemon=True).start()
        threading.Thread(target=pipe, args=(s, c, 0, rate), daemon=True).start()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--rate", default="50M", help="bytes/s per connection, 0 = no cap")
    try:
        serve(ap.parse_args())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
