#!/usr/bin/env bash
# Makes sure an NVRTC 13 library is available and prints its absolute path (the only line on
# stdout; messages go to stderr), so callers can do `export FATHOM_NVRTC="$(scripts/install-nvrtc.sh)"`.
#
# Looks, in this order, where codegen::nvrtc looks first:
#   1. $FATHOM_NVRTC: the library file, or a directory holding libnvrtc.so.13 / libnvrtc.so
#      (set but wrong is an error: an explicit choice is never silently replaced);
#   2. $CUDA_PATH/lib64 and $CUDA_PATH/lib;
#   3. /usr/local/cuda/lib64;
#   4. the pinned wheel in fathom's cache directory: $FATHOM_CACHE_DIR, else $XDG_CACHE_HOME/fathom,
#      else ~/.cache/fathom, at nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13.
# In 2 and 3 only libnvrtc.so.13 counts, so the tests always run against NVRTC 13 (the version
# cudarc's bindings are built for). The Rust side also searches LD_LIBRARY_PATH, the other
# toolkit directories and pip's site-packages; the tests need none of those, so this script
# does not mirror them. When nothing is found it installs the pinned wheel
# `nvidia-cuda-nvrtc==13.0.88` with pip into the cache (a ~90 MB download) and prints that path.
# Running it again finds the installed wheel and downloads nothing.
set -euo pipefail

readonly version="13.0.88"
readonly lib="libnvrtc.so.13"

say() { printf 'install-nvrtc: %s\n' "$*" >&2; }

found() {
    say "using $1 ($2)"
    printf '%s\n' "$1"
    exit 0
}

# 1. FATHOM_NVRTC
if [[ -n "${FATHOM_NVRTC:-}" ]]; then
    if [[ -f "$FATHOM_NVRTC" ]]; then
        found "$(realpath -s "$FATHOM_NVRTC")" "FATHOM_NVRTC"
    elif [[ -d "$FATHOM_NVRTC" ]]; then
        for name in "$lib" libnvrtc.so; do
            [[ -f "$FATHOM_NVRTC/$name" ]] && found "$(realpath -s "$FATHOM_NVRTC/$name")" "FATHOM_NVRTC"
        done
    fi
    say "FATHOM_NVRTC=$FATHOM_NVRTC is neither the NVRTC library file nor a directory holding $lib or libnvrtc.so"
    say "fix: point it at libnvrtc.so.13, or unset it to let this script find or install NVRTC"
    exit 1
fi

# 2. CUDA_PATH, 3. the default toolkit
dirs=()
if [[ -n "${CUDA_PATH:-}" ]]; then
    dirs+=("$CUDA_PATH/lib64" "$CUDA_PATH/lib")
fi
dirs+=(/usr/local/cuda/lib64)
for d in "${dirs[@]}"; do
    [[ -f "$d/$lib" ]] && found "$(realpath -s "$d/$lib")" "CUDA toolkit"
done

# 4. the cache: the same rule as codegen::nvrtc::cache_dir()
if [[ -n "${FATHOM_CACHE_DIR:-}" ]]; then
    cache="$FATHOM_CACHE_DIR"
elif [[ "${XDG_CACHE_HOME:-}" == /* ]]; then
    cache="$XDG_CACHE_HOME/fathom"
elif [[ -n "${HOME:-}" ]]; then
    cache="$HOME/.cache/fathom"
else
    cache="${TMPDIR:-/tmp}/fathom"
fi
target="$cache/nvrtc-$version"
wheel_lib="$target/nvidia/cu13/lib/$lib"
[[ -f "$wheel_lib" ]] && found "$wheel_lib" "pinned wheel, already installed"

# Nothing found: install the pinned wheel. pip writes into a temporary directory that is renamed
# into place only when complete, so an interrupted install never looks installed.
if ! python3 -m pip --version >/dev/null 2>&1; then
    say "no NVRTC found, and python3 -m pip is not available to install it"
    say "fix: install the CUDA 13 toolkit, set FATHOM_NVRTC to a libnvrtc.so.13, or install pip for python3"
    exit 1
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/nvrtc-$version.partial.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
say "no NVRTC found; installing nvidia-cuda-nvrtc==$version into $target"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    --no-deps --no-compile --target "$tmp" "nvidia-cuda-nvrtc==$version" >&2
if [[ ! -f "$tmp/nvidia/cu13/lib/$lib" ]]; then
    say "pip installed nvidia-cuda-nvrtc==$version but $tmp/nvidia/cu13/lib/$lib is missing"
    exit 1
fi
chmod 755 "$tmp"
if [[ -e "$target" && ! -f "$wheel_lib" ]]; then
    say "replacing the incomplete $target"
    rm -rf "$target"
fi
if ! mv -T "$tmp" "$target" 2>/dev/null; then
    # Another run finished first; its copy is as good as ours.
    [[ -f "$wheel_lib" ]] || { say "could not move $tmp to $target"; exit 1; }
fi
found "$wheel_lib" "pinned wheel, installed now"
