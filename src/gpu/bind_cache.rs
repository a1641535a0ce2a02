//! Bind groups: made for a dispatch from its bindings, or taken from a [`BindGroupCache`]
//! that an owner (a layer's attention, `attention::gpu::AttendScratch`) keeps across its calls.
//!
//! A bind group names buffers, never the bytes of a uniform: every uniform binding of kvpack's
//! pipelines has a dynamic offset ([`super::pipeline::layout_entries`]) and its bytes live in
//! a slot of the device's uniform arena ([`super::uniforms`]), chosen at `set_bind_group`. So
//! the bind groups of a layer's decode step (its segments, ring, tables, partials, the
//! caller's query and output buffers, the arena) are the same at the next step although the
//! length in the uniforms changed, and a cache keyed by the bound buffers serves them: on
//! lavapipe a KIVI-4 decode call's recording took ~11.5 µs of host time, ~59 % of it making its
//! two bind groups (2026-12-07, a throwaway profile of `encode_attend` in a loop).
//!
//! A cached group holds its buffers (clones of the handles) alive, so an entry not used for
//! [`KEEP_CALLS`] calls of its owner is dropped: a buffer the owner replaced (a grown segment,
//! the caller's new query buffer) is released a few calls later, and all of them when the
//! owner is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Bind;
use super::registry::Binding;

/// Calls of the owner after which an unused entry is dropped.
pub const KEEP_CALLS: u64 = 4;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Measuring only (benches/host_encode.rs): `false` makes every owner's bind groups per call,
/// as before the caches, for an interleaved A/B of their host time in one process. Default
/// `true`.
#[doc(hidden)]
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The bound buffers of one group: layout, then per binding (buffer, static offset, size; 0:
/// to the end).
type Key = (wgpu::BindGroupLayout, Vec<(wgpu::Buffer, u64, u64)>);

/// One kept group: its key, the group and the owner's call that last used it.
type Entry = (Key, wgpu::BindGroup, u64);

#[derive(Debug, Default)]
struct Inner {
    /// Entries by the hash of their key (looked up without cloning a handle).
    map: HashMap<u64, Vec<Entry>>,
    call: u64,
    hits: u64,
    misses: u64,
}

/// Bind groups by the buffers they bind, kept across an owner's calls (see the module doc).
#[derive(Debug, Default)]
pub struct BindGroupCache {
    inner: Mutex<Inner>,
}

impl BindGroupCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts one call of the owner: drops the entries its last [`KEEP_CALLS`] calls did not
    /// use.
    pub fn begin_call(&self) {
        let mut c = self.lock();
        c.call += 1;
        let call = c.call;
        c.map.retain(|_, entries| {
            entries.retain(|(_, _, used)| *used + KEEP_CALLS >= call);
            !entries.is_empty()
        });
    }

    /// Groups held now.
    pub fn len(&self) -> usize {
        self.lock().map.values().map(Vec::len).sum()
    }

    /// Whether it holds no group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Groups served from the cache and made new so far, `(hits, misses)`. For tests.
    #[doc(hidden)]
    pub fn stats(&self) -> (u64, u64) {
        let c = self.lock();
        (c.hits, c.misses)
    }
}

/// The bind group of `binds` (binding i = `binds[i]`) for `layout`, whose bindings are
/// `kinds`, and the dynamic offsets of its uniform bindings (their `Bind` offsets, in binding
/// order; a uniform binding is bound from byte 0 of its buffer with the `Bind`'s size). From
/// `cache` where given (made and kept on a miss), else made now.
pub(crate) fn bind_group(
    gpu: &crate::context::Gpu,
    layout: &wgpu::BindGroupLayout,
    kinds: &[Binding],
    binds: &[Bind<'_>],
    cache: Option<&BindGroupCache>,
) -> (wgpu::BindGroup, Vec<u32>) {
    let uniform = |i: usize| kinds.get(i) == Some(&Binding::Uniform);
    // A uniform binding: from byte 0, `size` bytes (to the Bind's end), the offset dynamic.
    let bound = |i: usize, b: &Bind<'_>| -> (u64, u64) {
        if uniform(i) {
            (0, b.size.unwrap_or(b.buffer.size() - b.offset))
        } else {
            (b.offset, b.size.unwrap_or(0))
        }
    };
    let offsets: Vec<u32> = binds
        .iter()
        .enumerate()
        .filter(|(i, _)| uniform(*i))
        .map(|(_, b)| b.offset as u32)
        .collect();
    let make = || {
        let entries: Vec<wgpu::BindGroupEntry> = binds
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let (offset, size) = bound(i, b);
                wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.buffer,
                        offset,
                        size: wgpu::BufferSize::new(size),
                    }),
                }
            })
            .collect();
        gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        })
    };
    let Some(cache) = cache.filter(|_| ENABLED.load(Ordering::Relaxed)) else {
        return (make(), offsets);
    };
    let bound: Vec<(&wgpu::Buffer, u64, u64)> = binds
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let (offset, size) = bound(i, b);
            (b.buffer, offset, size)
        })
        .collect();
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        layout.hash(&mut h);
        bound.hash(&mut h);
        h.finish()
    };
    let same = |(l, entries): &Key| {
        l == layout
            && entries.len() == bound.len()
            && entries
                .iter()
                .zip(&bound)
                .all(|((b, o, s), (b2, o2, s2))| b == *b2 && o == o2 && s == s2)
    };
    let mut c = cache.lock();
    let call = c.call;
    let mut device = gpu.bind_groups.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, group, used)) = c
        .map
        .get_mut(&hash)
        .and_then(|v| v.iter_mut().find(|e| same(&e.0)))
    {
        *used = call;
        let group = group.clone();
        c.hits += 1;
        device.0 += 1;
        return (group, offsets);
    }
    let group = make();
    c.misses += 1;
    device.1 += 1;
    let key: Key = (
        layout.clone(),
        bound
            .iter()
            .map(|(b, o, s)| ((*b).clone(), *o, *s))
            .collect(),
    );
    c.map
        .entry(hash)
        .or_default()
        .push((key, group.clone(), call));
    (group, offsets)
}

impl crate::Context {
    /// Bind groups the device's owners (layers' attention) took from their caches and made
    /// new so far, `(hits, misses)` (all handles of the device together; `(0, 0)` without a
    /// GPU; groups made for a call only, as the blocking `attend`'s, are not counted). For
    /// tests and tuning.
    #[doc(hidden)]
    pub fn bind_group_stats(&self) -> (u64, u64) {
        self.gpu().map_or((0, 0), |g| {
            *g.bind_groups.lock().unwrap_or_else(|e| e.into_inner())
        })
    }
}
