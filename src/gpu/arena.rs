//! Write-once arenas: small host bytes for recorded commands, placed in one large buffer per
//! device and use (uniforms: [`super::uniforms`]; host rows of appends: [`super::staging`])
//! instead of a buffer per call.
//!
//! **The rule.** A slot is written once (`Queue::write_buffer`, which lands at the next
//! submission before every command of it) and never again: a command recorded earlier, in an
//! encoder not yet submitted, that names a slot must read the bytes written for it, so a slot
//! is never reused while the arena lives. When the arena is full a new buffer takes over; the
//! old one lives on only as long as bind groups or recorded commands hold it (wgpu keeps a
//! buffer alive while a command buffer names it).

use crate::context::Context;
use crate::error::Result;

/// One arena: its current buffer (none until the first slot) and its next free byte.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    buffer: Option<wgpu::Buffer>,
    next: u64,
    /// Arena buffers made so far (for tests and tuning).
    pub made: u64,
}

/// Where [`Arena::place`] put bytes.
pub(crate) struct Placed {
    /// The arena buffer.
    pub buffer: wgpu::Buffer,
    /// First byte of the slot (a multiple of the alignment asked for).
    pub offset: u64,
    /// Whether this call made a new arena buffer (the old one's slots are gone).
    pub fresh: bool,
}

impl Arena {
    /// Writes `data` (padded with zeros to whole words) into a new slot at a multiple of
    /// `align` (a power of two ≥ 4), making a new buffer of `max(bytes, data.len())` bytes
    /// with `usage` (plus `COPY_DST`) when there is none or the slot would not fit. Errors:
    /// the buffer cannot be made (an allocation failure: nothing was written).
    pub fn place(
        &mut self,
        ctx: &Context,
        label: &'static str,
        usage: wgpu::BufferUsages,
        bytes: u64,
        align: u64,
        data: &[u8],
    ) -> Result<Placed> {
        let gpu = super::gpu_of(ctx, label)?;
        // Copies into buffers move whole words.
        let size = (data.len() as u64).div_ceil(4) * 4;
        let offset = self.next.div_ceil(align) * align;
        let (buffer, offset, fresh) = match &self.buffer {
            Some(b) if offset + size <= b.size() => (b.clone(), offset, false),
            _ => {
                let bytes = bytes.max(size).div_ceil(4) * 4;
                let b = super::allocate(ctx, label, bytes, |device| {
                    Ok(device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some(label),
                        size: bytes,
                        usage: usage | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    }))
                })?;
                self.buffer = Some(b.clone());
                self.made += 1;
                (b, 0, true)
            }
        };
        if size == data.len() as u64 {
            gpu.queue.write_buffer(&buffer, offset, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(size as usize, 0);
            gpu.queue.write_buffer(&buffer, offset, &padded);
        }
        self.next = offset + size;
        Ok(Placed {
            buffer,
            offset,
            fresh,
        })
    }

    /// Whether the arena holds a buffer.
    pub fn holds(&self) -> bool {
        self.buffer.is_some()
    }

    /// Forgets the buffer (the next slot makes a new one).
    pub fn clear(&mut self) {
        self.buffer = None;
        self.next = 0;
    }
}
