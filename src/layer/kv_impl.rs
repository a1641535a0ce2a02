//! [`KvLayer`] for [`Layer`]: appends through the shared store, attention, memory, snapshots
//! and reconstructions.

use std::sync::Arc;

use crate::attention::{self, AttendOptions};
use crate::codec::Codec;
use crate::context::PathChoice;
use crate::error::{Error, Result};
use crate::gpu;
use crate::method::Method;
use crate::store::gpu::{GpuSide, NewRows};
use crate::store::gpu_input::{self, GpuInput};
use crate::store::{Geometry, Input, Memory, MemoryReport, Side, Snapshot, quantized_len};

use super::{KvLayer, Layer, Store};

impl KvLayer for Layer {
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()> {
        self.sync()?;
        let (k16, v16) = self.validate(k, v)?;
        self.check_rows([&k16, &v16])?;
        if k16.is_empty() {
            return Ok(());
        }
        let n = k16.len() / self.g.token_elems();
        self.append_rows([NewRows::Host(&k16), NewRows::Host(&v16)], n)
    }

    fn append_gpu(&mut self, k: GpuInput<'_>, v: GpuInput<'_>) -> Result<()> {
        self.append_gpu_rows(k, v).map(|_| ())
    }

    fn encode_append_gpu(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<()> {
        self.encode_append_gpu_rows(enc, k, v).map(|_| ())
    }

    fn sync(&mut self) -> Result<()> {
        let Store::Gpu(s) = &self.store else {
            return Ok(());
        };
        if !s.unsynced {
            return Ok(());
        }
        let words = self.read_input_status(s)?;
        let err = self.status_error(&words);
        if err.is_some() {
            gpu::submit_blocking(&self.ctx, "sync (clear input status)", |enc| {
                enc.clear_buffer(&s.input_status, 0, None);
                Ok(())
            })?;
            self.tokens = words[gpu_input::status::T_OLD] as usize;
        }
        if let Store::Gpu(s) = &mut self.store {
            s.unsynced = false;
        }
        err.map_or(Ok(()), Err)
    }

    fn encode_append(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()> {
        let (k16, v16) = self.validate(k, v)?;
        self.check_rows([&k16, &v16])?;
        let Store::Gpu(s) = &mut self.store else {
            return Err(Error::PathUnavailable {
                kernel: self.codecs[0].method(),
                requested: PathChoice::Cpu.to_string(),
                reason: "encode_append() records GPU work; this layer runs on the CPU".into(),
            });
        };
        if k16.is_empty() {
            return Ok(());
        }
        let (t, r) = (self.tokens, self.residual);
        let mut staged = None;
        let rows = crate::store::gpu::stage_rows(
            &self.ctx,
            self.g.token_elems(),
            [NewRows::Host(&k16), NewRows::Host(&v16)],
            &mut staged,
        )?;
        let p = [
            s.sides[0].prepare(&*self.codecs[0], r, t, rows[0])?,
            s.sides[1].prepare(&*self.codecs[1], r, t, rows[1])?,
        ];
        for (codec, p) in self.codecs.iter().zip(&p) {
            if codec.needs_status() && GpuSide::encodes(p) {
                return Err(Error::Config(format!(
                    "{} {}: this configuration can overflow its parameter storage and needs the status check of \
                     the blocking append(); encode_append() records without reading back",
                    codec.method(),
                    codec.side().name()
                )));
            }
        }
        for ((side, codec), p) in s.sides.iter().zip(&self.codecs).zip(&p) {
            side.record_encode(&**codec, p, enc)?;
        }
        // While a recorded GPU-input append is unsynced, the window's writes are conditional
        // on its input status (see encode_append_gpu).
        let conditional = s.unsynced.then_some(&s.input_status);
        for (side, p) in s.sides.iter().zip(&p) {
            side.record_commit(p, enc, conditional)?;
        }
        let [pk, pv] = p;
        s.sides[0].apply(pk);
        s.sides[1].apply(pv);
        self.tokens += k16.len() / self.g.token_elems();
        Ok(())
    }

    fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        self.check_unsynced()?;
        self.check_attend(q.len(), hq, opts)?;
        attention::check_finite(q)?;
        match &self.store {
            Store::Cpu(_) => self.cpu_attend(None, q, hq, opts),
            Store::Gpu(s) => {
                let (sides, shape) = self.attend_inputs(s, None);
                let call = self.call(q.len() / (hq * self.g.dim), hq, opts);
                Self::run_gpu(&self.ctx, s, &call, &shape, &sides, q)
            }
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
        self.check_attend(tq * hq * self.g.dim, hq, opts)?;
        self.encode_attend_at(enc, q, tq, hq, opts, out, None)
    }

    fn memory(&self) -> MemoryReport {
        let t = self.tokens;
        let (mut held, mut payload) = (Memory::default(), Memory::default());
        let mut q_min = t;
        for (i, c) in self.codecs.iter().enumerate() {
            let side = c.side();
            let q = quantized_len(t, self.residual, c.block_tokens());
            q_min = q_min.min(q);
            let blocks = q / c.block_tokens();
            for st in c.streams() {
                payload.add_stream(side, st.kind, (blocks * st.words_per_block * 4) as u64);
            }
            payload.residual += ((t - q) * self.g.token_elems() * 2) as u64;
            let tables = (c.tables().len() * 4) as u64;
            payload.tables += tables;
            match &self.store {
                Store::Cpu(sides) => {
                    let (per, resid) = sides[i].held();
                    for (st, b) in c.streams().iter().zip(per) {
                        held.add_stream(side, st.kind, b);
                    }
                    held.residual += resid;
                    held.tables += tables;
                }
                Store::Gpu(s) => {
                    let (per, ring, tables, positions) = s.sides[i].held(c.streams().len());
                    for (st, b) in c.streams().iter().zip(per) {
                        held.add_stream(side, st.kind, b);
                    }
                    held.residual += ring;
                    held.tables += tables;
                    held.eviction += positions;
                }
            }
        }
        MemoryReport::new(
            t,
            q_min,
            held,
            payload,
            (2 * t * self.g.token_elems() * 2) as u64,
        )
    }

    fn len(&self) -> usize {
        self.tokens
    }

    fn snapshot(&self) -> Result<Snapshot> {
        self.check_unsynced()?;
        Ok(Snapshot {
            tokens: self.tokens,
            keys: self.side_words(0)?,
            values: self.side_words(1)?,
        })
    }

    fn reconstruct(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((
            self.reconstruct_side(crate::store::Side::Keys)?,
            self.reconstruct_side(crate::store::Side::Values)?,
        ))
    }

    fn reconstruct_side(&self, side: crate::store::Side) -> Result<Vec<f32>> {
        self.check_unsynced()?;
        let row = self.g.token_elems();
        let mut out = vec![0f32; self.tokens * row];
        let gpu_side = match &self.store {
            Store::Gpu(s) => Some(s),
            Store::Cpu(_) => None,
        };
        let i = match side {
            crate::store::Side::Keys => 0,
            crate::store::Side::Values => 1,
        };
        {
            let c = &self.codecs[i];
            let gb = c.block_tokens();
            let q = quantized_len(self.tokens, self.residual, gb);
            let x = &mut out;
            match gpu_side {
                Some(s) if c.gpu_decodes() => {
                    let side = &s.sides[i];
                    let seg_tokens = side.seg_blocks * gb;
                    // Pieces whose f32 output fits one binding.
                    let piece = ((self.ctx.max_storage_binding_size() / (row * 4) as u64) as usize
                        / gb)
                        .max(1)
                        * gb;
                    let mut a = 0;
                    while a < q {
                        let si = a / seg_tokens;
                        let b = ((si + 1) * seg_tokens).min(q).min(a + piece);
                        let bytes = ((b - a) * row * 4) as u64;
                        let buf = gpu::storage_buffer(&self.ctx, "kvpack reconstruction", bytes)?;
                        let seg = &side.segments[si];
                        gpu::submit_blocking(&self.ctx, "reconstruct", |enc| {
                            c.decode_gpu(
                                &self.ctx,
                                enc,
                                &seg.at((a - si * seg_tokens) / gb, &side.tables),
                                (b - a) / gb,
                                &buf,
                            )
                        })?;
                        let back = gpu::readback(&self.ctx, &buf, bytes)?;
                        x[a * row..b * row].copy_from_slice(bytemuck::cast_slice(&back));
                        a = b;
                    }
                    let resid = s.sides[i].read_ring(q, self.tokens)?;
                    for (o, r) in x[q * row..].iter_mut().zip(resid) {
                        *o = r.to_f32();
                    }
                }
                _ => {
                    let w = self.side_words(i)?;
                    c.decode(&w.words(), q / gb, &mut x[..q * row])?;
                    for (o, r) in x[q * row..].iter_mut().zip(&w.residual) {
                        *o = r.to_f32();
                    }
                }
            }
        }
        if let (0, Some(mu)) = (i, &self.center) {
            crate::store::center::add_back(&mut out, mu);
        }
        Ok(out)
    }

    fn attend_reference(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>> {
        self.check_unsynced()?;
        self.check_attend(q.len(), hq, opts)?;
        attention::check_finite(q)?;
        self.cpu_attend(None, q, hq, opts)
    }

    fn method(&self) -> &Method {
        &self.method
    }

    fn geometry(&self) -> Geometry {
        self.g
    }

    fn index(&self) -> usize {
        self.index
    }

    fn codec(&self, side: Side) -> &dyn Codec {
        &*self.codecs[side as usize]
    }

    fn paths(&self) -> [crate::path::KernelPath; 2] {
        [self.codecs[0].path(), self.codecs[1].path()]
    }

    fn attend_kernels(&self) -> Result<Vec<(&'static str, crate::path::KernelPath)>> {
        let Store::Gpu(s) = &self.store else {
            return Ok(Vec::new());
        };
        let (k, v) = (&*self.codecs[0], &*self.codecs[1]);
        let paths = attention::gpu::AttendPaths::resolve(&self.ctx, k, v, s.choice)?;
        let (kh, vh) = (k.attend_hooks(), v.attend_hooks());
        let mut out = vec![(attention::kernel::partials(kh, vh).name, paths.partials)];
        if let (Some(def), Some(path)) = (attention::kernel::prefill(kh, vh), paths.prefill) {
            out.push((def.name, path));
        }
        if let (Some(def), Some(Ok(path))) = (attention::kernel::tensor(kh, vh), &paths.tensor) {
            out.push((def.name, *path));
        }
        if let (Some(def), Some(Ok(path)), Ok(_)) = (
            attention::kernel::tensor_decode(kh, vh),
            &paths.tensor_decode,
            attention::gpu::tiles(k, v),
        ) {
            out.push((def.name, *path));
        }
        out.push((attention::kernel::merge(kh, vh).name, paths.merge));
        Ok(out)
    }

    fn prepare(&self) -> Result<()> {
        self.prepare_job().map_or(Ok(()), |job| job())
    }

    fn prepare_async(&self) -> crate::Preparing {
        match self.prepare_job() {
            Some(job) => crate::Preparing::spawn(job),
            None => crate::Preparing::ready(Ok(())),
        }
    }

    fn describe(&self) -> String {
        let side = |c: &Arc<dyn Codec>| {
            let s = c.settings();
            format!(
                "{} {}{} on {}{}",
                c.side().name(),
                c.method(),
                if s.is_empty() {
                    String::new()
                } else {
                    format!(" {s}")
                },
                c.path(),
                c.attend_note().map_or(String::new(), |n| format!(" ({n})"))
            )
        };
        let fallbacks = self.ctx.msl_fallbacks();
        let note = if fallbacks.is_empty()
            || !self
                .codecs
                .iter()
                .any(|c| c.path() == crate::path::KernelPath::Msl)
        {
            String::new()
        } else {
            let names: Vec<&str> = fallbacks.iter().map(|(k, _)| *k).collect();
            format!(
                "; the Metal driver rejected the MSL of {} (they run their {} kernels: see \
                 Context::msl_fallbacks)",
                names.join(", "),
                crate::gpu::msl_fallback::FALLBACK
            )
        };
        format!(
            "{}; {}; residual window {} tokens{note}",
            side(&self.codecs[0]),
            side(&self.codecs[1]),
            self.residual
        )
    }
}
