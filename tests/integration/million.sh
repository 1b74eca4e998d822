#!/usr/bin/env bash
#
# million.sh: metadata of big prefixes (issue 14) against tests/s3_synth.py,
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
#  7. TTLs of inf: a second stat long after the first asks nothing.
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
del_key() { curl -sf -X POST "http://127.0.0.1:$1/__delete?key=$2" >/dev/null; }
# want_md5 KEY [SIZE]: md5 of the generator's bytes of KEY
want_md5() {
	python3 - "$1" "${2:-}" <<'EOF'
import hashlib, sys, zlib
k = sys.argv[1]
n = int(sys.argv[2]) if sys.argv[2] else zlib.crc32(k.encode()) % 4096 + 1
d = hashlib.sha256(k.encode()).digest()
print(hashlib.md5((d * (n // 32 + 1))[:n]).hexdigest())
EOF
}
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
	if [ "$got" = "$(want_md5 "$key")" ]; then
		pass "its bytes are the generator's (md5 $got)"
	else
		fail "expected $key to read as md5 $(want_md5 "$key"), got $got"
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
	if [ "$got" = "$(want_md5 d0003/k00042)" ] && [ $((r1 - r0)) -le 5 ]; then
		pass "a nested key d0003/k00042 reads right after $((r1 - r0)) requests (2 lookups + 1 GET)"
	else
		fail "nested key: expected md5 $(want_md5 d0003/k00042) (got $got) within 5 requests (got $((r1 - r0)))"
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
	if [ "$(md5sum <"$MNT/knew-one" | cut -d' ' -f1)" = "$(want_md5 knew-one 333)" ]; then
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

summary
