#!/usr/bin/env bash
#
# million.sh: metadata of big prefixes against tests/s3_synth.py,
# a synthetic S3 server of generated keys that counts the requests it gets:
#
#  1. stat of one key of a flat prefix of $KEYS keys on a fresh mount costs
#     at most 3 requests and lists nothing (a HEAD and a one-key listing);
#     a nested key costs that per path component;
#  2. its bytes are the server's (md5 against the generator's formula);
#  3. ls -f and ls -l see every key, the listing in 1,000-key pages;
#  4. a key that is both an object and a prefix is a directory;
#  5. churn: a key added or deleted shows or vanishes once the TTLs pass;
#  6. negative_timeout: with 0 a key added after a miss is found at once,
#     with 30 the kernel keeps the miss;
#  7. TTLs of inf: a second stat long after the first asks nothing;
#  8. readdir streams (a server answering in 20 ms): the first name of
#     ls -f comes before the last page is asked for, and the listing stops
#     once its reader is gone; two ls at once share one listing, and a
#     lookup while it streams is answered;
#     Lookups of one directory run in parallel (FUSE_PARALLEL_DIROPS);
#  9. an object whose prefix comes a page later (999 keys "K-NNN" between
#     "K" and "K/") shows once, as the directory;
# 10. memory: after ls -l and drop_caches the nodes the kernel forgot are
#     freed (the inodes counter of .objfs-stats), for a listing too large
#     to keep and for a small one past list_ttl.
#
# contrib/bench/million_bench.sh measures the same at 1,000,000 keys.
#
# Exit: 0 pass, 1 fail, 77 skip (no FUSE).
set -u
. "$(dirname "$0")/lib.sh"
skip_unless_fuse
require_objfs

KEYS=${MILLION_KEYS:-20000}

# stats PORT: "list head get" requests so far
stats() {
	curl -sf "http://127.0.0.1:$1/__stats" |
		python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["list"], s["head"], s["get"])'
}
# requests PORT: their sum
requests() { stats "$1" | awk '{ print $1 + $2 + $3 }'; }
put_key() { curl -sf -X POST "http://127.0.0.1:$1/__put?key=$2&size=${3:-100}" >/dev/null; }
# put_keys PORT SIZE KEY...: several keys in one request
put_keys() {
	local port=$1 size=$2 q="" k
	shift 2
	for k in "$@"; do q="$q&key=$k"; done
	curl -sf -X POST "http://127.0.0.1:$port/__put?size=$size$q" >/dev/null
}
# inodes: the nodes objfs holds now (.objfs-stats)
inodes() { awk '$1 == "inodes" { print $2 }' "$MNT/.objfs-stats"; }
rss_mib() { awk '/^VmRSS/ { print int($2 / 1024) }' "/proc/$OBJFS_PID/status"; }
# drop_wait MAX: drop the kernel's caches, wait (5 s at most) for its
# forgets to bring the nodes to MAX or fewer; prints the count
drop_wait() {
	local i n
	sync
	for ((i = 0; i < 25; i++)); do
		echo 2 >/proc/sys/vm/drop_caches
		n=$(inodes)
		[ "${n:-0}" -le "$1" ] && break
		sleep 0.2
	done
	echo "$n"
}
del_key() { curl -sf -X POST "http://127.0.0.1:$1/__delete?key=$2" >/dev/null; }
s3o() { echo "endpoint=http://127.0.0.1:$1,no_sign,path_style,region=us-east-1${2:+,$2}"; }

synth_start flat --keys "$KEYS"
synth_start nest --keys 5000 --layout nested --per-dir 1000
MNT=$TEST_TMP/mnt

