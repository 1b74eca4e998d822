# shellcheck shell=bash
#
# rgw.sh: a throw-away single-node Ceph RGW (a real S3 server that verifies
# SigV4) on 127.0.0.1, for the integration tests and the benchmarks.  Source
# it, do not run it.
#
#   . tests/integration/rgw.sh
#   rgw_check || exit 77     # Ceph packages present?  (reason on stderr)
#   rgw_start "$dir"         # start mon + OSD + radosgw under $dir, make a user;
#                            # exports RGW_ENDPOINT (http://127.0.0.1:PORT),
#                            # RGW_ACCESS_KEY, RGW_SECRET_KEY, RGW_USER (the
#                            # user's uid), RGW_DIR, RGW_CONF
#   rgw_admin ARGS...        # radosgw-admin against that cluster
#   rgw_requests BUCKET [METHOD]  # how many requests RGW has logged for BUCKET
#                            # (path style; METHOD: GET, HEAD, ...; all when
#                            # omitted), from its access log lines
#   rgw_stop                 # stop every daemon rgw_start started (idempotent)
#
# Nothing under /etc/ceph or /var/lib/ceph is used: the cluster has its own
# conf file ($dir/ceph.conf, passed with -c to every daemon and tool), its
# own run/log/data directories, authentication off (auth * required =
# none), one memstore OSD (objects live in RAM; RGW_MEM bytes, default
# 4 GiB, caps them) and pools of size 1.  Only RGW's S3 front end is
# authenticated: it checks every request's SigV4 signature against the
# user's key, so a wrong secret gets 403 SignatureDoesNotMatch.  STS is on:
# the user ($RGW_USER) may get temporary credentials with a session token
# (s3util.py session-token).
#
# rgw_start returns 0 once an S3 request signed with the user's key lists
# the buckets; otherwise it stops what it started, prints the step that
# failed with the tail of the daemon logs on stderr and returns non-zero.
# It takes 10-30 s (RGW_START_TIMEOUT, default 120 s, bounds each wait).
#
# rgw_start installs an EXIT trap that calls rgw_stop and then whatever EXIT
# trap was set before (lib.sh's cleanup, say), passing the exit status on;
# INT and TERM exit through it when nobody trapped them.  Set your own traps
# before rgw_start, or call rgw_stop from them.  The daemons are background
# jobs of the calling shell: never call rgw_start inside $(...).
#
# $dir is not removed (lib.sh removes $TEST_TMP; a benchmark keeps its logs).
#
# Environment: RGW_ACCESS_KEY / RGW_SECRET_KEY (defaults below) to choose the
# user's key, RGW_MEM, RGW_START_TIMEOUT, CEPH_BIN (directory of the Ceph
# binaries, default: from PATH).

RGW_ENDPOINT=
RGW_DIR=
RGW_CONF=
RGW_ACCESS_KEY=${RGW_ACCESS_KEY:-OBJFSTESTACCESSKEY01}
RGW_SECRET_KEY=${RGW_SECRET_KEY:-objfs+test/Secret+Key0123456789abcdefghij}
RGW_USER=objfs
_RGW_PIDS=()
_RGW_TRAPPED=

_rgw_bin() {
	if [ -n "${CEPH_BIN:-}" ]; then
		printf '%s/%s' "$CEPH_BIN" "$1"
	else
		command -v "$1" || printf '/usr/bin/%s' "$1"
	fi
}

# rgw_check: 0 when every Ceph binary rgw_start needs is installed.
rgw_check() {
	local b missing=()
	for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph; do
		[ -x "$(_rgw_bin "$b")" ] || missing+=("$b")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "rgw_check: Ceph is not installed (missing ${missing[*]}; Debian packages ceph-mon ceph-osd radosgw)" >&2
		return 1
	fi
}

