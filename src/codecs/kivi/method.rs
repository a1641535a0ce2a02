//! KIVI's row of the method table: `kivi:bits=B,group=G,params=f16|f32` (both sides), with
//! `kbits`/`vbits` and `kgroup`/`vgroup` for the sides of a `kivi` spec, and the short forms
//! `kivi-B` and `kivi-B-G-R`.
//!
//! For values KIVI has two groups: the channels sharing a (scale, lo) (`vgroup`) and the
//! tokens flushed together (kivi.md: one `Q` for keys and values, by the key group). In a
//! `kivi` spec for both sides the values flush with the keys' group; as the value side of a
//! pair (`f16/kivi:group=64`) `group` sets both and `vgroup` the channels.

use std::sync::Arc;

use super::codec::KiviCodec;
use super::config::{KiviConfig, KiviSide};
use super::layout::ParamStorage;
use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::method::types::{MethodRow, OptionDef, Options, SideConfig, Sides};
use crate::store::{Geometry, Side};

/// The `kivi` row.
pub static ROW: MethodRow = MethodRow {
    name: "kivi",
    summary: "KIVI: keys per channel over G-token blocks, values per token over channel groups, (scale, lo) per group",
    sides: Sides::Both,
    options: &[
        OptionDef {
            key: "bits",
            default: "2",
            help: "bits per code (1..=8), both sides",
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
            key: "group",
            default: "32",
            help: "key group (tokens; also the flush block) and value group (channels)",
        },
        OptionDef {
            key: "kgroup",
            default: "group",
            help: "key group in tokens (values flush with it)",
        },
        OptionDef {
            key: "vgroup",
            default: "group",
            help: "value group in channels",
        },
        OptionDef {
            key: "params",
            default: "f16",
            help: "storage of each group's (scale, lo): f16 or f32",
        },
    ],
    default_residual: 128,
    parse,
    short,
};

impl crate::method::Method {
    /// KIVI with this configuration on both sides (an error for bits outside 1..=8 or a
    /// malformed configuration; the geometry is checked when a layer is built).
    pub fn kivi(cfg: &KiviConfig) -> Result<Self> {
        cfg.to_string().parse()
    }
}

impl SideConfig for KiviSide {
    fn method(&self) -> &'static str {
        "kivi"
    }

    fn side(&self) -> Side {
        self.side
    }

    fn block_tokens(&self) -> usize {
        self.block
    }

    fn bits_per_value(&self, g: Geometry) -> f64 {
        let pair = 32.0 * self.params.words() as f64;
        let per_group = match self.side {
            Side::Keys => self.block,
            Side::Values => self.channel_group.min(g.dim),
        };
        self.bits as f64 + pair / per_group as f64
    }

    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        residual: usize,
        _layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>> {
        Ok(Arc::new(KiviCodec::new(
            ctx,
            *self,
            self.layout(g, residual)?,
            choice,
        )?))
    }
}

fn parse(side: Side, both: bool, o: &Options) -> Result<Arc<dyn SideConfig>> {
    let m = "kivi";
    let (own, other) = match side {
        Side::Keys => (("kbits", "kgroup"), ("vbits", "vgroup")),
        Side::Values => (("vbits", "vgroup"), ("kbits", "kgroup")),
    };
    if !both {
        for k in [other.0, other.1] {
            if o.get(k).is_some() {
                return Err(Error::Config(format!(
                    "kivi: `{k}` applies to the other side; this is the {} method of a KEYS/VALUES pair (use `bits`, `group`{})",
                    side.name(),
                    if side == Side::Values {
                        ", `vgroup`"
                    } else {
                        ""
                    }
                )));
            }
        }
    }
    let bits = o
        .number::<u32>(m, own.0)?
        .or(o.number::<u32>(m, "bits")?)
        .unwrap_or(2);
    crate::cpu::bitpack::bitpack::check_bits(bits)?;
    let group = o.number::<usize>(m, "group")?;
    let kgroup = o.number::<usize>(m, "kgroup")?.or(group).unwrap_or(32);
    let (block, channel_group) = match side {
        Side::Keys => (kgroup, kgroup),
        Side::Values => {
            let block = if both { kgroup } else { group.unwrap_or(32) };
            (
                block,
                o.number::<usize>(m, "vgroup")?.or(group).unwrap_or(32),
            )
        }
    };
    let params = o
        .get("params")
        .map_or(Ok(ParamStorage::F16), ParamStorage::parse)?;
    Ok(Arc::new(KiviSide {
        side,
        bits,
        block,
        channel_group,
        params,
    }))
}

/// `kivi-B` and `kivi-B-G-R`.
fn short(s: &str) -> Option<Result<Options>> {
    let rest = s.strip_prefix("kivi-")?;
    let nums: Vec<&str> = rest.split('-').collect();
    let bad = || {
        Err(Error::Config(format!(
            "`{s}`: short forms are kivi-B or kivi-B-G-R (bits, group, residual)"
        )))
    };
    if nums
        .iter()
        .any(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()))
    {
        return Some(bad());
    }
    let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
    Some(match nums[..] {
        [b] => Ok(Options(vec![kv("bits", b)])),
        [b, g, r] => Ok(Options(vec![
            kv("bits", b),
            kv("group", g),
            kv("residual", r),
        ])),
        _ => bad(),
    })
}