# ---- 1, 2: one key, fresh mount ----
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_flat")"; then
	key=$(printf 'k%07d' $((KEYS / 2 + 7)))
	r0=$(stats "$PORT_flat")
	sz=$(stat -c %s "$MNT/$key" 2>&1)
	r1=$(stats "$PORT_flat")
	read -r l0 h0 _ <<<"$r0"
	read -r l1 h1 _ <<<"$r1"
	if [ $((l1 - l0 + h1 - h0)) -le 3 ] && [ $((l1 - l0)) -le 1 ] && [[ $sz =~ ^[0-9]+$ ]]; then
		pass "stat of one key of a flat $KEYS-key prefix: $((l1 - l0)) one-key listing(s) + $((h1 - h0)) HEAD(s), size $sz"
	else
		fail "stat of one key: expected at most 3 requests and no full listing, got $((l1 - l0)) listings + $((h1 - h0)) HEADs (size '$sz')"
	fi
	got=$(md5sum <"$MNT/$key" | cut -d' ' -f1)
	if [ "$got" = "$(synth_md5 "$key")" ]; then
		pass "its bytes are the generator's (md5 $got)"
	else
		fail "expected $key to read as md5 $(synth_md5 "$key"), got $got"
	fi
	r0=$(requests "$PORT_flat")
	if ! stat "$MNT/k9999999x" >/dev/null 2>&1 && [ $(($(requests "$PORT_flat") - r0)) -le 2 ]; then
		pass "a missing key: ENOENT after 2 requests, no listing"
	else
		fail "expected a missing key to be ENOENT"
	fi
	# ---- 3: the whole prefix ----
	r0=$(stats "$PORT_flat")
	n=$(ls -f "$MNT" | grep -c '^k')
	nl=$(ls -l "$MNT" | grep -c '^-')
	r1=$(stats "$PORT_flat")
	read -r l0 h0 _ <<<"$r0"
	read -r l1 h1 _ <<<"$r1"
	if [ "$n" -eq "$KEYS" ] && [ "$nl" -eq "$KEYS" ] && [ $((h1 - h0)) -eq 0 ] &&
		[ $((l1 - l0)) -le $(((KEYS + 999) / 1000 + 1)) ]; then
		pass "ls -f and ls -l list all $KEYS keys in $((l1 - l0)) pages, no HEAD"
	else
		fail "expected ls -f and ls -l to see $KEYS keys (got $n, $nl) from at most $(((KEYS + 999) / 1000 + 1)) pages and no HEAD (got $((l1 - l0)), $((h1 - h0)))"
	fi
	unmount_objfs "$MNT"
else
	fail "expected s3://bkt of s3_synth.py to mount"
fi

# nested: each component costs its lookup, and a listing is never taken
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_nest")"; then
	r0=$(requests "$PORT_nest")
	got=$(md5sum <"$MNT/d0003/k00042" | cut -d' ' -f1)
	r1=$(requests "$PORT_nest")
	if [ "$got" = "$(synth_md5 d0003/k00042)" ] && [ $((r1 - r0)) -le 5 ]; then
		pass "a nested key d0003/k00042 reads right after $((r1 - r0)) requests (2 lookups + 1 GET)"
	else
		fail "nested key: expected md5 $(synth_md5 d0003/k00042) (got $got) within 5 requests (got $((r1 - r0)))"
	fi
	# ---- 4: object and prefix ----
	put_key "$PORT_nest" d0001 10
	if [ -d "$MNT/d0001" ] && [ -f "$MNT/d0001/k00001" ]; then
		pass "a key that is both an object and a prefix (d0001, d0001/...) is a directory"
	else
		fail "expected d0001 (object and prefix) to be a directory"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the nested s3_synth.py bucket to mount"
fi

# ---- 5: churn, short TTLs ----
TTL="attr_timeout=1,entry_timeout=1,negative_timeout=1,list_ttl=1"
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_flat" "$TTL")"; then
	ls -f "$MNT" >/dev/null
	put_key "$PORT_flat" knew-one 333
	del_key "$PORT_flat" k0000003
	sleep 2.2
	if ls -f "$MNT" | grep -qx knew-one && ! ls -f "$MNT" | grep -qx k0000003 &&
		[ "$(stat -c %s "$MNT/knew-one" 2>/dev/null)" = 333 ] && ! stat "$MNT/k0000003" >/dev/null 2>&1; then
		pass "churn: a key added and a key deleted show in ls and stat once the 1 s TTLs passed"
	else
		fail "churn: expected knew-one (333 bytes) listed and k0000003 gone after the TTLs"
	fi
	if [ "$(md5sum <"$MNT/knew-one" | cut -d' ' -f1)" = "$(synth_md5 knew-one 333)" ]; then
		pass "churn: the new key reads right"
	else
		fail "churn: the new key's bytes differ"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the churn mount"
fi

