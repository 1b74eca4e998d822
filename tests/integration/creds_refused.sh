#!/usr/bin/env bash
#
# creds_refused.sh: temporary credentials the store refuses before their
# expiry (revoked, rotated early) are resolved again at once and the
# refused request is signed anew and sent once more, so readers see
# nothing; credentials the store keeps refusing give EACCES, never a hang.
#
# A loopback stand-in for EC2 instance metadata (tests/imds_stub.py) hands
# out credentials valid for an hour, a new access key id each time it is
# asked; tests/s3_synth.py --refuse-keys answers requests signed with a key
# id listed in a file with 400 ExpiredToken, as S3 answers revoked
# temporary credentials. The test:
#
#  1. mounts and reads a key byte-exact with the first credentials;
#  2. a file opened before its credentials are refused reads byte-exact:
#     its GET was refused, signed anew off the engine thread with
#     credentials asked of the metadata service once more (the daemon logs
#     the refusal), and sent again; later reads ask nothing more;
#  3. a stat of a key not seen yet (a lookup: HEAD and a one-key listing),
#     an ls, and an fstat past attr_timeout (a HEAD alone, whose refusal
#     has no body) are refused the same way and answer at the first try;
#  4. with every key refused, a read fails with EACCES within seconds and
#     the metadata service is asked a bounded number of times.
#  5. keys the user gave (environment) refused: the message says the key
#     was refused, not that it is resolved again, and the mount fails.
#
# Without the change every read after 2's refusal failed for the hour.
# Exit: 0 pass, 1 fail, 77 skip (no FUSE).

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
got_md5() { timeout 30 md5sum <"$MNT/$1" 2>/dev/null | awk '{ print $1 }'; }

# attr_timeout=1: an open file's attributes are asked again (a HEAD) soon
OPTS="endpoint=http://127.0.0.1:$PORT_s3,path_style,region=us-east-1,attr_timeout=1"
if ! mount_objfs s3://bkt "$MNT" "$OPTS"; then
	fail "expected s3://bkt to mount with credentials from the metadata stand-in"
	summary
	exit 1
fi

# 1. the first credentials work
if [ "$(got_md5 k0000001)" = "$(synth_md5 k0000001)" ]; then
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

# 2. GETs refused: signed anew and sent again. The object is larger than
# a block, so its open fetches nothing and its reads' GETs meet the refusal.
BIG=$((24 << 20))
curl -sf -X POST "http://127.0.0.1:$PORT_s3/__put?key=big&size=$BIG" >/dev/null ||
	fail "expected s3_synth to add the key big"
exec 3<"$MNT/big"
echo "$first" >"$REFUSE"
r0=$(refused)
got=$(timeout 60 md5sum <&3 2>"$TEST_TMP/read.err" | awk '{ print $1 }')
exec 3<&-
if [ "$got" = "$(synth_md5 big "$BIG")" ] && [ "$(refused)" -gt "$r0" ]; then
	pass "refused GET: a file opened before the refusal reads byte-exact ($(($(refused) - r0)) GET(s) refused on the way)"
else
	fail "refused GET: expected big byte-exact after $(($(refused) - r0)) refused request(s), got '$got' $(head -c 200 "$TEST_TMP/read.err")"
fi
if grep -q "refused by the store as expired or unknown" "$OBJFS_LOG"; then
	pass "refused GET: the daemon says the store refused them and resolves them again"
else
	fail "refused GET: expected a log line saying the store refused the credentials; log:"
	excerpt "$OBJFS_LOG"
fi
second=$(last_key)
n1=$(fetched)
if [ "$second" != "$first" ] && [ "$n1" -eq $((n0 + 1)) ]; then
	pass "refused GET: sent again with new credentials ($second), the metadata service asked once more"
else
	fail "refused GET: expected new credentials fetched once (key '$second' after '$first', fetches $n0 -> $n1)"
fi
for k in k0000002 k0000004 k0000005; do
	[ "$(got_md5 "$k")" = "$(synth_md5 "$k")" ] || fail "refused GET: expected $k byte-exact after the refresh"
done
if [ "$(fetched)" -eq "$n1" ]; then
	pass "refused GET: later reads use the new credentials without asking again"
else
	fail "refused GET: expected no further fetch of credentials ($n1 -> $(fetched))"
fi

# 3. a lookup and a listing refused (2.2 s apart: refusals less than two
# gaps apart make the gap grow, as for a source whose every key is refused)
sleep 2.2
echo "$second" >>"$REFUSE"
r0=$(refused)
if [ "$(got_md5 k0000003)" = "$(synth_md5 k0000003)" ] && [ "$(refused)" -gt "$r0" ] &&
	[ "$(last_key)" != "$second" ]; then
	pass "refused lookup: k0000003 (not seen before) reads byte-exact at the first try, with new credentials ($(last_key))"
else
	fail "refused lookup: expected k0000003 byte-exact with new credentials ($(($(refused) - r0)) refused, key $(last_key))"
fi
third=$(last_key)
sleep 2.2
echo "$third" >>"$REFUSE"
r0=$(refused)
if timeout 30 ls "$MNT/" 2>"$TEST_TMP/ls.err" | grep -q k0000199 && [ "$(refused)" -gt "$r0" ] &&
	[ "$(last_key)" != "$third" ]; then
	pass "refused listing: ls lists every key at the first try, with new credentials ($(last_key))"
