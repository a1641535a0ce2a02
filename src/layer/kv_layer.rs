//! [`KvLayer`]: one layer's cache, whatever the method, as models and tools use it.

use crate::attention::AttendOptions;
use crate::codec::Codec;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::method::Method;
use crate::store::gpu_input::GpuInput;
use crate::store::{Geometry, Input, MemoryReport, Side, Snapshot};

/// One layer's cache, whatever the method: what a model's attention needs from it. Lets
/// tools and models swap methods (and the f16 baseline) without knowing their storage.
pub trait KvLayer: Send + Sync + std::fmt::Debug {
    /// Appends `[n, H, D]` K and V (blocking on GPU paths). On any error nothing changes.
    fn append(&mut self, k: Input<'_>, v: Input<'_>) -> Result<()>;
    /// [`KvLayer::append`] recorded into the caller's encoder (GPU layers). The layer counts
    /// the tokens at once: submit the encoder before the next call that reads or appends,
    /// and never drop it unsubmitted. Recorded while an [`KvLayer::encode_append_gpu`] is
    /// unsynced, its window writes wait on that append's GPU check (and are rolled back with
    /// it if it was rejected).
    fn encode_append(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: Input<'_>,
        v: Input<'_>,
    ) -> Result<()>;
    /// Appends `n` tokens of K and V that live in the application's device buffers (see
    /// [`GpuInput`] for the layout and what is checked), blocking like [`KvLayer::append`],
    /// and with its exact result: the same stored words as the host append of the same
    /// values, and the same errors, [`Error::NonFinite`] (NaN, ±Inf, beyond f16) with the
    /// same index and value, and the codecs' own row checks (per-vector norms). The values are
    /// converted and checked on the GPU; only a status word (and, for a rejected norm, one
    /// token's row) is read back. Buffer problems are typed errors before anything runs:
    /// [`Error::Config`] for a buffer without `STORAGE` usage or of another device,
    /// [`Error::Shape`] for a misaligned offset or K and V of different token counts,
    /// [`Error::LengthMismatch`] for a range past the buffer's end, [`Error::Limit`] for one
    /// beyond a storage binding. On any error nothing changes. On the CPU path:
    /// [`Error::PathUnavailable`] (kvpack never reads an app's buffer back behind its back).
    fn append_gpu(&mut self, k: GpuInput<'_>, v: GpuInput<'_>) -> Result<()>;
    /// [`KvLayer::append_gpu`] recorded into the caller's encoder: no submit, no readback.
    /// The layer counts the tokens at once (submit the encoder before the next call that
    /// reads or appends, never drop it unsubmitted). Buffer problems are the same typed errors,
    /// returned before anything is recorded; a configuration that needs the blocking append's
    /// status check is refused as by [`KvLayer::encode_append`].
    ///
    /// **Values are checked on the GPU.** If this append's input holds a value the host
    /// append would refuse (NaN, ±Inf, beyond f16, or a vector norm the codec cannot store),
    /// the GPU marks the layer's input status *rejected*, and every write to the residual
    /// window of this append and of every append recorded after it (host or GPU input) is
    /// skipped; tokens stored before it keep their words. The layer learns it at its next
    /// sync: [`KvLayer::sync`] (or the blocking `append`/`append_gpu`, which sync first) rolls
    /// the layer back to the tokens it held before the rejected append, forgetting the
    /// appends recorded after it (buffers they grew stay: `memory().held` may be larger), and
    /// returns the error the host append would have returned.
    /// Until then `len()` and `memory()` count the rejected tokens, the readers that read
    /// stored words back (`snapshot`, `attend`, `reconstruct`, `attend_reference`) return
    /// that error without changing anything, and attention recorded with `encode_attend`
    /// reads unspecified values for the rejected tokens.
    fn encode_append_gpu(
        &mut self,
        encoder: &mut wgpu::CommandEncoder,
        k: GpuInput<'_>,
        v: GpuInput<'_>,
    ) -> Result<()>;
    /// Reads the input status of the appends recorded by [`KvLayer::encode_append_gpu`] since
    /// the last sync (blocking; a no-op when there are none, and on the CPU path): `Ok` when
    /// every one was stored, else rolls the layer back to the tokens it held before the first
    /// rejected one and returns its error (see there). Their encoders must have been submitted.
    fn sync(&mut self) -> Result<()>;
    /// Attention of host queries `[Tq, Hq, D]` (query row i at position T − Tq + i) over the
    /// cache as stored; `[Tq, Hq, D]` f32.
    fn attend(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>>;
    /// Attention recorded into the caller's encoder (GPU paths): `q` `[tq, Hq, D]` f32 and
    /// `out` `[tq, Hq, D]` f32 are device buffers.
    fn encode_attend(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()>;
    /// Bytes held and the ratio against f16.
    fn memory(&self) -> MemoryReport;
    /// Tokens held (per KV head: under eviction, every head holds the same number).
    fn len(&self) -> usize;
    /// Tokens appended: the position of the next token ([`KvLayer::len`] unless the layer
    /// evicts, [`crate::policy`]).
    fn appended(&self) -> usize {
        self.len()
    }
    /// The eviction policy's state (scores, positions, counters) of a layer that evicts
    /// ([`crate::policy::EvictingLayer`]; saved with the cache; read back from the device on a
    /// GPU path), else `None`.
    fn eviction_state(&self) -> Result<Option<crate::policy::layer::EvictionState>> {
        Ok(None)
    }
    /// True before the first append.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A CPU copy of the stored words (read back on GPU paths): for tests and tools.
    fn snapshot(&self) -> Result<Snapshot>;
    /// The reconstruction of the whole cache as f32 `[T, H, D]` (K̂, V̂): decoded blocks,
    /// then the f16 window (tests and tools; attention never does this).
    fn reconstruct(&self) -> Result<(Vec<f32>, Vec<f32>)>;
    /// The reconstruction of one side (`[T, H, D]` f32), e.g. the values of a cache whose
    /// keys have none (QJL: [`crate::Error::Config`] for its keys).
    fn reconstruct_side(&self, side: crate::store::Side) -> Result<Vec<f32>>;
    /// The CPU reference of attention over this layer's stored words (read back on GPU
    /// paths): what [`KvLayer::attend`] must agree with.
    fn attend_reference(&self, q: &[f32], hq: usize, opts: &AttendOptions) -> Result<Vec<f32>>;
    /// The method.
    fn method(&self) -> &Method;
    /// The fixed shape: KV heads and head width.
    fn geometry(&self) -> Geometry;
    /// The model layer its codecs drew per-layer tables for ([`Method::layer_at`]; 0 for a
    /// lone layer): saved with the cache so that a loaded layer decodes with the same tables.
    fn index(&self) -> usize;
    /// The codec of one side (what it stores, its settings and tables).
    fn codec(&self, side: Side) -> &dyn Codec;
    /// The path the key side's and the value side's kernels run on.
    fn paths(&self) -> [crate::path::KernelPath; 2];
    /// The attention kernels this layer runs and their paths (the CPU reference: none).
    fn attend_kernels(&self) -> Result<Vec<(&'static str, crate::path::KernelPath)>>;
    /// The method, the path of each side and the residual window, in words.
    fn describe(&self) -> String;
    /// Builds every GPU pipeline this layer's appends and attention calls will use, so that
    /// none of them compiles a shader (and waits for it) later: the store's kernels (GPU-input
    /// conversion and checks, the conditional ring writes), each codec's encode kernels, and
    /// the attention kernels (decode, prefill where the key codec serves it, merge) with the
    /// one specialization every call of this layer gets (head width, the device's subgroup
    /// width class, whether the layer has a ring, the codecs' constants: never a length).
    /// Blocking; [`KvLayer::prepare_async`] builds them on a thread of its own. Call it once
    /// after making the layer (layers of the same method and geometry on one context share
    /// their pipelines: preparing the first prepares them all). `Ok` with nothing to do on
    /// the CPU path. Not covered: the GPU reconstruction kernels of
    /// [`KvLayer::reconstruct`] (a tool, built on its first call). A kernel the device
    /// rejects is [`Error::Shader`].
    fn prepare(&self) -> Result<()> {
        Ok(())
    }
    /// [`KvLayer::prepare`] on a thread of kvpack's own: returns at once with a
    /// [`crate::Preparing`], a future of prepare's result (await it, poll it once per frame,
    /// or [`crate::Preparing::wait`]). Calls made before it finishes stay correct: a pipeline
    /// not yet built is built by the call that needs it (which may then wait for it).
    fn prepare_async(&self) -> crate::Preparing {
        crate::Preparing::ready(self.prepare())
    }
}
