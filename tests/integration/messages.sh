#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# messages.sh: a mount that fails says why, in words that name the fix, at
# the default log level, on stderr, with the one "objfs: " prefix.
#
#   OBJFS=/path/to/objfs tests/integration/messages.sh
#
# What must hold (nginx on loopback; each case exits non-zero, mounts
# nothing):
#  - nothing listening: the reason on stderr, also with log_file= (which
#    has the line too, with its level);
#  - https:// to a plain-HTTP port: the TLS handshake failed, and the
#    server may speak plain HTTP there;
#  - a plain-HTTP 403: access denied with the status, and no word of TLS;
#  - an http:// URL answered by an S3 error document (<Error><Code>):
#    the s3:// SOURCE and endpoint= to mount instead;
#  - a SOURCE that is no http(s) URL (s3:/b, ftp://, host:port/path):
#    every accepted form named, s3:// included;
#  - every line on stderr starts with "objfs: " and none with a level tag.
# (Against a real S3 server: s3_rgw.sh, "S3 endpoint mounted as http://".)
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse),
# 99 binary missing.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_unless_fuse
require_objfs

SRC=$TEST_TMP/src
WORK=$TEST_TMP/work
MNT=$TEST_TMP/mnt
KPORT=$(free_port)

mkdir -p "$SRC" "$WORK" "$MNT"
echo "data" >"$SRC/file.txt"
NGINX_EXTRA_CONF="
    server {
        listen 127.0.0.1:$KPORT;
        location /plain403/ { return 403; }
        location /bucket/ {
            default_type application/xml;
            return 403 '<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message><RequestId>tx1</RequestId></Error>';
        }
    }"
if ! nginx_start "$SRC"; then
	fail "expected nginx to start"
	summary
	exit 1
fi
log "objfs: $OBJFS; nginx on $NGINX_PORT and $KPORT"

# says DESC WANT_REGEX [NOT_REGEX] ARGS...: objfs ARGS (daemonising) exits
# non-zero, mounts nothing, and its stderr matches WANT_REGEX (grep -E)
# and not NOT_REGEX ("" for none); every line starts with "objfs: " and
# none with a level tag.
says() {
	local desc=$1 want=$2 not=$3 rc=0
	shift 3
	remember_mountpoint "$MNT"
	timeout 120 "$OBJFS" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
	if is_mounted "$MNT"; then
		fail "$desc: expected no mount, got one (exit $rc)"
		timeout 10 fusermount3 -u "$MNT" 2>/dev/null
	elif [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
		fail "$desc: expected objfs to exit non-zero, got exit $rc"
	elif ! grep -E -q -- "$want" "$WORK/err"; then
		fail "$desc: expected stderr to match /$want/, got: $(head -c 600 "$WORK/err")"
	elif [ -n "$not" ] && grep -E -q -- "$not" "$WORK/err"; then
		fail "$desc: expected stderr not to match /$not/, got: $(head -c 600 "$WORK/err")"
	elif grep -v -q '^objfs: ' "$WORK/err" || grep -E -q '^objfs: (error|warning|note): ' "$WORK/err"; then
		fail "$desc: expected every line to start with 'objfs: ' and no level tag, got: $(head -c 600 "$WORK/err")"
	else
		pass "$desc: exit $rc: $(grep -E -m 1 -- "$want" "$WORK/err" | cut -c 1-260)"
	fi
}

DEAD=$(free_port)
says "nothing listening" \
	"^objfs: cannot list 'http://127\.0\.0\.1:$DEAD/data/': connection refused" "" \
	-o retries=0 "http://127.0.0.1:$DEAD/data/" "$MNT"
# with a log file the reason reaches the terminal all the same
says "nothing listening, log_file=" \
	"^objfs: cannot list 'http://127\.0\.0\.1:$DEAD/data/': connection refused" "" \
	-o "retries=0,log_file=$WORK/file.log" "http://127.0.0.1:$DEAD/data/" "$MNT"
if grep -q "objfs\[[0-9]*\]: error: cannot list 'http://127\.0\.0\.1:$DEAD/data/'" "$WORK/file.log"; then
	pass "nothing listening, log_file=: the file has the line, with its level"
else
	fail "nothing listening, log_file=: expected 'error: cannot list' in the file, got: $(head -c 300 "$WORK/file.log")"
fi
says "https:// to a plain-HTTP port" \
	"^objfs: https://127\.0\.0\.1:$NGINX_PORT/data/: the TLS handshake failed \(.*wrong version number\): the server may speak plain HTTP on this port; if so, use http:// instead of https://" "" \
	-o retries=1 "https://127.0.0.1:$NGINX_PORT/data/" "$MNT"
says "plain-HTTP 403" \
	"^objfs: cannot list 'http://127\.0\.0\.1:$KPORT/plain403/': access denied \(HTTP 403\)$" "TLS|certificate|s3://" \
	"http://127.0.0.1:$KPORT/plain403/" "$MNT"
says "S3 error document over http://" \
	"access denied \(HTTP 403 AccessDenied\); the server answers as S3 does: to mount the bucket, use s3://bucket/pre/ with -o endpoint=http://127\.0\.0\.1:$KPORT$" "TLS" \
	"http://127.0.0.1:$KPORT/bucket/pre/" "$MNT"
says "SOURCE s3:/b" \
	"did you mean s3://b \?\); SOURCE is s3://BUCKET\[/PREFIX\], http://HOST\[:PORT\]/PATH or https://HOST\[:PORT\]/PATH" \
	"must be http:// or https://" "s3:/b" "$MNT"
says "SOURCE ftp://" \
	"URL scheme ftp:// is not one objfs mounts; SOURCE is s3://BUCKET\[/PREFIX\], http://" \
	"must be http:// or https://" "ftp://127.0.0.1/x/" "$MNT"
says "SOURCE host:port/path" \
	"did you mean http://127\.0\.0\.1:$NGINX_PORT/data/ \?\); SOURCE is s3://BUCKET" \
	"must be http:// or https://" "127.0.0.1:$NGINX_PORT/data/" "$MNT"
summary
