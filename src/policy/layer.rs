//! [`EvictingLayer`]: any layer ([`crate::layer::Layer`], any key and value codec) under an
//! eviction policy. It keeps, per held (token, KV head), the token's score and its absolute
//! position (`[held][H]` f32 and u32 tables, 8 bytes per token-head, counted in
//! [`crate::Memory::eviction`]; on a GPU path the positions live in the key side's positions
//! stream and are counted there); after an append that brings a head past its budget (checked
//! every `stride` appended tokens) every head evicts the same number of whole units (a unit is
//! one block of both sides' codecs: 1 token for per-token codecs, G for KIVI) from its
//! candidates: quantized on both sides, not a sink (the first `sinks` tokens), not among the
//! `window` newest; the residual window is never touched. The layer's stored words move down
//! (`store::compact`) so memory is really reclaimed, and attention reads each held
//! token's true position for causality, windows and sinks.
//!
//! On a GPU path (WGSL; the MSL kernels exist but no Metal device has run this layer) the
//! tables and the words stay on the device and nothing is read back: the scores live in a
//! device table (`src/policy/device.rs`, `[cap][H]` f32): appends from host values
//! queue the CPU twin's scores (the `evict_score` kernel's twin), appends from device buffers
//! record the kernel on the converted f16 rows and copy its output in (within the f32
//! summation bound of the twin's). An eviction is one submission, not waited for (later work on
//! the queue runs after it; reads of the tables wait): `evict_select` (one
//! workgroup per head) writes the keep lists on the device, `evict_compact` moves every
//! stream's kept units, the positions stream's first `end` units and the score table by them,
//! and the ring's live rows rotate. Positions need no host table: before the eviction the
//! slots `[rows, end·U)` get `slot + evicted` written (the host knows them), and after it the
//! first `(end − n)·U` slots hold their positions in the stream while every later slot sits at
//! `slot + evicted` (the tail moved down whole). Attention, blocking or recorded
//! (`encode_attend`), reads them from that stream (`ATT_POS`). Recorded appends
//! (`encode_append`, `encode_append_gpu`) record the append, the table's growth and, for
//! device input, the scoring into the caller's encoder; the eviction runs at `sync()` (until
//! then the layer holds everything appended, attention recorded in the same encoder sees it,
//! and a snapshot or [`EvictingLayer::state`] is refused; a rejected recorded append rolls
//! the counters back with the words). [`EvictingLayer::state`], `scores()` and `positions()`
//! read the tables back (blocking); a save does. Not yet on a GPU path: caches larger than
//! one segment (refused at the first eviction that would need it). A saved evicting cache
//! restores on any path ([`EvictingLayer::restore`]).

use std::sync::Arc;

use crate::attention::AttendOptions;
use crate::codec::Codec;
use crate::cpu::attend::Positions;
use crate::error::{Error, Result};
use crate::layer::{HeldRows, KvLayer, Layer};
use crate::method::Method;
use crate::store::{Geometry, GpuInput, Input, MemoryReport, Side, Snapshot};

use super::config::{Eviction, Policy};
use super::device::{DeviceScores, Grown, Selection};
use super::score::Scorer;
use super::select::{self, Held, Order};

/// What an [`EvictingLayer`] keeps besides its stored words (saved with the cache,
/// `crate::persist`): per held (token, head) scores and positions `[held][H]`, the tokens
/// appended, the tokens appended since the last eviction, and the checksum of the scorer's
/// filters ([`Scorer::checksum`]).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct EvictionState {
    /// Tokens appended (the next token's position).
    pub appended: usize,
    /// Tokens appended since the last eviction (the stride's counter).
    pub since: usize,
    /// `[held][H]` absolute positions.
    pub positions: Vec<u32>,
    /// `[held][H]` scores.
    pub scores: Vec<f32>,
    /// The scorer's checksum.
    pub scorer: u32,
}

