#!/usr/bin/env python3
"""Expected token ids of the Qwen2.5-Coder tokenizer on a few texts, for tests/model_qwen.rs.

Writes qwen_tokens.json beside this file: a list of {"name", "text", "ids"}.

The ids come from Hugging Face `tokenizers` (its Rust BPE and Oniguruma regex engine, not
kvpack's code), set up as Qwen2's tokenizer.json sets it up, with the vocabulary, merges and
token types read from the GGUF (the Hugging Face hub is not reachable here):
- pre-tokenizer: Split(the qwen2 regex, isolated) then ByteLevel(add_prefix_space=False,
  use_regex=False); model: BPE on the GGUF's vocab and merges; decoder ByteLevel;
- the user-defined tokens (token_type 4: `<tool_call>`, `</tool_call>`) as added tokens, so
  they are matched in text; control tokens (`<|im_end|>`, ...) are left out, so they stay plain
  text, as llama.cpp does when it does not parse special tokens;
- no normalizer: llama.cpp applies none (tokenizer.json has NFC; every text here is NFC
  already, which the script checks, so the two agree on them); no BOS (add_bos_token = false).
The regex is tokenizer.json's own, `(?i:'s|...)` included, while kvpack runs llama.cpp's
spelled-out form: the texts exercise the contractions in both cases.

Needs: pip install gguf tokenizers (numpy comes with gguf).
Run:   python3 tests/data/qwen_tokens.py [path/to/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf]
"""

import json
import os
import sys
import unicodedata

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TEXTS = [
    (
        "python",
        'import os\n\n\ndef area(r: float) -> float:\n    """Circle area."""\n'
        "    return 3.14159 * r ** 2  # pi r^2\n\n"
        "class Shape:\n\tpass\n\nif __name__ == '__main__':\n"
        '    print(f"{area(2.0):.3f}")\n',
    ),
    (
        "prose",
        "The quick brown fox doesn't jump; it's the dog's turn. They'll say we'd "
        "never won't. I'M LOUD, YOU'RE NOT, HE'D AGREE, WE'VE SEEN, I'LL GO.",
    ),
    (
        "whitespace",
        "a  b   c\t\td \n\n  \n   e    \r\n f  \n\n\n\t  x\u3000y \u00a0z   ",
    ),
    (
        "digits",
        "In 2024, 3.14159 x 10^5 = 314159; version 1.2.3-rc4, phone +1 (555) 012-3456, "
        "٣٤٥ and ²³ and ⅷ.",
    ),
    (
        "unicode",
        "Café naïve façade — 東京は日本の首都です。Привет, мир! 🤖🚀👩‍💻 "
        "Ελληνικά, עברית, العربية, हिन्दी, 한국어.",
    ),
    (
        "special",
        'call <tool_call>{"name": "f", "x": 1}</tool_call> then <|im_end|> and '
        "<|endoftext|> stay text.",
    ),
    ("paris_prompt", "The capital of France is"),
    ("edge", " "),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else default_gguf()
    tok = build_tokenizer(GGUFReader(path))
    out = []
    for name, text in TEXTS:
        assert unicodedata.normalize("NFC", text) == text, name
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text, name
        out.append({"name": name, "text": text, "ids": ids})
        print(f"{name}: {len(ids)} ids")
    dst = os.path.join(here, "qwen_tokens.json")
    with open(dst, "w", encoding="utf-8") as f:
        # one text per line, so that a diff shows which text changed
        f.write("[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in out) + "\n]\n")
    print(f"wrote {dst}")


def default_gguf(file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"):
    base = os.environ.get("KVPACK_MODELS") or os.path.expanduser("~/.cache/kvpack")
    return os.path.join(base, file)


def build_tokenizer(r):
    """The qwen2 tokenizer of a GGUFReader, as Hugging Face `tokenizers` objects."""
    assert r.fields["tokenizer.ggml.pre"].contents() == "qwen2"
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(tokens)}

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    user = [(i, t) for i, t in enumerate(tokens) if types[i] == 4]
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for _, t in user])
    for i, t in user:
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t), i)
    return tok


if __name__ == "__main__":
    main()