_rgw_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Prints the last lines of every daemon log, for a failure message.
_rgw_logs() {
	local f
	for f in "$RGW_DIR"/log/*.log "$RGW_DIR"/log/*.out; do
		[ -s "$f" ] || continue
		echo "  --- ${f#"$RGW_DIR"/} (last lines)"
		grep -v -e '^\s*$' "$f" | tail -n "${1:-15}" | sed 's/^/    | /'
	done
}

_rgw_fail() {
	{
		echo "rgw_start: $*"
		_rgw_logs 15
	} >&2
	rgw_stop
	return 1
}

_rgw_alive() {
	[ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null
}

# _rgw_daemon NAME CMD...: start CMD in the foreground mode of a Ceph daemon,
# as a background job of this shell; remember its pid.
_rgw_daemon() {
	local name=$1
	shift
	"$@" >>"$RGW_DIR/log/$name.out" 2>&1 &
	_RGW_PIDS+=("$!")
}

# _rgw_wait WHAT PID CMD...: poll CMD until it succeeds (up to
# RGW_START_TIMEOUT s); fail at once if daemon PID died.
_rgw_wait() {
	local what=$1 pid=$2 deadline
	shift 2
	deadline=$((SECONDS + ${RGW_START_TIMEOUT:-120}))
	while ((SECONDS < deadline)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		if [ -n "$pid" ] && ! _rgw_alive "$pid"; then
			_rgw_fail "expected $what, but the daemon (pid $pid) exited"
			return 1
		fi
		sleep 0.25
	done
	_rgw_fail "expected $what within ${RGW_START_TIMEOUT:-120} s, but it did not happen"
}

# rgw_require LABEL [PYTHON]: 0 when a throw-away RGW can run here and
# PYTHON (default python3) has boto3; otherwise a failure under CI=true
# (tests/deps.sh installs both) or a note, and 1. Needs lib.sh's fail/note.
rgw_require() {
	local label=$1 py=${2:-python3} why
	if rgw_check 2>"$TEST_TMP/rgw_check.err" && "$py" -c 'import boto3' 2>/dev/null; then
		return 0
	fi
	why="$(cat "$TEST_TMP/rgw_check.err") (and boto3 for $py)"
	if [ "${CI:-}" = true ]; then
		fail "$label: expected Ceph RGW and boto3 under CI=true (tests/deps.sh installs them): $why"
	else
		note "$label skipped: $why"
	fi
	return 1
}

rgw_ceph() {
	timeout 30 "$(_rgw_bin ceph)" -c "$RGW_CONF" --connect-timeout 10 "$@"
}

rgw_admin() {
	timeout 60 "$(_rgw_bin radosgw-admin)" -c "$RGW_CONF" -n client.admin "$@"
}

# rgw_requests BUCKET [METHOD]: requests for BUCKET (path-style URLs) in
# RGW's access log ("beast: ... "GET /BUCKET?... HTTP/1.1" 200 ..."), after
# a moment for the log thread to write them out.
rgw_requests() {
	local m=${2:-[A-Z]+}
	sleep 1
	grep -c -E "beast: .* \"$m /$1([/?]| HTTP)" "$RGW_DIR/log/client.rgw.log"
}

# An S3 request signed with the user's key (boto3), listing the buckets.
_rgw_s3_ok() {
	python3 - "$RGW_ENDPOINT" "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" <<'EOF'
import sys, boto3, botocore.config
ep, ak, sk = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                  region_name="us-east-1",
                  config=botocore.config.Config(retries={"max_attempts": 1},
                                                connect_timeout=2, read_timeout=5))
s3.list_buckets()
EOF
}

_rgw_osd_up() {
	rgw_ceph osd dump 2>/dev/null | grep -q '^osd\.0 up'
}

_rgw_write_conf() {
	local fsid=$1 mon_port=$2 rgw_port=$3 d=$RGW_DIR
	cat >"$RGW_CONF" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mon_port
mon initial members = a
ms bind msgr2 = false
ms bind ipv6 = false
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
keyring = $d/keyring
run dir = $d/run
admin socket = $d/run/\$name.asok
log file = $d/log/\$name.log
pid file = $d/run/\$name.pid
crash dir = $d/crash
erasure code dir = /usr/lib/$(uname -m)-linux-gnu/ceph/erasure-code
plugin dir = /usr/lib/$(uname -m)-linux-gnu/ceph
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 2
mon data avail crit = 1
osd crush chooseleaf type = 0
debug ms = 0

[mon]
mon data = $d/mon.\$id

[osd]
osd data = $d/osd.\$id
osd objectstore = memstore
memstore device bytes = ${RGW_MEM:-4294967296}
osd max object size = 1073741824
# no mon commands from the OSD while it boots: it may send them before it
# has the monmap (fsid 0: "wrong fsid", and the OSD exits); rgw_start puts
# osd.0 into the CRUSH map itself
osd crush update on start = false
osd class update on start = false

[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $d/rgw
rgw enable usage log = false
# virtual-host style: curl resolves BUCKET.localhost to loopback by itself
rgw dns name = localhost
rgw thread pool size = 64
# STS (GetSessionToken): temporary credentials with a session token.  The
# STS engine goes last: first (the default) its rejection would replace the
# local one, and a wrong secret would get AccessDenied instead of
# SignatureDoesNotMatch
rgw sts key = objfsstskey01234
rgw s3 auth use sts = true
rgw s3 auth order = external, local, sts
EOF
}

_rgw_trap() {
	local rc=$?
	rgw_stop
	if [ -n "$_RGW_PREV_EXIT" ]; then
		(exit "$rc")
		eval "$_RGW_PREV_EXIT"
	fi
	exit "$rc"
}

_rgw_install_trap() {
	local prev
	[ -n "$_RGW_TRAPPED" ] && return 0
	_RGW_TRAPPED=1
	prev=$(trap -p EXIT)
	# trap -p prints: trap -- 'CMD' EXIT
	prev=${prev#"trap -- '"}
	prev=${prev%"' EXIT"}
	_RGW_PREV_EXIT=${prev//\'\\\'\'/\'}
	trap _rgw_trap EXIT
	[ -n "$(trap -p INT)" ] || trap 'exit 130' INT
	[ -n "$(trap -p TERM)" ] || trap 'exit 143' TERM
}

rgw_start() {
	local d=$1 fsid mon_port rgw_port t0=$SECONDS bin osd_uuid
	rgw_check || return 1
	mkdir -p "$d" || return 1
	RGW_DIR=$(cd "$d" && pwd)
	RGW_CONF=$RGW_DIR/ceph.conf
	export RGW_DIR RGW_CONF RGW_ACCESS_KEY RGW_SECRET_KEY RGW_USER
	_rgw_install_trap
	mkdir -p "$RGW_DIR"/{run,log,crash,rgw,mon.a,osd.0} || return 1
	fsid=$(cat /proc/sys/kernel/random/uuid)
	if ! mon_port=$(_rgw_port) || ! rgw_port=$(_rgw_port); then
		_rgw_fail "expected free ports on 127.0.0.1"
		return 1
	fi
	_rgw_write_conf "$fsid" "$mon_port" "$rgw_port"

	# mon
	bin=$(_rgw_bin ceph-authtool)
	"$bin" --create-keyring "$RGW_DIR/keyring" --gen-key -n mon. --cap mon 'allow *' \
		>>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "ceph-authtool failed"; return 1; }
	"$(_rgw_bin monmaptool)" --create --fsid "$fsid" --addv a "[v1:127.0.0.1:$mon_port]" \
		"$RGW_DIR/monmap" >>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "monmaptool failed"; return 1; }
	timeout 60 "$(_rgw_bin ceph-mon)" -c "$RGW_CONF" --mkfs -i a --monmap "$RGW_DIR/monmap" \
		--keyring "$RGW_DIR/keyring" >>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "ceph-mon --mkfs failed"; return 1; }
	_rgw_daemon mon.a "$(_rgw_bin ceph-mon)" -f -c "$RGW_CONF" -i a
	_rgw_wait "the monitor on 127.0.0.1:$mon_port to answer" "${_RGW_PIDS[-1]}" \
		rgw_ceph mon stat || return 1

	# one memstore OSD
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)
	rgw_ceph osd new "$osd_uuid" >>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "'ceph osd new' failed"; return 1; }
	rgw_ceph osd crush add osd.0 1.0 root=default >>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "'ceph osd crush add' failed"; return 1; }
	# the OSD boots only when its uuid is the one the monitor knows
	timeout 60 "$(_rgw_bin ceph-osd)" -c "$RGW_CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" \
		>>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "ceph-osd --mkfs failed"; return 1; }
	_rgw_daemon osd.0 "$(_rgw_bin ceph-osd)" -f -c "$RGW_CONF" -i 0
	_rgw_wait "osd.0 to be up" "${_RGW_PIDS[-1]}" _rgw_osd_up || return 1

	# radosgw, then the user (the user needs RGW's pools, which it creates)
	_rgw_daemon rgw "$(_rgw_bin radosgw)" -f -c "$RGW_CONF" -n client.rgw
	RGW_ENDPOINT=http://127.0.0.1:$rgw_port
	export RGW_ENDPOINT
	_rgw_wait "radosgw to answer on $RGW_ENDPOINT" "${_RGW_PIDS[-1]}" \
		curl -s -o /dev/null --max-time 2 "$RGW_ENDPOINT/" || return 1
	rgw_admin user create --uid="$RGW_USER" --display-name="objfs tests" \
		--access-key="$RGW_ACCESS_KEY" --secret="$RGW_SECRET_KEY" \
		>>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "radosgw-admin user create failed"; return 1; }
	# lets the user give itself an IAM policy, e.g. for sts:GetSessionToken
	# (tests/integration/s3util.py session-token)
	rgw_admin caps add --uid="$RGW_USER" --caps="user-policy=*" >>"$RGW_DIR/log/setup.out" 2>&1 ||
		{ _rgw_fail "radosgw-admin caps add failed"; return 1; }
	_rgw_wait "a signed S3 ListBuckets to succeed on $RGW_ENDPOINT" "${_RGW_PIDS[-1]}" \
		_rgw_s3_ok || return 1
	echo "rgw: $RGW_ENDPOINT up in $((SECONDS - t0)) s (conf $RGW_CONF)" >&2
}

# rgw_stop: TERM every daemon rgw_start started (newest first), KILL what is
# still there after 10 s.  Safe to call twice or when nothing was started.
rgw_stop() {
	local i pid n=${#_RGW_PIDS[@]}
	for ((i = n - 1; i >= 0; i--)); do
		pid=${_RGW_PIDS[$i]}
		kill -TERM "$pid" 2>/dev/null
	done
	for ((i = n - 1; i >= 0; i--)); do
		pid=${_RGW_PIDS[$i]}
		local j
		for ((j = 0; j < 100; j++)); do
			_rgw_alive "$pid" || break
			sleep 0.1
		done
		if _rgw_alive "$pid"; then
			kill -KILL "$pid" 2>/dev/null
		fi
		wait "$pid" 2>/dev/null
	done
	_RGW_PIDS=()
	return 0
}
