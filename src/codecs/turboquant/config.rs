//! TurboQuant's settings for one side: the variant (MSE or RVQ), bits per code and the seed
//! of the rotation's signs (docs/contracts/turboquant.md).

use std::fmt;

use crate::cpu::common::splitmix::{DEFAULT_SEED, STREAM_KEY_SIGNS, STREAM_VALUE_SIGNS};
use crate::store::Side;

/// Which TurboQuant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Variant {
    /// One stage of b bits (`turboquant-mse`).
    Mse,
    /// Two stages of b bits each: the second quantizes the first one's error (`turboquant-rvq`).
    Rvq,
}

impl Variant {
    /// The method-table name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Mse => "turboquant-mse",
            Variant::Rvq => "turboquant-rvq",
        }
    }

    /// Code rows per vector.
    pub fn stages(self) -> usize {
        match self {
            Variant::Mse => 1,
            Variant::Rvq => 2,
        }
    }
}

/// One side's TurboQuant settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TqSide {
    /// MSE or RVQ.
    pub variant: Variant,
    /// Keys or values (keys draw their signs from stream 0, values from stream 1).
    pub side: Side,
    /// Bits per code (each stage), 1..=8.
    pub bits: u32,
    /// The seed of the sign streams (default [`DEFAULT_SEED`]).
    pub seed: u64,
}

impl TqSide {
    /// `variant` at `bits` per code on `side`, with the default seed.
    pub fn new(variant: Variant, side: Side, bits: u32) -> Self {
        Self {
            variant,
            side,
            bits,
            seed: DEFAULT_SEED,
        }
    }

    /// The same settings with the sign streams' seed `seed`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The SplitMix64 stream of this side's signs.
    pub fn sign_stream(&self) -> u64 {
        match self.side {
            Side::Keys => STREAM_KEY_SIGNS,
            Side::Values => STREAM_VALUE_SIGNS,
        }
    }
}

impl fmt::Display for TqSide {
    /// The side's options in the method grammar: `bits=B` and, when not the default,
    /// `seed=0x…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bits={}", self.bits)?;
        if self.seed != DEFAULT_SEED {
            write!(f, ",seed={:#x}", self.seed)?;
        }
        Ok(())
    }
}
