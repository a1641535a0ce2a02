//! `evict_compact` (wgsl/policy/evict_compact.wgsl, msl/policy/evict_compact.metal): one
//! stream's words after an eviction, written to a new buffer word by word as the GPU kernels
//! do (one destination word per invocation). Equal to the store's in-place compaction
//! (`store::compact::compact_stream`, then the later units moved down), padding bits included.

/// The layout of one stream's compaction (the kernels' uniform, `CompactParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactShape {
    /// u32 words per row.
    pub row_words: usize,
    /// Rows per unit (blocks per unit × the stream's rows per block).
    pub unit_rows: usize,
    /// Bits of one head in a row.
    pub head_bits: usize,
    /// KV heads.
    pub heads: usize,
    /// Units each head keeps of the candidates `[0, keep_of)`.
    pub kept: usize,
    /// Units the selection chose from.
    pub keep_of: usize,
    /// Words of the stream before the eviction (whole units, then possibly a partial one:
    /// a side whose blocks are smaller than a unit).
    pub words: usize,
}

/// `src`: the stream's `words` words `[units][unit_rows][row_words]`; `keep`: `[H][kept]` units
/// each head keeps (ascending). Returns the `words − (keep_of − kept)·unit_words` words after.
pub fn evict_compact(src: &[u32], keep: &[u32], s: &CompactShape) -> Vec<u32> {
    let unit_words = s.unit_rows * s.row_words;
    let mut dst = vec![0u32; s.words - (s.keep_of - s.kept) * unit_words];
    for (w, out) in dst.iter_mut().enumerate() {
        let (u, within) = (w / unit_words, w % unit_words);
        if u >= s.kept {
            *out = src[(u - s.kept + s.keep_of) * unit_words + within];
            continue;
        }
        let (r, c) = (within / s.row_words, within % s.row_words);
        let (mut b, end) = (c * 32, c * 32 + 32);
        while b < end {
            let h = b / s.head_bits;
            let (su, stop) = if h < s.heads {
                (
                    keep[h * s.kept + u] as usize,
                    end.min((h + 1) * s.head_bits),
                )
            } else {
                (u, end)
            };
            let word = src[(su * s.unit_rows + r) * s.row_words + c];
            let (lo, hi) = (b - c * 32, stop - c * 32);
            let top = if hi == 32 { u32::MAX } else { (1u32 << hi) - 1 };
            *out |= word & top & !((1u32 << lo) - 1);
            b = stop;
        }
    }
    dst
}