impl EvictionState {
    /// Checks the state of a layer holding `held` tokens of `heads` heads: one score and
    /// position per (token, head), positions strictly increasing per head and below
    /// `appended`, `held ≤ appended`, `since ≤ appended`, finite scores.
    pub fn check(&self, held: usize, heads: usize) -> std::result::Result<(), String> {
        if self.positions.len() != held * heads || self.scores.len() != held * heads {
            return Err(format!(
                "{} positions and {} scores for {held} tokens × {heads} heads",
                self.positions.len(),
                self.scores.len()
            ));
        }
        if self.appended < held || self.since > self.appended {
            return Err(format!(
                "{} tokens appended ({} since the last eviction) for {held} held",
                self.appended, self.since
            ));
        }
        for h in 0..heads {
            let p = |j: usize| self.positions[j * heads + h] as usize;
            if (1..held).any(|j| p(j) <= p(j - 1)) || (held > 0 && p(held - 1) >= self.appended) {
                return Err(format!(
                    "head {h}'s positions are not strictly increasing below {}",
                    self.appended
                ));
            }
        }
        if let Some(i) = self.scores.iter().position(|x| !x.is_finite()) {
            return Err(format!("score {i} is {}", self.scores[i]));
        }
        Ok(())
    }
}

/// A layer under an eviction policy: see the module docs.
pub struct EvictingLayer {
    inner: Layer,
    method: Method,
    ev: Arc<Eviction>,
    scorer: Scorer,
    /// Tokens per unit (the lcm of both sides' block sizes).
    unit: usize,
    /// CPU path: `[held][H]` scores and absolute positions (on a GPU path both stay empty:
    /// the scores live in `dev`, the positions in the key side's positions stream).
    scores: Vec<f32>,
    positions: Vec<u32>,
    appended: usize,
    /// Tokens appended since the last eviction check that evicted.
    since: usize,
    /// Tokens evicted (`appended − held`, but for recorded appends a sync may reject).
    evicted: usize,
    /// Held slots whose position is in the positions stream (GPU) or is not `slot + evicted`
    /// (CPU); later slots sit at `slot + evicted`.
    rows: usize,
    /// GPU path: the score table on the device.
    dev: Option<DeviceScores>,
    /// A recorded append since the last sync: eviction waits for the sync (its compaction
    /// must run after the caller's encoder).
    deferred: bool,
}

impl std::fmt::Debug for EvictingLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictingLayer")
            .field("method", &self.method.to_string())
            .field("held", &self.inner.len())
            .field("appended", &self.appended)
            .finish()
    }
}

/// The scorer of `ev` for model layer `index` of geometry `g` (Q-Filters: that layer's filters
/// from the calibration, checked against the geometry).
pub(crate) fn scorer_for(ev: &Eviction, index: usize, g: Geometry) -> Result<Scorer> {
    Ok(match &ev.policy {
        Policy::QFilters {
            calib,
            calib_path,
            flip,
        } => {
            let err = |message: String| Error::Calibration {
                path: calib_path.display().to_string(),
                message,
            };
            let m = &calib.meta.model;
            if (m.kv_heads, m.head_dim) != (g.heads, g.dim) || index >= m.layers {
                return Err(err(format!(
                    "made for {} ({} layers, {} KV heads, head_dim {}), used for layer \
                     {index} with {} KV heads of {}",
                    m.name, m.layers, m.kv_heads, m.head_dim, g.heads, g.dim
                )));
            }
            let t = calib
                .qfilters
                .as_ref()
                .ok_or_else(|| err("has no Q-Filters tables".into()))?;
            let n = g.heads * g.dim;
            let sign = if *flip { -1.0 } else { 1.0 };
            Scorer::Filter(
                t.filters[index * n..(index + 1) * n]
                    .iter()
                    .map(|x| sign * x)
                    .collect(),
            )
        }
        Policy::Streaming => Scorer::Zero,
        Policy::KeyNorm => Scorer::NegNorm,
    })
}

