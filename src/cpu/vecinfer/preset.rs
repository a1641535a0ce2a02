//! The codebook geometry of one side (keys or values) of VecInfer: sub-vector width d_s and
//! centroid count C (docs/contracts/vecinfer.md, "Parameters").

use crate::error::{Error, Result};

/// Sub-vector width and centroid count of one side's codebook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Preset {
    /// d_s: coordinates per sub-vector (divides P).
    pub sub_dim: usize,
    /// C: centroids per codebook, a power of two in 2..=256.
    pub centroids: usize,
}

impl Preset {
    /// `vecinfer:bits=1` (d_s 8, C 256) or `vecinfer:bits=2` (d_s 4, C 256).
    pub fn for_bits(bits: u32) -> Result<Self> {
        match bits {
            1 => Ok(Self {
                sub_dim: 8,
                centroids: 256,
            }),
            2 => Ok(Self {
                sub_dim: 4,
                centroids: 256,
            }),
            _ => Err(Error::Config(format!(
                "vecinfer presets exist for bits = 1 (d_s 8, C 256) and 2 (d_s 4, C 256), got {bits}"
            ))),
        }
    }

    /// A preset from its two numbers; C must be a power of two in 2..=256 and d_s ≥ 1.
    pub fn new(sub_dim: usize, centroids: usize) -> Result<Self> {
        if sub_dim == 0 || !(2..=256).contains(&centroids) || !centroids.is_power_of_two() {
            return Err(Error::Config(format!(
                "vecinfer needs d_s ≥ 1 and C a power of two in 2..=256, got d_s {sub_dim}, C {centroids}"
            )));
        }
        Ok(Self { sub_dim, centroids })
    }

    /// log2 C: bits per stored index.
    pub fn index_bits(&self) -> u32 {
        self.centroids.trailing_zeros()
    }

    /// n_sub = P/d_s sub-vectors per vector; an error when d_s does not divide P.
    pub fn n_sub(&self, padded: usize) -> Result<usize> {
        if !padded.is_multiple_of(self.sub_dim) || self.sub_dim > padded {
            return Err(Error::Config(format!(
                "vecinfer sub-vector width {} does not divide the padded head dimension {padded}",
                self.sub_dim
            )));
        }
        Ok(padded / self.sub_dim)
    }

    /// Bits per coordinate of the stored indices: log2(C)/d_s (× P/D for the padding).
    pub fn bits_per_coordinate(&self) -> f64 {
        self.index_bits() as f64 / self.sub_dim as f64
    }

    /// The short name used in calibration files: `d8c256`.
    pub fn tag(&self) -> String {
        format!("d{}c{}", self.sub_dim, self.centroids)
    }
}
