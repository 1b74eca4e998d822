# shellcheck shell=bash
#
# lib.sh: helpers for the objfs integration tests.  Source it, do not run it.
#
#   . "$(dirname "$0")/lib.sh"
#   skip_unless_fuse
#   require_objfs
#   nginx_start "$src"            # exports NGINX_PORT NGINX_PREFIX NGINX_PID
#   mount_objfs "http://127.0.0.1:$NGINX_PORT/data/" "$mnt" "attr_timeout=1"
#   ...; pass "what held" / fail "what was expected, what happened"
#   unmount_objfs "$mnt"
#   summary                       # prints "N passed, N failed"; non-zero on failure
#
# Everything lives under one temporary directory ($TEST_TMP).  A trap runs
# cleanup() on every exit path (normal exit, error, INT, TERM): it unmounts
# whatever is still mounted, stops nginx and removes $TEST_TMP (kept when
# OBJFS_TEST_KEEP=1).
#
# mount_objfs and nginx_start start background processes that the calling
# shell must own (so it can wait for them): never call them inside $(...).
#
# Environment:
#   OBJFS            the objfs binary (default: <this dir>/../../src/objfs)
#   OBJFS_TEST_KEEP  1 = keep $TEST_TMP (logs, nginx conf) after the run
#   NGINX            the nginx binary (default: nginx from PATH, or /usr/sbin/nginx)
#   NGINX_EXTRA_CONF more nginx.conf text for the http block (another server
#                    block: HTTPS (nginx_tls_server), crafted listings), set
#                    before nginx_start

set -u

_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OBJFS=${OBJFS:-$_LIB_DIR/../../src/objfs}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
# byte-order sorting, but UTF-8 aware tools (names are UTF-8)
if locale -a 2>/dev/null | grep -qix 'c\.utf-\?8'; then
	export LC_ALL=C.UTF-8
else
	export LC_ALL=C
fi

PASS_COUNT=0
FAIL_COUNT=0
NGINX_PORT=
NGINX_PREFIX=
NGINX_PID=
NGINX_DATA=
OBJFS_PID=
OBJFS_LOG=
UNMOUNT_HOW=
UNMOUNT_STATUS=
export OBJFS_PID OBJFS_LOG UNMOUNT_HOW UNMOUNT_STATUS
declare -A _MOUNT_PID=()   # mountpoint -> objfs pid (started by mount_objfs)
declare -A _MOUNT_LOG=()   # mountpoint -> objfs stderr log
_EXTRA_MNTS=()             # mountpoints that might be mounted by a daemonised objfs

TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/objfs-it.XXXXXX") || {
	echo "lib.sh: mktemp -d failed" >&2
	exit 99
}
export TEST_TMP

log() { printf '%s\n' "$*"; }
note() { printf '  # %s\n' "$*"; }

pass() {
	PASS_COUNT=$((PASS_COUNT + 1))
	printf 'PASS: %s\n' "$*"
}

fail() {
	FAIL_COUNT=$((FAIL_COUNT + 1))
	printf 'FAIL: %s\n' "$*"
}

# check DESCRIPTION CMD...: pass if CMD succeeds, else fail (DESCRIPTION says
# what was expected).
check() {
	local desc=$1
	shift
	if "$@"; then pass "$desc"; else fail "$desc (command failed: $*)"; fi
}

# Print "N passed, N failed" alone on a line; return 1 when anything failed
# (or nothing ran at all).
summary() {
	printf '%d passed, %d failed\n' "$PASS_COUNT" "$FAIL_COUNT"
	[ "$FAIL_COUNT" -eq 0 ] && [ "$PASS_COUNT" -gt 0 ]
}

skip() {
	printf 'SKIP: %s\n' "$*"
	exit 77
}

# Exit 77 (automake "skipped") when FUSE cannot be used here.
skip_unless_fuse() {
	[ -c /dev/fuse ] || skip "/dev/fuse is missing"
	command -v fusermount3 >/dev/null 2>&1 || skip "fusermount3 is not installed"
	[ -x "$NGINX" ] || skip "nginx is not installed (looked for $NGINX)"
	command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
	command -v curl >/dev/null 2>&1 || skip "curl is not installed"
}

