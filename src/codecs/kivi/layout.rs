//! KIVI storage layout: how codes and parameters sit in u32 words (CPU and GPU alike; a
//! codec of one side uses its side's fields).
//!
//! One layer holds `T` tokens of `H` heads of width `D`. Of those, the first `Q` tokens are
//! quantized (a multiple of the key group `Gk`), the rest `[Q, T)` sit in the f16 residual.
//!
//! **Keys** (per channel, groups of `Gk` tokens). Token block `j` covers tokens
//! `[j·Gk, (j+1)·Gk)`. Each (block, head, channel) group is one dense LSB-first bitstream of
//! `Gk` codes (token order) padded to whole words (`key_group_words = ceil(Gk·bk / 32)`; no
//! padding for Gk = 32 or 128):
//! ```text
//! key_codes:  u32 [blocks][H][D][key_group_words]
//! key_params: [blocks][H][D] pairs (scale, lo)
//! ```
//! **Values** (per token, groups of `Gv` consecutive channels, the last one ragged when
//! `Gv ∤ D`). Each (token, head) row is a sequence of group streams, each padded to whole
//! words; full groups take `ceil(Gv·bv / 32)` words, the ragged one `ceil((D mod Gv)·bv / 32)`:
//! ```text
//! value_codes:  u32 [tokens][H][value_row_words]
//! value_params: [tokens][H][ceil(D / Gv)] pairs (scale, lo)
//! ```
//! **Parameters**: f16 storage packs one pair per u32 (`scale` in the low half, `lo` in the
//! high half: WGSL `pack2x16float(vec2(scale, lo))`); f32 storage takes two u32 (the bits of
//! `scale`, then of `lo`).
//!
//! **Residual**: f16 K and V rows `[H·D]` per token, two f16 per u32 (channel 2i in the low
//! half). Padding to whole words exists only in the streams said above; the memory report
//! counts it.

use crate::error::{Error, Result};

/// How each group's (scale, lo) pair is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ParamStorage {
    /// Two f16 in one u32 (the spec's default).
    #[default]
    F16,
    /// Two f32.
    F32,
}

impl ParamStorage {
    /// u32 words per (scale, lo) pair.
    pub fn words(self) -> usize {
        match self {
            Self::F16 => 1,
            Self::F32 => 2,
        }
    }

    /// Parses `f16 | f32` (also [`std::str::FromStr`]).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f16" => Ok(Self::F16),
            "f32" => Ok(Self::F32),
            other => Err(Error::Config(format!(
                "unknown parameter storage `{other}` (f16 or f32)"
            ))),
        }
    }
}

impl std::str::FromStr for ParamStorage {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl std::fmt::Display for ParamStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F16 => "f16",
            Self::F32 => "f32",
        })
    }
}

/// The fixed geometry of one layer's KIVI cache (everything but the growing T).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// KV heads.
    pub heads: usize,
    /// Head width.
    pub dim: usize,
    /// Key bits.
    pub key_bits: u32,
    /// Key group (tokens per channel group; also the flush granularity).
    pub key_group: usize,
    /// Value bits.
    pub value_bits: u32,
    /// Value group (channels per group).
    pub value_group: usize,
    /// Residual window R (a multiple of `key_group`, may be 0).
    pub residual: usize,
    /// Parameter storage.
    pub params: ParamStorage,
}

impl Layout {
    /// Validates a geometry.
    pub fn new(heads: usize, dim: usize, cfg: &super::KiviConfig) -> Result<Self> {
        let l = Self {
            heads,
            dim,
            key_bits: cfg.key_bits,
            key_group: cfg.key_group,
            value_bits: cfg.value_bits,
            value_group: cfg.value_group,
            residual: cfg.residual,
            params: cfg.params,
        };
        for bits in [l.key_bits, l.value_bits] {
            crate::cpu::bitpack::check_bits(bits)?;
        }
        if heads == 0 || dim == 0 {
            return Err(Error::Shape {
                what: "cache",
                message: format!("heads ({heads}) and dim ({dim}) must be positive"),
            });
        }
        if l.key_group == 0 || l.value_group == 0 {
            return Err(Error::Config("group sizes must be positive".into()));
        }
        if l.key_group > 1024 || l.value_group > 256 {
            return Err(Error::Config(format!(
                "key groups above 1024 tokens and value groups above 256 channels are not supported (key {}, value {})",
                l.key_group, l.value_group
            )));
        }
        if !l.residual.is_multiple_of(l.key_group) {
            return Err(Error::Config(format!(
                "residual R = {} must be a multiple of the group G = {}",
                l.residual, l.key_group
            )));
        }
        if heads.checked_mul(dim).is_none_or(|x| x > (1 << 20)) {
            return Err(Error::Shape {
                what: "cache",
                message: format!("heads·dim = {heads}·{dim} is too large"),
            });
        }
        Ok(l)
    }

    /// Number of quantized tokens after `t` tokens were appended in total:
    /// `floor(max(0, t − R) / G) · G`.
    pub fn quantized_len(&self, t: usize) -> usize {
        t.saturating_sub(self.residual) / self.key_group * self.key_group
    }

    /// Words of one key (block, head, channel) group stream.
    pub fn key_group_words(&self) -> usize {
        (self.key_group * self.key_bits as usize).div_ceil(32)
    }

    /// Words of one key token block (all heads and channels).
    pub fn key_block_words(&self) -> usize {
        self.heads * self.dim * self.key_group_words()
    }

    /// Parameter words of one key token block.
    pub fn key_block_param_words(&self) -> usize {
        self.heads * self.dim * self.params.words()
    }

    /// Value groups per (token, head) row.
    pub fn value_groups(&self) -> usize {
        self.dim.div_ceil(self.value_group)
    }

    /// Words of one full value group stream.
    pub fn value_group_words(&self) -> usize {
        (self.value_group * self.value_bits as usize).div_ceil(32)
    }

    /// Words of one (token, head) value row: full groups, then the ragged one.
    pub fn value_row_words(&self) -> usize {
        let full = self.dim / self.value_group;
        let rem = self.dim % self.value_group;
        full * self.value_group_words() + (rem * self.value_bits as usize).div_ceil(32)
    }

    /// Code words of one token (all heads).
    pub fn value_token_words(&self) -> usize {
        self.heads * self.value_row_words()
    }

    /// Parameter words of one token (all heads).
    pub fn value_token_param_words(&self) -> usize {
        self.heads * self.value_groups() * self.params.words()
    }

    /// u32 words of one f16 residual row of K or V (`H·D` halves).
    pub fn residual_row_words(&self) -> usize {
        (self.heads * self.dim).div_ceil(2)
    }

    /// Residual ring capacity in tokens: the residual never holds more than R + G − 1 tokens.
    pub fn ring_tokens(&self) -> usize {
        self.residual + self.key_group
    }

    /// Elements of one token (`H·D`).
    pub fn token_elems(&self) -> usize {
        self.heads * self.dim
    }
}
