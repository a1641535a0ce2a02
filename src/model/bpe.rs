//! GPT-2 byte-level BPE, built from a GGUF file's `tokenizer.ggml.tokens` and
//! `tokenizer.ggml.merges` (`tokenizer.ggml.model = gpt2`).
//!
//! Encoding follows what Hugging Face `tokenizers` does with
//! `Digits(individual_digits=True)` + `ByteLevel(add_prefix_space=False)` and a plain BPE model
//! (the pipeline that produced the SmolLM2 fixtures' `token_ids`, and that llama.cpp's `smollm`
//! pre-tokenizer agrees with):
//!
//! 1. **Digits**: every numeric character (`char::is_numeric`, Unicode `N`) becomes a piece of
//!    its own; the runs between them are pieces. Only for pre-tokenizer `smollm`; `gpt2` skips
//!    this step.
//! 2. **GPT-2 split** of each piece, with GPT-2's regex
//!    `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`. The `regex`
//!    crate has no look-ahead, so `\s+(?!\S)` is done by hand: a whitespace run followed by a
//!    non-space character gives back its last character, which then starts the next piece (so
//!    `"a  b"` splits as `a`, ` `, ` b`). `regex`'s leftmost-first alternation gives the same
//!    matches as the backtracking engine (Oniguruma) that `tokenizers` uses for this pattern.
//! 3. **Bytes to symbols**: each piece's UTF-8 bytes become GPT-2's printable stand-ins
//!    (`bytes_to_unicode`), one initial symbol per byte.
//! 4. **Merges by rank**: repeatedly merge the adjacent pair with the lowest merge rank (the
//!    leftmost on ties) until no pair has a merge; the symbols' vocab ids are the tokens.
//!
//! Decoding maps each token's characters back to bytes and reads them as UTF-8 (invalid
//! sequences, possible in the middle of a multi-byte character, become U+FFFD in [`Bpe::decode`];
//! [`Bpe::decode_bytes`] gives the raw bytes). Special tokens (`<|im_start|>`, ...) are not
//! recognised inside text: text is always encoded as plain text, and no BOS is added. A byte
//! whose stand-in is not in the vocab is dropped, as `tokenizers` does for a BPE without an
//! unknown token: SmolLM2's vocab lacks a few control bytes (0x04, ...), so text holding them
//! does not round-trip; all other text does.
//!
//! **Why not the `tokenizers` crate.** It would do steps 1-4, but even with default features
//! off it brings Oniguruma (a C library) or `fancy-regex`, plus `serde`, `rayon` and friends,
//! for a pipeline that is about 150 lines here; the `regex` crate (already in kvpack's
//! dependency tree, from the rust-lang project) supplies the Unicode classes.

use std::collections::HashMap;

use regex::Regex;

use super::gguf::GgufFile;
use crate::{Error, Result};

/// GPT-2's pre-tokenization regex without the `\s+(?!\S)` alternative (done by hand).
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

fn malformed(message: impl Into<String>) -> Error {
    Error::Format {
        format: "GGUF tokenizer",
        message: message.into(),
    }
}

/// GPT-2's `bytes_to_unicode`: printable bytes stand for themselves, the others map to
/// U+0100 and up, in byte order.
pub fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).unwrap_or('\u{FFFD}');
            n += 1;
            c
        };
    }
    table
}

/// How text is split before BPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's regex split only.
    Gpt2,
    /// Numeric characters one per piece, then GPT-2's split (`tokenizer.ggml.pre = smollm`).
    IndividualDigits,
}

/// A GPT-2 byte-level BPE tokenizer.
#[derive(Debug, Clone)]
pub struct Bpe {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    /// `(left id, right id) -> (rank, merged id)`.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The token of each byte's stand-in; `None` where the vocab lacks it.
    byte_ids: [Option<u32>; 256],
    char_to_byte: HashMap<char, u8>,
    pre: PreTokenizer,
    split: Regex,
    bos: Option<u32>,
    eos: Option<u32>,
}

