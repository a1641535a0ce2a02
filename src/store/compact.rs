//! Compaction of one side's stored words after an eviction (docs/contracts/qfilters.md,
//! "Scoring and eviction"): every head keeps its own units (a unit is `U` tokens, a whole
//! number of the side's blocks), and the kept units' bits move down to the front of the
//! stream, head by head, in their order; nothing is decoded or re-encoded. The per-head bit
//! ranges come from each stream's layout ([`crate::codec::Stream`]: `rows` rows per block,
//! head h at bits `[h·head_bits, (h+1)·head_bits)` of a row).
//!
//! CPU only for now; the layout is the same on the GPU, where a compaction kernel would move
//! the same bits.

use crate::codec::Stream;

/// Copies `n` bits from `src` at bit `from` to `dst` at bit `to` (LSB-first words).
pub(crate) fn copy_bits(dst: &mut [u32], to: usize, src: &[u32], from: usize, n: usize) {
    if to.is_multiple_of(32) && from.is_multiple_of(32) && n.is_multiple_of(32) {
        let (a, b, w) = (to / 32, from / 32, n / 32);
        dst[a..a + w].copy_from_slice(&src[b..b + w]);
        return;
    }
    let mut done = 0;
    while done < n {
        let (s, d) = (from + done, to + done);
        // The widest piece that stays inside one source word and one destination word.
        let take = (n - done).min(32 - s % 32).min(32 - d % 32);
        let mask = if take == 32 {
            u32::MAX
        } else {
            (1u32 << take) - 1
        };
        let bits = (src[s / 32] >> (s % 32)) & mask;
        let w = &mut dst[d / 32];
        *w = (*w & !(mask << (d % 32))) | (bits << (d % 32));
        done += take;
    }
}

/// Moves the kept units of one stream down, in place: `words` holds whole blocks of
/// `stream`; a unit is `blocks_per_unit` blocks; `keep[h]` lists the units head h keeps, in
/// increasing order (every head keeps the same number). Afterwards unit i of head h holds
/// what unit `keep[h][i]` held; the caller truncates the stream to the kept units. In place
/// is safe: `keep[h][i] ≥ i`, and ascending, so no source is overwritten before it is read.
pub(crate) fn compact_stream(
    words: &mut [u32],
    stream: &Stream,
    heads: usize,
    blocks_per_unit: usize,
    keep: &[Vec<usize>],
) {
    let row_words = stream.words_per_block / stream.rows;
    let unit_rows = blocks_per_unit * stream.rows;
    for (h, units) in keep.iter().enumerate().take(heads) {
        for (i, &u) in units.iter().enumerate() {
            if u == i {
                continue;
            }
            debug_assert!(u > i);
            for r in 0..unit_rows {
                let (dst_row, src_row) = (i * unit_rows + r, u * unit_rows + r);
                let bit = h * stream.head_bits;
                // Source and destination rows never overlap (different rows).
                let (lo, hi) = words.split_at_mut(src_row * row_words);
                copy_bits(
                    &mut lo[dst_row * row_words..],
                    bit,
                    &hi[..row_words],
                    bit,
                    stream.head_bits,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::policy::evict_compact::{CompactShape, evict_compact};
    use crate::store::memory::StreamKind;

    #[test]
    fn the_kernels_twin_equals_the_in_place_compaction() {
        // Streams whose heads straddle words (head_bits 24, 40), whole words, halves, and
        // several rows per block; units of 1 and 2 blocks; padding bits set.
        let mut x = 0x1234_5678u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let streams = [
            Stream::halves("norms", StreamKind::Params, 3, 1),
            Stream::words("codes", StreamKind::Codes, 2, 4, 3),
            Stream {
                name: "odd",
                kind: StreamKind::Codes,
                words_per_block: 2 * 5,
                rows: 2,
                head_bits: 24,
            },
            Stream {
                name: "wide",
                kind: StreamKind::Codes,
                words_per_block: 4,
                rows: 1,
                head_bits: 40,
            },
        ];
        let heads = [3, 2, 6, 3];
        for (st, &h) in streams.iter().zip(&heads) {
            for bpu in [1, 2] {
                let units = 9;
                let keep_of = 7;
                let unit_words = bpu * st.words_per_block;
                let words: Vec<u32> = (0..units * unit_words).map(|_| next()).collect();
                // Each head keeps 4 of the first 7 units (its own choice).
                let keep: Vec<Vec<usize>> = (0..h)
                    .map(|hh| {
                        let mut k: Vec<usize> = (0..keep_of).collect();
                        for i in 0..3 {
                            let at = (next() as usize + hh + i) % k.len();
                            k.remove(at);
                        }
                        k
                    })
                    .collect();
                let mut want = words.clone();
                compact_stream(&mut want, st, h, bpu, &keep);
                want.copy_within(keep_of * unit_words.., 4 * unit_words);
                want.truncate(want.len() - 3 * unit_words);
                let flat: Vec<u32> = keep.iter().flatten().map(|&u| u as u32).collect();
                let shape = CompactShape {
                    row_words: st.words_per_block / st.rows,
                    unit_rows: bpu * st.rows,
                    head_bits: st.head_bits,
                    heads: h,
                    kept: 4,
                    keep_of,
                    words: units * unit_words,
                };
                assert_eq!(
                    evict_compact(&words, &flat, &shape),
                    want,
                    "{} bpu {bpu}",
                    st.name
                );
            }
        }
    }

    #[test]
    fn copy_bits_matches_a_bit_by_bit_copy() {
        let src: Vec<u32> = (0..6u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9) ^ 0xA5A5_0F0F)
            .collect();
        for (to, from, n) in [
            (0, 0, 64),
            (16, 48, 16),
            (3, 37, 70),
            (31, 1, 33),
            (0, 16, 16),
        ] {
            let mut a = vec![0xFFFF_FFFFu32; 6];
            let mut b = a.clone();
            copy_bits(&mut a, to, &src, from, n);
            for k in 0..n {
                let bit = (src[(from + k) / 32] >> ((from + k) % 32)) & 1;
                let w = &mut b[(to + k) / 32];
                *w = (*w & !(1 << ((to + k) % 32))) | (bit << ((to + k) % 32));
            }
            assert_eq!(a, b, "to {to} from {from} n {n}");
        }
    }

    #[test]
    fn halves_per_head_move_independently() {
        // 3 heads of one f16 each (2 words per block), 4 blocks; head 0 keeps units 1 and 3,
        // head 1 keeps 0 and 2, head 2 keeps 2 and 3.
        let s = Stream::halves("norms", StreamKind::Params, 3, 1);
        let half = |b: usize, h: usize| (100 * b + h) as u32;
        let mut words = vec![0u32; 8];
        for b in 0..4 {
            for h in 0..3 {
                copy_bits(&mut words, b * 64 + h * 16, &[half(b, h)], 0, 16);
            }
        }
        compact_stream(&mut words, &s, 3, 1, &[vec![1, 3], vec![0, 2], vec![2, 3]]);
        let got = |b: usize, h: usize| {
            let mut w = [0u32];
            copy_bits(&mut w, 0, &words, b * 64 + h * 16, 16);
            w[0]
        };
        assert_eq!(
            [
                got(0, 0),
                got(1, 0),
                got(0, 1),
                got(1, 1),
                got(0, 2),
                got(1, 2)
            ],
            [
                half(1, 0),
                half(3, 0),
                half(0, 1),
                half(2, 1),
                half(2, 2),
                half(3, 2)
            ]
        );
    }
}
