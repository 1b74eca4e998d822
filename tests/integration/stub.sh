# shellcheck shell=bash
#
# stub.sh: nginx stand-ins for the hardening tests (perms.sh, keys.sh).
# Source it after lib.sh, do not run it.
#
#   s3stub_dir DIR [KEY...]       DIR/lists/: the ListObjectsV2 pages (delimiter
#                                 /, one per prefix) of a bucket holding every
#                                 file under DIR/objs (its relative path is the
#                                 key) plus the extra KEYs (1-byte objects that
#                                 nginx cannot serve: crafted keys)
#   s3stub_server PORT BUCKET DIR [CERT]
#                                 prints an nginx server block answering
#                                 path-style S3 on 127.0.0.1:PORT: GET /BUCKET
#                                 is the page of its prefix= argument, GET
#                                 /BUCKET/KEY is DIR/objs/KEY, with TLS when
#                                 CERT (nginx_tls_server's -c, lib.sh) is
#                                 given; every request's Authorization and
#                                 token headers go to DIR/access.log (the
#                                 secrets check)
#   stub_isolate_aws              unset the invoking user's AWS settings (keys,
#                                 profile, files, instance metadata): a test
#                                 sees only the credentials it passes
#   stub_outside_conf DIR         nginx location /outside/: a file holding
#                                 STUB_OUTSIDE_MARK, outside every bucket and
#                                 listing, that no objfs request may reach
#
# Why a stub and not RGW: it answers in microseconds, starts with nginx,
# accepts any signature (so the secrets test can choose its keys), records
# every header objfs sent, and serves listings no real server would send
# (keys with "..", control characters, a bucket that names objects outside
# itself). It verifies nothing: never proof of SigV4 (s3_rgw.sh is).

STUB_OUTSIDE_MARK=OBJFS-OUTSIDE-SECRET

s3stub_dir() {
	local dir=$1
	shift
	mkdir -p "$dir/objs" "$dir/lists" || return 1
	python3 - "$dir" "$@" <<'EOF'
import os, sys, urllib.parse
from xml.sax.saxutils import escape
d, extra = sys.argv[1], sys.argv[2:]
objs = {}
for root, _, files in os.walk(os.path.join(d, "objs")):
    for name in files:
        p = os.path.join(root, name)
        st = os.stat(p)
        key = os.path.relpath(p, os.path.join(d, "objs"))
        # nginx's ETag: "<mtime hex>-<size hex>"; objfs pins it with If-Match
        objs[key] = (st.st_size, '"%x-%x"' % (int(st.st_mtime), st.st_size))
for k in extra:
    objs[k] = (1, '"crafted"')
q = lambda s: urllib.parse.quote(s, safe="")
# one page per prefix, as S3 answers delimiter=/ (nginx picks it by the
# prefix= argument, still percent-encoded: that is the file name)
todo, done = [""], set()
while todo:
    pfx = todo.pop()
    if pfx in done or len(q(pfx)) > 240:
        continue
    done.add(pfx)
    keys, cps = [], set()
    for k in sorted(objs):
        if not k.startswith(pfx):
            continue
        rest = k[len(pfx):]
        if "/" in rest:
            cps.add(pfx + rest[:rest.index("/") + 1])
        else:
            keys.append(k)
    todo += sorted(cps)
    with open(os.path.join(d, "lists", q(pfx) + ".xml"), "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>'
                "<IsTruncated>false</IsTruncated><EncodingType>url</EncodingType>")
        for k in keys:
            size, etag = objs[k]
            f.write("<Contents><Key>%s</Key><Size>%d</Size><ETag>%s</ETag><LastModified>"
                    "2026-01-02T03:04:05.000Z</LastModified></Contents>"
                    % (urllib.parse.quote(k, safe="/"), size, escape(etag)))
        for c in sorted(cps):
            f.write("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>"
                    % urllib.parse.quote(c, safe="/"))
        f.write("</ListBucketResult>\n")
EOF
}

s3stub_server() {
	local port=$1 bucket=$2 dir=$3 cert=${4:-} body
	body="access_log $dir/access.log stub_$port;
        location = /$bucket {
            default_type application/xml;
            root $dir;
            try_files /lists/\$arg_prefix.xml =404;
        }
        location /$bucket/ {
            alias $dir/objs/;
        }
$(stub_outside_conf "$dir")"
	printf '%s\n' "    log_format stub_$port '\$request_method \$request_uri auth=\"\$http_authorization\" token=\"\$http_x_amz_security_token\"';"
	if [ -n "$cert" ]; then
		nginx_tls_server -c "$cert" "$port" - "$body"
	else
		printf '    server {\n        listen 127.0.0.1:%s;\n        %s\n    }\n' "$port" "$body"
	fi
}

# stub_outside_conf DIR: a location serving /outside/secret.txt from
# DIR/outside (for a server block of the caller's own).
stub_outside_conf() {
	mkdir -p "$1/outside" && echo "$STUB_OUTSIDE_MARK" >"$1/outside/secret.txt"
	cat <<EOF
        location /outside/ {
            alias $1/outside/;
        }
EOF
}

stub_isolate_aws() {
	local v
	for v in AWS_PROFILE AWS_DEFAULT_PROFILE AWS_REGION AWS_DEFAULT_REGION AWS_SESSION_TOKEN \
		AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
		unset "$v"
	done
	export AWS_CONFIG_FILE=$TEST_TMP/no-aws-config
	export AWS_SHARED_CREDENTIALS_FILE=$TEST_TMP/no-aws-credentials
	export AWS_EC2_METADATA_DISABLED=true
}
