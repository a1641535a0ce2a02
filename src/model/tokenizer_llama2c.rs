//! The llama2.c tokenizer (`tokenizer.bin`, `tok512.bin`, ...): an i32 `max_token_length`,
//! then per token an f32 merge score, an i32 byte length and the bytes. Encoding follows
//! `run.c`: optional BOS (id 1), a dummy-prefix `" "` token when the text is non-empty, one
//! token per UTF-8 character (or its bytes as `<0xXX>` tokens, id = byte + 3, when the
//! character is not in the vocabulary), then repeatedly the adjacent pair whose concatenation
//! is the highest-scoring vocabulary entry is merged, until no pair is in the vocabulary.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};

/// Beginning of sequence.
pub const BOS: u32 = 1;
/// End of sequence.
pub const EOS: u32 = 2;

/// A llama2.c (sentencepiece-derived) tokenizer.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    pieces: Vec<Vec<u8>>,
    scores: Vec<f32>,
    lookup: HashMap<Vec<u8>, u32>,
    max_token_length: usize,
}

impl Tokenizer {
    /// Reads a tokenizer file; every entry up to the end of the file is a token.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&bytes).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses a tokenizer held in memory.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let bad = |m: String| Error::Config(format!("not a llama2.c tokenizer: {m}"));
        let mut at = 0usize;
        let word = |at: &mut usize, what: &str| -> Result<[u8; 4]> {
            let w = bytes
                .get(*at..*at + 4)
                .ok_or_else(|| bad(format!("truncated at byte {} reading {what}", *at)))?;
            *at += 4;
            Ok([w[0], w[1], w[2], w[3]])
        };
        let max_len = i32::from_le_bytes(word(&mut at, "max_token_length")?);
        if !(1..=1 << 16).contains(&max_len) {
            return Err(bad(format!("max_token_length {max_len} is out of range")));
        }
        let (mut pieces, mut scores) = (Vec::new(), Vec::new());
        while at < bytes.len() {
            let id = pieces.len();
            let score = f32::from_le_bytes(word(&mut at, "a score")?);
            if !score.is_finite() {
                return Err(bad(format!("token {id} has score {score}")));
            }
            let len = i32::from_le_bytes(word(&mut at, "a length")?);
            if len < 0 || len > max_len {
                return Err(bad(format!(
                    "token {id} has length {len} (max_token_length {max_len})"
                )));
            }
            let piece = bytes
                .get(at..at + len as usize)
                .ok_or_else(|| bad(format!("truncated in token {id}")))?;
            at += len as usize;
            pieces.push(piece.to_vec());
            scores.push(score);
        }
        if pieces.len() < 3 + 256 {
            return Err(bad(format!(
                "{} tokens is fewer than the 3 specials and 256 byte tokens",
                pieces.len()
            )));
        }
        Ok(Self::from_parts(pieces, scores, max_len as usize))
    }

    /// A tokenizer from its pieces and scores (`pieces[i]` is token i's bytes).
    pub fn from_parts(pieces: Vec<Vec<u8>>, scores: Vec<f32>, max_token_length: usize) -> Self {
        let mut lookup = HashMap::with_capacity(pieces.len());
        for (i, p) in pieces.iter().enumerate() {
            // run.c looks pieces up as C strings: an embedded NUL ends the piece.
            let key = c_str(p).to_vec();
            lookup.entry(key).or_insert(i as u32);
        }
        Self {
            pieces,
            scores,
            lookup,
            max_token_length,
        }
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// Longest piece in bytes, as the file states it.
    pub fn max_token_length(&self) -> usize {
        self.max_token_length
    }

    /// Token `id`'s bytes as stored (`<0x0A>` for a byte token).
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id as usize).map(Vec::as_slice)
    }

    /// Encodes `text` as `run.c` does: `[BOS] [" "] merged pieces [EOS]`.
    pub fn encode(&self, text: &str, bos: bool, eos: bool) -> Vec<u32> {
        let mut tokens: Vec<u32> = Vec::with_capacity(text.len() + 3);
        if bos {
            tokens.push(BOS);
        }
        if !text.is_empty() {
            if let Some(&id) = self.lookup.get(b" ".as_slice()) {
                tokens.push(id);
            }
        }
        let mut buf = [0u8; 4];
        for ch in text.chars() {
            let s = ch.encode_utf8(&mut buf).as_bytes();
            match self.lookup.get(s) {
                Some(&id) => tokens.push(id),
                None => tokens.extend(s.iter().map(|&b| b as u32 + 3)),
            }
        }
        let mut joined = Vec::with_capacity(2 * self.max_token_length + 2);
        loop {
            let mut best: Option<(f32, u32, usize)> = None;
            for i in 0..tokens.len().saturating_sub(1) {
                joined.clear();
                joined.extend_from_slice(c_str(&self.pieces[tokens[i] as usize]));
                joined.extend_from_slice(c_str(&self.pieces[tokens[i + 1] as usize]));
                if let Some(&id) = self.lookup.get(joined.as_slice()) {
                    let score = self.scores[id as usize];
                    if best.is_none_or(|(s, _, _)| score > s) {
                        best = Some((score, id, i));
                    }
                }
            }
            let Some((_, id, i)) = best else { break };
            tokens[i] = id;
            tokens.remove(i + 1);
        }
        if eos {
            tokens.push(EOS);
        }
        tokens
    }

    /// The bytes `token` prints after `prev` (`run.c`'s `decode`): a byte token `<0xXX>` is
    /// that byte, and a piece's leading space is dropped right after BOS.
    pub fn decode_piece(&self, prev: u32, token: u32) -> Vec<u8> {
        let Some(mut piece) = self.piece(token) else {
            return Vec::new();
        };
        if prev == BOS && piece.first() == Some(&b' ') {
            piece = &piece[1..];
        }
        if let Some(b) = parse_byte_piece(piece) {
            return vec![b];
        }
        piece.to_vec()
    }

    /// The text of a token sequence as `run.c` prints it: each token decoded against its
    /// predecessor (the first as if after BOS, so the dummy-prefix space is dropped), BOS and
    /// EOS print nothing, invalid UTF-8 is replaced.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut out = Vec::new();
        let mut prev = None;
        for &t in ids {
            if t != BOS && t != EOS {
                let p = prev.unwrap_or(BOS);
                out.extend(self.decode_piece(p, t));
            }
            prev = Some(t);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The piece up to its first NUL byte.
fn c_str(p: &[u8]) -> &[u8] {
    p.iter().position(|&b| b == 0).map_or(p, |n| &p[..n])
}

/// `<0xXX>` → the byte.
fn parse_byte_piece(p: &[u8]) -> Option<u8> {
    let hex = p.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}
