//! One side of a layer on the CPU path: the codec's streams in host memory (the same words a
//! GPU segment holds) and the f16 residual rows of tokens `[Q, T)`.
//!
//! Appends follow the store's rule (see [`super`]): `CpuSide::prepare` encodes the blocks
//! leaving the window and makes every allocation the commit will need (grown vectors are new
//! vectors, filled by copy), `CpuSide::commit` cannot fail.

use half::f16;

use super::{Geometry, quantized_len};
use crate::codec::Codec;
use crate::context::Context;
use crate::error::{Error, Result};

/// Stored words of one side (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct CpuSide {
    /// Per stream, `[Q / G][words_per_block]`.
    pub streams: Vec<Vec<u32>>,
    /// f16 rows `[T − Q][H][D]` of tokens `[Q, T)`.
    pub resid: Vec<f16>,
}

/// What [`CpuSide::prepare`] computed and allocated.
pub(crate) struct CpuPending {
    words: Vec<Vec<u32>>,
    grown_streams: Vec<Option<Vec<u32>>>,
    /// The new window when it outgrows the old one's capacity.
    grown_resid: Option<Vec<f16>>,
    /// Else: elements to drop from the window's front, and the new rows that stay.
    drop_elems: usize,
    new: Vec<f16>,
}

/// A vector of `len` elements copied from `old` with capacity `cap`, allocated fallibly
/// (the context's test hook can fail it too).
fn grown<T: Copy>(ctx: &Context, what: &'static str, old: &[T], cap: usize) -> Result<Vec<T>> {
    let oom = |message: String| Error::OutOfMemory {
        what,
        bytes: (cap * std::mem::size_of::<T>()) as u64,
        message,
    };
    if ctx.take_injected_allocation_failure() {
        return Err(oom(
            "allocation failed on purpose (Context::fail_allocation_after)".into(),
        ));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(cap).map_err(|e| oom(e.to_string()))?;
    v.extend_from_slice(old);
    Ok(v)
}

impl CpuSide {
    pub(crate) fn new(codec: &dyn Codec) -> Self {
        Self {
            streams: vec![Vec::new(); codec.streams().len()],
            resid: Vec::new(),
        }
    }

    /// Phase 1 of appending the f16 rows `new` `[n][H][D]` after `t_old` tokens with
    /// residual window `r`: encodes the blocks that leave the window, allocates what the
    /// commit needs. Changes nothing.
    pub(crate) fn prepare(
        &self,
        ctx: &Context,
        codec: &dyn Codec,
        r: usize,
        t_old: usize,
        new: &[f16],
    ) -> Result<CpuPending> {
        let g: Geometry = codec.geometry();
        let row = g.token_elems();
        let n = new.len() / row;
        let gb = codec.block_tokens();
        let (q_old, q_new) = (quantized_len(t_old, r, gb), quantized_len(t_old + n, r, gb));
        // Token s of [Q_old, T_old + n): residual row s − Q_old, or new row s − T_old.
        let resid = &self.resid;
        let x = |t: usize, h: usize, d: usize| -> f32 {
            let s = q_old + t;
            let e = h * g.dim + d;
            if s < t_old {
                resid[(s - q_old) * row + e]
            } else {
                new[(s - t_old) * row + e]
            }
            .to_f32()
        };
        let blocks = (q_new - q_old) / gb;
        let mut words = vec![Vec::new(); codec.streams().len()];
        if blocks > 0 {
            codec.encode(q_old, blocks, &x, &mut words)?;
        }
        let mut grown_streams = Vec::with_capacity(words.len());
        for (s, w) in words.iter().enumerate() {
            let have = &self.streams[s];
            let need = have.len() + w.len();
            grown_streams.push(if need > have.capacity() {
                let cap = super::grown_capacity(have.capacity(), need);
                Some(grown(ctx, "cpu stream", have, cap)?)
            } else {
                None
            });
        }
        // The window after the append: rows of [Q_new, T_new).
        let keep_old = t_old.saturating_sub(q_new.max(q_old));
        let first_new = q_new.max(t_old) - t_old;
        let need = (keep_old + n - first_new) * row;
        let kept = &self.resid[self.resid.len() - keep_old * row..];
        let grown_resid = if need > self.resid.capacity() {
            let cap = super::grown_capacity(self.resid.capacity(), need);
            let mut w = grown(ctx, "cpu residual", kept, cap)?;
            w.extend_from_slice(&new[first_new * row..]);
            Some(w)
        } else {
            None
        };
        let new = match grown_resid {
            Some(_) => Vec::new(),
            None => new[first_new * row..].to_vec(),
        };
        Ok(CpuPending {
            words,
            grown_streams,
            grown_resid,
            drop_elems: self.resid.len() - keep_old * row,
            new,
        })
    }

    /// Phase 2: applies what [`Self::prepare`] computed (cannot fail: every allocation was
    /// made in phase 1, or fits the capacity held).
    pub(crate) fn commit(&mut self, p: CpuPending) {
        for ((stream, words), grown) in self.streams.iter_mut().zip(&p.words).zip(p.grown_streams) {
            if let Some(g) = grown {
                *stream = g;
            }
            stream.extend_from_slice(words);
        }
        match p.grown_resid {
            Some(w) => self.resid = w,
            None => {
                self.resid.drain(..p.drop_elems);
                self.resid.extend_from_slice(&p.new);
            }
        }
    }

    /// A side holding `words` (checked by the caller, [`super::SideWords::check`]), each
    /// vector allocated fallibly at its exact length (the context's test hook can fail it).
    pub(crate) fn restore(ctx: &Context, words: &super::SideWords) -> Result<Self> {
        Ok(Self {
            streams: words
                .streams
                .iter()
                .map(|w| grown(ctx, "cpu stream", w, w.len()))
                .collect::<Result<_>>()?,
            resid: grown(ctx, "cpu residual", &words.residual, words.residual.len())?,
        })
    }

    /// Evicts whole units of `unit` tokens (a multiple of the codec's block size) from the
    /// quantized tokens: of the first `keep_of` units, head h keeps `keep[h]` (ascending, the
    /// same count for every head, see [`super::compact::compact_stream`]); the quantized
    /// blocks after them move down for every head alike; the residual rows stay. Capacity is
    /// kept (the next appends reuse it: held bytes stay flat under a budget).
    pub(crate) fn compact(
        &mut self,
        codec: &dyn Codec,
        unit: usize,
        keep_of: usize,
        keep: &[Vec<usize>],
    ) {
        let g = codec.geometry();
        let bpu = unit / codec.block_tokens();
        let kept = keep.first().map_or(keep_of, Vec::len);
        for (words, st) in self.streams.iter_mut().zip(codec.streams()) {
            super::compact::compact_stream(words, st, g.heads, bpu, keep);
            let unit_words = bpu * st.words_per_block;
            words.copy_within(keep_of * unit_words.., kept * unit_words);
            words.truncate(words.len() - (keep_of - kept) * unit_words);
        }
    }

    /// Bytes held per stream (capacities) and by the residual.
    pub(crate) fn held(&self) -> (Vec<u64>, u64) {
        (
            self.streams
                .iter()
                .map(|s| (s.capacity() * 4) as u64)
                .collect(),
            (self.resid.capacity() * 2) as u64,
        )
    }
}
