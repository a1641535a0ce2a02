//! Uniforms reused by content, in one arena buffer per device. A dispatch's uniform (binding
//! 0, and the codecs' attention uniforms) is a few dozen bytes that depend on the call's shape:
//! the same bytes recur for every layer of a model at one decode step (same geometry, same
//! length) and for every step of an append pattern. Each distinct content is written once
//! per device into a slot of the device's arena ([`ARENA_BYTES`], slots aligned to the
//! device's `min_uniform_buffer_offset_alignment`; `src/gpu/arena.rs`) and kept, instead of a
//! buffer per dispatch. Sharing is safe because a uniform is only read.
//!
//! **Why an arena.** Every uniform binding of kvpack's pipelines has a dynamic offset
//! ([`super::pipeline::layout_entries`]): a bind group names the arena buffer, not the slot,
//! so a layer's bind group stays the same from one decode step to the next while the length
//! in its uniform changes ([`super::bind_cache`]).
//!
//! **Why slots are never rewritten.** `Queue::write_buffer` lands at the next submission,
//! before every command of it: a slot rewritten with new content while a command recorded
//! earlier (in an encoder not yet submitted) still names it would make that command read the
//! new bytes. So a slot is written once, when its content first appears; when the arena is
//! full a new arena buffer takes over and the old one lives on only as long as bind groups
//! or recorded commands hold it. [`Context::cached_uniforms`] counts the arena buffers the
//! device's cache holds (0 or 1), [`Context::clear_uniform_cache`] drops them.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::context::Context;
use crate::error::Result;

/// Bytes of one arena buffer: 1,024 slots of 256 bytes (the usual offset alignment).
pub const ARENA_BYTES: u64 = 256 * 1024;

type Key = (&'static str, Vec<u8>);

/// One uniform's place: `size` bytes of `buffer` from `offset` (a multiple of the device's
/// uniform offset alignment; bound as a dynamic offset).
#[derive(Clone, Debug)]
pub struct UniformSlot {
    /// The arena buffer (or, for [`super::uniform_buffer`]'s own buffers, that buffer).
    pub buffer: wgpu::Buffer,
    /// First byte.
    pub offset: u64,
    /// Bytes (the content padded with zeros to 16).
    pub size: u64,
}

impl<'a> From<&'a UniformSlot> for super::Bind<'a> {
    fn from(s: &'a UniformSlot) -> Self {
        super::Bind::range(&s.buffer, s.offset, s.size)
    }
}

/// The device's arena and the slot of each content written to it.
#[derive(Debug, Default)]
pub(crate) struct UniformCache {
    arena: super::arena::Arena,
    map: HashMap<Key, UniformSlot>,
    hits: u64,
    misses: u64,
}

fn lock(m: &Mutex<UniformCache>) -> std::sync::MutexGuard<'_, UniformCache> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slot holding `data` (padded with zeros to 16 bytes): the device's slot of that content
/// when it has one, else a new one written now (visible to every command submitted after
/// this call, in this encoder or a later one).
pub fn uniform(ctx: &Context, label: &'static str, data: &[u8]) -> Result<UniformSlot> {
    let gpu = super::gpu_of(ctx, label)?;
    let mut padded = data.to_vec();
    padded.resize(data.len().div_ceil(16).max(1) * 16, 0);
    let key = (label, padded);
    let mut c = lock(&gpu.uniforms);
    if let Some(s) = c.map.get(&key) {
        let s = s.clone();
        c.hits += 1;
        return Ok(s);
    }
    let align = u64::from(gpu.limits.min_uniform_buffer_offset_alignment).max(16);
    let placed = c.arena.place(
        ctx,
        "kvpack uniform arena",
        wgpu::BufferUsages::UNIFORM,
        ARENA_BYTES,
        align,
        &key.1,
    )?;
    if placed.fresh {
        // The old arena's slots are forgotten, never rewritten (see the module's doc).
        c.map.clear();
    }
    let (arena, offset, size) = (placed.buffer, placed.offset, key.1.len() as u64);
    c.misses += 1;
    let slot = UniformSlot {
        buffer: arena,
        offset,
        size,
    };
    c.map.insert(key, slot.clone());
    Ok(slot)
}

impl Context {
    /// Uniform arena buffers this device's cache holds (0 or 1; 0 without a GPU).
    pub fn cached_uniforms(&self) -> usize {
        self.gpu()
            .map_or(0, |g| usize::from(lock(&g.uniforms).arena.holds()))
    }

    /// Drops the device's uniform arena and its slots (made again on need; bind groups and
    /// recorded commands that name the old arena keep it alive until they are dropped).
    pub fn clear_uniform_cache(&self) {
        if let Some(g) = self.gpu() {
            let mut c = lock(&g.uniforms);
            c.map.clear();
            c.arena.clear();
        }
    }

    /// Uniform uploads served from the device's cache and written new so far, `(hits,
    /// misses)` (all handles of the device together; `(0, 0)` without a GPU). For tests and
    /// tuning.
    #[doc(hidden)]
    pub fn uniform_stats(&self) -> (u64, u64) {
        self.gpu().map_or((0, 0), |g| {
            let c = lock(&g.uniforms);
            (c.hits, c.misses)
        })
    }
}