# ---- 6: negative_timeout ----
for neg in 0 30; do
	if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_flat" "negative_timeout=$neg")"; then
		k=kneg$neg
		stat "$MNT/$k" >/dev/null 2>&1
		put_key "$PORT_flat" "$k" 10
		if stat "$MNT/$k" >/dev/null 2>&1; then found=1; else found=0; fi
		what="still missing (the kernel keeps the miss)"
		[ "$found" = 1 ] && what="found at once"
		if { [ "$neg" = 0 ] && [ "$found" = 1 ]; } || { [ "$neg" = 30 ] && [ "$found" = 0 ]; }; then
			pass "negative_timeout=$neg: a key added right after a miss is $what"
		else
			fail "negative_timeout=$neg: unexpected lookup result $found after the key was added"
		fi
		unmount_objfs "$MNT"
	else
		fail "expected the negative_timeout=$neg mount"
	fi
done

# ---- 7: TTLs of forever ----
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_flat" "attr_timeout=inf,entry_timeout=inf,list_ttl=inf")"; then
	stat "$MNT/k0000009" >/dev/null
	r0=$(requests "$PORT_flat")
	sleep 1.5
	stat "$MNT/k0000009" >/dev/null
	cat "$MNT/k0000009" >/dev/null
	ls -f "$MNT" >/dev/null
	ls -f "$MNT" >/dev/null
	r1=$(requests "$PORT_flat")
	# one GET for the read, the listing's pages once (the churn above
	# added a few keys: one page more at most)
	if [ $((r1 - r0)) -le $(((KEYS + 999) / 1000 + 2)) ]; then
		pass "TTLs of inf: a second stat asks nothing, a second ls -f lists nothing ($((r1 - r0)) requests: one GET, one listing)"
	else
		fail "TTLs of inf: expected at most $(((KEYS + 999) / 1000 + 2)) requests, got $((r1 - r0))"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the attr_timeout=inf mount"
fi

# ---- 8: readdir streams ----
synth_start slow --keys "$KEYS" --latency-ms 20
PAGES=$(((KEYS + 999) / 1000))
listings() { stats "$1" | cut -d' ' -f1; }
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_slow")"; then
	l0=$(listings "$PORT_slow")
	first=$(ls -f "$MNT" | grep -m1 '^k')
	l1=$(listings "$PORT_slow")
	sleep 1
	l2=$(listings "$PORT_slow")
	if [ "$first" = k0000000 ] && [ $((l1 - l0)) -lt "$PAGES" ] && [ $((l2 - l0)) -lt "$PAGES" ]; then
		pass "ls -f | head: the first name came after $((l1 - l0)) of the $PAGES listing pages; the listing stopped at $((l2 - l0)) once its reader was gone"
	else
		fail "ls -f | head: expected k0000000 before the last of $PAGES pages and the listing stopped after (got '$first' after $((l1 - l0)) pages, $((l2 - l0)) a second later)"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the slow s3_synth.py bucket to mount"
fi
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_slow")"; then
	last=$(printf 'k%07d' $((KEYS - 1)))
	l0=$(listings "$PORT_slow")
	ls -f "$MNT" | grep -c '^k' >"$TEST_TMP/ls1" &
	p1=$!
	ls -f "$MNT" | grep -c '^k' >"$TEST_TMP/ls2" &
	p2=$!
	sleep 0.1
	sz=$(stat -c %s "$MNT/$last" 2>&1)
	wait "$p1" "$p2"
	l1=$(listings "$PORT_slow")
	n1=$(cat "$TEST_TMP/ls1")
	n2=$(cat "$TEST_TMP/ls2")
	# the pages once, and the one-key listing of the lookup
	if [ "$n1" = "$KEYS" ] && [ "$n2" = "$KEYS" ] && [ $((l1 - l0)) -le $((PAGES + 1)) ] &&
		[ "$sz" = "$(synth_size "$last")" ]; then
		pass "two ls -f at once: $KEYS names each from one listing ($((l1 - l0)) requests); $last looked up meanwhile ($sz bytes)"
	else
		fail "two ls -f at once: expected $KEYS names each (got $n1, $n2) from at most $((PAGES + 1)) listing requests (got $((l1 - l0))) and $last of $(synth_size "$last") bytes (got '$sz')"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the slow s3_synth.py bucket to mount"
fi