impl EvictingLayer {
    /// `inner` (empty) under `method`'s eviction policy, for model layer `index`. Errors: a GPU
    /// layer that already holds tokens ([`Error::PathUnavailable`]: positions are laid out in
    /// an empty layer's segment 0; restore through [`EvictingLayer::restore`]); a budget the layer can never get down to (the
    /// sinks rounded up to whole units, the newest `max(window, R + U − 1)` tokens and one unit
    /// must fit, [`Error::Config`]); a calibration file without Q-Filters tables, made for
    /// another shape or with fewer layers ([`Error::Calibration`]).
    pub fn new(mut inner: Layer, method: Method, index: usize) -> Result<Self> {
        let ev = method
            .eviction()
            .cloned()
            .ok_or_else(|| Error::Config("EvictingLayer without an eviction policy".into()))?;
        if inner.on_gpu() && !inner.is_empty() {
            return Err(Error::PathUnavailable {
                kernel: "evict",
                requested: inner.codec(Side::Keys).path().to_string(),
                reason: format!(
                    "eviction ({}) over a GPU layer that already holds tokens: start from an \
                     empty layer, or restore a saved evicting cache with EvictingLayer::restore",
                    ev.policy.name()
                ),
            });
        }
        let g = inner.geometry();
        let unit = crate::layer::lcm(
            inner.codec(Side::Keys).block_tokens(),
            inner.codec(Side::Values).block_tokens(),
        );
        let tail = ev.window.max(inner.residual() + unit - 1);
        let floor = ev.sinks.div_ceil(unit) * unit + tail + unit;
        if ev.budget < floor {
            return Err(Error::Config(format!(
                "{}: budget {} is below what {} can hold at least: {} sink token(s) in whole \
                 units of {unit}, the newest {tail} (window {}, or residual window {} + a unit \
                 − 1), and one unit to evict (budget ≥ {floor})",
                ev.policy.name(),
                ev.budget,
                method,
                ev.sinks,
                ev.window,
                inner.residual()
            )));
        }
        let scorer = scorer_for(&ev, index, g)?;
        inner.enable_positions()?;
        let dev = match inner.on_gpu() {
            true => Some(DeviceScores::new(inner.context(), g.heads)?),
            false => None,
        };
        Ok(Self {
            inner,
            method,
            ev: Arc::new(ev),
            scorer,
            unit,
            scores: Vec::new(),
            positions: Vec::new(),
            appended: 0,
            since: 0,
            evicted: 0,
            rows: 0,
            dev,
            deferred: false,
        })
    }

    /// `inner` (empty, on any path) filled with a saved cache's words (`snapshot`) under
    /// `method`'s policy with the saved `state`, checked: the snapshot as
    /// [`Layer::from_snapshot`] checks it, the scorer's checksum (a changed calibration file is
    /// [`Error::Calibration`]), one score and position per held (token, head), positions
    /// strictly increasing per head and below `appended`, finite scores, `since ≤ appended`
    /// ([`Error::Config`] naming what is wrong). On a GPU path the positions table's first
    /// rows are written into segment 0's positions stream, as after an eviction.
    pub fn restore(
        inner: Layer,
        method: Method,
        index: usize,
        snapshot: &Snapshot,
        state: EvictionState,
    ) -> Result<Self> {
        let mut l = Self::new(inner, method, index)?;
        l.inner.restore_words(snapshot)?;
        if state.scorer != l.scorer.checksum() {
            let path = match &l.ev.policy {
                Policy::QFilters { calib_path, .. } => calib_path.display().to_string(),
                _ => String::new(),
            };
            return Err(Error::Calibration {
                path,
                message: format!(
                    "the filters of layer {index} changed since the cache was saved (checksum \
                     {:#010x}, saved {:#010x})",
                    l.scorer.checksum(),
                    state.scorer
                ),
            });
        }
        let (h, held) = (l.inner.geometry().heads, l.inner.len());
        state
            .check(held, h)
            .map_err(|m| Error::Config(format!("eviction state of layer {index}: {m}")))?;
        l.appended = state.appended;
        l.since = state.since;
        l.evicted = state.appended - held;
        l.positions = state.positions;
        l.scores = state.scores;
        l.rows = l.table_rows();
        l.inner.write_positions(&l.positions[..l.rows * h])?;
        if let Some(dev) = &mut l.dev {
            // The tables move to the device.
            let ctx = l.inner.context();
            let grown = dev.reserve(ctx, held)?;
            crate::gpu::submit_blocking(ctx, "eviction restore", |enc| {
                dev.commit(enc, grown, 0);
                Ok(())
            })?;
            dev.write(ctx, 0, &l.scores)?;
            l.scores = Vec::new();
            l.positions = Vec::new();
        }
        Ok(l)
    }