# Exit 99 (automake "hard error") when the binary under test is missing.
require_objfs() {
	if [ ! -x "$OBJFS" ]; then
		echo "ERROR: objfs binary not found or not executable: $OBJFS (build it, or set OBJFS=)" >&2
		exit 99
	fi
}

# A TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
	python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# ---------------------------------------------------------------- mounts

# Escape a path the way /proc/self/mountinfo does (octal for space, tab,
# newline, backslash).
_mountinfo_escape() {
	local p=$1
	p=${p//\\/\\134}
	p=${p// /\\040}
	p=${p//$'\t'/\\011}
	p=${p//$'\n'/\\012}
	printf '%s' "$p"
}

# is_mounted DIR: true if DIR is a mount point.  Reads mountinfo, so it never
# touches (and never hangs on) the FUSE file system itself.
is_mounted() {
	local esc
	esc=$(_mountinfo_escape "$1")
	awk -v m="$esc" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# Mount points under $TEST_TMP, deepest first (escaped as in mountinfo).
_mounts_under_tmp() {
	local esc
	esc=$(_mountinfo_escape "$TEST_TMP")
	awk -v t="$esc/" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

_pid_alive() {
	[ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null
}

# mount_objfs URL MNT [OPTS]: start "$OBJFS -f [-o OPTS] URL MNT" in the
# background, wait (up to 10 s) until MNT is a mount point.  Sets OBJFS_PID
# and OBJFS_LOG.  Returns non-zero, with the reason and the daemon's output on
# stderr, when the mount did not come up.
mount_objfs() {
	local url=$1 mnt=$2 opts=${3:-} pid i logf
	mkdir -p "$mnt" || return 1
	logf=$TEST_TMP/objfs.$(basename "$mnt").$RANDOM.log
	if [ -n "$opts" ]; then
		"$OBJFS" -f -o "$opts" "$url" "$mnt" >"$logf" 2>&1 &
	else
		"$OBJFS" -f "$url" "$mnt" >"$logf" 2>&1 &
	fi
	pid=$!
	_MOUNT_PID[$mnt]=$pid
	_MOUNT_LOG[$mnt]=$logf
	OBJFS_PID=$pid
	OBJFS_LOG=$logf
	for ((i = 0; i < 100; i++)); do
		if is_mounted "$mnt"; then
			return 0
		fi
		if ! _pid_alive "$pid"; then
			local st=0
			wait "$pid" 2>/dev/null || st=$?
			{
				echo "mount_objfs: expected $mnt to be mounted from $url${opts:+ (-o $opts)}," \
					"but objfs (pid $pid) exited with status $st before mounting; its output:"
				sed 's/^/    | /' "$logf" | tail -n 30
			} >&2
			unset '_MOUNT_PID[$mnt]'
			return 1
		fi
		sleep 0.1
	done
	{
		echo "mount_objfs: expected $mnt to be mounted within 10 s from $url${opts:+ (-o $opts)}," \
			"but it is not (objfs pid $pid still running); its output:"
		sed 's/^/    | /' "$logf" | tail -n 30
	} >&2
	unmount_objfs "$mnt" >/dev/null 2>&1
	return 1
}

# unmount_objfs MNT: fusermount3 -u (a few tries, the mount may be busy), then
# umount -l; then wait up to 10 s for the objfs daemon started by mount_objfs
# to exit (killed if it does not).  Sets UNMOUNT_HOW (fusermount3, umount -l,
# failed, not-mounted) and UNMOUNT_STATUS (the daemon's exit status, or
# "running"/"killed"/"unknown").  Returns 0 only when the mount is gone and
# the daemon exited by itself.
unmount_objfs() {
	local mnt=$1 pid=${_MOUNT_PID[$1]:-} i rc=0
	UNMOUNT_HOW=not-mounted
	UNMOUNT_STATUS=unknown
	if is_mounted "$mnt"; then
		UNMOUNT_HOW=failed
		for ((i = 0; i < 5; i++)); do
			timeout 10 fusermount3 -u "$mnt" 2>/dev/null
			if ! is_mounted "$mnt"; then
				UNMOUNT_HOW=fusermount3
				break
			fi
			sleep 0.5
		done
		if is_mounted "$mnt"; then
			echo "unmount_objfs: fusermount3 -u $mnt failed 5 times; trying umount -l" >&2
			timeout 10 umount -l "$mnt" 2>/dev/null
			if is_mounted "$mnt"; then
				echo "unmount_objfs: expected $mnt to be unmounted, but it is still mounted" >&2
				rc=1
			else
				UNMOUNT_HOW="umount -l"
			fi
		fi
	fi
	if [ -n "$pid" ]; then
		for ((i = 0; i < 100; i++)); do
			_pid_alive "$pid" || break
			sleep 0.1
		done
		if _pid_alive "$pid"; then
			echo "unmount_objfs: expected objfs (pid $pid) to exit after unmounting $mnt," \
				"but it is still running after 10 s; killing it" >&2
			kill -TERM "$pid" 2>/dev/null
			sleep 1
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			UNMOUNT_STATUS=killed
			rc=1
		else
			UNMOUNT_STATUS=0
			wait "$pid" 2>/dev/null || UNMOUNT_STATUS=$?
		fi
		unset '_MOUNT_PID[$mnt]'
	fi
	return "$rc"
}

# check_unmount LABEL MNT: fusermount3 -u works, the daemon exits 0.
check_unmount() {
	local label=$1 mnt=$2
	if unmount_objfs "$mnt" && [ "$UNMOUNT_HOW" = fusermount3 ] && [ "$UNMOUNT_STATUS" = 0 ] &&
		! is_mounted "$mnt"; then
		pass "$label: fusermount3 -u unmounted it and objfs exited with status 0"
	else
		fail "$label: expected fusermount3 -u to unmount $mnt and objfs to exit 0, got how='$UNMOUNT_HOW' status='$UNMOUNT_STATUS'"
	fi
}

# test_binary NAME [ENVVAR]: the path of tests/NAME next to $OBJFS's build
# ($ENVVAR overrides it); exits 99 when it is missing (make check builds it).
test_binary() {
	local p=${2:+${!2:-}}
	[ -n "$p" ] || p=$(dirname "$OBJFS")/../tests/$1
	[ -x "$p" ] || { echo "ERROR: $1 not found at $p (make check builds it)" >&2; exit 99; }
	printf '%s\n' "$p"
}

# gpu_probe BIN: skip (77) without a usable GPU, per "BIN probe".
gpu_probe() {
	"$1" probe >/dev/null 2>&1
	case $? in
	0) ;;
	77) skip "no usable GPU" ;;
	*) echo "ERROR: $1 probe failed" >&2; exit 99 ;;
	esac
}

# second_user NAME: makes the unprivileged system user NAME when missing
# (useradd may race with another test run making it too); sets TUID, TGID
# and AS_USER (the command prefix that runs as it). Returns 1 if it cannot.
second_user() {
	if ! id "$1" >/dev/null 2>&1; then
		useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin "$1" \
			>/dev/null 2>&1 || id "$1" >/dev/null 2>&1 || return 1
	fi
	TUID=$(id -u "$1")
	TGID=$(id -g "$1")
	AS_USER=(setpriv --reuid="$TUID" --regid="$TGID" --init-groups --)
}

# ---------------------------------------------------------------- memory

# What objfs may hold beyond cache_size (README, "Memory and unmounting"):
# threads' buffers, connections, listings.  The RSS bound of the load tests.
OBJFS_RSS_OVERHEAD_MB=64
export OBJFS_RSS_OVERHEAD_MB

# objfs_sanitized: true for an ASan/UBSan build of $OBJFS (its RSS is
# shadow memory and quarantine too: no RSS bound applies).
objfs_sanitized() {
	ldd "$OBJFS" 2>/dev/null | grep -q 'libasan\|libubsan'
}

# rss_sampler PID FILE: append PID's VmRSS (kB) to FILE every 0.2 s, in the
# background, until PID exits or the sampler is killed; sets RSS_SAMPLER.
# check_rss_cap FILE CACHE_MB: pass when the largest sample in FILE is under
# CACHE_MB + OBJFS_RSS_OVERHEAD_MB (a note only for sanitizer builds).
RSS_SAMPLER=
export RSS_SAMPLER
rss_sampler() {
	(
		while [ -r "/proc/$1/status" ]; do
			sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"
			sleep 0.2
		done
	) >>"$2" 2>/dev/null &
	RSS_SAMPLER=$!
}
check_rss_cap() {
	local max_kb limit_kb=$((($2 + OBJFS_RSS_OVERHEAD_MB) * 1024))
	max_kb=$(sort -n "$1" | tail -n 1)
	if [ -z "$max_kb" ]; then
		fail "expected RSS samples of objfs in $1, got none"
	elif objfs_sanitized; then
		note "sanitizer build: peak RSS ${max_kb} kB not checked against ${limit_kb} kB"
	elif [ "$max_kb" -le "$limit_kb" ]; then
		pass "peak RSS ${max_kb} kB stayed under cache_size + ${OBJFS_RSS_OVERHEAD_MB} MiB = ${limit_kb} kB ($(wc -l <"$1") samples)"
	else
		fail "expected peak RSS under cache_size + ${OBJFS_RSS_OVERHEAD_MB} MiB = ${limit_kb} kB, got ${max_kb} kB"
	fi
}

# missing_dep WHAT: a part of a test cannot run for want of WHAT: a failure
# under CI=true (tests/deps.sh installs everything), a note elsewhere.
missing_dep() {
	if [ "${CI:-}" = true ]; then
		fail "$* (CI=true: tests/deps.sh installs it)"
	else
		note "$*: not tested"
	fi
}

# remember_mountpoint DIR: cleanup() will unmount DIR if something (e.g. a
# daemonising objfs run by a test directly) left it mounted.
remember_mountpoint() {
	_EXTRA_MNTS+=("$1")
}

# ---------------------------------------------------------------- nginx

_nginx_write_conf() {
	local prefix=$1 port=$2 data=$3 user_line=
	# When run as root nginx's workers would drop to "nobody", who cannot
	# read a mktemp -d tree (mode 0700); keep them as root.
	if [ "$(id -u)" -eq 0 ]; then
		user_line="user root;"
	fi
	mkdir -p "$prefix"/client_body "$prefix"/proxy "$prefix"/fastcgi \
		"$prefix"/uwsgi "$prefix"/scgi "$prefix"/logs || return 1
	cat >"$prefix/nginx.conf" <<EOF
$user_line
daemon off;
master_process on;
worker_processes 2;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;

events {
    worker_connections 1024;
}

http {
    access_log $prefix/access.log;
    client_body_temp_path $prefix/client_body;
    proxy_temp_path $prefix/proxy;
    fastcgi_temp_path $prefix/fastcgi;
    uwsgi_temp_path $prefix/uwsgi;
    scgi_temp_path $prefix/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 10000;
    keepalive_timeout 65;

    server {
        listen 127.0.0.1:$port;
        server_name localhost;

        # JSON directory listings
        location /data/ {
            alias $data/;
            autoindex on;
            autoindex_format json;
        }
        # HTML directory listings (sizes must come from HEAD)
        location /html/ {
            alias $data/;
            autoindex on;
        }
        # JSON listings, bodies throttled to 2 MB/s per request; mounted with
        # max_connections=2 a 64 MiB read takes ~16 s, so a server stop
        # lands in the middle of it
        location /slow/ {
            alias $data/;
            autoindex on;
            autoindex_format json;
            limit_rate 2m;
        }
    }
${NGINX_EXTRA_CONF:-}
}
EOF
}

# nginx_check: the nginx binary is usable and has the autoindex module.
nginx_check() {
	local v
	v=$("$NGINX" -V 2>&1) || {
		echo "nginx_check: '$NGINX -V' failed: $v" >&2
		return 1
	}
	case $v in
	*--without-http_autoindex_module*)
		echo "nginx_check: expected nginx with the autoindex module, but it was built --without-http_autoindex_module" >&2
		return 1
		;;
	esac
	return 0
}

# Start nginx on the port/prefix/data already in NGINX_*; wait until it
# serves /data/.
_nginx_launch() {
	local i
	: >"$NGINX_PREFIX/error.log"
	"$NGINX" -p "$NGINX_PREFIX/" -c "$NGINX_PREFIX/nginx.conf" -e "$NGINX_PREFIX/error.log" \
		>>"$NGINX_PREFIX/stdout.log" 2>&1 &
	NGINX_PID=$!
	for ((i = 0; i < 100; i++)); do
		if ! _pid_alive "$NGINX_PID"; then
			wait "$NGINX_PID" 2>/dev/null
			NGINX_PID=
			return 1
		fi
		if timeout 5 curl -sf -o /dev/null "http://127.0.0.1:$NGINX_PORT/data/"; then
			export NGINX_PID
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# nginx_start DATA_DIR: serve DATA_DIR at /data/ (JSON autoindex), /html/
# (HTML autoindex) and /slow/ (JSON, 2 MB/s) on a free 127.0.0.1 port.
# Exports NGINX_PORT, NGINX_PREFIX, NGINX_PID.
nginx_start() {
	local data try
	data=$(cd "$1" && pwd) || {
		echo "nginx_start: data directory '$1' does not exist" >&2
		return 1
	}
	nginx_check || return 1
	NGINX_DATA=$data
	NGINX_PREFIX=$TEST_TMP/nginx
	export NGINX_PREFIX
	for ((try = 0; try < 5; try++)); do
		NGINX_PORT=$(free_port) || return 1
		export NGINX_PORT
		_nginx_write_conf "$NGINX_PREFIX" "$NGINX_PORT" "$NGINX_DATA" || return 1
		if _nginx_launch; then
			return 0
		fi
		# port stolen in between, or a config problem: try once more, then report
		if [ -n "$NGINX_PID" ]; then
			nginx_stop
		fi
	done
	{
		echo "nginx_start: expected nginx to serve http://127.0.0.1:$NGINX_PORT/data/, but it did not start; error.log:"
		sed 's/^/    | /' "$NGINX_PREFIX/error.log" "$NGINX_PREFIX/stdout.log" 2>/dev/null | tail -n 20
	} >&2
	return 1
}

# nginx_stop: fast shutdown (SIGTERM: open connections are dropped), wait for
# the master and its workers to be gone.  KILL after 10 s.
nginx_stop() {
	local pid=$NGINX_PID workers i w
	[ -n "$pid" ] || return 0
	workers=$(pgrep -P "$pid" 2>/dev/null | tr '\n' ' ')
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		_pid_alive "$pid" || break
		sleep 0.1
	done
	if _pid_alive "$pid"; then
		echo "nginx_stop: nginx (pid $pid) did not stop on SIGTERM within 10 s; killing it" >&2
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	for w in $workers; do
		for ((i = 0; i < 50; i++)); do
			_pid_alive "$w" || break
			sleep 0.1
		done
		kill -KILL "$w" 2>/dev/null
	done
	NGINX_PID=
	return 0
}

# nginx_restart_same_port: start nginx again with the same port, prefix and
# data (after nginx_stop).
nginx_restart_same_port() {
	local i
	if [ -z "$NGINX_PORT" ] || [ -z "$NGINX_PREFIX" ]; then
		echo "nginx_restart_same_port: nginx was never started" >&2
		return 1
	fi
	[ -z "$NGINX_PID" ] || nginx_stop
	# the port may linger briefly; nginx sets SO_REUSEADDR, but retry anyway
	for ((i = 0; i < 10; i++)); do
		if _nginx_launch; then
			return 0
		fi
		sleep 0.5
	done
	{
		echo "nginx_restart_same_port: expected nginx to serve again on port $NGINX_PORT, but it did not start; error.log:"
		sed 's/^/    | /' "$NGINX_PREFIX/error.log" 2>/dev/null | tail -n 20
	} >&2
	return 1
}

# ---------------------------------------------------------------- TLS

# The HTTPS tests' certificates live in $TLS_DIR (a test may point it at
# a directory of its own before the first call): a test CA "ca" and a
# server certificate "server" of it for 127.0.0.1 and localhost, made on
# first use and shared by every server block of the test; files already
# there are kept. EC P-256 keys (openssl takes milliseconds for them).
#
#   tls_ca NAME                  $TLS_DIR/NAME.pem + .key: a self-signed CA
#   tls_leaf NAME SAN [CA]       $TLS_DIR/NAME.pem + .key: a server
#                                certificate for SAN ("IP:127.0.0.1,DNS:x")
#                                signed by CA (default ca, made if missing)
#   nginx_tls_server [-c CERT] [-l LISTEN] [-a LOG -f FORMAT] PORT TARGET
#                    [DIRECTIVES]
#       prints an nginx server block for NGINX_EXTRA_CONF: TLS on
#       127.0.0.1:PORT (LISTEN: more listen parameters, e.g. http2;
#       LOG: its access log, one line a request in FORMAT, no ') with
#       the certificate CERT (a name in $TLS_DIR or a path without .pem;
#       default server, for 127.0.0.1 and localhost, made with the CA if
#       missing). TARGET: a directory, served at /data/ with nginx's JSON
#       index; http://HOST:PORT, every request proxied there as it came
#       (Host kept, so SigV4 signatures still verify; nothing buffered, so
#       what goes wrong upstream -- a body cut, reset or stalled --
#       reaches the client as it happens); or - for none (DIRECTIVES hold
#       the locations). DIRECTIVES: more text inside the server block.
#       Clients trust it with $TLS_DIR/ca.pem (objfs: -o ca_file=).
# Each returns non-zero, with openssl's words on stderr, when it fails; a
# test calls tls_leaf (or tls_ca) itself first when it must tell that
# failure apart, since nginx_tls_server usually runs inside $(...).
TLS_DIR=$TEST_TMP/tls

tls_ca() {
	[ -s "$TLS_DIR/$1.pem" ] && [ -s "$TLS_DIR/$1.key" ] && return 0
	mkdir -p "$TLS_DIR" || return 1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj "/CN=objfs test CA $1" -keyout "$TLS_DIR/$1.key" -out "$TLS_DIR/$1.pem" \
		>>"$TLS_DIR/openssl.log" 2>&1 ||
		{ echo "tls_ca: openssl could not make the CA $1: $(tail -n 3 "$TLS_DIR/openssl.log")" >&2; return 1; }
}

tls_leaf() {
	local name=$1 san=$2 ca=${3:-ca} d=$TLS_DIR
	[ -s "$d/$name.pem" ] && [ -s "$d/$name.key" ] && return 0
	tls_ca "$ca" || return 1
	{
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
			-keyout "$d/$name.key" -out "$d/$name.csr" &&
			printf 'subjectAltName=%s\n' "$san" >"$d/$name.ext" &&
			openssl x509 -req -in "$d/$name.csr" -CA "$d/$ca.pem" -CAkey "$d/$ca.key" \
				-CAcreateserial -days 2 -extfile "$d/$name.ext" -out "$d/$name.pem"
	} >>"$d/openssl.log" 2>&1 ||
		{ echo "tls_leaf: openssl could not make $name ($san, CA $ca): $(tail -n 3 "$d/openssl.log")" >&2; return 1; }
}

nginx_tls_server() {
	local OPTIND o cert=server listen='' alog='' afmt='' port target more body
	while getopts c:l:a:f: o; do
		case $o in
		c) cert=$OPTARG ;;
		l) listen=" $OPTARG" ;;
		a) alog=$OPTARG ;;
		f) afmt=$OPTARG ;;
		*) return 1 ;;
		esac
	done
	shift $((OPTIND - 1))
	port=$1 target=$2 more=${3:-}
	if [ "$cert" = server ]; then
		tls_leaf server "IP:127.0.0.1,DNS:localhost" || return 1
	fi
	case $cert in
	*/*) ;;
	*) cert=$TLS_DIR/$cert ;;
	esac
	case $target in
	-) body= ;;
	http://*)
		body="location / {
            proxy_pass $target;
            proxy_set_header Host \$http_host;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
            proxy_request_buffering off;
        }" ;;
	*) body="location /data/ { alias $target/; autoindex on; autoindex_format json; }" ;;
	esac
	if [ -n "$alog" ]; then
		printf "    log_format tls_%s '%s';\n" "$port" "$afmt"
		more="access_log $alog tls_$port;
        $more"
	fi
	cat <<EOF
    server {
        listen 127.0.0.1:$port ssl$listen;
        ssl_certificate $cert.pem;
        ssl_certificate_key $cert.key;
        $more
        $body
    }
EOF
}

# ---------------------------------------------------------------- cleanup

# at_cleanup CMD...: run CMD (one shell word list) at exit, after unmounting.
_CLEANUP_CMDS=()
# py_server_start NAME SCRIPT ARGS...: python3 SCRIPT ARGS in the background
# (stopped at exit), a server of tests/ that prints its port first; sets
# PORT_<NAME> to it. Exits the test (1) when it does not start.
py_server_start() {
	local name=$1 script=$2 port i
	shift 2
	python3 "$script" "$@" >"$TEST_TMP/$name.port" 2>"$TEST_TMP/$name.err" &
	at_cleanup "kill $! 2>/dev/null"
	for ((i = 0; i < 600; i++)); do
		port=$(head -n 1 "$TEST_TMP/$name.port" 2>/dev/null)
		[ -n "$port" ] && break
		sleep 0.1
	done
	if [ -z "$port" ]; then
		fail "${script##*/} $* did not start: $(head -c 300 "$TEST_TMP/$name.err")"
		summary
		exit 1
	fi
	printf -v "PORT_$name" '%s' "$port"
}

