# shellcheck shell=bash
#
# stub.sh: nginx stand-ins for the hardening tests (perms.sh, keys.sh).
# Source it after lib.sh, do not run it.
#
#   tls_cert DIR NAME SAN         self-signed certificate DIR/NAME.pem (+ .key)
#                                 for SAN ("IP:127.0.0.1,DNS:localhost")
#   s3stub_dir DIR [KEY...]       DIR/list.xml: a ListObjectsV2 page listing
#                                 every file in DIR/objs (flat: the name is the
#                                 key) plus the extra KEYs (1-byte objects that
#                                 nginx cannot serve: crafted keys)
#   s3stub_server PORT BUCKET DIR [CERT]
#                                 prints an nginx server block answering
#                                 path-style S3 on 127.0.0.1:PORT: GET /BUCKET
#                                 (any query) is DIR/list.xml, GET
#                                 /BUCKET/KEY is DIR/objs/KEY, with TLS when
#                                 CERT (tls_cert's DIR/NAME) is given; every
#                                 request's Authorization and token headers go
#                                 to DIR/access.log (the secrets check)
#   STUB_SECRET_URI               a path outside every bucket and listing
#                                 (/outside/secret.txt) that no objfs request
#                                 may ever reach; stub_outside_conf serves it
#
# Why a stub and not RGW: it answers in microseconds, starts with nginx,
# accepts any signature (so the secrets test can choose its keys), records
# every header objfs sent, and serves listings no real server would send
# (keys with "..", control characters, a bucket that names objects outside
# itself). It verifies nothing: never proof of SigV4 (s3_rgw.sh is).

# shellcheck disable=SC2034 # for the sourcing test
STUB_SECRET_URI=/outside/secret.txt

tls_cert() {
	local dir=$1 name=$2 san=$3
	mkdir -p "$dir" || return 1
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=objfs-test-$name" \
		-addext "subjectAltName=$san" -keyout "$dir/$name.key" -out "$dir/$name.pem" \
		>"$dir/$name.openssl.log" 2>&1
}

s3stub_dir() {
	local dir=$1
	shift
	mkdir -p "$dir/objs" || return 1
	python3 - "$dir" "$@" <<'EOF'
import os, sys, urllib.parse
from xml.sax.saxutils import escape
d, extra = sys.argv[1], sys.argv[2:]
ents = []
for name in sorted(os.listdir(os.path.join(d, "objs"))):
    st = os.stat(os.path.join(d, "objs", name))
    # nginx's ETag: "<mtime hex>-<size hex>"; objfs pins it with If-Match
    ents.append((name, st.st_size, '"%x-%x"' % (int(st.st_mtime), st.st_size)))
ents += [(k, 1, '"crafted"') for k in extra]
with open(os.path.join(d, "list.xml"), "w") as f:
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>'
            '<IsTruncated>false</IsTruncated><EncodingType>url</EncodingType>')
    for key, size, etag in ents:
        f.write("<Contents><Key>%s</Key><Size>%d</Size><ETag>%s</ETag>"
                "<LastModified>2026-01-02T03:04:05.000Z</LastModified></Contents>"
                % (urllib.parse.quote(key, safe="/"), size, escape(etag)))
    f.write("</ListBucketResult>\n")
EOF
}

s3stub_server() {
	local port=$1 bucket=$2 dir=$3 cert=${4:-} tls=
	if [ -n "$cert" ]; then
		tls="ssl;
        ssl_certificate $cert.pem;
        ssl_certificate_key $cert.key"
	fi
	cat <<EOF
    log_format stub_$port '\$request_method \$request_uri auth="\$http_authorization" token="\$http_x_amz_security_token"';
    server {
        listen 127.0.0.1:$port $tls;
        access_log $dir/access.log stub_$port;
        location = /$bucket {
            default_type application/xml;
            alias $dir/list.xml;
        }
        location /$bucket/ {
            alias $dir/objs/;
        }
$(stub_outside_conf "$dir")
    }
EOF
}

# stub_outside_conf DIR: a location serving STUB_SECRET_URI from DIR/outside
# (for a server block of the caller's own); the file holds a marker line.
stub_outside_conf() {
	mkdir -p "$1/outside" && echo "OBJFS-OUTSIDE-SECRET" >"$1/outside/secret.txt"
	cat <<EOF
        location /outside/ {
            alias $1/outside/;
        }
EOF
}
