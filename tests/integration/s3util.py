#!/usr/bin/env python3
"""s3util.py: seed and change S3 buckets for the objfs tests and benchmarks.

Talks to one S3 endpoint with boto3 (signed with SigV4), taking the endpoint
and key from the environment: RGW_ENDPOINT, RGW_ACCESS_KEY, RGW_SECRET_KEY,
RGW_USER (what rgw.sh exports).  Subcommands:

  mb BUCKET...                     create buckets
  sync DIR BUCKET [PREFIX]         upload every file under DIR as PREFIX+relpath,
                                   and a "d/" marker object for each empty directory;
                                   files over 8 MiB go up as multipart uploads
                                   (ETag "md5-N"), like the AWS CLI does
  marker BUCKET KEY/...            put empty "dir/" marker objects
  put BUCKET KEY FILE              upload one file ('-' = stdin) as KEY
  many BUCKET PREFIX N             put N objects PREFIX f00000..; each body is
                                   its own key, repeated (key * (i % 7)), so
                                   sizes differ and content is checkable
  ls BUCKET [PREFIX]               print every key (no delimiter), one a line
  session-token [SECS]             allow the user sts:GetSessionToken (an IAM user
                                   policy; RGW needs the user-policy cap rgw.sh
                                   grants) and print "ACCESS SECRET TOKEN" of
                                   temporary credentials (default 900 s)

Uploads run on a thread pool (SEED_THREADS, default 32).  Exits non-zero with
the error on the first failure.
"""
import concurrent.futures
import json
import os
import sys

import boto3
import boto3.s3.transfer
import botocore.config


def client():
    cfg = botocore.config.Config(retries={"max_attempts": 3},
                                 max_pool_connections=64,
                                 s3={"addressing_style": "path"})
    return boto3.client("s3", endpoint_url=os.environ["RGW_ENDPOINT"],
                        aws_access_key_id=os.environ["RGW_ACCESS_KEY"],
                        aws_secret_access_key=os.environ["RGW_SECRET_KEY"],
                        region_name="us-east-1", config=cfg)


def run_all(fn, items):
    n = int(os.environ.get("SEED_THREADS", "32"))
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        for f in [ex.submit(fn, *it) for it in items]:
            f.result()  # re-raises the first error


def many_body(key, i):
    return key.encode() * (i % 7)


def main(argv):
    s3 = client()
    cmd, args = argv[1], argv[2:]
    if cmd == "mb":
        for b in args:
            s3.create_bucket(Bucket=b)
    elif cmd == "sync":
        top, bucket = args[0], args[1]
        prefix = args[2] if len(args) > 2 else ""
        tcfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 << 20,
                                                multipart_chunksize=8 << 20)
        items, markers = [], []
        for d, dirs, files in os.walk(top):
            rel = os.path.relpath(d, top)
            rel = "" if rel == "." else rel + "/"
            if not dirs and not files and rel:
                markers.append(prefix + rel)
            for f in files:
                items.append((os.path.join(d, f), prefix + rel + f))
        run_all(lambda path, key: s3.upload_file(path, bucket, key, Config=tcfg), items)
        run_all(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=b""),
                [(m,) for m in markers])
        print(f"sync: {len(items)} objects, {len(markers)} markers into {bucket}")
    elif cmd == "marker":
        for k in args[1:]:
            s3.put_object(Bucket=args[0], Key=k, Body=b"")
    elif cmd == "put":
        bucket, key, path = args
        body = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    elif cmd == "many":
        bucket, prefix, n = args[0], args[1], int(args[2])
        run_all(lambda key, i: s3.put_object(Bucket=bucket, Key=key, Body=many_body(key, i)),
                [(f"{prefix}f{i:05d}", i) for i in range(n)])
        print(f"many: {n} objects under {bucket}/{prefix}")
    elif cmd == "session-token":
        kw = dict(endpoint_url=os.environ["RGW_ENDPOINT"],
                  aws_access_key_id=os.environ["RGW_ACCESS_KEY"],
                  aws_secret_access_key=os.environ["RGW_SECRET_KEY"], region_name="us-east-1")
        policy = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["sts:GetSessionToken"], "Resource": "*"}]}
        user = os.environ.get("RGW_USER", "objfs")  # RGW has no GetCallerIdentity
        boto3.client("iam", **kw).put_user_policy(UserName=user, PolicyName="objfs-sts",
                                                  PolicyDocument=json.dumps(policy))
        secs = int(args[0]) if args else 900
        c = boto3.client("sts", **kw).get_session_token(DurationSeconds=secs)["Credentials"]
        print(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
    elif cmd == "ls":
        pg = s3.get_paginator("list_objects_v2")
        for page in pg.paginate(Bucket=args[0], Prefix=args[1] if len(args) > 1 else ""):
            for o in page.get("Contents", []):
                print(o["Key"])
    else:
        sys.exit(f"s3util: unknown command {cmd!r}")


if __name__ == "__main__":
    main(sys.argv)
