#!/bin/sh
# Build llama.cpp's llama-server from the source vendored in the pinned llama-cpp-python sdist.
#
# Why the sdist: PyPI is the only source registry this project may reach, and the sdist ships
# llama.cpp's full tree (vendor/llama.cpp). Only cmake, a C/C++ compiler and pip are needed.
# The binary lands in a cache directory outside the repository and is reused when present, so
# only a fresh machine pays the build (about six minutes on two cores).
#
# Usage: build_llama_server.sh PYTHON VERSION DEST
#   PYTHON   a python with pip (the project's venv)
#   VERSION  the llama-cpp-python version to take llama.cpp from
#   DEST     directory to hold bin: DEST/llama-server
set -eu

PYTHON=$1
VERSION=$2
DEST=$3
JOBS=${JOBS:-2}

if [ -x "$DEST/llama-server" ] && "$DEST/llama-server" --version >/dev/null 2>&1; then
	echo "llama-server $VERSION: cached at $DEST/llama-server"
	exit 0
fi

mkdir -p "$DEST"
WORK=$(mktemp -d "$DEST/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "llama-server $VERSION: downloading the llama-cpp-python sdist"
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
	"llama-cpp-python==$VERSION" -d "$WORK"
tar -xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"

# Static, CPU-only, no network at build or run time: no UI download, no curl, no TLS.
# Not -march=native: on a CPU that reports Intel AMX, a native build takes ggml's AMX kernels,
# which die with SIGSEGV in a VM whose kernel does not grant the AMX tile state (seen here:
# ggml_backend_amx_mul_mat). AVX2, FMA and F16C (x86-64-v3) run on every machine of this kind.
echo "llama-server $VERSION: building (cmake, -j$JOBS)"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
	-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
	-DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$WORK/cmake.log" 2>&1 ||
	{ cat "$WORK/cmake.log"; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$JOBS" >"$WORK/build.log" 2>&1 ||
	{ tail -50 "$WORK/build.log"; exit 1; }

# Copy then rename, so an interrupted build never leaves a half-written binary behind.
cp "$WORK/build/bin/llama-server" "$DEST/llama-server.tmp"
mv "$DEST/llama-server.tmp" "$DEST/llama-server"
echo "llama-server $VERSION: built at $DEST/llama-server"
