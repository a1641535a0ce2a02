//! The types of the method table: a row ([`MethodRow`]), its options, one side's parsed
//! configuration ([`SideConfig`]) and a whole method ([`Method`]). Codec folders implement
//! these; [`super::table`] lists the rows and parses specs.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::codec::Codec;
use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::store::{Geometry, Side};

/// One option key of a method.
#[derive(Clone, Copy, Debug)]
pub struct OptionDef {
    /// The key.
    pub key: &'static str,
    /// Its default, as written in a spec.
    pub default: &'static str,
    /// What it sets.
    pub help: &'static str,
}

/// Which sides a method can store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sides {
    /// Keys and values.
    Both,
    /// Keys only (a value method must be given: `qjl/kivi:bits=4`).
    KeysOnly,
}

/// The options given to one side, in order (`key=value`), as parsed from a spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options(pub Vec<(String, String)>);

impl Options {
    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `key` parsed as a number, if given.
    pub fn number<T: FromStr>(&self, method: &str, key: &str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    Error::Config(format!("{method}: `{key}={v}` is not a valid number"))
                })
            })
            .transpose()
    }
}

/// One side's configuration, as a method row parsed it (`Display`: its options, canonical).
pub trait SideConfig: Send + Sync + fmt::Debug + fmt::Display {
    /// The method row's name.
    fn method(&self) -> &'static str;
    /// The side it stores.
    fn side(&self) -> Side;
    /// Tokens per block (the side quantizes whole blocks).
    fn block_tokens(&self) -> usize;
    /// Nominal bits per value of this side's stored form for a geometry (codes, per-group
    /// and per-token side information; not the residual window or tables).
    fn bits_per_value(&self, g: Geometry) -> f64;
    /// Whether its stored form can be reconstructed (QJL keys cannot: `roundtrip` then
    /// refuses that side and reconstructs the other).
    fn reconstructs(&self) -> bool {
        true
    }
    /// Whether attention on this side equals attention on its reconstruction (its scores or
    /// values are dot products with / copies of [`crate::KvLayer::reconstruct`]'s rows, up to
    /// rounding). False for QJL keys (no reconstruction) and TurboQuant-Prod keys (the score
    /// adds the sketch correction to the MSE stage, which is what they reconstruct).
    fn attends_on_reconstruction(&self) -> bool {
        self.reconstructs()
    }
    /// Builds the codec for layer `layer` of a model (its index: codecs that draw random
    /// tables per layer, TurboQuant's signs, seed them with it; 0 for a lone layer), with
    /// residual window `residual`, on `choice`.
    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        residual: usize,
        layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>>;
}

/// One row of the method table.
#[derive(Debug)]
pub struct MethodRow {
    /// The name in specs.
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// The sides it can store.
    pub sides: Sides,
    /// Its option keys (besides `residual`).
    pub options: &'static [OptionDef],
    /// Its default residual window.
    pub default_residual: usize,
    /// Parses a spec side: the options given to `side` (in a spec for both sides, options
    /// meant for the other side already removed) into a configuration.
    pub parse: fn(side: Side, both: bool, opts: &Options) -> Result<Arc<dyn SideConfig>>,
    /// Expands a short form (`kivi-4`) into options, or `None` when `s` is not one.
    pub short: fn(s: &str) -> Option<Result<Options>>,
}

/// A cache method: a key codec configuration, a value codec configuration and the layer's
/// residual window. Parse one with [`str::parse`] / [`Method::parse`]; `Display` writes it
/// back canonically.
#[derive(Clone, Debug)]
pub struct Method {
    pub(crate) key: Arc<dyn SideConfig>,
    pub(crate) value: Arc<dyn SideConfig>,
    pub(crate) residual: usize,
    /// An eviction policy over the layer (`SPEC+POLICY`, [`crate::policy`]).
    pub(crate) eviction: Option<Arc<crate::policy::Eviction>>,
    /// Key centering (`center=calib,calib=FILE`, [`crate::store::center`]).
    pub(crate) center: Option<Arc<crate::store::center::Center>>,
}

impl PartialEq for Method {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Method {
    /// Parses a spec (see the module docs).
    pub fn parse(s: &str) -> Result<Self> {
        s.parse()
    }

    /// The uncompressed baseline.
    pub fn f16() -> Self {
        "f16".parse().expect("the f16 spec parses")
    }

    /// The key side.
    pub fn key(&self) -> &dyn SideConfig {
        &*self.key
    }

    /// The value side.
    pub fn value(&self) -> &dyn SideConfig {
        &*self.value
    }

    /// The residual window R (tokens kept in f16).
    pub fn residual(&self) -> usize {
        self.residual
    }

    /// True for the uncompressed baseline (`f16` on both sides, no window, no eviction).
    pub fn is_f16(&self) -> bool {
        self.key.method() == "f16" && self.value.method() == "f16" && self.eviction.is_none()
    }

    /// Key centering, if any.
    pub fn center(&self) -> Option<&crate::store::center::Center> {
        self.center.as_deref()
    }

    /// The eviction policy, if any.
    pub fn eviction(&self) -> Option<&crate::policy::Eviction> {
        self.eviction.as_deref()
    }

    /// This method under eviction policy `ev` (`None`: without eviction).
    pub fn with_eviction(&self, ev: Option<crate::policy::Eviction>) -> Self {
        Self {
            eviction: ev.map(Arc::new),
            ..self.clone()
        }
    }

    /// Nominal bits per value held once the cache is long (both sides' stored forms,
    /// averaged; the residual window and tables excluded).
    pub fn bits_per_value(&self, g: Geometry) -> f64 {
        (self.key.bits_per_value(g) + self.value.bits_per_value(g)) / 2.0
    }
}
