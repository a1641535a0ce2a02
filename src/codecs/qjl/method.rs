//! QJL's row of the method table: `qjl:m=M` (keys only: `qjl:m=128/kivi:bits=4`), with
//! `seed`; the residual window defaults to 0 (every key is sketched at once).

use std::sync::Arc;

use super::codec::QjlCodec;
use super::config::QjlSide;
use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::cpu::common::sketch::check_sketch_rows;
use crate::cpu::common::splitmix::DEFAULT_SEED;
use crate::error::{Error, Result};
use crate::method::types::{MethodRow, OptionDef, Options, SideConfig, Sides};
use crate::store::{Geometry, Side};

/// The `qjl` row.
pub static ROW: MethodRow = MethodRow {
    name: "qjl",
    summary: "QJL keys: m sign bits of a Gaussian projection and an f16 norm per token and head; scores estimated without reconstructing keys",
    sides: Sides::KeysOnly,
    options: &[
        OptionDef {
            key: "m",
            default: "D",
            help: "sketch rows (a positive multiple of 32; default D rounded up to one)",
        },
        OptionDef {
            key: "seed",
            default: "0x6b7670616b",
            help: "seed of the Gaussian sketch (decimal or 0x hex)",
        },
    ],
    default_residual: 0,
    parse,
    short: |_| None,
};

impl SideConfig for QjlSide {
    fn method(&self) -> &'static str {
        "qjl"
    }

    fn side(&self) -> Side {
        Side::Keys
    }

    fn block_tokens(&self) -> usize {
        1
    }

    fn reconstructs(&self) -> bool {
        false
    }

    /// (m + 16) / D: the sign bits and the f16 norm.
    fn bits_per_value(&self, g: Geometry) -> f64 {
        (self.rows(g.dim) as f64 + 16.0) / g.dim as f64
    }

    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        _residual: usize,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>> {
        Ok(Arc::new(QjlCodec::new(ctx, *self, g, layer, choice)?))
    }
}

fn parse(side: Side, _both: bool, o: &Options) -> Result<Arc<dyn SideConfig>> {
    if side == Side::Values {
        return Err(Error::Config(
            "qjl stores keys only: it cannot be the value method".into(),
        ));
    }
    let m = o.number::<usize>("qjl", "m")?;
    if let Some(m) = m {
        check_sketch_rows(m)?;
    }
    let seed = match o.get("seed") {
        None => DEFAULT_SEED,
        Some(v) => {
            let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.map_err(|_| {
                Error::Config(format!("qjl: `seed={v}` is not a u64 (decimal or 0x hex)"))
            })?
        }
    };
    Ok(Arc::new(QjlSide { m, seed }))
}
