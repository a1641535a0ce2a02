//! Memory accounting, the same for every codec and path: bytes **held** (allocated capacity:
//! `Vec` capacities on the CPU, buffer sizes on the GPU) and bytes of **payload** (the data in
//! use, by the codec's stored layout), by kind, and the ratio against f16 K and V of the same
//! tokens. Ratios are measured from what is held, never from a formula.

/// Bytes a cache holds, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Memory {
    /// The key codec's code streams (packed codes, sign words, indices...).
    pub key_codes: u64,
    /// The key codec's side information (per-group (scale, lo), per-token norms...).
    pub key_params: u64,
    /// The value codec's code streams.
    pub value_codes: u64,
    /// The value codec's side information.
    pub value_params: u64,
    /// The f16 residual window of K and V.
    pub residual: u64,
    /// Per-layer constants uploaded once (sign tables, sketch matrices, codebooks).
    pub tables: u64,
    /// Eviction's per (token, head) scores and positions ([`crate::policy`]).
    pub eviction: u64,
}

impl Memory {
    /// Sum of all kinds.
    pub fn total(&self) -> u64 {
        self.key_codes
            + self.key_params
            + self.value_codes
            + self.value_params
            + self.residual
            + self.tables
            + self.eviction
    }

    /// Adds another's bytes kind by kind.
    pub fn add(&mut self, o: &Memory) {
        self.key_codes += o.key_codes;
        self.key_params += o.key_params;
        self.value_codes += o.value_codes;
        self.value_params += o.value_params;
        self.residual += o.residual;
        self.tables += o.tables;
        self.eviction += o.eviction;
    }

    /// `bytes` counted as codes or params of `side`.
    pub(crate) fn add_stream(&mut self, side: super::Side, kind: StreamKind, bytes: u64) {
        use super::Side::{Keys, Values};
        let slot = match (side, kind) {
            (Keys, StreamKind::Codes) => &mut self.key_codes,
            (Keys, StreamKind::Params) => &mut self.key_params,
            (Values, StreamKind::Codes) => &mut self.value_codes,
            (Values, StreamKind::Params) => &mut self.value_params,
        };
        *slot += bytes;
    }
}

/// How a codec's stream is counted in [`Memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// Codes (`key_codes` / `value_codes`).
    Codes,
    /// Side information (`key_params` / `value_params`).
    Params,
}

/// What a layer's (or a whole cache's) `memory()` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct MemoryReport {
    /// Tokens held.
    pub tokens: usize,
    /// Of which stored in compressed form on both sides (`min` of the sides' Q).
    pub quantized: usize,
    /// Bytes allocated, by kind.
    pub held: Memory,
    /// Bytes in use, by kind.
    pub payload: Memory,
    /// Bytes of the same K and V in f16: `2 · T · H · D · 2`.
    pub f16_bytes: u64,
}

impl MemoryReport {
    /// A report from its parts.
    pub fn new(
        tokens: usize,
        quantized: usize,
        held: Memory,
        payload: Memory,
        f16_bytes: u64,
    ) -> Self {
        Self {
            tokens,
            quantized,
            held,
            payload,
            f16_bytes,
        }
    }

    /// f16 bytes over held bytes (the honest compression ratio; `None` for an empty cache).
    pub fn ratio(&self) -> Option<f64> {
        (self.held.total() > 0 && self.tokens > 0)
            .then(|| self.f16_bytes as f64 / self.held.total() as f64)
    }

    /// f16 bytes over payload bytes (what the format achieves, ignoring spare capacity).
    pub fn payload_ratio(&self) -> Option<f64> {
        (self.payload.total() > 0 && self.tokens > 0)
            .then(|| self.f16_bytes as f64 / self.payload.total() as f64)
    }

    /// Bits per value held: `held · 8 / (2 · T · H · D)` (`None` for an empty cache).
    pub fn bits_per_value(&self) -> Option<f64> {
        (self.tokens > 0 && self.f16_bytes > 0)
            .then(|| self.held.total() as f64 * 8.0 / (self.f16_bytes as f64 / 2.0))
    }

    /// Adds another layer's report.
    pub fn add(&mut self, o: &MemoryReport) {
        self.tokens += o.tokens;
        self.quantized += o.quantized;
        self.held.add(&o.held);
        self.payload.add(&o.payload);
        self.f16_bytes += o.f16_bytes;
    }
}
