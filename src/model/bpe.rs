//! GPT-2 byte-level BPE, built from a GGUF file's `tokenizer.ggml.tokens` and
//! `tokenizer.ggml.merges` (`tokenizer.ggml.model = gpt2`).
//!
//! Encoding follows what Hugging Face `tokenizers` does with
//! `Digits(individual_digits=True)` + `ByteLevel(add_prefix_space=False)` and a plain BPE model
//! (the pipeline that produced the SmolLM2 fixtures' `token_ids`, and that llama.cpp's `smollm`
//! pre-tokenizer agrees with):
//!
//! 0. **User-defined tokens** (`tokenizer.ggml.token_type` 4, e.g. Qwen2.5's `<tool_call>`)
//!    are cut out of the text first and become their own ids, as llama.cpp does even when it
//!    does not parse special tokens (longest token first, each one split out of the text that
//!    is left). Control tokens (`<|im_start|>`, ...) are not: they stay plain text.
//! 1. **Digits**: every numeric character (`char::is_numeric`, Unicode `N`) becomes a piece of
//!    its own; the runs between them are pieces. Only for pre-tokenizer `smollm`; `gpt2` skips
//!    this step.
//! 2. **GPT-2 split** of each piece, with GPT-2's regex
//!    `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`. The `regex`
//!    crate has no look-ahead, so `\s+(?!\S)` is done by hand: a whitespace run followed by a
//!    non-space character gives back its last character, which then starts the next piece (so
//!    `"a  b"` splits as `a`, ` `, ` b`). `regex`'s leftmost-first alternation gives the same
//!    matches as the backtracking engine (Oniguruma) that `tokenizers` uses for this pattern.
//!
//!    **qwen2** (`tokenizer.ggml.pre = qwen2`, Qwen2/Qwen2.5) replaces steps 1 and 2 with one
//!    split by the regex llama.cpp runs for it, [`QWEN2_SPLIT`] (the model's own
//!    `tokenizer.json` pattern with its `(?i:…)` contractions spelled out as `'[sS]|…`):
//!    letters with at most one leading non-letter/non-digit/non-newline character, single
//!    digits, punctuation runs with their trailing newlines, newline runs with the whitespace
//!    before them, and whitespace runs that leave their last space to the next word
//!    (`\s+(?!\S)`). That look-ahead is run by `fancy-regex` (a backtracking engine on top of
//!    `regex`), not by hand-written rules. No Unicode normalization is applied (llama.cpp applies
//!    none; Hugging Face's tokenizer for these models applies NFC first, so ids can differ from
//!    theirs on text that is not in NFC).
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
//! **Why not the `tokenizers` crate.** It would do steps 0-4, but even with default features
//! off it brings Oniguruma (a C library) or `fancy-regex`, plus `serde`, `rayon` and friends,
//! for a pipeline that is about 200 lines here; the `regex` crate (already in kvpack's
//! dependency tree, from the rust-lang project) supplies the Unicode classes, and `fancy-regex`
//! (the engine `tokenizers` itself can use) the look-ahead of the qwen2 split.

use std::collections::HashMap;

use regex::Regex;

use super::gguf::Value;

use super::gguf::GgufFile;
use crate::{Error, Result};

/// GPT-2's pre-tokenization regex without the `\s+(?!\S)` alternative (done by hand).
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

/// The qwen2 pre-tokenizer's split regex, as llama.cpp runs it (`tokenizer.json`'s pattern with
/// the case-insensitive group `(?i:'s|'t|'re|'ve|'m|'ll|'d)` written out per letter).
pub const QWEN2_SPLIT: &str = concat!(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+",
    r"|\p{N}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+",
);

/// `tokenizer.ggml.token_type` of a user-defined token.
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

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
    /// Qwen2's split regex [`QWEN2_SPLIT`] (`tokenizer.ggml.pre = qwen2`).
    Qwen2,
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
    /// [`QWEN2_SPLIT`], for [`PreTokenizer::Qwen2`] only.
    split_qwen2: Option<fancy_regex::Regex>,
    /// User-defined tokens (text, id), longest first: cut out of the text before splitting.
    user_defined: Vec<(String, u32)>,
    bos: Option<u32>,
    eos: Option<u32>,
}

