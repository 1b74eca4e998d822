#!/bin/bash
# https_direct.sh: the direct receive path over HTTPS against a
# real server: nginx with a certificate from lib.sh's test CA.
#
#   - a mount with ca_file= reads large and small objects byte-exact, the
#     data GETs on the direct path (requests_direct in .objfs-stats, no
#     fallbacks), a kept connection's TLS records read by objfs itself
#     (tls_own_conns), later TLS connections resuming the session (nginx
#     logs $ssl_session_reused);
#   - a certificate for another host name, and one from a CA not given,
#     are refused at mount with the existing clear messages (libcurl's);
#   - the certificate changing under a running mount (nginx reloaded with
#     one from an untrusted CA): the direct path refuses it too (a
#     fallback counted), libcurl refuses it and says so, the read fails
#     with EACCES (a refused certificate, as at any time), and no byte of
#     it is wrong;
#   - insecure: the untrusted certificate is read directly.
#
# Run as root (FUSE); skips (77) without /dev/fuse, openssl or nginx.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

skip_unless_fuse
require_objfs
command -v openssl >/dev/null || skip "openssl is not installed"
nginx_check || skip "nginx is not usable"

SHORT_TO=60
SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
TLS=$TLS_DIR
mkdir -p "$SRC"
head -c $((48 << 20)) /dev/urandom >"$SRC/big.bin"
head -c $((6 << 20)) /dev/urandom >"$SRC/mid.bin"
head -c $((6 << 20)) /dev/urandom >"$SRC/late.bin"
echo "small file over https" >"$SRC/f.txt"

# the test CA (lib.sh) and a rogue one; "server" of the test CA is served
# first, then, under the running mount, "untrusted" of the rogue CA
if ! { tls_leaf server "IP:127.0.0.1,DNS:localhost" && tls_leaf nameonly "DNS:localhost" &&
	tls_leaf untrusted "IP:127.0.0.1" rogue; }; then
	echo "ERROR: openssl could not make the test certificates" >&2
	exit 99
fi
cp "$TLS/server.pem" "$TLS/live.pem"
cp "$TLS/server.key" "$TLS/live.key"

HTTPS_PORT=$(free_port)
NAMEONLY_PORT=$(free_port)
# shellcheck disable=SC2034 # read by nginx_start (lib.sh)
NGINX_EXTRA_CONF="
$(nginx_tls_server -c live -a "$TEST_TMP/tls.log" -f '$ssl_session_reused $request' \
	"$HTTPS_PORT" "$SRC" "keepalive_requests 4; ssl_protocols TLSv1.2 TLSv1.3;")
$(nginx_tls_server -c nameonly "$NAMEONLY_PORT" "$SRC")"
nginx_start "$SRC" || { fail "expected nginx to start"; summary; exit 1; }
URL=https://127.0.0.1:$HTTPS_PORT/data/
log "objfs: $OBJFS; nginx https on $HTTPS_PORT (another name only: $NAMEONLY_PORT)"

stat_of() { awk -v k="$1" '$1 == k { print $2 }' "$MNT/.objfs-stats"; }
# reads_exact DESC FILE: FILE reads through the mount as it is in the source
reads_exact() {
	if timeout "$SHORT_TO" cmp -s "$MNT/$2" "$SRC/$2"; then
		pass "$1: $2 reads byte-exact"
	else
		fail "$1: expected $2 to read as the source, it differs or failed"
	fi
}

# ---------------------------------------------------------------- direct

# one connection: a sequential read's prefetched blocks wait for it, and
# go out as fewer, longer GETs (joined GETs, engine_direct.c), byte-exact
if mount_objfs "$URL" "$MNT" "ca_file=$TLS/ca.pem,max_connections=1"; then
	reads_exact "https, one connection" big.bin
	joined=$(stat_of requests_joined)
	reqs=$(stat_of requests)
	if [ "${joined:-0}" -gt 0 ] && [ "$(stat_of direct_fallbacks)" = 0 ]; then
		pass "https, one connection: $joined of $reqs ranges received on the GET before them"
	else
		fail "https, one connection: expected joined GETs and no fallback, got requests_joined=$joined of $reqs"
	fi
	# after its first response the connection's TLS 1.3 records are read by
	# objfs itself (src/net/tls_rx.c), decrypted into the blocks; the rest
	# of big.bin came that way, byte-exact above
	own=$(stat_of tls_own_conns)
	check "https, one connection: its records read by objfs after the first response (tls_own_conns=$own)" \
		[ "${own:-0}" -ge 1 ]
	check_unmount "https, one connection" "$MNT"
else
	fail "https, one connection: expected $URL to mount"
fi

