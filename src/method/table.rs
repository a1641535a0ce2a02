//! The method table and the spec grammar's parser and writer (see [`super`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::types::{Method, MethodRow, Options, SideConfig, Sides};
use crate::error::{Error, Result};
use crate::store::Side;

/// Every method, in the order `kvpack methods` lists them.
pub static METHODS: &[&MethodRow] = &[
    &crate::codecs::f16::ROW,
    &crate::codecs::kivi::ROW,
    &crate::codecs::turboquant::ROW_MSE,
    &crate::codecs::turboquant::ROW_RVQ,
    &crate::codecs::turboquant::ROW_PROD,
    &crate::codecs::qjl::ROW,
    &crate::codecs::vecinfer::ROW,
];

/// The row named `name`, or an error listing the methods.
pub fn row(name: &str) -> Result<&'static MethodRow> {
    METHODS
        .iter()
        .copied()
        .find(|r| r.name == name)
        .ok_or_else(|| {
            Error::Config(format!(
                "unknown method `{name}` (methods: {}; `kvpack methods` lists their options)",
                METHODS
                    .iter()
                    .map(|r| r.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Splits `name:k=v,...` (or a short form) into the row and its options.
fn parse_side(s: &str) -> Result<(&'static MethodRow, Options)> {
    let s = s.trim();
    if s.is_empty() {
        return Err(Error::Config("empty method spec".into()));
    }
    for r in METHODS {
        if let Some(opts) = (r.short)(s) {
            return Ok((r, opts?));
        }
    }
    let (name, rest) = s.split_once(':').unwrap_or((s, ""));
    let r = row(name)?;
    let mut opts = Options::default();
    for kv in rest.split(',').filter(|x| !x.trim().is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("`{kv}` in `{s}` is not key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let generic = ["residual", "center", "calib"].contains(&k);
        if !generic && !r.options.iter().any(|o| o.key == k) {
            return Err(Error::Config(format!(
                "{}: unknown option `{k}` (options: {}, residual, center)",
                r.name,
                r.options
                    .iter()
                    .map(|o| o.key)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        opts.0.push((k.to_string(), v.to_string()));
    }
    Ok((r, opts))
}

/// Splits `KEYS/VALUES` at the first `/` that starts a method (a name of the table, or a short
/// form), so option values may hold paths (`vecinfer:calib=/tmp/c.safetensors/kivi-4`);
/// without such a `/`, a spec without a `calib=` path splits at its first `/` (so an unknown
/// value method is reported as one).
fn split_pair(s: &str) -> Option<(&str, &str)> {
    let at_method = s.match_indices('/').map(|(i, _)| i).find_map(|i| {
        let rest = s[i + 1..].trim();
        let name = rest.split(':').next().unwrap_or(rest);
        let is_method = row(name).is_ok() || METHODS.iter().any(|r| (r.short)(rest).is_some());
        is_method.then(|| (&s[..i], &s[i + 1..]))
    });
    at_method.or_else(|| {
        if s.contains("calib=") {
            None
        } else {
            s.split_once('/')
        }
    })
}

/// Whether a row reads `calib=` itself (VecInfer).
fn has_calib(r: &MethodRow) -> bool {
    r.options.iter().any(|o| o.key == "calib")
}

/// Takes the layer-level key centering (`center=calib|none`, with `calib=FILE`) from a side's
/// options (`keys`: whether it is the key side). `calib` stays for a row that reads it itself,
/// and so does `center` (VecInfer keys then use the tables trained on centered keys).
fn take_center(
    r: &MethodRow,
    keys: bool,
    opts: &mut Options,
) -> Result<Option<Arc<crate::store::center::Center>>> {
    let center = opts.get("center").map(str::to_string);
    let calib = opts.get("calib").map(str::to_string);
    opts.0
        .retain(|(k, _)| has_calib(r) || (k != "center" && k != "calib"));
    match center.as_deref() {
        None | Some("none") => {
            if calib.is_some() && !has_calib(r) {
                return Err(Error::Config(format!(
                    "{}: `calib=` is read by `center=calib` (key centering) only",
                    r.name
                )));
            }
            Ok(None)
        }
        Some("calib") => {
            if !keys {
                return Err(Error::Config(format!(
                    "{}: `center=` centers keys: give it on the key side of a KEYS/VALUES pair",
                    r.name
                )));
            }
            let path = calib.ok_or_else(|| {
                Error::Config(format!(
                    "{}: `center=calib` needs `calib=FILE` (a calibration with key means, from \
                     `kvpack calibrate`)",
                    r.name
                ))
            })?;
            Ok(Some(Arc::new(crate::store::center::Center::load(&path)?)))
        }
        Some(other) => Err(Error::Config(format!(
            "{}: `center={other}` (valid: calib, none)",
            r.name
        ))),
    }
}

fn take_residual(method: &str, opts: &mut Options) -> Result<Option<usize>> {
    let r = opts.number::<usize>(method, "residual")?;
    opts.0.retain(|(k, _)| k != "residual");
    Ok(r)
}

/// Splits `SPEC+POLICY` at the last `+` that a policy name follows (a calibration path may
/// hold `+` too).
fn split_eviction(s: &str) -> (&str, Option<&str>) {
    for (i, _) in s.rmatch_indices('+') {
        let rest = &s[i + 1..];
        let name = rest.split(':').next().unwrap_or("");
        if crate::policy::POLICY_NAMES.contains(&name) {
            return (&s[..i], Some(rest));
        }
    }
    (s, None)
}

impl FromStr for Method {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let (s, policy) = split_eviction(s);
        let eviction = policy
            .map(|p| p.parse::<crate::policy::Eviction>().map(Arc::new))
            .transpose()?;
        let (key, value, residual, center) = match split_pair(s) {
            None => {
                let (r, mut opts) = parse_side(s)?;
                if r.sides == Sides::KeysOnly {
                    return Err(Error::Config(format!(
                        "{} stores keys only: give a value method too, e.g. `{s}/kivi:bits=4`",
                        r.name
                    )));
                }
                let res = take_residual(r.name, &mut opts)?;
                let center = take_center(r, true, &mut opts)?;
                (
                    (r.parse)(Side::Keys, true, &opts)?,
                    (r.parse)(Side::Values, true, &opts)?,
                    res.unwrap_or(r.default_residual),
                    center,
                )
            }
            Some((ks, vs)) => {
                let (kr, mut ko) = parse_side(ks)?;
                let (vr, mut vo) = parse_side(vs)?;
                if vr.sides == Sides::KeysOnly {
                    return Err(Error::Config(format!(
                        "{} stores keys only and cannot be the value method of `{s}`",
                        vr.name
                    )));
                }
                let (rk, rv) = (
                    take_residual(kr.name, &mut ko)?,
                    take_residual(vr.name, &mut vo)?,
                );
                let center = take_center(kr, true, &mut ko)?;
                take_center(vr, false, &mut vo)?;
                let res = match (rk, rv) {
                    (Some(a), Some(b)) if a != b => {
                        return Err(Error::Config(format!(
                            "`{s}`: the residual window is one number per layer (residual={a} and residual={b})"
                        )));
                    }
                    (Some(a), _) | (None, Some(a)) => a,
                    (None, None) => kr.default_residual.max(vr.default_residual),
                };
                (
                    (kr.parse)(Side::Keys, false, &ko)?,
                    (vr.parse)(Side::Values, false, &vo)?,
                    res,
                    center,
                )
            }
        };
        Ok(Self {
            key,
            value,
            residual,
            eviction,
            center,
        })
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |c: &dyn SideConfig| {
            let o = c.to_string();
            if o.is_empty() {
                c.method().to_string()
            } else {
                format!("{}:{o}", c.method())
            }
        };
        let (k, v) = (side(&*self.key), side(&*self.value));
        let default = |c: &dyn SideConfig| row(c.method()).map_or(0, |r| r.default_residual);
        let sep = |s: &str| if s.contains(':') { "," } else { ":" };
        let ev = self
            .eviction
            .as_ref()
            .map_or(String::new(), |e| format!("+{e}"));
        // Layer-level options ride on the key side: the window when not the default, then
        // the centering.
        let res_default = if k == v {
            default(&*self.key)
        } else {
            default(&*self.key).max(default(&*self.value))
        };
        let mut extra = Vec::new();
        if self.residual != res_default {
            extra.push(format!("residual={}", self.residual));
        }
        if let Some(c) = &self.center {
            extra.push("center=calib".to_string());
            // (a side that reads `calib=` itself, VecInfer, already names the file)
            if !k.contains("calib=") {
                extra.push(format!("calib={}", c.calib_path.display()));
            }
        }
        let kx = if extra.is_empty() {
            k.clone()
        } else {
            format!("{k}{}{}", sep(&k), extra.join(","))
        };
        if k == v {
            write!(f, "{kx}{ev}")
        } else {
            write!(f, "{kx}/{v}{ev}")
        }
    }
}

/// `kvpack methods`: every method with its options and defaults, one block per method.
pub fn describe_methods() -> String {
    let mut out = String::new();
    for r in METHODS {
        out.push_str(&format!(
            "{}{}: {}\n  residual=<tokens>  default {}: the newest tokens kept in f16 (one number per layer)\n",
            r.name,
            if r.sides == Sides::KeysOnly { " (keys only)" } else { "" },
            r.summary,
            r.default_residual
        ));
        for o in r.options {
            out.push_str(&format!("  {}={:<10} {}\n", o.key, o.default, o.help));
        }
    }
    out.push_str(
        "spec: NAME[:key=value,...] for both sides, or KEYS/VALUES (e.g. kivi:bits=4/f16); short forms kivi-B, kivi-B-G-R\n\
         eviction: SPEC+qfilters:budget=B,sinks=S,window=W,stride=N,calib=FILE[,flip=true] | \
         SPEC+streaming:budget=B,sinks=S[,stride=N] | SPEC+knorm:budget=B[,sinks=S,window=W,stride=N] \
         (defaults: budget 512, sinks 4, window 0, stride 1)\n\
         key centering (any method's keys): center=calib,calib=FILE (the key means of \
         a calibration from `kvpack calibrate`; center=none, the default, for none)\n",
    );
    out
}
