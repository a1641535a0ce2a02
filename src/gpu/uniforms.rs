//! Uniform buffers reused by content. A dispatch's uniform (binding 0, and the codecs'
//! attention uniforms) is a few dozen bytes that depend on the call's shape: the same bytes
//! recur for every layer of a model at one decode step (same geometry, same length) and for
//! every step of an append pattern. Each distinct content is uploaded once per device and
//! kept (up to [`CAPACITY`] contents, the oldest dropped first), instead of a buffer per
//! dispatch. Sharing is safe because a uniform is only read. The cache holds at most
//! [`CAPACITY`] small buffers per device ([`Context::cached_uniforms`]; a leak check counts
//! the device's buffers net of them), and [`Context::clear_uniform_cache`] drops them.
//!
//! Bind groups are still made per dispatch, deliberately. A decode step's plan uniform holds
//! the cache's length, so its buffer (and with it the group) differs at every step; a group
//! could only be kept across steps if that uniform lived at a dynamic offset in a buffer
//! rewritten per call, and `Queue::write_buffer` lands at the next submission, before every
//! command of it: two calls recorded into one encoder (an append, then attention, then
//! another step) would both read the last write. Content-keyed buffers are right under any
//! recording order. A layer's attention partials buffer is kept across calls
//! (`attention::gpu::AttendScratch`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::context::Context;
use crate::error::Result;

/// Distinct uniform contents kept per device (each at most a few hundred bytes).
pub const CAPACITY: usize = 256;

type Key = (&'static str, Vec<u8>);

/// The uniforms of one device, by (label, padded bytes).
#[derive(Debug, Default)]
pub(crate) struct UniformCache {
    map: HashMap<Key, wgpu::Buffer>,
    order: VecDeque<Key>,
    hits: u64,
    misses: u64,
}

fn lock(m: &Mutex<UniformCache>) -> std::sync::MutexGuard<'_, UniformCache> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A uniform buffer holding `data` (padded with zeros to 16 bytes): the device's buffer of
/// that content when it has one, else a new one (kept for the next call).
pub fn uniform(ctx: &Context, label: &'static str, data: &[u8]) -> Result<wgpu::Buffer> {
    let gpu = super::gpu_of(ctx, label)?;
    let mut padded = data.to_vec();
    padded.resize(data.len().div_ceil(16).max(1) * 16, 0);
    let key = (label, padded);
    {
        let mut c = lock(&gpu.uniforms);
        if let Some(b) = c.map.get(&key).cloned() {
            c.hits += 1;
            return Ok(b);
        }
    }
    let buffer = super::uniform_buffer(ctx, label, &key.1)?;
    let mut c = lock(&gpu.uniforms);
    c.misses += 1;
    if c.map.len() >= CAPACITY {
        if let Some(old) = c.order.pop_front() {
            c.map.remove(&old);
        }
    }
    c.order.push_back(key.clone());
    c.map.insert(key, buffer.clone());
    Ok(buffer)
}

impl Context {
    /// Uniform buffers this device's cache holds (at most [`CAPACITY`]; 0 without a GPU).
    pub fn cached_uniforms(&self) -> usize {
        self.gpu().map_or(0, |g| lock(&g.uniforms).map.len())
    }

    /// Drops every uniform buffer this device's cache holds (they are made again on need).
    pub fn clear_uniform_cache(&self) {
        if let Some(g) = self.gpu() {
            let mut c = lock(&g.uniforms);
            c.map.clear();
            c.order.clear();
        }
    }

    /// Uniform uploads served from the device's cache and made new so far, `(hits, misses)`
    /// (all handles of the device together; `(0, 0)` without a GPU). For tests and tuning.
    #[doc(hidden)]
    pub fn uniform_stats(&self) -> (u64, u64) {
        self.gpu().map_or((0, 0), |g| {
            let c = lock(&g.uniforms);
            (c.hits, c.misses)
        })
    }
}