impl Bpe {
    /// Builds the tokenizer stored in a GGUF file. Requires `tokenizer.ggml.model = gpt2` and a
    /// pre-tokenizer (`tokenizer.ggml.pre`) of `smollm` (digits split), `qwen2`, or
    /// `gpt2`/`default`/absent. Tokens whose `tokenizer.ggml.token_type` is 4 (user-defined)
    /// are matched in text as whole tokens.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let model = file.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(malformed(format!(
                "tokenizer.ggml.model is `{model}`; only `gpt2` (byte-level BPE) is supported here"
            )));
        }
        let pre = match file.get("tokenizer.ggml.pre").and_then(|v| v.as_str()) {
            Some("smollm") => PreTokenizer::IndividualDigits,
            Some("qwen2") => PreTokenizer::Qwen2,
            None | Some("gpt2") | Some("default") => PreTokenizer::Gpt2,
            Some(other) => {
                return Err(malformed(format!(
                    "pre-tokenizer `{other}` is not supported (smollm, qwen2 and gpt2 are)"
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
        if let Some(types) = file.get("tokenizer.ggml.token_type") {
            let types = types
                .as_array()
                .ok_or_else(|| malformed("tokenizer.ggml.token_type is not an array"))?;
            if types.len() != tokens.len() {
                return Err(malformed(format!(
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    types.len(),
                    tokens.len()
                )));
            }
            let user: Vec<u32> = types
                .iter()
                .enumerate()
                .filter(|(_, t)| token_type(t) == Some(TOKEN_TYPE_USER_DEFINED))
                .map(|(i, _)| i as u32)
                .collect();
            bpe.set_user_defined(&user)?;
        }
        Ok(bpe)
    }

    /// Makes the tokens `ids` user-defined: [`Bpe::encode`] cuts their text out of its input
    /// (longest first) and emits their ids, before any splitting. Replaces an earlier set.
    pub fn set_user_defined(&mut self, ids: &[u32]) -> Result<()> {
        let mut user = Vec::with_capacity(ids.len());
        for &id in ids {
            let text = self.token(id).ok_or_else(|| {
                malformed(format!("user-defined token {id} is outside the vocab"))
            })?;
            if text.is_empty() {
                return Err(malformed(format!("user-defined token {id} is empty")));
            }
            user.push((text.to_owned(), id));
        }
        // Longest first (then by id, so that the order does not depend on the file's order).
        user.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        self.user_defined = user;
        Ok(())
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
        let split_qwen2 = match pre {
            PreTokenizer::Qwen2 => Some(
                fancy_regex::Regex::new(QWEN2_SPLIT)
                    .map_err(|e| malformed(format!("qwen2 split regex: {e}")))?,
            ),
            _ => None,
        };
        Ok(Self {
            tokens,
            ids,
            merges: merge_map,
            byte_ids,
            char_to_byte,
            pre,
            split,
            split_qwen2,
            user_defined: Vec::new(),
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

    /// The user-defined tokens' ids, longest text first.
    pub fn user_defined(&self) -> impl Iterator<Item = u32> + '_ {
        self.user_defined.iter().map(|(_, id)| *id)
    }

    /// The pieces that BPE runs on, as slices of `text` (user-defined tokens are not cut out
    /// here: see [`Bpe::encode`]).
    pub fn pre_tokenize<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut out = Vec::new();
        match self.pre {
            PreTokenizer::Gpt2 => self.gpt2_split(text, &mut out),
            PreTokenizer::Qwen2 => self.qwen2_split(text, &mut out),
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

    fn qwen2_split<'t>(&self, text: &'t str, out: &mut Vec<&'t str>) {
        let Some(re) = &self.split_qwen2 else {
            // Unreachable: `new` compiles the regex for this pre-tokenizer.
            out.push(text);
            return;
        };
        let mut pos = 0;
        for m in re.find_iter(text) {
            match m {
                Ok(m) => {
                    // Every character is matched by some alternative, so there are no gaps;
                    // keep one rather than lose text if there were.
                    if m.start() > pos {
                        out.push(&text[pos..m.start()]);
                    }
                    if m.end() > m.start() {
                        out.push(m.as_str());
                    }
                    pos = m.end();
                }
                Err(e) => {
                    // fancy-regex's backtracking limit; not reachable with this pattern (each
                    // alternative backtracks at most linearly). Keep the text as one piece.
                    log::warn!("qwen2 pre-tokenizer: {e}; the rest of the text is one piece");
                    break;
                }
            }
        }
        if pos < text.len() {
            out.push(&text[pos..]);
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

    /// Encodes text as plain text (no BOS; control-token strings such as `<|im_end|>` are not
    /// recognised; user-defined tokens are).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        for frag in self.cut_user_defined(text) {
            match frag {
                Fragment::Text(t) => {
                    for piece in self.pre_tokenize(t) {
                        self.bpe_piece(piece, &mut out);
                    }
                }
                Fragment::Token(id) => out.push(id),
            }
        }
        out
    }

    /// `text` with every user-defined token cut out, longest token first: each token splits
    /// the text fragments that earlier (longer) tokens left, at every non-overlapping occurrence
    /// from the left (llama.cpp's order).
    fn cut_user_defined<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut frags = vec![Fragment::Text(text)];
        for (tok, id) in &self.user_defined {
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(tok.as_str())))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(mut rest) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(i) = rest.find(tok.as_str()) {
                    if i > 0 {
                        next.push(Fragment::Text(&rest[..i]));
                    }
                    next.push(Fragment::Token(*id));
                    rest = &rest[i + tok.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            frags = next;
        }
        frags
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

/// A part of a text being encoded: plain text, or a user-defined token already resolved.
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// A `tokenizer.ggml.token_type` entry as an integer (GGUF stores them as i32).
fn token_type(v: &Value) -> Option<i64> {
    match *v {
        Value::I32(t) => Some(t.into()),
        _ => v.as_u64().and_then(|t| i64::try_from(t).ok()),
    }
}
