//! The CPU path of a KIVI layer: the same words as the GPU buffers, in host memory.

use half::f16;

use super::layout::Layout;
use super::{Memory, RawKivi};
use crate::cpu::kivi_quant_keys::ParamOverflow;
use crate::cpu::{kivi_dequant_keys, kivi_dequant_values, kivi_quant_keys, kivi_quant_values};
use crate::error::{Error, Result};

pub(crate) struct CpuStore {
    l: Layout,
    key_codes: Vec<u32>,
    key_params: Vec<u32>,
    value_codes: Vec<u32>,
    value_params: Vec<u32>,
    /// f16 rows of tokens `[Q, T)`, `[T − Q][H][D]`.
    resid_k: Vec<f16>,
    resid_v: Vec<f16>,
}

pub(crate) fn overflow_error(o: ParamOverflow, what: &str) -> Error {
    Error::Config(format!(
        "{what} group at token {}, head {}, index {} has a scale or lo that f16 parameter storage \
         cannot hold (use f32 parameters or more bits)",
        o.token, o.head, o.index
    ))
}

impl CpuStore {
    pub(crate) fn new(l: Layout) -> Self {
        Self {
            l,
            key_codes: Vec::new(),
            key_params: Vec::new(),
            value_codes: Vec::new(),
            value_params: Vec::new(),
            resid_k: Vec::new(),
            resid_v: Vec::new(),
        }
    }

    /// Appends f16 rows after `t_old` tokens; validates and computes everything before it
    /// changes any stored word.
    pub(crate) fn append(&mut self, t_old: usize, k: &[f16], v: &[f16]) -> Result<()> {
        let l = self.l;
        let row = l.token_elems();
        let n = k.len() / row;
        let (q_old, q_new) = (l.quantized_len(t_old), l.quantized_len(t_old + n));
        // Token s in [Q_old, T_old + n): residual row s − Q_old, or new row s − T_old.
        let at = |src_k: bool, s: usize, e: usize| -> f32 {
            let (resid, new) = if src_k {
                (&self.resid_k, k)
            } else {
                (&self.resid_v, v)
            };
            if s < t_old {
                resid[(s - q_old) * row + e]
            } else {
                new[(s - t_old) * row + e]
            }
            .to_f32()
        };
        let blocks = (q_new - q_old) / l.key_group;
        let mut kc = vec![0u32; blocks * l.key_block_words()];
        let mut kp = vec![0u32; blocks * l.key_block_param_words()];
        kivi_quant_keys::kivi_quant_keys(
            &l,
            blocks,
            |t, h, d| at(true, q_old + t, h * l.dim + d),
            &mut kc,
            &mut kp,
        )
        .map_err(|o| {
            overflow_error(
                ParamOverflow {
                    token: o.token + q_old,
                    ..o
                },
                "key",
            )
        })?;
        let tokens = q_new - q_old;
        let mut vc = vec![0u32; tokens * l.value_token_words()];
        let mut vp = vec![0u32; tokens * l.value_token_param_words()];
        kivi_quant_values::kivi_quant_values(
            &l,
            tokens,
            |t, h, d| at(false, q_old + t, h * l.dim + d),
            &mut vc,
            &mut vp,
        )
        .map_err(|o| {
            overflow_error(
                ParamOverflow {
                    token: o.token + q_old,
                    ..o
                },
                "value",
            )
        })?;
        // Commit: nothing below can fail.
        crate::cache::extend_tight(&mut self.key_codes, &kc);
        crate::cache::extend_tight(&mut self.key_params, &kp);
        crate::cache::extend_tight(&mut self.value_codes, &vc);
        crate::cache::extend_tight(&mut self.value_params, &vp);
        for (resid, new) in [(&mut self.resid_k, k), (&mut self.resid_v, v)] {
            let drop_rows = (q_new - q_old).min(t_old - q_old);
            resid.drain(..drop_rows * row);
            let first_new = q_new.max(t_old) - t_old;
            crate::cache::extend_tight(resid, &new[first_new * row..]);
        }
        Ok(())
    }

    pub(crate) fn reconstruct(&self, t: usize) -> (Vec<f32>, Vec<f32>) {
        let l = self.l;
        let q = l.quantized_len(t);
        let row = l.token_elems();
        let mut k = vec![0f32; t * row];
        let mut v = vec![0f32; t * row];
        kivi_dequant_keys::kivi_dequant_keys(
            &l,
            q / l.key_group,
            &self.key_codes,
            &self.key_params,
            &mut k[..q * row],
        );
        kivi_dequant_values::kivi_dequant_values(
            &l,
            q,
            &self.value_codes,
            &self.value_params,
            &mut v[..q * row],
        );
        for (out, resid) in [(&mut k, &self.resid_k), (&mut v, &self.resid_v)] {
            for (o, r) in out[q * row..].iter_mut().zip(resid) {
                *o = r.to_f32();
            }
        }
        (k, v)
    }

    pub(crate) fn memory(&self, t: usize) -> (Memory, Memory) {
        let w = |v: &Vec<u32>| (v.capacity() * 4) as u64;
        let h = |v: &Vec<f16>| (v.capacity() * 2) as u64;
        let held = Memory {
            key_codes: w(&self.key_codes),
            key_params: w(&self.key_params),
            value_codes: w(&self.value_codes),
            value_params: w(&self.value_params),
            residual: h(&self.resid_k) + h(&self.resid_v),
        };
        let payload = payload_memory(&self.l, t);
        (held, payload)
    }

    /// The stored words as a [`super::view::KiviView`] (no copy).
    pub(crate) fn view(&self, t: usize) -> super::view::KiviView<'_> {
        super::view::KiviView {
            layout: &self.l,
            tokens: t,
            key_codes: &self.key_codes,
            key_params: &self.key_params,
            value_codes: &self.value_codes,
            value_params: &self.value_params,
            residual_k: &self.resid_k,
            residual_v: &self.resid_v,
        }
    }

    pub(crate) fn raw(&self, _t: usize) -> RawKivi {
        RawKivi {
            key_codes: self.key_codes.clone(),
            key_params: self.key_params.clone(),
            value_codes: self.value_codes.clone(),
            value_params: self.value_params.clone(),
            residual_k: self.resid_k.clone(),
            residual_v: self.resid_v.clone(),
        }
    }
}

/// Bytes of the data of `t` tokens in the storage layout (no spare capacity).
pub(crate) fn payload_memory(l: &Layout, t: usize) -> Memory {
    let q = l.quantized_len(t);
    let blocks = q / l.key_group;
    Memory {
        key_codes: (blocks * l.key_block_words() * 4) as u64,
        key_params: (blocks * l.key_block_param_words() * 4) as u64,
        value_codes: (q * l.value_token_words() * 4) as u64,
        value_params: (q * l.value_token_param_words() * 4) as u64,
        residual: (2 * (t - q) * l.token_elems() * 2) as u64,
    }
}
