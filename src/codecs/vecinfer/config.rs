//! VecInfer's settings for one side: its preset (d_s, C) and the calibration (λ and codebooks
//! of every layer), loaded once when the method is parsed and shared by every layer's codec.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::calib::Calibration;
use crate::cpu::vecinfer::Preset;
use crate::store::Side;

/// One side's VecInfer settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VecSide {
    /// Keys or values.
    pub side: Side,
    /// The nominal bits (1 or 2) of the preset.
    pub bits: u32,
    /// d_s and C.
    pub preset: Preset,
    /// The calibration file as given in the spec.
    pub calib_path: PathBuf,
    /// The calibration file's content.
    pub calib: Arc<Calibration>,
    /// Keys under key centering (`center=calib`): λ and codebooks trained on k − μ
    /// ([`crate::calib::CenteredKeyTables`]); the store subtracts μ before the codec sees a key.
    pub centered: bool,
}

impl VecSide {
    /// `side` at the preset of `bits` (d_s and C: `preset`) with the calibration `calib` read
    /// from `calib_path`.
    pub fn new(
        side: Side,
        bits: u32,
        preset: Preset,
        calib_path: PathBuf,
        calib: Arc<Calibration>,
    ) -> Self {
        Self {
            side,
            bits,
            preset,
            calib_path,
            calib,
            centered: false,
        }
    }
}

impl fmt::Display for VecSide {
    /// `bits=B,calib=PATH`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bits={},calib={}", self.bits, self.calib_path.display())
    }
}
