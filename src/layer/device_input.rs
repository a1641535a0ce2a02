//! Appends from the caller's device buffers ([`GpuInput`]): checking the inputs, converting
//! them to f16 rows on the device (the input-status words report NaN/Inf, range and norm
//! rejections), then the shared append; blocking and recorded.

use crate::context::PathChoice;
use crate::error::{Error, Result};
use crate::gpu;
use crate::store::check_token_limit;
use crate::store::gpu::{GpuSide, NewRows};
use crate::store::gpu_input::{self, GpuInput};

use super::{GpuStore, KvLayer, Layer, Store};

impl Layer {
    /// The error for a GPU-input append under key centering.
    pub(super) fn centered_gpu_input(&self, call: &str) -> Error {
        Error::Config(format!(
            "{call}: key centering (`center=calib`) is applied to host appends only; append \
             from host memory or use a method without centering"
        ))
    }

    /// Checks both sides' device inputs (see [`GpuInput`]) before anything is recorded.
    pub(super) fn check_gpu_inputs<'a>(
        &self,
        k: &GpuInput<'a>,
        v: &GpuInput<'a>,
    ) -> Result<[gpu_input::Bound<'a>; 2]> {
        if v.tokens != k.tokens {
            return Err(Error::Shape {
                what: "v",
                message: format!("v has {} tokens, k has {}", v.tokens, k.tokens),
            });
        }
        check_token_limit(self.tokens, k.tokens)?;
        let row = self.g.token_elems();
        let kb = gpu_input::check_input(&self.ctx, "k", k, row)?;
        let vb = gpu_input::check_input(&self.ctx, "v", v, row)?;
        if let (Store::Gpu(s), true) = (&self.store, k.tokens > 0) {
            let placeholder = s.sides[0].placeholder();
            gpu_input::check_device(&self.ctx, "k", &kb, placeholder)?;
            gpu_input::check_device(&self.ctx, "v", &vb, placeholder)?;
        }
        Ok([kb, vb])
    }

    /// The CPU path's refusal of device input.
    pub(super) fn gpu_input_on_cpu(&self, call: &str) -> Error {
        Error::PathUnavailable {
            kernel: self.codecs[0].method(),
            requested: PathChoice::Cpu.to_string(),
            reason: format!(
                "{call}() reads the application's GPU buffers; this layer runs on the CPU \
                 (append host values with append())"
            ),
        }
    }

    /// One scratch buffer of f16 rows per side for `n` tokens.
    pub(super) fn scratch_rows(&self, n: usize) -> Result<[wgpu::Buffer; 2]> {
        let bytes = (n * self.g.row_words() * 4) as u64;
        Ok([
            gpu::storage_buffer(&self.ctx, "kvpack converted keys", bytes)?,
            gpu::storage_buffer(&self.ctx, "kvpack converted values", bytes)?,
        ])
    }

    /// The input status's words (blocking).
    pub(super) fn read_input_status(&self, s: &GpuStore) -> Result<Vec<u32>> {
        let bytes = gpu_input::status_bytes(self.g);
        Ok(bytemuck::pod_collect_to_vec(&gpu::readback(
            &self.ctx,
            &s.input_status,
            bytes,
        )?))
    }

    /// The error of a rejected append, if the input status holds one.
    pub(super) fn status_error(&self, words: &[u32]) -> Option<Error> {
        (words[gpu_input::status::REJECTED] != 0).then(|| {
            gpu_input::rejected_error(words, self.g, |side, first, row| {
                self.codecs[side].check_rows(first, row)
            })
        })
    }

    /// [`KvLayer::append_gpu`], returning the converted f16 key rows `[n][row_words]` u32
    /// of the tokens it appended (`None` for none): eviction scores them on the device.
    pub(crate) fn append_gpu_rows(
        &mut self,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<Option<wgpu::Buffer>> {
        if !matches!(self.store, Store::Gpu(_)) {
            return Err(self.gpu_input_on_cpu("append_gpu"));
        }
        if self.center.is_some() {
            return Err(self.centered_gpu_input("append_gpu"));
        }
        self.sync()?;
        let bound = self.check_gpu_inputs(&k, &v)?;
        let n = k.tokens;
        if n == 0 {
            return Ok(None);
        }
        let rows = self.scratch_rows(n)?;
        let Store::Gpu(s) = &self.store else {
            unreachable!("checked above")
        };
        gpu::submit_blocking(&self.ctx, "append (convert input)", |enc| {
            enc.clear_buffer(&s.input_status, 0, None);
            gpu_input::record_convert(
                &self.ctx,
                enc,
                self.g,
                self.tokens,
                n,
                [&bound[0], &bound[1]],
                [&rows[0], &rows[1]],
                s.norm_checks,
                &s.input_status,
            )
        })?;
        let words = self.read_input_status(s)?;
        if words[gpu_input::status::REJECTED] != 0 {
            let e = self.status_error(&words);
            gpu::submit_blocking(&self.ctx, "append (clear input status)", |enc| {
                enc.clear_buffer(&s.input_status, 0, None);
                Ok(())
            })?;
            return Err(e.unwrap_or_else(|| Error::Gpu {
                during: "append",
                message: "rejected input without an error (a kvpack bug)".into(),
            }));
        }
        self.append_rows(
            [
                NewRows::Device {
                    buffer: &rows[0],
                    offset: 0,
                    tokens: n,
                },
                NewRows::Device {
                    buffer: &rows[1],
                    offset: 0,
                    tokens: n,
                },
            ],
            n,
        )?;
        let [keys, _] = rows;
        Ok(Some(keys))
    }

    /// [`KvLayer::encode_append_gpu`], returning the buffer its converted f16 key rows
    /// `[n][row_words]` u32 are recorded into (`None` for no tokens): eviction records its
    /// scoring of them after the append.
    pub(crate) fn encode_append_gpu_rows(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<Option<wgpu::Buffer>> {
        if !matches!(self.store, Store::Gpu(_)) {
            return Err(self.gpu_input_on_cpu("encode_append_gpu"));
        }
        if self.center.is_some() {
            return Err(self.centered_gpu_input("encode_append_gpu"));
        }
        let bound = self.check_gpu_inputs(&k, &v)?;
        let n = k.tokens;
        if n == 0 {
            return Ok(None);
        }
        let rows = self.scratch_rows(n)?;
        let (t, r) = (self.tokens, self.residual);
        let Store::Gpu(s) = &mut self.store else {
            unreachable!("checked above")
        };
        let new = |i: usize| NewRows::Device {
            buffer: &rows[i],
            offset: 0,
            tokens: n,
        };
        let p = [
            s.sides[0].prepare(&*self.codecs[0], r, t, new(0))?,
            s.sides[1].prepare(&*self.codecs[1], r, t, new(1))?,
        ];
        for (codec, p) in self.codecs.iter().zip(&p) {
            if codec.needs_status() && GpuSide::encodes(p) {
                return Err(Error::Config(format!(
                    "{} {}: this configuration can overflow its parameter storage and needs the status check of \
                     the blocking append_gpu(); encode_append_gpu() records without reading back",
                    codec.method(),
                    codec.side().name()
                )));
            }
        }
        // From the first command recorded on, the layer reads the input status at its next
        // sync (even if recording fails below: a conversion already recorded may flag it).
        s.unsynced = true;
        gpu_input::record_convert(
            &self.ctx,
            enc,
            self.g,
            t,
            n,
            [&bound[0], &bound[1]],
            [&rows[0], &rows[1]],
            s.norm_checks,
            &s.input_status,
        )?;
        for ((side, codec), p) in s.sides.iter().zip(&self.codecs).zip(&p) {
            side.record_encode(&**codec, p, enc)?;
        }
        for (side, p) in s.sides.iter().zip(&p) {
            side.record_commit(p, enc, Some(&s.input_status))?;
        }
        let [pk, pv] = p;
        s.sides[0].apply(pk);
        s.sides[1].apply(pv);
        self.tokens += n;
        let [keys, _] = rows;
        Ok(Some(keys))
    }
}
