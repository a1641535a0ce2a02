//! TurboQuant's rows of the method table: `turboquant-mse:bits=B` and `turboquant-rvq:bits=B`
//! (B per stage), with `kbits`/`vbits` for the sides of a spec for both, and `seed`. Either can
//! store keys, values or both (`turboquant-mse:bits=4/kivi:bits=2`). The residual window
//! defaults to 0 (docs/contracts/turboquant.md: every token is quantized at once).

use std::sync::Arc;

use super::codec::TurboQuantCodec;
use super::config::{TqSide, Variant};
use super::prod::{ProdCodec, ProdSide};
use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::cpu::common::sketch::check_sketch_rows;
use crate::cpu::common::splitmix::DEFAULT_SEED;
use crate::error::{Error, Result};
use crate::method::types::{MethodRow, OptionDef, Options, SideConfig, Sides};
use crate::store::{Geometry, Side};

const OPTIONS: &[OptionDef] = &[
    OptionDef {
        key: "bits",
        default: "4",
        help: "bits per code (1..=8; RVQ: per stage), both sides",
    },
    OptionDef {
        key: "kbits",
        default: "bits",
        help: "key bits",
    },
    OptionDef {
        key: "vbits",
        default: "bits",
        help: "value bits",
    },
    OptionDef {
        key: "seed",
        default: "0x6b7670616b",
        help: "seed of the rotation's random signs (decimal or 0x hex)",
    },
];

/// The `turboquant-mse` row.
pub static ROW_MSE: MethodRow = MethodRow {
    name: "turboquant-mse",
    summary: "TurboQuant-MSE: random Hadamard rotation, then an optimal scalar codebook per coordinate; one f16 norm per token and head",
    sides: Sides::Both,
    options: OPTIONS,
    default_residual: 0,
    parse: |side, both, o| parse(Variant::Mse, side, both, o),
    short: |_| None,
};

/// The `turboquant-rvq` row.
pub static ROW_RVQ: MethodRow = MethodRow {
    name: "turboquant-rvq",
    summary: "TurboQuant-RVQ: TurboQuant-MSE, then a second codebook on its error (2·bits per coordinate)",
    sides: Sides::Both,
    options: &[
        OptionDef {
            key: "bits",
            default: "2",
            help: "bits per code of each stage (1..=8), both sides",
        },
        OPTIONS[1],
        OPTIONS[2],
        OPTIONS[3],
    ],
    default_residual: 0,
    parse: |side, both, o| parse(Variant::Rvq, side, both, o),
    short: |_| None,
};

/// The `turboquant-prod` row (keys only: `turboquant-prod:bits=3/turboquant-mse:bits=3`).
pub static ROW_PROD: MethodRow = MethodRow {
    name: "turboquant-prod",
    summary: "TurboQuant-Prod keys: TurboQuant-MSE at bits − 1, then m sign bits of a Gaussian sketch of its residual and the residual's f16 norm; unbiased scores",
    sides: Sides::KeysOnly,
    options: &[
        OptionDef {
            key: "bits",
            default: "3",
            help: "bits in total (2..=8): bits − 1 for the MSE stage, 1 for the sketch",
        },
        OptionDef {
            key: "m",
            default: "P",
            help: "sketch rows (a positive multiple of 32; default P rounded up to one)",
        },
        OPTIONS[3],
    ],
    default_residual: 0,
    parse: parse_prod,
    short: |_| None,
};

impl SideConfig for ProdSide {
    fn method(&self) -> &'static str {
        "turboquant-prod"
    }

    fn side(&self) -> Side {
        Side::Keys
    }

    fn block_tokens(&self) -> usize {
        1
    }

    /// Its reconstruction is the MSE stage; its scores add the sketch correction.
    fn attends_on_reconstruction(&self) -> bool {
        false
    }

    /// ((b − 1)·P + m + 32) / D: stage-1 codes, sign bits, the f16 norm and ρ.
    fn bits_per_value(&self, g: Geometry) -> f64 {
        let p = g.dim.next_power_of_two();
        let m = self.m.unwrap_or(p.next_multiple_of(32));
        (f64::from(self.bits - 1) * p as f64 + m as f64 + 32.0) / g.dim as f64
    }

    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        _residual: usize,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>> {
        Ok(Arc::new(ProdCodec::new(ctx, *self, g, layer, choice)?))
    }
}

fn parse_prod(side: Side, _both: bool, o: &Options) -> Result<Arc<dyn SideConfig>> {
    if side == Side::Values {
        return Err(Error::Config(
            "turboquant-prod stores keys only: it cannot be the value method".into(),
        ));
    }
    let bits = o.number::<u32>("turboquant-prod", "bits")?.unwrap_or(3);
    crate::cpu::bitpack::check_bits(bits)?;
    if bits < 2 {
        return Err(Error::Config(
            "turboquant-prod needs bits >= 2 (1 for the MSE stage, 1 for the sketch)".into(),
        ));
    }
    let m = o.number::<usize>("turboquant-prod", "m")?;
    if let Some(m) = m {
        check_sketch_rows(m)?;
    }
    let seed = o.get("seed").map_or(Ok(DEFAULT_SEED), parse_seed)?;
    Ok(Arc::new(ProdSide { bits, m, seed }))
}

impl SideConfig for TqSide {
    fn method(&self) -> &'static str {
        self.variant.name()
    }

    fn side(&self) -> Side {
        self.side
    }

    fn block_tokens(&self) -> usize {
        1
    }

    fn bits_per_value(&self, g: Geometry) -> f64 {
        let p = g.dim.next_power_of_two() as f64;
        (self.variant.stages() as f64 * f64::from(self.bits) * p + 16.0) / g.dim as f64
    }

    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        _residual: usize,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>> {
        Ok(Arc::new(TurboQuantCodec::new(
            ctx, *self, g, layer, choice,
        )?))
    }
}

/// A seed in decimal or `0x` hex.
fn parse_seed(v: &str) -> Result<u64> {
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| {
        Error::Config(format!(
            "turboquant: `seed={v}` is not a u64 (decimal or 0x hex)"
        ))
    })
}

fn parse(variant: Variant, side: Side, both: bool, o: &Options) -> Result<Arc<dyn SideConfig>> {
    let m = variant.name();
    let (own, other) = match side {
        Side::Keys => ("kbits", "vbits"),
        Side::Values => ("vbits", "kbits"),
    };
    if !both && o.get(other).is_some() {
        return Err(Error::Config(format!(
            "{m}: `{other}` applies to the other side; this is the {} method of a KEYS/VALUES pair (use `bits`)",
            side.name()
        )));
    }
    let default = match variant {
        Variant::Mse => 4,
        Variant::Rvq => 2,
    };
    let bits = o
        .number::<u32>(m, own)?
        .or(o.number::<u32>(m, "bits")?)
        .unwrap_or(default);
    crate::cpu::bitpack::check_bits(bits)?;
    let seed = o.get("seed").map_or(Ok(DEFAULT_SEED), parse_seed)?;
    Ok(Arc::new(TqSide {
        variant,
        side,
        bits,
        seed,
    }))
}
