#!/usr/bin/env python3
"""Loopback stand-in for the AWS credential endpoints objfs asks: the EC2
instance metadata service (IMDSv2), a container credentials endpoint (ECS,
EKS Pod Identity) and STS (AssumeRole, AssumeRoleWithWebIdentity).

Prints its port on the first line of stdout. Serves the token, role and
credential documents like the real service (401 without a token). The
credentials expire EXPIRES_IN seconds after each fetch (argv[1], default
3600); GET /count returns how many credential documents were served.

For end-to-end tests against a real S3 server: IMDS_STUB_ACCESS_KEY,
IMDS_STUB_SECRET_KEY and IMDS_STUB_SESSION_TOKEN (environment) replace the
fake credentials (no Token in the document when the last is unset).

Container endpoint: GET /container/creds, answered only with the header
"Authorization: $CONTAINER_STUB_TOKEN" (default "stub-container-token").
STS: POST / with a form body. AssumeRoleWithWebIdentity needs a
WebIdentityToken equal to $STS_STUB_WEB_TOKEN (when set); AssumeRole needs
a SigV4 Authorization header for service sts (not verified: the keys it
names are recorded). RoleArn "arn:aws:iam::1:role/deny" gets an
ErrorResponse (AccessDenied). GET /counts: a JSON object of how many
answers of each kind were given, and the last RoleArn, RoleSessionName and
signing key id seen.
"""
import datetime
import http.server
import json
import os
import sys
import urllib.parse

TOKEN = "stub-token-123"
ROLE = "objfs-test-role"
EXPIRES_IN = int(sys.argv[1]) if len(sys.argv) > 1 else 3600
served = 0
counts = {"imds": 0, "container": 0, "web_identity": 0, "assume_role": 0, "denied": 0,
          "last_role": "", "last_session": "", "last_signer": ""}


def creds(expires):
    """The credentials every endpoint hands out (IMDS_STUB_* or fakes)."""
    if os.environ.get("IMDS_STUB_ACCESS_KEY"):
        return (os.environ["IMDS_STUB_ACCESS_KEY"], os.environ["IMDS_STUB_SECRET_KEY"],
                os.environ.get("IMDS_STUB_SESSION_TOKEN", ""), expires)
    return ("ASIASTUB%d" % served, "stubSecretValue", "stubTokenValue", expires)


def expiry():
    exp = datetime.datetime.now(datetime.timezone.utc) + \
        datetime.timedelta(seconds=EXPIRES_IN)
    return exp.strftime("%Y-%m-%dT%H:%M:%SZ")


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

    def do_POST(self):
        global served
        n = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(n).decode())
        get = lambda k: form.get(k, [""])[0]
        action = get("Action")
        if get("Version") != "2011-06-15" or not get("RoleArn") or not get("RoleSessionName"):
            self.reply(400, "<ErrorResponse><Error><Code>MissingParameter</Code>"
                       "<Message>Version, RoleArn and RoleSessionName are required</Message>"
                       "</Error></ErrorResponse>")
            return
        if action == "AssumeRoleWithWebIdentity":
            want = os.environ.get("STS_STUB_WEB_TOKEN")
            if not get("WebIdentityToken") or (want and get("WebIdentityToken") != want):
                self.reply(400, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                           "<Message>token rejected</Message></Error></ErrorResponse>")
                return
            kind = "web_identity"
        elif action == "AssumeRole":
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("AWS4-HMAC-SHA256 Credential=") or \
                    "/sts/aws4_request" not in auth:
                self.reply(403, "<ErrorResponse><Error><Code>MissingAuthenticationToken"
                           "</Code><Message>unsigned</Message></Error></ErrorResponse>")
                return
            counts["last_signer"] = auth.split("Credential=")[1].split("/")[0]
            kind = "assume_role"
        else:
            self.reply(400, "<ErrorResponse><Error><Code>InvalidAction</Code>"
                       "<Message>no such action</Message></Error></ErrorResponse>")
            return
        counts["last_role"] = get("RoleArn")
        counts["last_session"] = get("RoleSessionName")
        if get("RoleArn").endswith(":role/deny"):
            counts["denied"] += 1
            self.reply(403, "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied"
                       "</Code><Message>Not authorized to perform sts:%s</Message></Error>"
                       "</ErrorResponse>" % action)
            return
        counts[kind] += 1
        served += 1
        ak, sk, tok, exp = creds(expiry())
        x = lambda v: v.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        self.reply(200, "<%sResponse><%sResult><Credentials><AccessKeyId>%s</AccessKeyId>"
                   "<SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken>"
                   "<Expiration>%s</Expiration></Credentials></%sResult></%sResponse>"
                   % (action, action, x(ak), x(sk), x(tok or "stubTokenValue"), exp,
                      action, action))

    def do_GET(self):
        global served
        if self.path == "/count":
            self.reply(200, str(served))
            return
        if self.path == "/counts":
            self.reply(200, json.dumps(counts))
            return
        if self.path == "/container/creds":
            if self.headers.get("Authorization") != \
                    os.environ.get("CONTAINER_STUB_TOKEN", "stub-container-token"):
                self.reply(401, '{"Code":"Unauthorized","Message":"bad token"}')
                return
            served += 1
            counts["container"] += 1
            ak, sk, tok, exp = creds(expiry())
            doc = {"AccessKeyId": ak, "SecretAccessKey": sk, "Expiration": exp}
            if tok:
                doc["Token"] = tok
            self.reply(200, json.dumps(doc))
            return
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self.reply(401, "")
            return
        base = "/latest/meta-data/iam/security-credentials/"
        if self.path == base:
            self.reply(200, ROLE + "\n")
        elif self.path == base + ROLE:
            served += 1
            counts["imds"] += 1
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
