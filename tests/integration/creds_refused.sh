#!/usr/bin/env bash
#
# creds_refused.sh: temporary credentials the store refuses before their
# expiry (revoked, rotated early) are resolved again at once, not kept
# until five minutes before the expiry they came with.
#
# A loopback stand-in for EC2 instance metadata (tests/imds_stub.py) hands
# out credentials valid for an hour, a new access key id each time it is
# asked; tests/s3_synth.py --refuse-keys answers requests signed with a key
# id listed in a file with 400 ExpiredToken, as S3 answers revoked
# temporary credentials. The test:
#
#  1. mounts and reads a key byte-exact with the first credentials;
#  2. lists those as refused: the next read of an uncached key fails with
#     EACCES (that request was signed with them), the daemon logs that the
#     store refused them, and the read after it is byte-exact, signed with
#     credentials asked of the metadata service once more (two fetches in
#     all, not one per request);
#  3. a listing signed with refused ones does the same for ls.
#
# Without the forced refresh every read after 2's first would fail for the
# hour. Exit: 0 pass, 1 fail, 77 skip (no FUSE).

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
skip_unless_fuse
require_objfs

MNT=$TEST_TMP/mnt
REFUSE=$TEST_TMP/refused
: >"$REFUSE"
synth_start s3 --keys 200 --refuse-keys "$REFUSE"
PORT_s3=${PORT_s3:?} # set by synth_start

py_server_start stub "$HERE/../imds_stub.py" 3600
STUB_PORT=${PORT_stub:?} # set by py_server_start

# Credentials from the stand-in only: no environment keys, no files.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE \
	AWS_EC2_METADATA_DISABLED AWS_CONTAINER_CREDENTIALS_FULL_URI \
	AWS_CONTAINER_CREDENTIALS_RELATIVE_URI AWS_WEB_IDENTITY_TOKEN_FILE
export HOME=$TEST_TMP/home
mkdir -p "$HOME"
export AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$STUB_PORT

last_key() {
	curl -sf "http://127.0.0.1:$PORT_s3/__stats" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["last_key"])'
}
refused() {
	curl -sf "http://127.0.0.1:$PORT_s3/__stats" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["refused"])'
}
fetched() { curl -sf "http://127.0.0.1:$STUB_PORT/count"; }
# the generator's bytes of key $1: byte i is sha256(key)[i % 32]
want_md5() {
	python3 - "$1" <<'EOF'
import hashlib, sys, zlib
k = sys.argv[1]
n = zlib.crc32(k.encode()) % 4096 + 1
d = hashlib.sha256(k.encode()).digest()
print(hashlib.md5((d * (n // 32 + 1))[:n]).hexdigest())
EOF
}
got_md5() { timeout 30 md5sum <"$MNT/$1" 2>/dev/null | awk '{ print $1 }'; }

OPTS="endpoint=http://127.0.0.1:$PORT_s3,path_style,region=us-east-1"
if ! mount_objfs s3://bkt "$MNT" "$OPTS"; then
	fail "expected s3://bkt to mount with credentials from the metadata stand-in"
	summary
	exit 1
fi

# 1. the first credentials work
if [ "$(got_md5 k0000001)" = "$(want_md5 k0000001)" ]; then
	pass "first credentials: k0000001 reads byte-exact"
else
	fail "first credentials: expected k0000001 to read byte-exact"
fi
first=$(last_key)
n0=$(fetched)
case $first in
ASIA*) pass "the requests are signed with the stand-in's key id ($first; $n0 fetch)" ;;
*) fail "expected requests signed with the stand-in's key id, the server saw '$first'" ;;
esac

# 2. refused before their expiry: one failed read, then new ones
echo "$first" >"$REFUSE"
if timeout 30 cat "$MNT/k0000002" >/dev/null 2>"$TEST_TMP/cat.err"; then
	fail "refused: expected the read signed with the refused credentials to fail"
elif grep -q "Permission denied" "$TEST_TMP/cat.err"; then
	pass "refused: the read signed with them fails with EACCES ($(head -c 100 "$TEST_TMP/cat.err"))"
else
	fail "refused: expected EACCES, got: $(head -c 200 "$TEST_TMP/cat.err")"
fi
if grep -q "refused by the store as expired or unknown" "$OBJFS_LOG"; then
	pass "refused: the daemon says the store refused them and resolves them again"
else
	fail "refused: expected a log line saying the store refused the credentials; log:"
	excerpt "$OBJFS_LOG"
fi
if [ "$(got_md5 k0000002)" = "$(want_md5 k0000002)" ]; then
	pass "refused: the next read is byte-exact"
else
	fail "refused: expected the next read of k0000002 to be byte-exact (the credentials kept?)"
fi
second=$(last_key)
n1=$(fetched)
if [ "$second" != "$first" ] && [ "$n1" -eq $((n0 + 1)) ]; then
	pass "refused: signed with new credentials ($second), the metadata service asked once more"
else
	fail "refused: expected new credentials fetched once (key '$second' after '$first', fetches $n0 -> $n1)"
fi
for k in k0000003 k0000004 k0000005; do
	[ "$(got_md5 "$k")" = "$(want_md5 "$k")" ] || fail "refused: expected $k byte-exact after the refresh"
done
if [ "$(fetched)" -eq "$n1" ]; then
	pass "refused: later reads use the new credentials without asking again"
else
	fail "refused: expected no further fetch of credentials ($n1 -> $(fetched))"
fi

# 3. a listing refused the same way (a second later: another key id is
# taken as refused at most once a second)
sleep 1.2
echo "$second" >>"$REFUSE"
r0=$(refused)
timeout 30 ls "$MNT/" >/dev/null 2>&1 || true
if timeout 30 ls "$MNT/" 2>/dev/null | grep -q k0000199; then
	pass "listing: ls works again after one refused listing ($(($(refused) - r0)) refused requests)"
else
	fail "listing: expected ls to list k0000199 after the refused credentials were resolved again"
fi
if [ "$(last_key)" != "$second" ]; then
	pass "listing: signed with the third credentials ($(last_key))"
else
	fail "listing: expected new credentials after the refusal, still $(last_key)"
fi

check_unmount "creds_refused" "$MNT"
summary