    /// What a saved cache records of this layer besides its words. On a GPU path the tables
    /// are read back (blocking); recorded appends not yet synced are [`Error::Config`] (their
    /// scores are not computed yet: submit the encoder, then call `sync()`).
    pub fn state(&self) -> Result<EvictionState> {
        Ok(EvictionState {
            appended: self.appended,
            since: self.since,
            positions: self.positions()?,
            scores: self.scores()?,
            scorer: self.scorer.checksum(),
        })
    }

    /// The policy.
    pub fn eviction(&self) -> &Eviction {
        &self.ev
    }

    /// Per held (token, head) scores `[held][H]` (read back on a GPU path, blocking; see
    /// [`Self::state`] for its error).
    pub fn scores(&self) -> Result<Vec<f32>> {
        match &self.dev {
            None => Ok(self.scores.clone()),
            Some(dev) => {
                self.check_synced()?;
                dev.read(self.inner.context(), self.inner.len())
            }
        }
    }

    /// Per held (token, head) absolute positions `[held][H]` (the positions stream read back
    /// on a GPU path, blocking; see [`Self::state`] for its error).
    pub fn positions(&self) -> Result<Vec<u32>> {
        let Some(_) = &self.dev else {
            return Ok(self.positions.clone());
        };
        self.check_synced()?;
        let (h, held) = (self.inner.geometry().heads, self.inner.len());
        let mut p = self.inner.read_positions(self.rows)?;
        let evicted = self.appended - held;
        for j in self.rows..held {
            p.extend(std::iter::repeat_n((j + evicted) as u32, h));
        }
        Ok(p)
    }

    /// [`Error::Config`] while recorded appends wait for `sync()` (GPU tables not final).
    fn check_synced(&self) -> Result<()> {
        if self.deferred {
            return Err(Error::Config(format!(
                "{}: recorded append(s) not synced: the eviction tables are not final (submit \
                 the encoder, then call sync())",
                self.method
            )));
        }
        Ok(())
    }

    /// The order units are evicted in: StreamingLLM's oldest first, else the lowest score.
    fn order(&self) -> Order {
        match self.ev.policy {
            Policy::Streaming => Order::Oldest,
            _ => Order::Score,
        }
    }

    /// The eviction's own pipelines on a GPU path, for `prepare()`: the scoring kernel that
    /// device appends use (none for StreamingLLM) and the selection kernel.
    #[allow(clippy::type_complexity)]
    fn eviction_pipelines(
        &self,
    ) -> Result<
        Vec<(
            &'static crate::gpu::registry::KernelDef,
            crate::gpu::registry::Specialization,
        )>,
    > {
        let g = self.inner.geometry();
        let mut out: Vec<_> = self
            .scorer
            .plan(1, g.heads, g.dim, 0)?
            .map(|p| (p.kernel, p.spec))
            .into_iter()
            .collect();
        let p = super::kernels::plan_select(g.heads, self.unit, 0, 1, 1, self.order())?;
        out.push((p.kernel, p.spec));
        Ok(out)
    }

    /// The counters after `n` appended tokens, and on the CPU path the host tables' rows with
    /// their `scores` `[n][H]` (a GPU path writes its device table itself).
    fn push_appended(&mut self, scores: &[f32], n: usize) {
        if self.dev.is_none() {
            let h = self.inner.geometry().heads;
            self.scores.extend_from_slice(scores);
            for t in 0..n {
                let p = (self.appended + t) as u32;
                self.positions.extend(std::iter::repeat_n(p, h));
            }
        }
        self.appended += n;
        self.since += n;
    }

    /// GPU path: room in the device table for `n` more rows after `row0`, allocated before an
    /// append records anything (`None` on the CPU path or when the table has it).
    fn reserve_dev(&self, row0: usize, n: usize) -> Result<Option<Grown>> {
        match &self.dev {
            Some(dev) => dev.reserve(self.inner.context(), row0 + n),
            None => Ok(None),
        }
    }

