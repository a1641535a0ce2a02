//! KIVI's settings: [`KiviConfig`] for both sides of a layer, [`KiviSide`] for one.

use std::fmt;

use super::layout::{Layout, ParamStorage};
use crate::error::Result;
use crate::store::{Geometry, Side};

/// KIVI settings of both sides of a layer: `KiviConfig::uniform(4, 32, 128).value_bits(2)`
/// (the type is `#[non_exhaustive]`: build it with [`KiviConfig::uniform`] or `default()` and
/// the setters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KiviConfig {
    /// Key bits, 1..=8.
    pub key_bits: u32,
    /// Key group: tokens per channel group, and the flush granularity (default 32).
    pub key_group: usize,
    /// Value bits, 1..=8.
    pub value_bits: u32,
    /// Value group: channels per group (default 32).
    pub value_group: usize,
    /// Residual window R in tokens (default 128; a multiple of `key_group`; may be 0).
    pub residual: usize,
    /// Storage of each group's (scale, lo) (default f16).
    pub params: ParamStorage,
}

impl Default for KiviConfig {
    fn default() -> Self {
        Self::uniform(2, 32, 128)
    }
}

impl KiviConfig {
    /// Same bits, group and residual for keys and values.
    pub fn uniform(bits: u32, group: usize, residual: usize) -> Self {
        Self {
            key_bits: bits,
            key_group: group,
            value_bits: bits,
            value_group: group,
            residual,
            params: ParamStorage::F16,
        }
    }

    /// Sets the key bits (1..=8; checked when a layer is made).
    pub fn key_bits(mut self, bits: u32) -> Self {
        self.key_bits = bits;
        self
    }

    /// Sets the key group (tokens per channel group, and the flush block).
    pub fn key_group(mut self, group: usize) -> Self {
        self.key_group = group;
        self
    }

    /// Sets the value bits (1..=8; checked when a layer is made).
    pub fn value_bits(mut self, bits: u32) -> Self {
        self.value_bits = bits;
        self
    }

    /// Sets the value group (channels per group).
    pub fn value_group(mut self, group: usize) -> Self {
        self.value_group = group;
        self
    }

    /// Sets the residual window R in tokens (a multiple of the key group; may be 0).
    pub fn residual(mut self, residual: usize) -> Self {
        self.residual = residual;
        self
    }

    /// Sets the storage of each group's (scale, lo).
    pub fn params(mut self, params: ParamStorage) -> Self {
        self.params = params;
        self
    }
}

impl fmt::Display for KiviConfig {
    /// The method spec of this configuration (`kivi:kbits=4,vbits=2,...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kivi:kbits={},vbits={},kgroup={},vgroup={},residual={},params={}",
            self.key_bits,
            self.value_bits,
            self.key_group,
            self.value_group,
            self.residual,
            self.params
        )
    }
}

/// One side's KIVI settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KiviSide {
    /// Keys or values.
    pub side: Side,
    /// Bits per code.
    pub bits: u32,
    /// Tokens per block: the key group, and the flush block of both sides.
    pub block: usize,
    /// Values: channels per group (keys: unused, equal to `block`).
    pub channel_group: usize,
    /// (scale, lo) storage.
    pub params: ParamStorage,
}

impl KiviSide {
    /// The KIVI layout this side's kernels use (the other side's fields are placeholders).
    pub fn layout(&self, g: Geometry, residual: usize) -> Result<Layout> {
        let cfg = KiviConfig {
            key_bits: self.bits,
            key_group: self.block,
            value_bits: self.bits,
            value_group: self.channel_group,
            residual,
            params: self.params,
        };
        Layout::new(g.heads, g.dim, &cfg)
    }
}

impl fmt::Display for KiviSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bits={},group={}", self.bits, self.block)?;
        if self.side == Side::Values && self.channel_group != self.block {
            write!(f, ",vgroup={}", self.channel_group)?;
        }
        write!(f, ",params={}", self.params)
    }
}
