#!/bin/sh
# tests/gpu/run-real-gpu.sh [BUILD_DIR] - the device plugin against a real GPU.
#
# Needs an NVIDIA GPU with its driver (libnvidia-ml.so.1, nvidia-smi) and the
# project's Debian build and test packages (scripts/deps). Builds the binary
# if BUILD_DIR (default: build) has none, then runs check_real_gpu.py:
# real NVML discovery and health through the fake kubelet, compared with
# nvidia-smi, and an Allocate that must return the GPU's UUID. Then, where
# the Python has torch, check_limiter.py holds PyTorch to a 20 GiB and a
# 30 % share with the in-container limiter (BUILD_DIR/libgpusched-cuda.so),
# and two 30 % processes at once to about 30 % each, the device plugin
# measuring each one's own utilisation.
# Not part of CI, which has no GPU. Exit status 0 when every check passed.
#
# On a GPU machine without the Debian packages, BUILD_DIR may be a bundle
# made by tests/gpu/make-bundle.sh on the build machine: its lib/ goes on
# LD_LIBRARY_PATH and its stubs/ replace grpc_tools. PYTHON names a Python
# with grpcio (and, for the CUDA check, torch); default /usr/bin/python3.
set -eu
cd "$(dirname "$0")/../.."
build=${1:-build}
command -v nvidia-smi >/dev/null || { echo "run-real-gpu: nvidia-smi not found: no NVIDIA driver here" >&2; exit 2; }
if [ ! -x "$build/gpusched" ] || [ ! -f "$build/libgpusched-cuda.so" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gpusched gpusched-cuda
fi
if [ -d "$build/stubs" ]; then
  b=$(cd "$build" && pwd)
  export GPUSCHED_STUBS_DIR="$b/stubs" LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi -L
rc=0
"${PYTHON:-/usr/bin/python3}" tests/gpu/check_real_gpu.py "$build/gpusched" || rc=$?
lrc=0
"${PYTHON:-/usr/bin/python3}" tests/gpu/check_limiter.py "$build/libgpusched-cuda.so" "$build/gpusched" || lrc=$?
# 2 = the limiter checks could not run here (no torch): not a failure
[ "$lrc" -eq 1 ] && rc=1
exit "$rc"
