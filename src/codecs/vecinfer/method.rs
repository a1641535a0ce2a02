//! VecInfer's row of the method table: `vecinfer:bits=1|2,calib=FILE` (`kbits`, `vbits` for
//! the sides of a spec for both; `residual`, default 0). The calibration file
//! (`kvpack calibrate --for vecinfer`) is read when the spec is parsed: a spec without
//! `calib`, a missing or malformed file, or a file without the preset's codebooks is an error
//! then, before any cache exists. Under key centering (`center=calib`, the same file) the keys
//! use the λ and codebooks the calibration trained on centered keys.

use std::path::PathBuf;
use std::sync::Arc;

use super::codec::VecInferCodec;
use super::config::VecSide;
use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::cpu::vecinfer::Preset;
use crate::error::{Error, Result};
use crate::method::types::{MethodRow, OptionDef, Options, SideConfig, Sides};
use crate::store::{Geometry, Side};

/// The `vecinfer` row.
pub static ROW: MethodRow = MethodRow {
    name: "vecinfer",
    summary: "VecInfer: calibrated λ smoothing + Hadamard, product VQ (indices into a calibrated sub-vector codebook), LUT attention; needs calib=FILE from `kvpack calibrate`",
    sides: Sides::Both,
    options: &[
        OptionDef {
            key: "bits",
            default: "2",
            help: "1 (d_s 8, C 256) or 2 (d_s 4, C 256), both sides",
        },
        OptionDef {
            key: "kbits",
            default: "bits",
            help: "key preset",
        },
        OptionDef {
            key: "vbits",
            default: "bits",
            help: "value preset",
        },
        OptionDef {
            key: "calib",
            default: "(required)",
            help: "calibration file of `kvpack calibrate --for vecinfer`",
        },
    ],
    default_residual: 0,
    parse,
    short: |_| None,
};

/// Calibration files read by this process, by path (a spec parsed once per layer or per
/// method does not read the file again; a changed file is read again when its length or
/// modification time differs).
fn parse(side: Side, both: bool, o: &Options) -> Result<Arc<dyn SideConfig>> {
    let (own, other) = match side {
        Side::Keys => ("kbits", "vbits"),
        Side::Values => ("vbits", "kbits"),
    };
    if !both && o.get(other).is_some() {
        return Err(Error::Config(format!(
            "vecinfer: `{other}` applies to the other side; this is the {} method of a KEYS/VALUES pair (use `bits`)",
            side.name()
        )));
    }
    let bits = o
        .number::<u32>("vecinfer", own)?
        .or(o.number::<u32>("vecinfer", "bits")?)
        .unwrap_or(2);
    let preset = Preset::for_bits(bits)?;
    let path = o.get("calib").ok_or_else(|| {
        Error::Config(
            "vecinfer needs a calibration file: `vecinfer:bits=B,calib=FILE` (make one with \
             `kvpack calibrate --model M --text F --out FILE --for vecinfer`)"
                .into(),
        )
    })?;
    let calib_path = PathBuf::from(path);
    let calib = crate::calib::file::load_cached(&calib_path)?;
    // Keys under `center=calib` use the tables trained on centered keys.
    let centered = side == Side::Keys && o.get("center") == Some("calib");
    // The preset's codebooks must be in the file (layer 0 checks what every layer has).
    calib
        .vecinfer_layer(0, preset, preset)
        .and_then(|_| match centered {
            true => calib.vecinfer_centered_keys(0, preset).map(|_| ()),
            false => Ok(()),
        })
        .map_err(|e| match e {
            Error::Calibration { message, .. } => Error::Calibration {
                path: calib_path.display().to_string(),
                message,
            },
            e => e,
        })?;
    Ok(Arc::new(VecSide {
        side,
        bits,
        preset,
        calib_path,
        calib,
        centered,
    }))
}

impl SideConfig for VecSide {
    fn method(&self) -> &'static str {
        "vecinfer"
    }

    fn side(&self) -> Side {
        self.side
    }

    fn block_tokens(&self) -> usize {
        1
    }

    /// log2(C)/d_s · P/D (the codebooks and λ are tables, counted once per layer).
    fn bits_per_value(&self, g: Geometry) -> f64 {
        let p = g.dim.next_power_of_two() as f64;
        self.preset.bits_per_coordinate() * p / g.dim as f64
    }

    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        _residual: usize,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>> {
        Ok(Arc::new(VecInferCodec::new(
            ctx,
            self.clone(),
            g,
            layer,
            choice,
        )?))
    }
}
