#!/bin/sh
# tests/gpu/make-bundle.sh OUT [BUILD_DIR] - everything tests/gpu/run-real-gpu.sh
# needs, for a GPU machine that lacks the project's Debian packages (say an
# Ubuntu image with the NVIDIA driver and a Python with grpcio, but no
# compiler packages and no network). Run it here, on the Debian build machine:
#   OUT/gpusched   the binary (stripped)
#   OUT/libgpusched-cuda.so  the in-container limiter (needs only libc)
#   OUT/lib/       the shared libraries it links, except the C library's own
#   OUT/stubs/     Python stubs of proto/, from protoc (message code that any
#                  protobuf runtime of 3.20 or later loads) and grpc_tools
# Copy the repository with OUT inside it to the GPU machine, then there:
#   PYTHON=python3 tests/gpu/run-real-gpu.sh OUT
set -eu
out=${1:?usage: make-bundle.sh OUT [BUILD_DIR]}
build=${2:-build}
cd "$(dirname "$0")/../.."
[ -x "$build/gpusched" ] || { echo "make-bundle: no $build/gpusched; run make first" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/lib" "$out/stubs"
strip -o "$out/gpusched" "$build/gpusched"
[ -f "$build/libgpusched-cuda.so" ] && strip -o "$out/libgpusched-cuda.so" "$build/libgpusched-cuda.so"
ldd "$build/gpusched" | awk '/=> \// {print $3}' |
  grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.so' |
  while read -r l; do cp -L "$l" "$out/lib/"; done
files="proto/deviceplugin.proto proto/podresources.proto proto/services/deviceplugin_services.proto
       proto/services/podresources_services.proto"
/usr/bin/python3 -m grpc_tools.protoc -I proto -I proto/services --grpc_python_out="$out/stubs" $files
protoc -I proto -I proto/services --python_out="$out/stubs" $files
echo "make-bundle: $out ($(du -sh "$out" | cut -f1)): copy the repository with it to the GPU machine and run"
echo "  PYTHON=python3 tests/gpu/run-real-gpu.sh $out"