    /// GPU path: after an append from slot `row0`, the room [`Self::reserve_dev`] allocated
    /// taken (its held rows copied in `enc`).
    fn commit_dev(&mut self, enc: &mut wgpu::CommandEncoder, grown: Option<Grown>, row0: usize) {
        if let Some(dev) = &mut self.dev {
            dev.commit(enc, grown, row0);
        }
    }

    /// GPU path: host `scores` `[n][H]` of the tokens appended from slot `row0`, queued into
    /// the device table (the room taken).
    fn queue_dev_scores(&self, row0: usize, scores: &[f32]) -> Result<()> {
        match &self.dev {
            Some(dev) => dev.write(self.inner.context(), row0, scores),
            None => Ok(()),
        }
    }

    /// Evicts down to the budget when due (see the module docs).
    fn maybe_evict(&mut self) -> Result<()> {
        let held = self.inner.len();
        if held <= self.ev.budget || self.since < self.ev.stride {
            return Ok(());
        }
        let u = self.unit;
        let q = Side::ALL
            .iter()
            .map(|&s| self.inner.quantized_len(s))
            .min()
            .unwrap_or(0);
        let first = self.ev.sinks.div_ceil(u);
        let end = q.min(held.saturating_sub(self.ev.window)) / u;
        if end <= first {
            return Ok(());
        }
        let n = (held - self.ev.budget).div_ceil(u).min(end - first);
        let order = self.order();
        if self.dev.is_some() {
            return self.evict_on_device((first, end, n), order);
        }
        let h = self.inner.geometry().heads;
        let keep = select::keep_lists(
            &Held {
                heads: h,
                scores: &self.scores,
                positions: &self.positions,
            },
            u,
            first,
            end,
            n,
            order,
        );
        self.inner.evict_units(u, end, &keep)?;
        select::compact_table(&mut self.scores, h, u, end, &keep);
        select::compact_table(&mut self.positions, h, u, end, &keep);
        self.since = 0;
        self.evicted += n * u;
        self.rows = self.table_rows();
        self.inner.write_positions(&self.positions[..self.rows * h])
    }

    /// The eviction on a GPU path, nothing read back: the held slots `[rows, end·U)` get their
    /// positions (`slot + evicted`) in the positions stream, then one submission selects
    /// (`evict_select` on the device score table), compacts every stream, the positions
    /// stream's first `end` units and the score table by the device keep lists, and rotates
    /// the rings. Afterwards the first `(end − n)·U` slots have their positions in the stream
    /// and every later slot sits at `slot + evicted` (the tail moved down as a whole).
    fn evict_on_device(
        &mut self,
        (first, end, n): (usize, usize, usize),
        order: Order,
    ) -> Result<()> {
        let (u, h, held) = (self.unit, self.inner.geometry().heads, self.inner.len());
        let choice = self
            .inner
            .gpu_choice()
            .ok_or_else(|| Error::Config("device eviction on a CPU layer (a kvpack bug)".into()))?;
        let sel = Selection::new(
            self.inner.context(),
            choice,
            h,
            u,
            (first, end, n),
            order,
            held,
        )?;
        let evicted = (self.appended - held) as u32;
        let fill: Vec<u32> = (self.rows..end * u)
            .flat_map(|j| std::iter::repeat_n(j as u32 + evicted, h))
            .collect();
        self.inner.write_positions_at(self.rows, &fill)?;
        let dev = self.dev.as_ref().expect("GPU path");
        let ctx = self.inner.context().clone();
        self.inner.evict_units_on_device(
            u,
            end,
            end - n,
            &sel.keep,
            |enc| sel.record_select(&ctx, enc, dev),
            |enc| sel.record_compact(&ctx, enc, dev),
        )?;
        self.since = 0;
        self.evicted += n * u;
        self.rows = (end - n) * u;
        Ok(())
    }

    /// Held slots up to the last whose position (on any head) is not `slot + evicted`.
    fn table_rows(&self) -> usize {
        let h = self.inner.geometry().heads;
        let evicted = self.appended - self.inner.len();
        (0..self.positions.len() / h)
            .rev()
            .find(|&j| (0..h).any(|hh| self.positions[j * h + hh] as usize != j + evicted))
            .map_or(0, |j| j + 1)
    }

