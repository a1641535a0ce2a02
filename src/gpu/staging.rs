//! Host rows staged for recorded copies: an append's f16 rows (one decode step: a token per
//! layer and side, e.g. 2 KiB at 8 heads × D = 128) are written into a slot of the device's
//! staging arena (`src/gpu/arena.rs`: write once, never reuse) and copied from there by the
//! commands the append records, instead of a new buffer made (and its allocation checked)
//! per call. Rows larger than a quarter of the arena ([`LARGE`], prefill chunks) get a buffer
//! of their own ([`super::upload`]): they would fill the arena at once.
//!
//! Slots are aligned to the device's `min_storage_buffer_offset_alignment`, so a slot can be
//! bound as a storage range too (the conditional ring write of
//! [`crate::store::gpu_input`] reads it so).

use std::sync::Mutex;

use crate::context::Context;
use crate::error::Result;

/// Bytes of one staging arena buffer.
pub const ARENA_BYTES: u64 = 4 << 20;

/// Rows of more bytes than this get a buffer of their own.
pub const LARGE: u64 = ARENA_BYTES / 4;

/// Staged bytes: `size` bytes of `buffer` from `offset` (a multiple of the device's storage
/// offset alignment; 0 for a buffer of its own).
#[derive(Clone, Debug)]
pub struct Staged {
    /// The arena buffer, or a buffer of its own.
    pub buffer: wgpu::Buffer,
    /// First byte.
    pub offset: u64,
    /// Bytes (the data padded with zeros to whole words).
    pub size: u64,
}

/// The device's staging arena.
pub(crate) type StagingArena = Mutex<super::arena::Arena>;

/// `data` in a slot of the device's staging arena (or, above [`LARGE`] bytes, in a storage
/// buffer of its own): readable by every command recorded after this call. Errors: no GPU;
/// the buffer cannot be made (nothing was written).
pub fn stage(ctx: &Context, label: &'static str, data: &[u8]) -> Result<Staged> {
    let gpu = super::gpu_of(ctx, label)?;
    let size = (data.len() as u64).div_ceil(4) * 4;
    if size > LARGE {
        return Ok(Staged {
            buffer: super::upload(ctx, label, data)?,
            offset: 0,
            size,
        });
    }
    let align = u64::from(gpu.limits.min_storage_buffer_offset_alignment).max(4);
    let placed = gpu
        .staging
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .place(
            ctx,
            "kvpack staging arena",
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            ARENA_BYTES,
            align,
            data,
        )?;
    Ok(Staged {
        buffer: placed.buffer,
        offset: placed.offset,
        size,
    })
}

impl Context {
    /// Staging arena buffers this device holds now (0 or 1; 0 without a GPU): a bounded
    /// buffer the device keeps across layers and steps, like [`Context::cached_uniforms`].
    pub fn staging_arenas_held(&self) -> usize {
        self.gpu().map_or(0, |g| {
            usize::from(g.staging.lock().unwrap_or_else(|e| e.into_inner()).holds())
        })
    }

    /// Drops the device's staging arena (made again on need; recorded commands that read a
    /// slot of it keep it alive until they are dropped).
    pub fn clear_staging(&self) {
        if let Some(g) = self.gpu() {
            g.staging.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// Staging arena buffers this device has made so far (all handles of the device together;
    /// 0 without a GPU). For tests and tuning.
    #[doc(hidden)]
    pub fn staging_arenas_made(&self) -> u64 {
        self.gpu().map_or(0, |g| {
            g.staging.lock().unwrap_or_else(|e| e.into_inner()).made
        })
    }
}
