#!/usr/bin/env python3
"""Loopback stand-in for the EC2 instance metadata service (IMDSv2).

Prints its port on the first line of stdout. Serves the token, role and
credential documents like the real service (401 without a token). The
credentials expire EXPIRES_IN seconds after each fetch (argv[1], default
3600); GET /count returns how many credential documents were served.

For end-to-end tests against a real S3 server: IMDS_STUB_ACCESS_KEY,
IMDS_STUB_SECRET_KEY and IMDS_STUB_SESSION_TOKEN (environment) replace the
fake credentials (no Token in the document when the last is unset).
"""
import datetime
import http.server
import json
import os
import sys

TOKEN = "stub-token-123"
ROLE = "objfs-test-role"
EXPIRES_IN = int(sys.argv[1]) if len(sys.argv) > 1 else 3600
served = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get(
                "X-aws-ec2-metadata-token-ttl-seconds"):
            self.reply(200, TOKEN)
        else:
            self.reply(400, "bad token request")

    def do_GET(self):
        global served
        if self.path == "/count":
            self.reply(200, str(served))
            return
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self.reply(401, "")
            return
        base = "/latest/meta-data/iam/security-credentials/"
        if self.path == base:
            self.reply(200, ROLE + "\n")
        elif self.path == base + ROLE:
            served += 1
            exp = datetime.datetime.now(datetime.timezone.utc) + \
                datetime.timedelta(seconds=EXPIRES_IN)
            expires = exp.strftime("%Y-%m-%dT%H:%M:%SZ")
            if os.environ.get("IMDS_STUB_ACCESS_KEY"):
                doc = {"Code": "Success", "Expiration": expires,
                       "AccessKeyId": os.environ["IMDS_STUB_ACCESS_KEY"],
                       "SecretAccessKey": os.environ["IMDS_STUB_SECRET_KEY"]}
                if os.environ.get("IMDS_STUB_SESSION_TOKEN"):
                    doc["Token"] = os.environ["IMDS_STUB_SESSION_TOKEN"]
                self.reply(200, json.dumps(doc))
                return
            self.reply(200, '{"Code":"Success","AccessKeyId":"ASIAIMDSSTUB%d",'
                       '"SecretAccessKey":"imdsSecretValue","Token":"imdsTokenValue",'
                       '"Expiration":"%s"}' % (served, expires))
        else:
            self.reply(404, "")


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
