# gpusched's container image, for users with a registry and Docker/Podman:
#   docker build -t gpusched:latest .
# `make image` (scripts/make-image) builds the same contents without Docker:
# both install scripts/image-packages on Debian 12 (slim) and run
# scripts/image-root-setup, and put the stripped binary at
# /usr/local/bin/gpusched; docs/deploy.md lists what is inside.

# ---- build: the packages scripts/deps installs, the same CMake build ------
FROM debian:12 AS build
COPY . /src
WORKDIR /src
RUN apt-get update -qq \
 && scripts/deps \
 && rm -rf build \
 && cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build -j"$(nproc)" \
 && mkdir -p /out/usr/local/bin \
 && strip --strip-unneeded -o /out/usr/local/bin/gpusched build/gpusched \
 && if [ -f build/libgpusched-cuda.so ]; then \
      mkdir -p /out/usr/local/lib/gpusched \
      && strip --strip-unneeded -o /out/usr/local/lib/gpusched/libgpusched-cuda.so \
           build/libgpusched-cuda.so; \
    fi

# ---- run: Debian 12 slim with only the runtime libraries -----------------
FROM debian:12-slim
COPY scripts/image-packages scripts/image-root-setup /tmp/image/
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(grep -v -e '^#' -e '^[[:space:]]*$' /tmp/image/image-packages) \
 && sh /tmp/image/image-root-setup / \
 && rm -rf /var/lib/apt/lists/* /tmp/image
# /usr/local/bin/gpusched, and the limiter's libgpusched-cuda.so when built
COPY --from=build /out/ /
# extender, webhook and status run as this unprivileged user; the device
# plugin's DaemonSet sets runAsUser: 0 (kubelet's socket directory, /dev)
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpusched"]
