#!/bin/bash
# shellcheck source-path=SCRIPTDIR
#
# perms.sh: who may read a mount, and what objfs keeps to itself.
#
#   OBJFS=/path/to/objfs tests/integration/perms.sh
#
# Runs as root and checks, with a second, unprivileged user (objfstest,
# created when missing) and a third one (uid 65534):
#
#  - without allow_other only the mounting user gets in (EACCES for others);
#  - allow_other without default_permissions: modes are shown but not
#    enforced (every user reads everything, as documented);
#  - allow_other,default_permissions with umask=, uid=, gid=: the modes
#    shown (write bits always clear) are the ones the kernel enforces;
#  - the GPU side API: a capability token is refused when presented by
#    another uid (either way round), accepted from its owner; a user the
#    modes keep out cannot get one (the open fails first);
#  - TLS: verification is on by default (nginx with a certificate of
#    lib.sh's test CA, the CA not given: the mount fails, naming TLS),
#    ca_file= makes it work, a wrong CA or host name fails, a missing
#    ca_file is named, insecure works and warns even at log_level=error;
#    the same for S3 over HTTPS (stub.sh);
#  - secrets: an S3 mount at log_level=debug (stub endpoint recording the
#    headers objfs sent) lists, reads and misses; its log holds neither the
#    secret key, nor the session token, nor any request signature;
#  - a credentials or config file holding a secret key and readable by
#    others draws a warning; mode 600 does not.
#
# Exit status: 0 all passed, 1 something failed, 77 skipped (no /dev/fuse;
# not root, except under CI=true where that fails), 99 binary missing.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=stub.sh
. "$HERE/stub.sh"

skip_unless_fuse
require_objfs
CLIENT=$(test_binary side_client SIDE_CLIENT) || exit 99

if [ "$(id -u)" -ne 0 ]; then
	[ "${CI:-}" = true ] && { echo "FAIL: perms.sh runs as root under CI"; exit 1; }
	skip "needs root to act as a second user"
fi
for t in setpriv useradd openssl; do
	command -v "$t" >/dev/null 2>&1 || {
		[ "${CI:-}" = true ] && { echo "FAIL: $t is missing (tests/deps.sh)"; exit 1; }
		skip "$t is not installed"
	}
done

TO=60
SHORT_TO=30
EXTRA_OPTS=${OBJFS_TEST_OPTS:-}
WORK=$TEST_TMP/work
SRC=$TEST_TMP/src
MNT=$TEST_TMP/mnt
PUB=$TEST_TMP/pub          # readable by the other users: scripts, capabilities
TUSER=objfstest
NOBODY=65534

# shellcheck source=battery.sh
. "$HERE/battery.sh"

second_user "$TUSER" || { echo "ERROR: cannot create the test user $TUSER" >&2; exit 99; }

# a python the other users may run (root's PATH may hold a private one)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
AS_NOBODY=(setpriv --reuid="$NOBODY" --regid="$NOBODY" --clear-groups --)

stub_isolate_aws

# The others must reach the mount points (mktemp -d is 0700).
chmod 711 "$TEST_TMP"
mkdir -p "$WORK" "$SRC/sub" "$PUB"
chmod 755 "$PUB"
mkdir -m 1777 "$PUB/drop"
echo "top secret bytes" >"$SRC/f.txt"
echo "in a directory" >"$SRC/sub/g.txt"
head -c $((3 << 20)) /dev/urandom >"$SRC/big.bin"

# probe PATH...: one word per path, as the caller sees it: "ok" when a
# directory lists / a file reads, else the errno name.
cat >"$PUB/probe.py" <<'EOF'
import errno, os, sys
out = []
for p in sys.argv[1:]:
    try:
        if os.path.isdir(p):
            os.listdir(p)
        else:
            with open(p, "rb") as f:
                f.read()
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode.get(e.errno, str(e.errno)))
print(" ".join(out))
EOF
chmod 644 "$PUB/probe.py"
# probe [CMD...]: probe.py run through CMD (AS_USER, AS_NOBODY; root when none)
probe() { timeout "$SHORT_TO" "$@" "$PY" "$PUB/probe.py" "$MNT" "$MNT/f.txt" "$MNT/sub" "$MNT/sub/g.txt" 2>&1; }
modes() { timeout "$SHORT_TO" stat -c '%a %u %g' -- "$MNT" "$MNT/f.txt" "$MNT/sub" 2>&1 | tr '\n' '|'; }