    /// The held tokens' positions as attention takes them: the table's first `rows` slots
    /// (later slots sit at `slot + evicted`).
    fn at(&self) -> Positions<'_> {
        Positions {
            table: &self.positions[..self.rows * self.inner.geometry().heads],
            appended: self.appended,
        }
    }

    /// The held tokens' positions as GPU attention takes them.
    fn held_rows(&self) -> HeldRows {
        HeldRows {
            rows: self.rows,
            appended: self.appended,
        }
    }
}

impl KvLayer for EvictingLayer {
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        self.sync()?;
        let row0 = self.inner.len();
        let g = self.inner.geometry();
        // Allocated before anything is stored: an out-of-memory changes nothing.
        let grown = self.reserve_dev(row0, k.len() / g.token_elems().max(1))?;
        self.inner.append(k, v)?;
        // Validated by the append: the same f16 rounding it stored.
        let k16 = k.to_f16("k")?;
        let n = k16.len() / g.token_elems();
        let scores = self.scorer.score(&k16, g.heads, g.dim);
        // After the append, only a lost device fails here (every later call then fails too).
        if grown.is_some() {
            let ctx = self.inner.context().clone();
            // The table's growth: submitted, not waited for (later work runs after it).
            crate::gpu::submit(&ctx, "eviction scores", |enc| {
                self.commit_dev(enc, grown, row0);
                Ok(())
            })?;
        }
        self.queue_dev_scores(row0, &scores)?;
        self.push_appended(&scores, n);
        self.maybe_evict()
    }

    fn encode_append(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        let row0 = self.inner.len();
        let g = self.inner.geometry();
        let grown = self.reserve_dev(row0, k.len() / g.token_elems().max(1))?;
        self.inner.encode_append(enc, k, v)?;
        // Validated by the append: the same f16 rounding it stored.
        let k16 = k.to_f16("k")?;
        let n = k16.len() / g.token_elems();
        let scores = self.scorer.score(&k16, g.heads, g.dim);
        self.commit_dev(enc, grown, row0);
        self.queue_dev_scores(row0, &scores)?;
        self.push_appended(&scores, n);
        self.deferred |= n > 0;
        Ok(())
    }

    fn append_gpu(&mut self, k: GpuInput<'_>, v: GpuInput<'_>) -> Result<()> {
        if self.inner.gpu_choice().is_none() {
            // The CPU path refuses device input (PathUnavailable).
            return self.inner.append_gpu(k, v);
        }
        self.sync()?;
        let ctx = self.inner.context().clone();
        let mut enc = crate::gpu::gpu_of(&ctx, "append")?
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("kvpack evicting append"),
            });
        // Submitted and synced even when recording failed part-way: whatever the inner layer
        // recorded runs, and the sync settles its count.
        let recorded = self.encode_append_gpu(&mut enc, k, v);
        crate::gpu::gpu_of(&ctx, "append")?
            .queue
            .submit(Some(enc.finish()));
        let synced = self.sync();
        recorded?;
        synced
    }

    fn encode_append_gpu(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<()> {
        let (n, g) = (k.tokens, self.inner.geometry());
        let Some(choice) = self.inner.gpu_choice() else {
            return self.inner.encode_append_gpu(enc, k, v);
        };
        // Allocated before anything is recorded: an out-of-memory changes nothing.
        let scoring = super::score::DeviceScoring::new(
            &self.scorer,
            self.inner.context(),
            choice,
            n,
            g.heads,
            g.dim,
        )?;
        let row0 = self.inner.len();
        let grown = self.reserve_dev(row0, n)?;
        let ctx = self.inner.context().clone();
        let Some(rows) = self.inner.encode_append_gpu_rows(enc, k, v)? else {
            return Ok(());
        };
        self.commit_dev(enc, grown, row0);
        // Recorded after the append into the same encoder: it reads the converted rows.
        let dev = self.dev.as_ref().expect("GPU path");
        match &scoring {
            Some(s) => {
                s.encode(&ctx, enc, &rows)?;
                dev.record_rows(enc, Some(s.scores()), row0, n);
            }
            None => dev.record_rows(enc, None, row0, n),
        }
        self.push_appended(&[], n);
        self.deferred = true;
        Ok(())
    }

    /// The inner layer's sync (a rejected recorded append rolls it back: the tables follow),
    /// then the eviction the recorded appends deferred.
    fn sync(&mut self) -> Result<()> {
        if !self.deferred {
            return self.inner.sync();
        }
        let synced = self.inner.sync();
        let h = self.inner.geometry().heads;
        let held = self.inner.len();
        let listed = self.appended - self.evicted;
        if held < listed {
            // Rolled back: no eviction ran since these rows were recorded.
            let dropped = listed - held;
            if self.dev.is_none() {
                self.scores.truncate(held * h);
                self.positions.truncate(held * h);
            }
            self.appended -= dropped;
            self.since = self.since.saturating_sub(dropped);
        }
        self.deferred = false;
        synced?;
        self.maybe_evict()
    }

    fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        match &self.dev {
            Some(_) => self.inner.attend_held(q, hq, opts, self.held_rows()),
            None => self.inner.attend_positions(q, hq, opts, &self.at()),
        }
    }

    fn encode_attend(
        &self,
        enc: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        self.inner
            .encode_attend_positions(enc, q, tq, hq, opts, out, self.held_rows())
    }

    fn memory(&self) -> MemoryReport {
        let mut r = self.inner.memory();
        let h = self.inner.geometry().heads;
        let (cap, used) = match &self.dev {
            // The positions live in the key side's positions stream (counted there).
            Some(dev) => (dev.bytes(), (self.inner.len() * h * 4) as u64),
            None => (
                (self.scores.capacity() * 4 + self.positions.capacity() * 4) as u64,
                ((self.scores.len() + self.positions.len()) * 4) as u64,
            ),
        };
        r.held.eviction += cap;
        r.payload.eviction += used;
        r
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn appended(&self) -> usize {
        self.appended
    }

    fn eviction_state(&self) -> Result<Option<EvictionState>> {
        self.state().map(Some)
    }

    fn snapshot(&self) -> Result<Snapshot> {
        self.check_synced()?;
        self.inner.snapshot()
    }

    fn reconstruct(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        self.inner.reconstruct()
    }

    fn reconstruct_side(&self, side: Side) -> Result<Vec<f32>> {
        self.inner.reconstruct_side(side)
    }

    fn attend_reference(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        match &self.dev {
            Some(_) => {
                self.check_synced()?;
                let table = self.inner.read_positions(self.rows)?;
                let at = Positions {
                    table: &table,
                    appended: self.appended,
                };
                self.inner.attend_positions_reference(q, hq, opts, &at)
            }
            None => self
                .inner
                .attend_positions_reference(q, hq, opts, &self.at()),
        }
    }

    fn method(&self) -> &Method {
        &self.method
    }

    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn index(&self) -> usize {
        self.inner.index()
    }

    fn codec(&self, side: Side) -> &dyn Codec {
        self.inner.codec(side)
    }

    fn paths(&self) -> [crate::path::KernelPath; 2] {
        self.inner.paths()
    }

    fn attend_kernels(&self) -> Result<Vec<(&'static str, crate::path::KernelPath)>> {
        self.inner.attend_kernels()
    }

    fn prepare(&self) -> Result<()> {
        self.inner
            .prepare_job_with(self.eviction_pipelines()?)
            .map_or(Ok(()), |job| job())
    }

    fn prepare_async(&self) -> crate::Preparing {
        match self.eviction_pipelines() {
            Err(e) => crate::Preparing::ready(Err(e)),
            Ok(extra) => match self.inner.prepare_job_with(extra) {
                Some(job) => crate::Preparing::spawn(job),
                None => crate::Preparing::ready(Ok(())),
            },
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}; eviction {} (units of {} token(s), {} of {} appended tokens held per KV head)",
            self.inner.describe(),
            self.ev,
            self.unit,
            self.inner.len(),
            self.appended
        )
    }
}
