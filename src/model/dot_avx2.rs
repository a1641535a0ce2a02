//! The forward pass's dot products with AVX2 + FMA intrinsics, for x86-64 CPUs that have them
//! (the caller checks at run time).
//!
//! They compute exactly what the portable code in [`super::forward`] computes with `FMA = true`
//! (eight lanes, lane `l` accumulating `fma(row[i + l], x[i + l], acc[l])` over `i` in steps of
//! 8, the lanes summed in order, the tail added without fusing), so results do not depend on
//! which runs; written with intrinsics because LLVM vectorizes the portable loops only at
//! opt-level 3, and the tests' profile is opt-level 2, where the scalar code is several times
//! slower.

use std::arch::x86_64::{
    __m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
};

const LANES: usize = 8;

/// An all-zero vector (`_mm256_setzero_ps` is a safe call only from Rust 1.87 on).
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(unused_unsafe)]
fn zero() -> __m256 {
    // SAFETY: AVX is enabled for this function.
    unsafe { _mm256_setzero_ps() }
}

/// The lanes of `v` summed in order, `((v0 + v1) + v2) + …`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn lane_sum(v: __m256) -> f32 {
    let mut a = [0f32; LANES];
    // SAFETY: `a` holds 8 floats.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
    a.iter().sum()
}

/// `out[q] = row · x[q]` for the `TILE` rows of `x` `[TILE, n]` (`row.len() == n`), one pass
/// over `row`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dot_tile<const TILE: usize>(row: &[f32], x: &[f32], n: usize, out: &mut [f32]) {
    assert!(row.len() >= n && x.len() >= TILE * n && out.len() >= TILE);
    let full = n / LANES * LANES;
    let mut acc = [zero(); TILE];
    // Row pointers, so that the hot loop has no index arithmetic to check (the tests' profile
    // checks overflow) and its loop over the tile unrolls into registers.
    let xp: [*const f32; TILE] = std::array::from_fn(|q| x[q * n..].as_ptr());
    let wp = row.as_ptr();
    let mut i = 0;
    while i < full {
        // SAFETY: i + 8 <= full <= n, and row has n values and x has TILE rows of n (asserted).
        unsafe {
            let w = _mm256_loadu_ps(wp.add(i));
            for q in 0..TILE {
                acc[q] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp[q].add(i)), acc[q]);
            }
        }
        i += LANES;
    }
    for (q, (o, a)) in out.iter_mut().zip(acc).enumerate() {
        let xr = &x[q * n..(q + 1) * n];
        let mut s = lane_sum(a);
        for j in full..n {
            s += row[j] * xr[j];
        }
        *o = s;
    }
}

/// `a · b` with sixteen accumulators (two vectors), summed in lane order, tail unfused.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n / (2 * LANES) * (2 * LANES);
    let (mut lo, mut hi) = (zero(), zero());
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n <= both lengths.
        unsafe {
            let (a0, b0) = (ap.add(i), bp.add(i));
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(a0), _mm256_loadu_ps(b0), lo);
            hi = _mm256_fmadd_ps(
                _mm256_loadu_ps(a0.add(LANES)),
                _mm256_loadu_ps(b0.add(LANES)),
                hi,
            );
        }
        i += 2 * LANES;
    }
    let mut acc = [0f32; 2 * LANES];
    // SAFETY: `acc` holds 16 floats.
    unsafe {
        _mm256_storeu_ps(acc.as_mut_ptr(), lo);
        _mm256_storeu_ps(acc.as_mut_ptr().add(LANES), hi);
    }
    let mut s: f32 = acc.iter().sum();
    for j in full..n {
        s += a[j] * b[j];
    }
    s
}

/// `out[j] = row · x[j]` for every row j of `x` `[out.len(), n]`: eight rows of x per pass over
/// `row`, then four, then one at a time (the portable `dot_row_impl::<true>`'s order).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_row(row: &[f32], x: &[f32], n: usize, out: &mut [f32]) {
    let t = out.len();
    let mut j = 0;
    while j + 8 <= t {
        dot_tile::<8>(row, &x[j * n..(j + 8) * n], n, &mut out[j..j + 8]);
        j += 8;
    }
    while j + 4 <= t {
        dot_tile::<4>(row, &x[j * n..(j + 4) * n], n, &mut out[j..j + 4]);
        j += 4;
    }
    for jj in j..t {
        out[jj] = dot(row, &x[jj * n..(jj + 1) * n]);
    }
}