# ---------------------------------------------------------------- servers

TLS=$TLS_DIR
# lib.sh's test CA: "server" (127.0.0.1 and localhost), "nameonly"
# (localhost only); "rogue", a CA that signed neither
if ! tls_leaf server "IP:127.0.0.1,DNS:localhost" || ! tls_leaf nameonly "DNS:localhost" ||
	! tls_ca rogue; then
	echo "ERROR: openssl could not make the test certificates" >&2
	exit 99
fi
STUB=$TEST_TMP/s3stub
mkdir -p "$STUB/objs"
cp "$SRC/f.txt" "$SRC/big.bin" "$STUB/objs/"
s3stub_dir "$STUB" gone.bin || exit 99   # listed, but 404: an error path to log
HTTPS_PORT=$(free_port)
NAMEONLY_PORT=$(free_port)
S3_PORT=$(free_port)
S3TLS_PORT=$(free_port)
H2_PORT=$(free_port)
NGINX_EXTRA_CONF="
$(nginx_tls_server -l http2 -a "$TEST_TMP/h2.log" -f '$server_protocol $request' "$H2_PORT" "$SRC")
$(nginx_tls_server "$HTTPS_PORT" "$SRC")
$(nginx_tls_server -c nameonly "$NAMEONLY_PORT" "$SRC")
$(s3stub_server "$S3_PORT" bkt "$STUB")
$(s3stub_server "$S3TLS_PORT" bkt "$STUB" server | sed "s/stub_$S3TLS_PORT/stubtls/")"
nginx_start "$SRC" || { fail "expected nginx to start"; summary; exit 1; }
URL=http://127.0.0.1:$NGINX_PORT/data/
log "objfs: $OBJFS; nginx on $NGINX_PORT (https $HTTPS_PORT, S3 stub $S3_PORT, S3 over TLS $S3TLS_PORT)"

# ---------------------------------------------------------------- access

# mount_as LABEL OPTS: mount $URL at $MNT with OPTS; fail and return 1 if not.
mount_as() {
	if mount_objfs "$URL" "$MNT" "$(opts "$2")"; then
		return 0
	fi
	fail "$1: expected $URL to mount with -o $2"
	return 1
}

# expect_access LABEL WHO GOT WANT
expect_access() {
	if [ "$3" = "$4" ]; then
		pass "$1: $2 gets '$4' (mount, file, dir, file in dir)"
	else
		fail "$1: expected $2 to get '$4' (mount, file, dir, file in dir), got '$3'"
	fi
}

# t_access LABEL OPTS MODES USER_GETS NOBODY_GETS: mount with OPTS; the
# mode, uid and gid stat shows for the mount, a file and a directory are
# MODES; root reads everything; the two other users get what probe says.
t_access() {
	local label=$1 o=$2 want=$3 m
	mount_as "$label" "$o" || return
	m=$(modes)
	if [ "$m" = "$want" ]; then
		pass "$label: mode/uid/gid of mount, file, dir are '$want' (write bits clear)"
	else
		fail "$label: expected mode/uid/gid '$want', got '$m'"
	fi
	expect_access "$label" root "$(probe)" "ok ok ok ok"
	expect_access "$label" "$TUSER" "$(probe "${AS_USER[@]}")" "$4"
	expect_access "$label" "uid $NOBODY" "$(probe "${AS_NOBODY[@]}")" "$5"
	check_unmount "$label" "$MNT"
}

