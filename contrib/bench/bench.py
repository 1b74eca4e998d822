#!/usr/bin/env python3
"""bench: objfs, its peers and the curl ceiling, side by side on the same data.

Run it through contrib/bench/run.sh, which installs the packages, builds
objfs, starts Ceph RGW for the S3 part and calls this script. By hand:

  bench.py --objfs build/src/objfs --out contrib/bench/out [--quick] [--s3]

What it does, in one run, on 127.0.0.1 only:
  * makes the data once (a big object, 4 objects for 4 readers, 200 objects
    for time to first byte, 1,000 small objects, two wide directories) and
    serves it with nginx (JSON index for objfs, HTML index for the peers
    that parse HTML: rclone's http backend and httpdirfs);
  * with --s3, uploads the same data to a bucket on the RGW given by
    RGW_ENDPOINT / RGW_ACCESS_KEY / RGW_SECRET_KEY;
  * for every source (http, s3) and every file system (objfs, rclone,
    httpdirfs or s3fs) runs each workload on a fresh mount, so every run
    starts with a cold page cache and a cold daemon; records the daemon's
    peak RSS (VmHWM);
  * measures the ceilings in the same run: curl single stream and N
    parallel range streams over the same object, and the bare listing
    requests;
  * repeats the sequential and random runs under S3-like conditions:
    wanproxy.py in front of the origin adds first-byte latency and caps
    each connection's bandwidth (the kernel here has no netem);
  * prints a table (figure, ratio to curl, ratio to the best peer), and
    writes results.json, results.md and bench.png into --out.

Every figure printed comes from this run; nothing is hard-coded.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def log(*a):
    print("bench:", *a, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


# ------------------------------------------------------------------ data

def make_data(root, cfg):
    """Creates the data tree once; returns a description of it."""
    d = os.path.join(root, "data")
    stamp = os.path.join(root, "data.done." + cfg["tag"])
    if os.path.exists(stamp):
        return d
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    log(f"making data in {d} ({cfg['tag']})")

    def rand_file(path, size):
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, 8 * MiB)
                f.write(os.urandom(n))
                left -= n

    rand_file(os.path.join(d, "big.bin"), cfg["big"])
    os.makedirs(os.path.join(d, "four"))
    for i in range(4):
        rand_file(os.path.join(d, "four", f"part-{i}.bin"), cfg["four"])
    os.makedirs(os.path.join(d, "ttfb"))
    for i in range(200):
        rand_file(os.path.join(d, "ttfb", f"obj-{i:04d}.bin"), 256 << 10)
    os.makedirs(os.path.join(d, "small"))
    for i in range(1000):
        rand_file(os.path.join(d, "small", f"s-{i:05d}.bin"), 64 << 10)
    for n in cfg["ls_sizes"]:
        sub = os.path.join(d, f"ls{n}")
        os.makedirs(sub)
        for i in range(n):
            with open(os.path.join(sub, f"f-{i:07d}"), "wb") as f:
                f.write(b"x")
    open(stamp, "w").close()
    return d


# ------------------------------------------------------------------ servers

class Nginx:
    def __init__(self, root, data):
        self.dir = os.path.join(root, "nginx")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.html_port = free_port()  # HTML index at / (httpdirfs drops a trailing '/')
        conf = os.path.join(self.dir, "nginx.conf")
        n = self.dir
        with open(conf, "w") as f:
            f.write(f"""