impl Bpe {
    /// Builds the tokenizer stored in a GGUF file. Requires `tokenizer.ggml.model = gpt2` and a
    /// pre-tokenizer (`tokenizer.ggml.pre`) of `smollm` (digits split) or `gpt2`/`default`/absent.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let model = file.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(malformed(format!(
                "tokenizer.ggml.model is `{model}`; only `gpt2` (byte-level BPE) is supported here"
            )));
        }
        let pre = match file.get("tokenizer.ggml.pre").and_then(|v| v.as_str()) {
            Some("smollm") => PreTokenizer::IndividualDigits,
            None | Some("gpt2") | Some("default") => PreTokenizer::Gpt2,
            Some(other) => {
                return Err(malformed(format!(
                    "pre-tokenizer `{other}` is not supported (smollm and gpt2 are)"
                )));
            }
        };
        let tokens = file.get_str_array("tokenizer.ggml.tokens")?;
        let merges = file.get_str_array("tokenizer.ggml.merges")?;
        let mut bpe = Self::new(&tokens, &merges, pre)?;
        let id = |key: &str| -> Result<Option<u32>> {
            match file.get(key) {
                None => Ok(None),
                Some(_) => {
                    let id = file.get_u64(key)?;
                    if id >= tokens.len() as u64 {
                        return Err(malformed(format!("{key} = {id} is outside the vocab")));
                    }
                    Ok(Some(id as u32))
                }
            }
        };
        bpe.bos = id("tokenizer.ggml.bos_token_id")?;
        bpe.eos = id("tokenizer.ggml.eos_token_id")?;
        Ok(bpe)
    }

    /// Builds a tokenizer from a vocab (token strings in GPT-2's byte-to-unicode alphabet, by
    /// id) and merges (`"left right"`, best first).
    pub fn new<S: AsRef<str>, M: AsRef<str>>(
        tokens: &[S],
        merges: &[M],
        pre: PreTokenizer,
    ) -> Result<Self> {
        if tokens.len() > u32::MAX as usize {
            return Err(malformed("vocab larger than u32"));
        }
        let tokens: Vec<String> = tokens.iter().map(|t| t.as_ref().to_owned()).collect();
        let mut ids = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            // Keep the first id when a string appears twice (as tokenizers' vocab does not).
            ids.entry(t.clone()).or_insert(i as u32);
        }
        let table = bytes_to_unicode();
        let mut byte_ids = [None; 256];
        let mut char_to_byte = HashMap::with_capacity(256);
        for (b, &c) in table.iter().enumerate() {
            char_to_byte.insert(c, b as u8);
            byte_ids[b] = ids.get(c.to_string().as_str()).copied();
        }
        if byte_ids.iter().all(Option::is_none) {
            return Err(malformed(
                "the vocab has none of GPT-2's byte tokens (not a byte-level BPE vocab)",
            ));
        }
        let mut merge_map = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            let m = m.as_ref();
            let (l, r) = m
                .split_once(' ')
                .ok_or_else(|| malformed(format!("merge #{rank} `{m}` has no space")))?;
            let lookup = |s: &str| {
                ids.get(s).copied().ok_or_else(|| {
                    malformed(format!("merge #{rank} `{m}`: `{s}` is not in the vocab"))
                })
            };
            let key = (lookup(l)?, lookup(r)?);
            let merged = lookup(&format!("{l}{r}"))?;
            // The first (best-ranked) occurrence of a pair wins.
            merge_map.entry(key).or_insert((rank as u32, merged));
        }
        let split = Regex::new(GPT2_SPLIT).map_err(|e| malformed(format!("split regex: {e}")))?;
        Ok(Self {
            tokens,
            ids,
            merges: merge_map,
            byte_ids,
            char_to_byte,
            pre,
            split,
            bos: None,
            eos: None,
        })
    }

    /// Number of tokens in the vocab.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The token string of `id` (in GPT-2's byte-to-unicode alphabet).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a token string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// `tokenizer.ggml.bos_token_id`, when the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// `tokenizer.ggml.eos_token_id`, when the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The pieces that BPE runs on, as slices of `text`.
    pub fn pre_tokenize<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut out = Vec::new();
        match self.pre {
            PreTokenizer::Gpt2 => self.gpt2_split(text, &mut out),
            PreTokenizer::IndividualDigits => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        self.gpt2_split(&text[start..i], &mut out);
                        let end = i + c.len_utf8();
                        out.push(&text[i..end]);
                        start = end;
                    }
                }
                self.gpt2_split(&text[start..], &mut out);
            }
        }
        out
    }

    fn gpt2_split<'t>(&self, text: &'t str, out: &mut Vec<&'t str>) {
        let mut pos = 0;
        while pos < text.len() {
            let Some(m) = self.split.find_at(text, pos) else {
                // Unreachable: `\s+` and `[^\s\p{L}\p{N}]+` with `\p{L}+`/`\p{N}+` cover every
                // character. Keep the rest as one piece rather than lose it.
                out.push(&text[pos..]);
                return;
            };
            if m.start() > pos {
                out.push(&text[pos..m.start()]);
            }
            let mut end = m.end();
            let piece = m.as_str();
            // `\s+(?!\S)`: a whitespace run of 2+ characters followed by a non-space character
            // leaves its last character to the next piece.
            if end < text.len() && piece.chars().all(char::is_whitespace) {
                if let Some((last, _)) = piece.char_indices().last() {
                    if last > 0 {
                        end = m.start() + last;
                    }
                }
            }
            out.push(&text[m.start()..end]);
            pos = end;
        }
    }

    /// Appends the BPE tokens of one piece.
    fn bpe_piece(&self, piece: &str, out: &mut Vec<u32>) {
        // Bytes without a token are dropped, as `tokenizers`' BPE does without an unknown
        // token (SmolLM2's vocab lacks a few control bytes, e.g. 0x04).
        let mut syms: Vec<u32> = piece
            .bytes()
            .filter_map(|b| self.byte_ids[b as usize])
            .collect();
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..syms.len().saturating_sub(1) {
                if let Some(&(rank, merged)) = self.merges.get(&(syms[i], syms[i + 1])) {
                    if best.is_none_or(|(r, _, _)| rank < r) {
                        best = Some((rank, i, merged));
                    }
                }
            }
            let Some((_, i, merged)) = best else { break };
            syms[i] = merged;
            syms.remove(i + 1);
        }
        out.extend_from_slice(&syms);
    }

    /// Encodes text as plain text (no BOS, special-token strings not recognised).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        for piece in self.pre_tokenize(text) {
            self.bpe_piece(piece, &mut out);
        }
        out
    }

    /// The bytes that `ids` stand for. Errors on an id outside the vocab.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for (i, &id) in ids.iter().enumerate() {
            let token = self.token(id).ok_or_else(|| {
                malformed(format!(
                    "token id {id} at position {i} is outside the vocab of {}",
                    self.tokens.len()
                ))
            })?;
            for c in token.chars() {
                match self.char_to_byte.get(&c) {
                    Some(&b) => out.push(b),
                    // Not a byte stand-in (only in hand-made special tokens): its own UTF-8.
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
        }
        Ok(out)
    }

    /// Decodes ids to text; invalid UTF-8 (a character cut between tokens) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}
