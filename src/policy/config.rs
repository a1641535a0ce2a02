//! An eviction policy as configured (`--evict` / a method's `+POLICY` suffix):
//!
//! ```text
//! POLICY := qfilters:budget=B,sinks=S,window=W,stride=N,calib=FILE[,flip=true]
//!         | streaming:budget=B,sinks=S[,stride=N]
//!         | knorm:budget=B[,sinks=S,window=W,stride=N]
//! ```
//! Defaults (docs/contracts/qfilters.md): budget 512 tokens per KV head, 4 sinks, window 0,
//! stride 1. `flip=true` scores with −u (the negative control: it must do worse).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::calib::Calibration;
use crate::error::{Error, Result};

/// How tokens are scored (higher: kept).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Policy {
    /// Q-Filters: ⟨k, u⟩ with u the layer's calibrated filter of the KV head.
    QFilters {
        /// The calibration file it was read from.
        calib_path: PathBuf,
        /// Its contents (must hold Q-Filters tables).
        calib: Arc<Calibration>,
        /// Score with −u instead (the negative control).
        flip: bool,
    },
    /// StreamingLLM: the sinks and the most recent tokens (the oldest others go first).
    Streaming,
    /// Key norm: keep the smallest ‖k‖ (score −‖k‖).
    KeyNorm,
}

impl Policy {
    /// `qfilters`, `streaming`, `knorm`.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::QFilters { .. } => "qfilters",
            Policy::Streaming => "streaming",
            Policy::KeyNorm => "knorm",
        }
    }
}

/// The names a policy spec starts with.
pub const POLICY_NAMES: [&str; 3] = ["qfilters", "streaming", "knorm"];

/// An eviction policy and its budget (see the module docs).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Eviction {
    /// How tokens are scored.
    pub policy: Policy,
    /// Tokens held per KV head once eviction runs.
    pub budget: usize,
    /// The first tokens, never evicted.
    pub sinks: usize,
    /// The most recent tokens, never evicted.
    pub window: usize,
    /// Evict every `stride` appended tokens (the cache then holds up to budget + stride − 1).
    pub stride: usize,
}

impl PartialEq for Eviction {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eviction {
    /// Parses a policy spec (also [`FromStr`]).
    pub fn parse(s: &str) -> Result<Self> {
        s.parse()
    }
}

fn number(name: &str, key: &str, v: &str) -> Result<usize> {
    v.parse()
        .map_err(|_| Error::Config(format!("{name}: `{key}={v}` is not a valid number")))
}

impl FromStr for Eviction {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let name = name.trim();
        let allowed: &[&str] = match name {
            "qfilters" => &["budget", "sinks", "window", "stride", "calib", "flip"],
            "streaming" => &["budget", "sinks", "stride"],
            "knorm" => &["budget", "sinks", "window", "stride"],
            other => {
                return Err(Error::Config(format!(
                    "unknown eviction policy `{other}` (valid: {})",
                    POLICY_NAMES.join(", ")
                )));
            }
        };
        let mut ev = Eviction {
            policy: Policy::Streaming,
            budget: 512,
            sinks: 4,
            window: 0,
            stride: 1,
        };
        let (mut calib, mut flip) = (None, false);
        for kv in rest.split(',').filter(|x| !x.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| Error::Config(format!("{name}: `{kv}` is not key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            if !allowed.contains(&k) {
                return Err(Error::Config(format!(
                    "{name}: unknown key `{k}` (valid: {})",
                    allowed.join(", ")
                )));
            }
            match k {
                "budget" => ev.budget = number(name, k, v)?,
                "sinks" => ev.sinks = number(name, k, v)?,
                "window" => ev.window = number(name, k, v)?,
                "stride" => ev.stride = number(name, k, v)?,
                "calib" => calib = Some(PathBuf::from(v)),
                "flip" => {
                    flip = match v {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => {
                            return Err(Error::Config(format!(
                                "{name}: `flip={v}` is not true or false"
                            )));
                        }
                    }
                }
                _ => unreachable!("checked against the allowed keys"),
            }
        }
        if ev.stride == 0 {
            return Err(Error::Config(format!("{name}: stride must be at least 1")));
        }
        if ev.sinks + ev.window >= ev.budget {
            return Err(Error::Config(format!(
                "{name}: sinks ({}) + window ({}) must be below the budget ({})",
                ev.sinks, ev.window, ev.budget
            )));
        }
        ev.policy = match name {
            "qfilters" => {
                let path = calib.ok_or_else(|| {
                    Error::Config(
                        "qfilters needs a calibration file: `qfilters:budget=B,calib=FILE` (make \
                         one with `kvpack calibrate --model M --text F --out FILE --for qfilters`)"
                            .into(),
                    )
                })?;
                let c = crate::calib::file::load_cached(&path)?;
                if c.qfilters.is_none() {
                    return Err(Error::Calibration {
                        path: path.display().to_string(),
                        message: "has no Q-Filters tables (calibrate --for qfilters)".into(),
                    });
                }
                Policy::QFilters {
                    calib_path: path,
                    calib: c,
                    flip,
                }
            }
            "streaming" => Policy::Streaming,
            _ => Policy::KeyNorm,
        };
        Ok(ev)
    }
}

impl fmt::Display for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:budget={},sinks={}",
            self.policy.name(),
            self.budget,
            self.sinks
        )?;
        if !matches!(self.policy, Policy::Streaming) {
            write!(f, ",window={}", self.window)?;
        }
        write!(f, ",stride={}", self.stride)?;
        if let Policy::QFilters {
            calib_path, flip, ..
        } = &self.policy
        {
            write!(f, ",calib={}", calib_path.display())?;
            if *flip {
                write!(f, ",flip=true")?;
            }
        }
        Ok(())
    }
}
