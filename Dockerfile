# objfs container image: the daemon on Debian 12 (bookworm).
#
#   docker build -t registry.example.com/objfs:latest .
#   docker run --rm --device /dev/fuse --cap-add SYS_ADMIN \
#       registry.example.com/objfs:latest -f SOURCE /mnt
#
# The build stage makes the Debian packages of this tree without CUDA
# (contrib/container/build.sh, which tests/integration/deb.sh tests); the
# runtime stage installs only the objfs package, whose dependencies (fuse3
# with fusermount3, libfuse3, libcurl, OpenSSL, liburing, libxxhash,
# libxml2, json-c) apt resolves from the package itself, plus the CA
# certificates HTTPS and S3 need. The entrypoint is the daemon: a
# container's arguments are objfs's (docs/kubernetes.md).

FROM debian:bookworm AS build
ARG DEBIAN_FRONTEND=noninteractive
# the build dependencies first, from debian/control alone (a cached layer)
COPY debian/control debian/changelog /src/debian/
RUN apt-get update \
 && apt-get install -y --no-install-recommends dpkg-dev \
 && apt-get build-dep -y /src \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
# The package build runs the unit tests; --build-arg DEB_BUILD_OPTIONS=nocheck
# skips them.
ARG DEB_BUILD_OPTIONS
RUN /src/contrib/container/build.sh /out

FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/objfs_*.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates /tmp/objfs_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/objfs_*.deb \
 && objfs --version
ENTRYPOINT ["/usr/bin/objfs"]
CMD ["--help"]