else
	fail "refused listing: expected ls to list k0000199 with new credentials ($(($(refused) - r0)) refused, key $(last_key)): $(head -c 200 "$TEST_TMP/ls.err")"
fi

# 3b. a HEAD refused: its answer has no body, so no code; a one-key listing
# signed with the same credentials tells (an open file's attributes, asked
# again past attr_timeout, come from a HEAD alone)
exec 4<"$MNT/k0000002"
fourth=$(last_key)
sleep 2.2
echo "$fourth" >>"$REFUSE"
r0=$(refused)
size=$(python3 -c 'import os; print(os.fstat(4).st_size)' 2>"$TEST_TMP/fstat.err")
exec 4<&-
if [ "$size" = "$(synth_size k0000002)" ] &&
	[ "$(refused)" -gt "$r0" ] && [ "$(last_key)" != "$fourth" ]; then
	pass "refused HEAD: fstat of an open file past attr_timeout answers at the first try ($size bytes, new credentials $(last_key))"
else
	fail "refused HEAD: expected fstat to give k0000002's size with new credentials, got '$size' ($(($(refused) - r0)) refused, key $(last_key)): $(head -c 200 "$TEST_TMP/fstat.err")"
fi

# 3c. a bodiless 400 to a HEAD that is not about the credentials (S3's
# answer to a HEAD of an SSE-C object without its key): the listing says
# the credentials are fine; nothing resolved, the error stands
exec 4<"$MNT/k0000011"
curl -sf -X POST "http://127.0.0.1:$PORT_s3/__headfail?key=k0000011" >/dev/null
n2=$(fetched)
l2=$(grep -c "refused by the store" "$OBJFS_LOG")
sleep 1.2
if python3 -c 'import os; os.fstat(4)' 2>/dev/null; then
	fail "HEAD 400 of another cause: expected fstat past attr_timeout to fail"
elif [ "$(fetched)" -eq "$n2" ] && [ "$(grep -c "refused by the store" "$OBJFS_LOG")" -eq "$l2" ]; then
	pass "HEAD 400 of another cause: fstat fails, the credentials are not resolved again"
else
	fail "HEAD 400 of another cause: expected no credential fetch ($n2 -> $(fetched)) and no new refusal logged ($l2 -> $(grep -c "refused by the store" "$OBJFS_LOG") lines)"
fi
exec 4<&-

# 4. every key refused: EACCES, no hang, the source not asked on every request
sleep 2.2
echo "*" >"$REFUSE"
n2=$(fetched)
start=$SECONDS
if timeout 60 cat "$MNT/k0000007" >/dev/null 2>"$TEST_TMP/cat.err"; then
	fail "all refused: expected the read to fail"
elif grep -q "Permission denied" "$TEST_TMP/cat.err" && [ $((SECONDS - start)) -lt 30 ]; then
	pass "all refused: the read fails with EACCES in $((SECONDS - start)) s"
else
	fail "all refused: expected EACCES within 30 s, got after $((SECONDS - start)) s: $(head -c 200 "$TEST_TMP/cat.err")"
fi
timeout 60 cat "$MNT/k0000008" "$MNT/k0000009" "$MNT/k0000010" >/dev/null 2>&1
n3=$(fetched)
if [ $((n3 - n2)) -ge 1 ] && [ $((n3 - n2)) -le $((SECONDS - start + 2)) ]; then
	pass "all refused: the metadata service asked $((n3 - n2)) time(s) in $((SECONDS - start)) s (at most once a second, less and less often)"
else
	fail "all refused: expected 1 to $((SECONDS - start + 2)) credential fetches, got $((n3 - n2))"
fi

check_unmount "creds_refused" "$MNT"

# 5. keys the user gave (the environment), refused: nothing can refresh
# them, so the message says the key was refused, not that they are
# resolved again; the mount fails with the store's reason
echo "*" >"$REFUSE"
rc=0
AWS_ACCESS_KEY_ID=AKIDSTATIC0000000000 AWS_SECRET_ACCESS_KEY=static-secret-0123456789 \
	AWS_EC2_METADATA_DISABLED=true timeout 60 "$OBJFS" -o "$OPTS" s3://bkt "$MNT" \
	>"$TEST_TMP/static.out" 2>"$TEST_TMP/static.err" </dev/null || rc=$?
if is_mounted "$MNT"; then
	fail "static keys refused: expected no mount"
	fusermount3 -u "$MNT"
elif [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
	grep -q "^objfs: the access key from environment was refused by the store .*: check AWS_ACCESS_KEY_ID" "$TEST_TMP/static.err" &&
	! grep -q -e "resolving them again" -e "expired or unknown" "$TEST_TMP/static.err"; then
	pass "static keys refused: exit $rc; $(head -n 2 "$TEST_TMP/static.err" | tr '\n' ' ' | cut -c 1-300)"
else
	fail "static keys refused: expected a non-zero exit, 'the access key from environment was refused' and no 'resolving them again'; exit $rc: $(head -c 600 "$TEST_TMP/static.err")"
fi
summary