# The owner (uid=) still cannot write: the mount is read-only.
t_owner_cannot_write() {
	local out
	mount_as "uid= owner writes" "allow_other,default_permissions,uid=$TUID" || return
	out=$(timeout "$SHORT_TO" "${AS_USER[@]}" "$PY" -c '
import errno, os, sys
m = sys.argv[1]
for name, op in (("open O_WRONLY", lambda: os.open(m + "/f.txt", os.O_WRONLY)),
                 ("create", lambda: os.open(m + "/new", os.O_WRONLY | os.O_CREAT, 0o644)),
                 ("chmod", lambda: os.chmod(m + "/f.txt", 0o666)),
                 ("mkdir", lambda: os.mkdir(m + "/d"))):
    try:
        op()
        print(name, "succeeded")
    except OSError as e:
        print(name, errno.errorcode[e.errno])' "$MNT" 2>&1 | tr '\n' '|')
	if [ "$out" = "open O_WRONLY EROFS|create EROFS|chmod EROFS|mkdir EROFS|" ]; then
		pass "uid=$TUID: the owner's writes, creates, chmod and mkdir fail with EROFS"
	else
		fail "uid=$TUID: expected EROFS for the owner's writes, got '$out'"
	fi
	check_unmount "uid= owner writes" "$MNT"
}

# ---------------------------------------------------------------- side API

# side_hello WHO CAPFILE: what the daemon answers to HELLO with CAPFILE
side_hello() {
	if [ "$1" = root ]; then
		timeout "$SHORT_TO" "$CLIENT" hello "$2" 2>&1
	else
		timeout "$SHORT_TO" "${AS_USER[@]}" "$CLIENT" hello "$2" 2>&1
	fi
}

t_side_uid() {
	local out
	mount_as "side API" "allow_other" || return
	if ! timeout "$SHORT_TO" "$CLIENT" cap "$MNT/big.bin" "$PUB/root.cap" ||
		! timeout "$SHORT_TO" "${AS_USER[@]}" "$CLIENT" cap "$MNT/big.bin" "$PUB/drop/user.cap"; then
		fail "side API: expected root and $TUSER to get a capability for big.bin"
		check_unmount "side API" "$MNT"
		return
	fi
	chmod 644 "$PUB/root.cap"
	out="$(side_hello root "$PUB/root.cap")|$(side_hello user "$PUB/drop/user.cap")"
	if [ "$out" = "accepted|accepted" ]; then
		pass "side API: each user's own token is accepted (controls)"
	else
		fail "side API: expected root and $TUSER to be accepted with their own tokens, got '$out'"
	fi
	out=$(side_hello user "$PUB/root.cap")
	if [ "$out" = "refused Permission denied" ]; then
		pass "side API: root's token presented by uid $TUID is refused (EACCES)"
	else
		fail "side API: expected root's token from uid $TUID to be refused with EACCES, got '$out'"
	fi
	out=$(side_hello root "$PUB/drop/user.cap")
	if [ "$out" = "refused Permission denied" ]; then
		pass "side API: uid $TUID's token presented by root is refused (EACCES)"
	else
		fail "side API: expected uid $TUID's token from root to be refused with EACCES, got '$out'"
	fi
	if out=$(timeout 60 "${AS_USER[@]}" "$CLIENT" reads "$MNT/big.bin" "$SRC/big.bin" 2>&1); then
		pass "side API: uid $TUID (allow_other) reads big.bin through its own session correctly"
	else
		fail "side API: expected uid $TUID's side reads to equal the source:"
		printf '%s\n' "$out" | grep -v '^ok' | head -5 | sed 's/^/    | /'
	fi
	check_unmount "side API" "$MNT"

	mount_as "side API, umask=077" "allow_other,default_permissions,umask=077" || return
	rm -f "$PUB/drop/user.cap"
	out=$(timeout "$SHORT_TO" "${AS_USER[@]}" "$CLIENT" cap "$MNT/big.bin" "$PUB/drop/user.cap" 2>&1)
	if [ ! -e "$PUB/drop/user.cap" ] && [[ $out == *"Permission denied"* ]]; then
		pass "side API: a user the modes keep out gets no capability (open: EACCES)"
	else
		fail "side API: expected uid $TUID to be refused a capability under umask=077, got '$out'"
	fi
	check_unmount "side API, umask=077" "$MNT"
}

# ---------------------------------------------------------------- TLS

# tls_refused DESC REGEX URL [OPTS]: the mount fails, stderr matches REGEX
tls_refused() {
	local desc=$1 re=$2 url=$3 o=${4:-}
	expect_mount_error "$desc" "$MNT" ${o:+-o "$o"} "$url" "$MNT"
	if grep -E -i -q -- "$re" "$WORK/err.err"; then
		pass "$desc: the message names the cause ($re)"
	else
		fail "$desc: expected stderr to match '$re', got: $(head -c 300 "$WORK/err.err")"
	fi
}

# tls_mounts DESC URL OPTS FILE: mounts, FILE reads as the source's f.txt
tls_mounts() {
	local desc=$1 url=$2 o=$3 file=$4 got
	if ! mount_objfs "$url" "$MNT" "$o"; then
		fail "$desc: expected $url to mount with -o $o"
		return 1
	fi
	got=$(timeout "$SHORT_TO" cat "$MNT/$file" 2>&1)
	if [ "$got" = "$(cat "$SRC/f.txt")" ]; then
		pass "$desc: mounts and reads $file"
	else
		fail "$desc: expected $file to read as the source, got '$got'"
	fi
}

# HTTP/1.1 by default against a server that offers HTTP/2 over TLS (one
# connection per request in flight); -o http_version=2 takes HTTP/2.
t_http_version() {
	local h2=https://127.0.0.1:$H2_PORT/data/ v want
	for v in default 2; do
		: >"$TEST_TMP/h2.log"
		want="HTTP/1.1"
		[ "$v" = 2 ] && want="HTTP/2.0"
		if tls_mounts "http_version=$v against an HTTP/2 server" "$h2" \
			"ca_file=$TLS/ca.pem$([ "$v" = 2 ] && echo ,http_version=2)" f.txt; then
			check_unmount "http_version=$v" "$MNT"
			if [ -s "$TEST_TMP/h2.log" ] && ! grep -v -q "^$want " "$TEST_TMP/h2.log"; then
				pass "http_version=$v: every request of the mount was $want ($(wc -l <"$TEST_TMP/h2.log") in the server's log)"
			else
				fail "http_version=$v: expected only $want requests in the server's log, got: $(sort "$TEST_TMP/h2.log" | uniq -c | head -c 300)"
			fi
		fi
	done
}

t_tls() {
	local https=https://127.0.0.1:$HTTPS_PORT/data/ s3tls=https://127.0.0.1:$S3TLS_PORT
	tls_refused "https, a test CA's certificate, no ca_file" "TLS|certificate" "$https" "retries=0"
	tls_refused "https, ca_file of another CA" "TLS|certificate" "$https" "retries=0,ca_file=$TLS/rogue.pem"
	tls_refused "https, ca_file missing" "ca_file.*No such file" "$https" "ca_file=$TLS/missing.pem"
	tls_refused "https, certificate for another host name (localhost only, asked 127.0.0.1)" \
		"TLS|certificate" "https://127.0.0.1:$NAMEONLY_PORT/data/" "retries=0,ca_file=$TLS/ca.pem"
	if tls_mounts "https with ca_file" "$https" "ca_file=$TLS/ca.pem" f.txt; then
		if grep -q "insecure\|verification is OFF" "$OBJFS_LOG"; then
			fail "https with ca_file: expected no insecure warning, log: $(head -c 300 "$OBJFS_LOG")"
		fi
		check_unmount "https with ca_file" "$MNT"
	fi
	if tls_mounts "https by host name with its certificate" "https://localhost:$NAMEONLY_PORT/data/" \
		"ca_file=$TLS/ca.pem" f.txt; then
		check_unmount "https by host name" "$MNT"
	fi
	if tls_mounts "https, insecure, log_level=error" "$https" "insecure,log_level=error" f.txt; then
		if grep -q "TLS certificate verification is OFF (insecure)" "$OBJFS_LOG"; then
			pass "insecure: the log says 'TLS certificate verification is OFF (insecure)' even at log_level=error"
		else
			fail "insecure: expected a loud warning in the log; got: $(head -c 300 "$OBJFS_LOG")"
		fi
		check_unmount "https, insecure" "$MNT"
	fi
	# S3 over TLS (the stub accepts any signature)
	AWS_ACCESS_KEY_ID=AKIDTLSTEST AWS_SECRET_ACCESS_KEY=tls-test-secret \
		tls_refused "S3 over https, a test CA's certificate, no ca_file" "TLS certificate.*not trusted" \
		s3://bkt "endpoint=$s3tls,retries=0"
	if AWS_ACCESS_KEY_ID=AKIDTLSTEST AWS_SECRET_ACCESS_KEY=tls-test-secret \
		tls_mounts "S3 over https with ca_file" s3://bkt "endpoint=$s3tls,ca_file=$TLS/ca.pem" f.txt; then
		check_unmount "S3 over https" "$MNT"
	fi
}

# ---------------------------------------------------------------- secrets

SECRET_KEY='perms/Test+Secret+Key0123456789abcdefXYZ'
SESSION_TOKEN="FwoGZXIvYXdzEPermsTestSessionToken$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"

t_secrets() {
	local log sigs n=0 hit=0 s
	: >"$STUB/access.log"
	if ! AWS_ACCESS_KEY_ID=AKIDPERMSTEST AWS_SECRET_ACCESS_KEY=$SECRET_KEY AWS_SESSION_TOKEN=$SESSION_TOKEN \
		mount_objfs s3://bkt "$MNT" "$(opts "endpoint=http://127.0.0.1:$S3_PORT,log_level=debug")"; then
		fail "secrets: expected the S3 stub to mount at log_level=debug"
		return
	fi
	log=$OBJFS_LOG
	timeout "$SHORT_TO" ls -la "$MNT" >/dev/null 2>&1
	timeout "$SHORT_TO" stat "$MNT/no-such-object" >/dev/null 2>&1
	if ! cmp -s "$MNT/big.bin" "$SRC/big.bin"; then
		fail "secrets: expected big.bin to read correctly from the S3 stub"
	fi
	timeout "$SHORT_TO" cat "$MNT/.objfs-stats" "$MNT/gone.bin" >/dev/null 2>&1
	check_unmount "secrets (S3 stub, log_level=debug)" "$MNT"
	if grep -q "mounted s3://bkt on $MNT (pid [0-9]*; credentials: environment; " "$log"; then
		pass "secrets: the summary at mount names the credential source (environment), no value"
	else
		fail "secrets: expected the summary line at mount to name the credential source 'environment'"
	fi
	sleep 0.2 # nginx writes its access log line after the response
	# every signature objfs sent, as the server saw it
	sigs=$(grep -o 'Signature=[0-9a-f]*' "$STUB/access.log" | cut -d= -f2 | sort -u)
	if ! grep -q 'token="FwoGZXIvYXdzEPermsTest' "$STUB/access.log" || [ -z "$sigs" ]; then
		fail "secrets: expected the stub's access log to hold signed requests with the session token; it has: $(head -c 400 "$STUB/access.log")"
		return
	fi
	if [ "$(grep -c '^objfs: ' "$log")" -lt 3 ]; then
		fail "secrets: expected debug lines in $log to search, got: $(head -c 300 "$log")"
		return
	fi
	for s in $sigs; do
		n=$((n + 1))
		grep -q -F -- "$s" "$log" && hit=1
		grep -q -F -- "${s:0:16}" "$log" && hit=1
	done
	if [ "$hit" -eq 0 ]; then
		pass "secrets: the debug log ($(wc -l <"$log") lines) holds none of the $n request signatures the server received"
	else
		fail "secrets: the debug log $log holds a request signature:"
		printf '%s\n' "$sigs" | grep -n -F -f - -- "$log" | head -5 | sed 's/^/    | /'
	fi
}

# After everything: no objfs output (logs, mount error messages) holds the
# secret key or the session token, whole or in part.
t_no_secret_anywhere() {
	local l n=0 bad=
	for l in "$TEST_TMP"/objfs.*.log "$WORK"/err.*; do
		[ -e "$l" ] || continue
		n=$((n + 1))
		if grep -q -F -e "${SECRET_KEY:0:12}" -e "${SECRET_KEY: -12}" \
			-e "${SESSION_TOKEN:20:20}" -e "${SESSION_TOKEN: -16}" -- "$l"; then
			bad="$bad $l"
		fi
	done
	if [ -z "$bad" ]; then
		pass "secrets: none of the $n objfs logs and outputs holds the secret key or the session token"
	else
		fail "secrets: the secret key or session token appears in:$bad"
	fi
}

# creds_mount DESC VAR FILE WARN(0|1): mount the S3 stub with credentials
# from FILE (VAR: AWS_SHARED_CREDENTIALS_FILE or AWS_CONFIG_FILE); the
# warning must be there (1) or not (0).
creds_mount() {
	local desc=$1 var=$2 f=$3 want=$4 got=0 saved=${!2}
	export "$var=$f"
	if ! mount_objfs s3://bkt "$MNT" "endpoint=http://127.0.0.1:$S3_PORT,log_level=info"; then
		fail "$desc: expected the S3 stub to mount with credentials from $f"
		export "$var=$saved"
		return
	fi
	export "$var=$saved"
	check_unmount "$desc" "$MNT"
	grep -q "readable by other users: run chmod 600 $f" "$OBJFS_LOG" && got=1
	if ! grep -q "credentials: profile 'default' from $f" "$OBJFS_LOG"; then
		fail "$desc: expected the credentials to come from $f; log: $(head -c 300 "$OBJFS_LOG")"
	elif [ "$got" = "$want" ]; then
		pass "$desc: $([ "$want" = 1 ] && echo "warns 'readable by other users: run chmod 600'" || echo "no warning")"
	else
		fail "$desc: expected $([ "$want" = 1 ] && echo "the warning" || echo "no warning"); log: $(head -c 300 "$OBJFS_LOG")"
	fi
}

t_creds_file_modes() {
	local crd=$WORK/credentials cfg=$WORK/config
	printf '[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = %s\n' "$SECRET_KEY" >"$crd"
	printf '[default]\nregion = us-east-1\naws_access_key_id = AKIDFILE\naws_secret_access_key = %s\n' \
		"$SECRET_KEY" >"$cfg"
	chmod 600 "$crd" "$cfg"
	creds_mount "credentials file, mode 600" AWS_SHARED_CREDENTIALS_FILE "$crd" 0
	chmod 644 "$crd"
	creds_mount "credentials file, mode 644" AWS_SHARED_CREDENTIALS_FILE "$crd" 1
	chmod 640 "$crd"
	creds_mount "credentials file, mode 640 (group)" AWS_SHARED_CREDENTIALS_FILE "$crd" 1
	creds_mount "config file holding the secret, mode 600" AWS_CONFIG_FILE "$cfg" 0
	chmod 644 "$cfg"
	creds_mount "config file holding the secret, mode 644" AWS_CONFIG_FILE "$cfg" 1
}

# ---------------------------------------------------------------- main

NO="EACCES EACCES EACCES EACCES"
ALL="ok ok ok ok"
DP=allow_other,default_permissions
t_access "no allow_other (only the mounting user)" "" "555 0 0|444 0 0|555 0 0|" "$NO" "$NO"
# without default_permissions the modes are shown, not enforced (README)
t_access "allow_other,umask=077 (modes not enforced)" allow_other,umask=077 \
	"500 0 0|400 0 0|500 0 0|" "$ALL" "$ALL"
t_access "$DP" "$DP" "555 0 0|444 0 0|555 0 0|" "$ALL" "$ALL"
t_access "$DP,umask=077" "$DP,umask=077" "500 0 0|400 0 0|500 0 0|" "$NO" "$NO"
t_access "$DP,uid=$TUID,umask=077" "$DP,uid=$TUID,umask=077" \
	"500 $TUID 0|400 $TUID 0|500 $TUID 0|" "$ALL" "$NO"
t_access "$DP,gid=$TGID,umask=027" "$DP,gid=$TGID,umask=027" \
	"550 0 $TGID|440 0 $TGID|550 0 $TGID|" "$ALL" "$NO"
t_access "$DP,umask=0" "$DP,umask=0" "555 0 0|444 0 0|555 0 0|" "$ALL" "$ALL"
t_access "$DP,umask=0777" "$DP,umask=0777" "0 0 0|0 0 0|0 0 0|" "$NO" "$NO"
t_owner_cannot_write
t_side_uid
t_tls
t_http_version
t_secrets
t_creds_file_modes
t_no_secret_anywhere
t_sanitizer_logs
summary