worker_processes 2;
pid {n}/nginx.pid;
error_log {n}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path {n}/body;
    proxy_temp_path {n}/proxy;
    fastcgi_temp_path {n}/fastcgi;
    uwsgi_temp_path {n}/uwsgi;
    scgi_temp_path {n}/scgi;
    server {{
        listen 127.0.0.1:{self.port};
        location /data/ {{ alias {data}/; autoindex on; autoindex_format json; }}
    }}
    server {{
        listen 127.0.0.1:{self.html_port};
        location / {{ root {data}; autoindex on; }}
    }}
}}
""")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        run([nginx, "-p", n, "-c", conf, "-e", os.path.join(n, "error.log")])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)

    def stop(self):
        try:
            with open(os.path.join(self.dir, "nginx.pid")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


class WanProxy:
    def __init__(self, target_port, delay_ms, rate):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "wanproxy.py"), "--to", f"127.0.0.1:{target_port}",
             "--delay-ms", str(delay_ms), "--rate", rate],
            stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError("wanproxy did not start")
        self.port = int(line[1])

    def stop(self):
        self.p.terminate()
        self.p.wait()


# ------------------------------------------------------------------ mounts

class Mount:
    """One file system mounted in the foreground, so its pid is ours."""

    def __init__(self, name, cmd, mnt, env=None):
        self.name, self.mnt = name, mnt
        # a daemon that died leaves a dead mount (ENOTCONN) behind: clear it
        subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
        os.makedirs(mnt, exist_ok=True)
        self.logf = open(mnt.rstrip("/") + ".log", "ab")
        self.p = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                  env=env, start_new_session=True)
        t0 = time.monotonic()
        while not os.path.ismount(mnt):
            if self.p.poll() is not None:
                raise RuntimeError(f"{name} exited ({self.p.returncode}) before mounting; "
                                   f"see {self.logf.name}")
            if time.monotonic() - t0 > 60:
                self.umount()
                raise RuntimeError(f"{name} did not mount in 60 s")
            time.sleep(0.05)

    def rss_peak(self):
        """Peak RSS of the daemon and its children, in bytes."""
        try:
            with open(f"/proc/{self.p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def umount(self):
        for cmd in (["fusermount3", "-u", self.mnt], ["fusermount", "-u", self.mnt],
                    ["umount", self.mnt], ["umount", "-l", self.mnt]):
            if not os.path.ismount(self.mnt) and self.p.poll() is not None:
                break
            subprocess.run(cmd, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        # a crashed daemon's mount fails ismount (ENOTCONN) but still stands
        subprocess.run(["umount", "-l", self.mnt], stderr=subprocess.DEVNULL)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.logf.close()


def peers_for(source, ctx):
    """(name, function(mnt) -> Mount, path of the data under the mount)."""
    objfs = ctx["objfs"]
    out = []
    if source["kind"] == "http":
        url = f"http://127.0.0.1:{source['port']}"
        out.append(("objfs", lambda m: Mount("objfs", [objfs, "-f", "-o", ctx["objfs_opts"],
                                                        url + "/data/", m], m)))
        html = f"http://127.0.0.1:{source['html_port']}/"
        out.append(("rclone", lambda m: Mount("rclone", [
            "rclone", "mount", "--read-only", "--config", "/dev/null", "--http-url",
            html, ":http:", m], m)))
        out.append(("httpdirfs", lambda m: Mount("httpdirfs", [
            # --no-range-check: httpdirfs 1.2.5 misjudges nginx (httpdirfs issue #188)
            "httpdirfs", "-f", "--no-range-check", html, m], m)))
    else:
        ep = source["endpoint"]
        b = source["bucket"]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=source["key"],
                   AWS_SECRET_ACCESS_KEY=source["secret"])
        out.append(("objfs", lambda m: Mount("objfs", [
            objfs, "-f", "-o", f"endpoint={ep},{ctx['objfs_opts']}", f"s3://{b}", m], m, env)))
        pw = os.path.join(ctx["root"], "s3fs.passwd")
        with open(pw, "w") as f:
            f.write(f"{source['key']}:{source['secret']}\n")
        os.chmod(pw, 0o600)
        out.append(("s3fs", lambda m: Mount("s3fs", [
            "s3fs", b, m, "-f", "-o",
            f"url={ep},use_path_request_style,passwd_file={pw},ro,"
            "parallel_count=16,multireq_max=16"], m)))
        # rclone 1.60's S3 client fails on AWS_CA_BUNDLE with its own transport
        renv = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        out.append(("rclone", lambda m: Mount("rclone", [
            "rclone", "mount", "--read-only", "--config", "/dev/null",
            "--s3-provider", "Ceph", "--s3-endpoint", ep, "--s3-access-key-id", source["key"],
            "--s3-secret-access-key", source["secret"], "--s3-env-auth=false",
            f":s3:{b}", m], m, renv)))
    return out


# ------------------------------------------------------------------ workloads

def fio(args, timeout):
    cmd = ["fio", "--output-format=json", "--ioengine=psync", "--direct=0",
           "--group_reporting", "--randrepeat=1", "--invalidate=0"] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"fio failed: {r.stderr.strip()[:400]}")
    j = json.loads(r.stdout[r.stdout.index("{"):])
    rd = j["jobs"][0]["read"]
    if j["jobs"][0].get("error"):
        raise RuntimeError(f"fio job error {j['jobs'][0]['error']}")
    pct = rd.get("clat_ns", {}).get("percentile", {})
    return {
        "MBps": rd["bw_bytes"] / 1e6,
        "iops": rd["iops"],
        "p50_ms": pct.get("50.000000", 0) / 1e6,
        "p99_ms": pct.get("99.000000", 0) / 1e6,
        "bytes": rd["io_bytes"],
    }


def w_seq1(mnt, cfg):
    return fio(["--name=seq1", f"--filename={mnt}/big.bin", "--rw=read", "--bs=1M",
                f"--runtime={cfg['seq_limit']}"], cfg["seq_limit"] + 60)


def w_seq4(mnt, cfg):
    files = ":".join(f"{mnt}/four/part-{i}.bin" for i in range(4))
    args = ["--rw=read", "--bs=1M", f"--runtime={cfg['seq_limit']}"]
    for i in range(4):
        args += [f"--name=r{i}", f"--filename={mnt}/four/part-{i}.bin"]
    del files
    return fio(args, cfg["seq_limit"] + 60)


def w_rand(bs):
    def f(mnt, cfg):
        return fio([f"--name=rand{bs}", f"--filename={mnt}/big.bin", "--rw=randread",
                    f"--bs={bs}", f"--runtime={cfg['rand_time']}", "--time_based"],
                   cfg["rand_time"] + 60)
    return f


def w_conc16(mnt, cfg):
    """16 readers at once, 4 on each of the four objects, spread over them."""
    args = ["--rw=read", "--bs=1M", f"--runtime={cfg['rand_time']}", "--time_based"]
    for i in range(16):
        off = (i // 4) * cfg["four"] // 4
        args += [f"--name=c{i}", f"--filename={mnt}/four/part-{i % 4}.bin",
                 f"--offset={off}"]
    return fio(args, cfg["rand_time"] + 60)


def w_ttfb(mnt, cfg):
    lat = []
    names = sorted(os.listdir(os.path.join(mnt, "ttfb")))
    for n in names:
        t0 = time.monotonic()
        fd = os.open(os.path.join(mnt, "ttfb", n), os.O_RDONLY)
        os.read(fd, 1)
        os.close(fd)
        lat.append(time.monotonic() - t0)
    lat.sort()
    return {"objects": len(lat), "p50_ms": 1e3 * statistics.median(lat),
            "p99_ms": 1e3 * lat[int(len(lat) * 0.99) - 1]}


def w_small(mnt, cfg):
    dst = tempfile.mkdtemp(prefix="bench-cp-", dir=cfg["root"])
    try:
        t0 = time.monotonic()
        run(["cp", "-r", os.path.join(mnt, "small"), dst])
        dt = time.monotonic() - t0
        n = len(os.listdir(os.path.join(dst, "small")))
        if n != 1000:
            raise RuntimeError(f"cp -r copied {n} of 1000 objects")
    finally:
        shutil.rmtree(dst, ignore_errors=True)
    return {"seconds": dt, "objects_per_s": 1000 / dt, "MBps": 1000 * (64 << 10) / dt / 1e6}


def w_ls(n):
    def f(mnt, cfg):
        out = {}
        for phase in ("cold", "warm"):
            t0 = time.monotonic()
            p = subprocess.Popen(["ls", "-l", os.path.join(mnt, f"ls{n}")],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            try:
                stdout, _ = p.communicate(timeout=cfg["ls_limit"])
            except subprocess.TimeoutExpired:
                # ls sits in D state on a FUSE request: only the daemon's end frees it
                cfg["daemon"].kill()
                p.kill()
                p.communicate()
                raise RuntimeError(f"ls -l ({phase}) did not finish in {cfg['ls_limit']} s; "
                                   "daemon killed")
            out[phase + "_s"] = time.monotonic() - t0
            lines = stdout.count(b"\n") - 1
            if p.returncode != 0 or lines != n:
                raise RuntimeError(f"ls -l listed {lines} of {n} entries (rc {p.returncode})")
        return out
    return f


WORKLOADS = [
    ("seq1", "sequential 1 reader, bs=1M (MB/s)", w_seq1),
    ("seq4", "sequential 4 readers on 4 objects (MB/s)", w_seq4),
    ("rand256k", "random 256 KiB (IOPS)", w_rand("256k")),
    ("rand4k", "random 4 KiB (IOPS)", w_rand("4k")),
    ("conc16", "16 concurrent sequential readers (MB/s)", w_conc16),
    ("ttfb", "open + read 1 byte, 200 objects (ms)", w_ttfb),
    ("small", "cp -r of 1,000 x 64 KiB (s)", w_small),
]
WAN_WORKLOADS = ["seq1", "rand256k"]


# ------------------------------------------------------------------ ceilings

def curl_cmd(source, path):
    if source["kind"] == "http":
        return ["curl", "-sf", "-o", "/dev/null", f"{source['base']}/data/{path}"], None
    # curl 7.88 does not add x-amz-content-sha256 itself; RGW (like AWS) needs it
    return (["curl", "-sf", "-o", "/dev/null", "--aws-sigv4", "aws:amz:us-east-1:s3",
             "--user", f"{source['key']}:{source['secret']}",
             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
             f"{source['base']}/{source['bucket']}/{path}"], None)


def curl_streams(source, path, size, n, limit):
    """n parallel range GETs covering [0, size) of path; MB/s."""
    cmd, _ = curl_cmd(source, path)
    step = (size + n - 1) // n
    procs = []
    t0 = time.monotonic()
    for i in range(n):
        lo, hi = i * step, min(size, (i + 1) * step) - 1
        procs.append(subprocess.Popen(cmd + ["-r", f"{lo}-{hi}", "--max-time", str(limit)]))
    rcs = [p.wait() for p in procs]
    dt = time.monotonic() - t0
    if any(rcs):
        raise RuntimeError(f"curl streams failed: {rcs}")
    return {"MBps": size / dt / 1e6, "streams": n}


def list_baseline(source, n):
    """Seconds for the bare listing requests of a directory of n entries."""
    if source["kind"] == "http":
        t0 = time.monotonic()
        run(["curl", "-sf", "-o", "/dev/null", f"{source['base']}/data/ls{n}/"])
        return time.monotonic() - t0
    import boto3
    s3 = boto3.client("s3", endpoint_url=source["base"], aws_access_key_id=source["key"],
                      aws_secret_access_key=source["secret"], region_name="us-east-1")
    t0 = time.monotonic()
    got = 0
    for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=source["bucket"], Prefix=f"ls{n}/", Delimiter="/"):
        got += len(page.get("Contents", []))
    dt = time.monotonic() - t0
    if got != n:
        raise RuntimeError(f"ListObjectsV2 returned {got} of {n}")
    return dt


# ------------------------------------------------------------------ S3 data

def seed_s3(source, data, cfg):
    import boto3
    from boto3.s3.transfer import TransferConfig
    s3 = boto3.client("s3", endpoint_url=source["base"], aws_access_key_id=source["key"],
                      aws_secret_access_key=source["secret"], region_name="us-east-1")
    b = source["bucket"]
    try:
        s3.head_bucket(Bucket=b)
        s3.head_object(Bucket=b, Key=f".done.{cfg['tag']}")
        return
    except Exception:
        pass
    try:
        s3.create_bucket(Bucket=b)
    except Exception:
        pass
    files = []
    skip = {f"ls{n}" for n in cfg["ls_sizes"]} - {f"ls{n}" for n in cfg["s3_ls_sizes"]}
    for dp, _, fns in os.walk(data):
        if os.path.relpath(dp, data).split(os.sep)[0] in skip:
            continue
        for fn in fns:
            p = os.path.join(dp, fn)
            files.append((p, os.path.relpath(p, data)))
    log(f"uploading {len(files)} objects to s3://{b}")
    t0 = time.monotonic()
    tc = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=64 * MiB,
                        max_concurrency=8)

    def put(pk):
        p, k = pk
        if os.path.getsize(p) > 64 * MiB:
            s3.upload_file(p, b, k, Config=tc)
        else:
            with open(p, "rb") as f:
                s3.put_object(Bucket=b, Key=k, Body=f.read())

    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        list(ex.map(put, files))
    s3.put_object(Bucket=b, Key=f".done.{cfg['tag']}", Body=b"")
    log(f"uploaded in {time.monotonic() - t0:.0f} s")


# ------------------------------------------------------------------ driver

def ls_sizes(source, cfg):
    """Wide directories to list: RGW on memstore takes ~75 PUTs/s here, so
    the 100,000-object bucket is opt-in (--s3-ls-100k)."""
    return cfg["ls_sizes"] if source["kind"] == "http" else cfg["s3_ls_sizes"]


def bench_source(source, ctx, cfg, results):
    src = source["name"]
    res = results.setdefault(src, {"ceiling": {}, "peers": {}})
    big = cfg["big"]
    log(f"[{src}] ceilings")
    res["ceiling"]["curl1"] = curl_streams(source, "big.bin", big, 1, 600)
    for n in (4, 8, 16):
        res["ceiling"][f"curl{n}"] = curl_streams(source, "big.bin", big, n, 600)
    for n in ls_sizes(source, cfg):
        res["ceiling"][f"list{n}_s"] = list_baseline(source, n)
    if source.get("wan_port"):
        wsrc = dict(source, base=f"http://127.0.0.1:{source['wan_port']}")
        res["ceiling"]["wan_curl1"] = curl_streams(wsrc, "big.bin", big, 1, 600)
        res["ceiling"]["wan_curl8"] = curl_streams(wsrc, "big.bin", big, 8, 600)

    plan = [(w, fn, source) for (w, _, fn) in WORKLOADS]
    plan += [(f"ls{n}", w_ls(n), source) for n in ls_sizes(source, cfg)]
    if source.get("wan_port"):
        wsrc = dict(source, port=source["wan_port"], base=f"http://127.0.0.1:{source['wan_port']}",
                    endpoint=f"http://127.0.0.1:{source['wan_port']}",
                    html_port=source.get("wan_html_port"))
        plan += [("wan_" + w, fn, wsrc) for (w, _, fn) in WORKLOADS if w in WAN_WORKLOADS]
    for w, fn, s in plan:
        for name, mount in peers_for(s, ctx):
            if ctx["only"] and name not in ctx["only"]:
                continue
            mnt = os.path.join(ctx["root"], "mnt", f"{src}-{name}")
            log(f"[{src}] {name}: {w}")
            entry = res["peers"].setdefault(name, {})
            m = None
            try:
                m = mount(mnt)
                cfg["daemon"] = m.p
                t0 = time.monotonic()
                r = fn(mnt, cfg)
                r["wall_s"] = time.monotonic() - t0
                r["rss_peak"] = m.rss_peak()
            except Exception as e:  # a peer that fails is recorded, not fatal
                r = {"error": str(e)[:300]}
                log(f"[{src}] {name}: {w} FAILED: {r['error']}")
            finally:
                if m:
                    m.umount()
            entry[w] = r
            print("   ", json.dumps(r), flush=True)


def fmt_table(results, cfg):
    lines = []
    def metric(w):
        if w.endswith("ttfb"):
            return "p50_ms", False
        if w.startswith("ls") or w.startswith("wan_ls"):
            return "cold_s", False
        if w.endswith("small"):
            return "seconds", False
        if "rand" in w:
            return "iops", True
        return "MBps", True

    for src, res in results.items():
        c = res["ceiling"]
        lines.append(f"\n### {src}\n")
        lines.append("ceilings: " + ", ".join(
            f"{k} {v['MBps']:.0f} MB/s" if isinstance(v, dict) else f"{k} {v:.3f} s"
            for k, v in c.items()))
        peers = list(res["peers"])
        works = []
        for p in peers:
            for w in res["peers"][p]:
                if w not in works:
                    works.append(w)
        lines.append("")
        lines.append("| workload | " + " | ".join(peers) + " | objfs / curl | objfs / best peer |")
        lines.append("|---|" + "---|" * (len(peers) + 2))
        for w in works:
            key, higher = metric(w)
            row, vals = [], {}
            for p in peers:
                r = res["peers"][p].get(w, {})
                if "error" in r or key not in r:
                    row.append("fail" if "error" in r else "-")
                    continue
                vals[p] = r[key]
                extra = ""
                if key == "iops":
                    extra = f" (p99 {r['p99_ms']:.1f} ms)"
                if key == "cold_s":
                    extra = f" (warm {r['warm_s']:.2f})"
                row.append(f"{r[key]:.2f}{extra}" if r[key] < 100 else f"{r[key]:.0f}{extra}")
            ceil = None
            if w in ("seq1",):
                ceil = c["curl1"]["MBps"]
            elif w == "seq4":
                ceil = c["curl4"]["MBps"]
            elif w == "conc16":
                ceil = c["curl16"]["MBps"]
            elif w == "wan_seq1":
                ceil = c.get("wan_curl8", {}).get("MBps")
            elif w.startswith("ls"):
                ceil = c.get(f"list{w[2:]}_s")
            o = vals.get("objfs")
            others = [v for p, v in vals.items() if p != "objfs"]
            if o is not None and ceil:
                rc = o / ceil if higher else ceil / o
                rc = f"{rc:.2f}x" if higher else f"{o / ceil:.2f}x time"
            else:
                rc = "-"
            if o is not None and others:
                best = max(others) if higher else min(others)
                rb = f"{o / best:.2f}x" if higher else f"{best / o:.2f}x faster" if o else "-"
            else:
                rb = "-"
            lines.append(f"| {w} ({key}) | " + " | ".join(row) + f" | {rc} | {rb} |")
        rss = []
        for p in peers:
            m = max((r.get("rss_peak") or 0) for r in res["peers"][p].values())
            rss.append(f"{p} {m / MiB:.0f} MiB")
        lines.append("\npeak RSS over all workloads: " + ", ".join(rss))
    return "\n".join(lines)


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    panels = [("seq1", "MBps", "seq 1 reader MB/s"), ("seq4", "MBps", "seq 4 readers MB/s"),
              ("rand256k", "iops", "random 256K IOPS"), ("rand4k", "iops", "random 4K IOPS"),
              ("wan_seq1", "MBps", "S3-like seq MB/s"), ("ttfb", "p50_ms", "TTFB p50 ms")]
    srcs = list(results)
    fig, axes = plt.subplots(len(srcs), len(panels), figsize=(3.2 * len(panels), 3 * len(srcs)),
                             squeeze=False)
    for i, s in enumerate(srcs):
        peers = results[s]["peers"]
        for j, (w, k, title) in enumerate(panels):
            ax = axes[i][j]
            names = [p for p in peers if k in peers[p].get(w, {})]
            vals = [peers[p][w][k] for p in names]
            ceil = None
            if w == "seq1":
                ceil = results[s]["ceiling"]["curl1"]["MBps"]
            elif w == "wan_seq1" and "wan_curl8" in results[s]["ceiling"]:
                ceil = results[s]["ceiling"]["wan_curl8"]["MBps"]
            ax.bar(names, vals, color=["#2a7" if n == "objfs" else "#999" for n in names])
            if ceil:
                ax.axhline(ceil, color="r", ls="--", lw=1, label="curl")
                ax.legend(fontsize=7)
            ax.set_title(f"{s}: {title}", fontsize=9)
            ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objfs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--root", default="/tmp/objfs-bench")
    ap.add_argument("--quick", action="store_true", help="smaller data, shorter runs")
    ap.add_argument("--s3", action="store_true", help="also S3 (needs RGW_* in the environment)")
    ap.add_argument("--no-http", action="store_true")
    ap.add_argument("--only", default="", help="comma list of file systems to run")
    ap.add_argument("--objfs-opts", default="cache_size=1G")
    ap.add_argument("--s3-ls-100k", action="store_true",
                    help="also upload and list 100,000 objects on S3 (slow to seed)")
    ap.add_argument("--wan-rate", default="50M")
    ap.add_argument("--wan-delay-ms", type=float, default=20)
    a = ap.parse_args()

    if a.quick:
        cfg = {"tag": "quick", "big": 512 * MiB, "four": 128 * MiB, "ls_sizes": [10000],
               "seq_limit": 60, "rand_time": 5, "ls_limit": 300}
    else:
        cfg = {"tag": "full", "big": 2048 * MiB, "four": 512 * MiB, "ls_sizes": [10000, 100000],
               "seq_limit": 120, "rand_time": 15, "ls_limit": 300}
    cfg["s3_ls_sizes"] = cfg["ls_sizes"] if a.s3_ls_100k else [10000]
    os.makedirs(a.root, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    cfg["root"] = a.root
    ctx = {"objfs": os.path.abspath(a.objfs), "root": a.root, "objfs_opts": a.objfs_opts,
           "only": [x for x in a.only.split(",") if x]}
    data = make_data(a.root, cfg)
    results = {}
    stops = []
    try:
        if not a.no_http:
            ng = Nginx(a.root, data)
            stops.append(ng.stop)
            wan = WanProxy(ng.port, a.wan_delay_ms, a.wan_rate)
            stops.append(wan.stop)
            wan_html = WanProxy(ng.html_port, a.wan_delay_ms, a.wan_rate)
            stops.append(wan_html.stop)
            src = {"name": "http", "kind": "http", "port": ng.port, "html_port": ng.html_port,
                   "base": f"http://127.0.0.1:{ng.port}", "wan_port": wan.port,
                   "wan_html_port": wan_html.port}
            bench_source(src, ctx, cfg, results)
        if a.s3:
            ep = os.environ["RGW_ENDPOINT"]
            port = int(ep.rsplit(":", 1)[1].rstrip("/"))
            src = {"name": "s3", "kind": "s3", "base": ep, "endpoint": ep, "bucket": "bench",
                   "key": os.environ["RGW_ACCESS_KEY"], "secret": os.environ["RGW_SECRET_KEY"]}
            seed_s3(src, data, cfg)
            wan = WanProxy(port, a.wan_delay_ms, a.wan_rate)
            stops.append(wan.stop)
            src["wan_port"] = wan.port
            bench_source(src, ctx, cfg, results)
    finally:
        for s in reversed(stops):
            s()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cmd": " ".join(sys.argv),
            "cfg": {k: v for k, v in cfg.items() if k != "root"},
            "host": {"nproc": os.cpu_count(), "kernel": os.uname().release},
            "wan": {"rate_per_conn": a.wan_rate, "delay_ms": a.wan_delay_ms}}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    table = fmt_table(results, cfg)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(f"<!-- {meta['cmd']} ({meta['date']}) -->\n{table}\n")
    plot(results, os.path.join(a.out, "bench.png"))
    print(table)


if __name__ == "__main__":
    main()