# ---- 8b: lookups in one directory run in parallel ----
# libfuse < 3.17.1 never passed FUSE_PARALLEL_DIROPS to the kernel, which
# then ran one LOOKUP of a directory at a time (fs.c hooks the INIT reply).
# Each lookup here is a HEAD and a one-key listing at once, so serialised
# lookups keep at most 2 requests in the server's latency wait.
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_slow")"; then
	curl -sf -X POST "http://127.0.0.1:$PORT_slow/__reset" >/dev/null
	pids=()
	pkeys=()
	for ((i = 0; i < 16; i++)); do
		pkeys+=("$(printf 'k%07d' $((i * 7 + 3)))")
		stat -c %s "$MNT/${pkeys[i]}" >"$TEST_TMP/pstat.$i" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	maxin=$(curl -sf "http://127.0.0.1:$PORT_slow/__inflight" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["max"])')
	bad=0
	for ((i = 0; i < 16; i++)); do
		[ "$(cat "$TEST_TMP/pstat.$i")" = "$(synth_size "${pkeys[i]}")" ] || bad=1
	done
	if [ "$bad" = 0 ] && [ "${maxin:-0}" -gt 2 ]; then
		pass "16 lookups in one directory at once: right sizes, up to $maxin requests in flight at the server (parallel LOOKUPs)"
	else
		fail "16 lookups in one directory at once: expected right sizes and more than 2 requests in flight (got bad=$bad, max in flight '$maxin')"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the slow s3_synth.py bucket to mount"
fi

# ---- 9: object and prefix in different pages ----
K=$(printf 'k%07d' $((KEYS / 2000 * 1000)))
mapfile -t dash < <(for ((i = 0; i < 999; i++)); do printf '%s-%03d\n' "$K" "$i"; done)
put_keys "$PORT_slow" 10 "${dash[@]}"
put_key "$PORT_slow" "$K/inner" 100
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_slow")"; then
	ls -l "$MNT" >"$TEST_TMP/lsl"
	nk=$(grep -c " $K\$" "$TEST_TMP/lsl")
	isdir=$(grep " $K\$" "$TEST_TMP/lsl" | cut -c1)
	nd=$(grep -c " $K-" "$TEST_TMP/lsl")
	total=$(grep -c ' k' "$TEST_TMP/lsl")
	inner=$(md5sum <"$MNT/$K/inner" | cut -d' ' -f1)
	if [ "$nk" = 1 ] && [ "$isdir" = d ] && [ "$nd" = 999 ] && [ "$total" = $((KEYS + 999)) ] &&
		[ "$inner" = "$(synth_md5 "$K/inner" 100)" ]; then
		pass "object $K and prefix $K/ a page apart: listed once, as the directory, among $total names; $K/inner reads right"
	else
		fail "object and prefix a page apart: expected $K once as a directory (got $nk, type '$isdir'), 999 $K-NNN (got $nd), $((KEYS + 999)) names (got $total), $K/inner right (md5 $inner)"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the slow s3_synth.py bucket to mount"
fi

# ---- 10: memory: forgotten nodes are freed ----
BIG=$((65536 + 4464)) # over OBJFS_LIST_KEEP_MAX: not kept once read
synth_start big --keys "$BIG"
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_big")"; then
	i0=$(inodes)
	r0=$(rss_mib)
	n=$(ls -l "$MNT" | grep -c '^-')
	i1=$(inodes)
	r1=$(rss_mib)
	i2=$(drop_wait 10)
	sleep 0.5
	r2=$(rss_mib)
	if [ "$n" = "$BIG" ] && [ "${i1:-0}" -ge "$BIG" ] && [ "${i2:-99}" -le 10 ]; then
		pass "ls -l of $BIG keys: $i0 -> $i1 nodes, $i2 after drop_caches (RSS $r0 -> $r1 -> $r2 MiB)"
	else
		fail "ls -l of $BIG keys: expected $BIG files (got $n), at least $BIG nodes after (got $i1), at most 10 after drop_caches (got $i2)"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the big s3_synth.py bucket to mount"
fi
if mount_objfs s3://bkt "$MNT" "$(s3o "$PORT_flat" list_ttl=1)"; then
	ls -l "$MNT" >/dev/null
	i1=$(inodes)
	sleep 1.5
	i2=$(drop_wait 10)
	if [ "${i1:-0}" -ge "$KEYS" ] && [ "${i2:-99}" -le 10 ]; then
		pass "a kept listing past list_ttl: $i1 nodes after ls -l, $i2 once the kernel forgot them"
	else
		fail "a kept listing past list_ttl: expected at least $KEYS nodes after ls -l (got $i1), at most 10 after drop_caches (got $i2)"
	fi
	unmount_objfs "$MNT"
else
	fail "expected the list_ttl=1 mount"
fi

summary
