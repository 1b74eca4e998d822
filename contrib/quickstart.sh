#!/usr/bin/env bash
# objfs quickstart: installs what is missing (tests/deps.sh --demo: not the
# test toolchain), builds objfs (in place when the tree is configured in
# place, else in build/), serves a demo directory with nginx on a free
# loopback port, mounts it read-only at ./mnt, lists and reads it, and tells
# you how to unmount.
#
#   contrib/quickstart.sh          # set up, mount, show
#   contrib/quickstart.sh stop     # unmount ./mnt and stop the demo server
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
demo=$top/.demo
mnt=$top/mnt
export PATH=$PATH:/usr/sbin:/sbin

stop() {
	if mountpoint -q "$mnt" 2>/dev/null; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
		echo "quickstart: unmounted $mnt"
	fi
	if [ -f "$demo/nginx/nginx.pid" ]; then
		kill "$(cat "$demo/nginx/nginx.pid")" 2>/dev/null || true
		rm -f "$demo/nginx/nginx.pid"
		echo "quickstart: demo server stopped"
	fi
}

if [ "${1:-}" = stop ]; then
	stop
	exit 0
fi

echo "quickstart: checking packages (apt-get installs what is missing)"
tests/deps.sh --demo
# A tree configured in place (README: ./configure && make) is built there:
# autoconf refuses an out-of-tree build of it. Otherwise build/.
bdir=$top/build
[ -f config.status ] && bdir=$top
echo "quickstart: building in $bdir"
[ -x configure ] || ./autogen.sh >/dev/null 2>&1
mkdir -p "$bdir"
(cd "$bdir" && { [ -f Makefile ] || "$top/configure" -q; } && make -s -j"$(nproc)")

stop >/dev/null 2>&1 || true
echo "quickstart: making a demo bucket in $demo/data"
mkdir -p "$demo/data/images" "$demo/data/logs/2026" "$demo/nginx" "$mnt"
echo "Hello from objfs: this file lives on an HTTP server." > "$demo/data/README.txt"
for i in 1 2 3; do
	head -c $((i * 700000)) /dev/urandom > "$demo/data/images/img-$i.bin"
done
seq 1 20000 > "$demo/data/logs/2026/numbers.txt"
echo "spaces and unicode work too" > "$demo/data/logs/naïve café.txt"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
n=$demo/nginx
# Started by root, nginx's workers would run as nobody, who cannot read a
# tree under /root (mode 0700): they stay the user who started it.
user=
[ "$(id -u)" -eq 0 ] && user="user root;"
cat > "$n/nginx.conf" <<CONF
$user
worker_processes 1;
pid $n/nginx.pid;
error_log $n/error.log;
events { worker_connections 128; }
http {
    access_log off;
    client_body_temp_path $n/body;
    proxy_temp_path $n/proxy;
    fastcgi_temp_path $n/fastcgi;
    uwsgi_temp_path $n/uwsgi;
    scgi_temp_path $n/scgi;
    server {
        listen 127.0.0.1:$port;
        location /data/ { alias $demo/data/; autoindex on; autoindex_format json; }
    }
}
CONF
nginx -p "$n" -c "$n/nginx.conf" -e "$n/error.log"
url="http://127.0.0.1:$port/data/"
echo "quickstart: serving $demo/data at $url"

"$bdir/src/objfs" "$url" "$mnt"
echo "quickstart: mounted $url at $mnt"
echo
echo "\$ ls -lR mnt"
ls -lR "$mnt"
echo
echo "\$ cat mnt/README.txt"
cat "$mnt/README.txt"
echo
echo "\$ sha256sum (through the mount, then the source)"
(cd "$mnt" && sha256sum images/*.bin)
(cd "$demo/data" && sha256sum images/*.bin)
echo
echo "Done. The mount stays up; try: ls mnt; tail mnt/logs/2026/numbers.txt"
echo "Unmount and stop the demo server with:  contrib/quickstart.sh stop"
echo "(or by hand: fusermount3 -u mnt)"