# synth_start NAME ARGS...: tests/s3_synth.py ARGS (py_server_start).
synth_start() {
	local name=$1
	shift
	py_server_start "$name" "$_LIB_DIR/../s3_synth.py" "$@"
}

# synth_size KEY: the size s3_synth.py gives KEY (its --size-max 4096);
# synth_md5 KEY [SIZE]: the md5 of its bytes, byte i being sha256(KEY)[i % 32]
synth_size() { python3 -c 'import sys, zlib; print(zlib.crc32(sys.argv[1].encode()) % 4096 + 1)' "$1"; }
synth_md5() {
	python3 - "$1" "${2:-$(synth_size "$1")}" <<'EOF'
import hashlib, sys
k, n = sys.argv[1], int(sys.argv[2])
d = hashlib.sha256(k.encode()).digest()
print(hashlib.md5((d * (n // 32 + 1))[:n]).hexdigest())
EOF
}

at_cleanup() {
	_CLEANUP_CMDS+=("$*")
}

cleanup() {
	local rc=$? mnt m left pid c
	trap - EXIT INT TERM
	set +e
	for mnt in "${!_MOUNT_PID[@]}"; do
		unmount_objfs "$mnt" >/dev/null 2>&1
	done
	for mnt in "${_EXTRA_MNTS[@]}"; do
		if is_mounted "$mnt"; then
			timeout 10 fusermount3 -u "$mnt" 2>/dev/null || timeout 10 umount -l "$mnt" 2>/dev/null
		fi
	done
	# anything else mounted below our temp dir (escaped names: use printf %b)
	while read -r m; do
		[ -n "$m" ] || continue
		m=$(printf '%b' "${m//\\/\\0}")
		timeout 10 fusermount3 -u "$m" 2>/dev/null || timeout 10 umount -l "$m" 2>/dev/null
	done < <(_mounts_under_tmp)
	nginx_stop >/dev/null 2>&1
	for c in "${_CLEANUP_CMDS[@]}"; do
		eval "$c"
	done
	# stray background jobs of ours (readers etc.)
	for pid in $(jobs -p); do
		kill -TERM "$pid" 2>/dev/null
	done
	left=$(_mounts_under_tmp)
	if [ -n "$left" ]; then
		echo "cleanup: still mounted, not removing $TEST_TMP: $left" >&2
	elif [ "${OBJFS_TEST_KEEP:-0}" = 1 ]; then
		echo "cleanup: keeping $TEST_TMP (OBJFS_TEST_KEEP=1)" >&2
	else
		timeout 60 rm -rf "$TEST_TMP"
	fi
	exit "$rc"
}

_on_signal() {
	echo "interrupted (signal), cleaning up" >&2
	exit "$1"
}

trap cleanup EXIT
trap '_on_signal 130' INT
trap '_on_signal 143' TERM