# keepalive_requests 4: nginx closes every fourth request's connection, so
# the mount keeps making new ones, which resume the session
if mount_objfs "$URL" "$MNT" "ca_file=$TLS/ca.pem,max_connections=4"; then
	for f in big.bin f.txt mid.bin; do
		reads_exact "https with ca_file" "$f"
	done
	want=$(dd if="$SRC/big.bin" bs=4096 skip=3001 count=77 status=none | sha256sum)
	got=$(timeout "$SHORT_TO" dd if="$MNT/big.bin" bs=4096 skip=3001 count=77 status=none | sha256sum)
	check "https: a read at an odd offset is byte-exact" [ "$want" = "$got" ]
	direct=$(stat_of requests_direct)
	fb=$(stat_of direct_fallbacks)
	if [ "${direct:-0}" -gt 0 ] && [ "${fb:-1}" = 0 ]; then
		pass "https: $direct data GETs on the direct path, no fallback to libcurl"
	else
		fail "https: expected data GETs on the direct path and no fallbacks, got requests_direct=$direct direct_fallbacks=$fb"
	fi
	reused=$(grep -c '^r ' "$TEST_TMP/tls.log")
	conns=$(wc -l <"$TEST_TMP/tls.log")
	if [ "$reused" -gt 0 ]; then
		pass "https: TLS sessions resumed ($reused of $conns requests on resumed connections)"
	else
		fail "https: expected resumed TLS sessions in nginx's log, got none of $conns requests"
	fi

	# the certificate changes under the mount: one from a CA not given
	fb0=$(stat_of direct_fallbacks)
	cp "$TLS/untrusted.pem" "$TLS/live.pem"
	cp "$TLS/untrusted.key" "$TLS/live.key"
	kill -HUP "$NGINX_PID"
	sleep 1
	if timeout "$SHORT_TO" cat "$MNT/late.bin" >"$TEST_TMP/late.out" 2>"$TEST_TMP/late.err"; then
		fail "certificate changed to an untrusted one: expected the read to fail, it succeeded"
	elif grep -q "Permission denied" "$TEST_TMP/late.err"; then
		pass "certificate changed to an untrusted one: the read fails with EACCES"
	else
		fail "certificate changed: expected EACCES, got: $(head -c 200 "$TEST_TMP/late.err")"
	fi
	if [ ! -s "$TEST_TMP/late.out" ] || cmp -s "$TEST_TMP/late.out" <(head -c "$(stat -c %s "$TEST_TMP/late.out")" "$SRC/late.bin"); then
		pass "certificate changed: no wrong byte reached the reader"
	else
		fail "certificate changed: the reader got bytes that are not the object's"
	fi
	fb1=$(stat_of direct_fallbacks)
	if [ "${fb1:-0}" -gt "${fb0:-0}" ]; then
		pass "certificate changed: the direct path refused it too ($((fb1 - fb0)) handed to libcurl)"
	else
		fail "certificate changed: expected the direct path to refuse it (direct_fallbacks $fb0 -> $fb1)"
	fi
	if grep -q "SSL peer certificate\|certificate" "$OBJFS_LOG"; then
		pass "certificate changed: the log says why ($(grep -m1 certificate "$OBJFS_LOG" | cut -c1-120))"
	else
		fail "certificate changed: expected a certificate message in the log, got: $(tail -c 300 "$OBJFS_LOG")"
	fi
	check_unmount "https with ca_file" "$MNT"
else
	fail "https with ca_file: expected $URL to mount"
fi

# ---------------------------------------------------------------- refused

# refused DESC URL OPTS: the mount fails, and says it is the certificate
refused() {
	local desc=$1 url=$2 o=$3
	if timeout 60 "$OBJFS" -f -o "$o" "$url" "$MNT" >"$TEST_TMP/ref.out" 2>&1; then
		fail "$desc: expected the mount to be refused, objfs exited 0"
		unmount_objfs "$MNT" >/dev/null 2>&1
	elif grep -qE "TLS|certificate" "$TEST_TMP/ref.out"; then
		pass "$desc: refused ($(grep -m1 -E 'TLS|certificate' "$TEST_TMP/ref.out" | cut -c1-140))"
	else
		fail "$desc: expected a TLS or certificate message, got: $(head -c 300 "$TEST_TMP/ref.out")"
	fi
	is_mounted "$MNT" && unmount_objfs "$MNT" >/dev/null 2>&1
}
refused "untrusted certificate (no ca_file)" "$URL" "retries=0"
refused "certificate for another host name (localhost only, asked 127.0.0.1)" \
	"https://127.0.0.1:$NAMEONLY_PORT/data/" "retries=0,ca_file=$TLS/ca.pem"

# ---------------------------------------------------------------- insecure

if mount_objfs "$URL" "$MNT" "insecure,max_connections=2"; then
	reads_exact "insecure (the untrusted certificate's server)" mid.bin
	direct=$(stat_of requests_direct)
	check "insecure: data GETs on the direct path (requests_direct=$direct)" [ "${direct:-0}" -gt 0 ]
	check_unmount "insecure" "$MNT"
else
	fail "insecure: expected $URL to mount"
fi

summary
