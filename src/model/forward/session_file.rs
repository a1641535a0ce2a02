//! Saving a [`Session`] after a prefill and resuming it from the file: the caches go into a
//! cache file ([`crate::persist`]) with the session's identity as metadata, so that a resumed
//! session produces the logits the saved one would have.
//!
//! Metadata written (and checked on resume): `session.pos` (tokens fed), `model.config` (the
//! model's shape, [`Config`]'s `Debug` form), `model.fingerprint` (CRC-32 of the token
//! embedding and the final norm: another checkpoint of the same shape is refused), and the
//! attention options (`attend.scale`, `attend.window`, `attend.sinks`), restored as saved.

use std::path::Path;
use std::sync::Arc;

use super::Session;
use crate::attention::AttendOptions;
use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::model::config::Weights;
use crate::persist::{CacheFileError, SavedCache};

/// CRC-32 of the token embedding and the final norm (little-endian f32 bytes).
fn fingerprint(w: &Weights) -> String {
    let mut h = crc32fast::Hasher::new();
    for x in w.token_embedding.iter().chain(&w.final_norm) {
        h.update(&x.to_le_bytes());
    }
    format!("{:08x}", h.finalize())
}

fn opt<T: ToString>(x: Option<T>) -> String {
    x.map_or_else(|| "none".into(), |v| v.to_string())
}

impl Session {
    /// Saves the caches and the position to `path` atomically ([`SavedCache::save`]). A
    /// session that failed part-way through a step cannot be saved.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        if self.failed {
            return Err(Error::Config(
                "this session failed earlier (its caches may hold part of a step); it cannot \
                 be saved"
                    .into(),
            ));
        }
        SavedCache::of_layers(self.caches.iter().map(|c| &**c))?
            .with_metadata("session.pos", self.pos.to_string())
            .with_metadata("model.config", format!("{:?}", self.weights.config))
            .with_metadata("model.fingerprint", fingerprint(&self.weights))
            .with_metadata("attend.scale", opt(self.opts.scale.map(f32::to_bits)))
            .with_metadata("attend.window", opt(self.opts.window))
            .with_metadata("attend.sinks", self.opts.sinks.to_string())
            .save(path)
    }

    /// A session of `weights` whose caches are loaded from `path` onto `choice` of `ctx`,
    /// at the saved position: feeding it the next token gives the logits the saved session
    /// would have given. A file of another model (shape or fingerprint), with layers of
    /// different methods or token counts, or without the session's metadata is a
    /// [`Error::CacheFile`] error naming the difference.
    pub fn resume(
        weights: Arc<Weights>,
        ctx: &Context,
        path: impl AsRef<Path>,
        choice: PathChoice,
    ) -> Result<Self> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let saved = SavedCache::open(path)?;
        let mismatch = |what: &str, found: String, expected: String| Error::CacheFile {
            file: file.clone(),
            problem: Box::new(CacheFileError::Mismatch {
                what: what.into(),
                file: found,
                expected,
            }),
        };
        let meta = |key: &str| {
            saved.metadata(key).map(str::to_string).ok_or_else(|| {
                mismatch(
                    &format!("metadata `{key}`"),
                    "nothing".into(),
                    "a saved session's entry".into(),
                )
            })
        };
        let c = &weights.config;
        let config = meta("model.config")?;
        if config != format!("{c:?}") {
            return Err(mismatch("the model's shape", config, format!("{c:?}")));
        }
        let fp = meta("model.fingerprint")?;
        if fp != fingerprint(&weights) {
            return Err(mismatch(
                "the model's fingerprint (CRC-32 of embedding and final norm)",
                fp,
                fingerprint(&weights),
            ));
        }
        let method = saved.layers.first().map(|l| l.method.clone());
        saved.expect(c.layers, c.kv_heads, c.head_dim, method.as_ref())?;
        let method = method.expect("expect checked the layer count (a model has layers)");
        let pos_text = meta("session.pos")?;
        let pos: usize = pos_text
            .parse()
            .map_err(|_| mismatch("session.pos", pos_text.clone(), "a token count".into()))?;
        if let Some((i, l)) = saved.layers.iter().enumerate().find(|(i, l)| l.index != *i) {
            return Err(mismatch(
                &format!("layer {i}'s index (its codecs' per-layer tables)"),
                l.index.to_string(),
                i.to_string(),
            ));
        }
        if let Some((i, l)) = saved
            .layers
            .iter()
            .enumerate()
            .find(|(_, l)| l.appended() != pos)
        {
            return Err(mismatch(
                &format!("layer {i}'s tokens"),
                l.appended().to_string(),
                format!("{pos} (session.pos)"),
            ));
        }
        if pos > c.max_seq {
            return Err(mismatch(
                "session.pos",
                pos.to_string(),
                format!("at most the model's {}", c.max_seq),
            ));
        }
        let parse_opt = |key: &str| -> Result<Option<u64>> {
            let v = meta(key)?;
            if v == "none" {
                return Ok(None);
            }
            v.parse()
                .map(Some)
                .map_err(|_| mismatch(key, v.clone(), "a number or `none`".into()))
        };
        let scale = parse_opt("attend.scale")?
            .map(|b| u32::try_from(b).map(f32::from_bits))
            .transpose()
            .map_err(|_| {
                mismatch(
                    "attend.scale",
                    "a value past 32 bits".into(),
                    "f32 bits".into(),
                )
            })?;
        let window = parse_opt("attend.window")?.map(|w| w as usize);
        let sinks = parse_opt("attend.sinks")?.unwrap_or(0) as usize;
        let caches = saved.to_layers(ctx, choice)?;
        let mut s = Session::new(weights, ctx, method, choice)?;
        s.caches = caches;
        s.pos = pos;
        s.opts = AttendOptions {
            scale,
            window,
            sinks,
            ..Default::default()
        };
        Ok(s)
    }
}
