//! The random streams of docs/contracts/turboquant.md, "Random signs and matrices": one
//! SplitMix64 generator per (seed, layer, head, stream), the ±1 sign vectors it gives, and the
//! Gaussian tables of the Prod and QJL sketches. Generated on the CPU only (WGSL and MSL have
//! no u64/f64); the GPU reads the tables.

/// The cache option's default seed ("kvpak" in ASCII).
pub const DEFAULT_SEED: u64 = 0x6B_7670_616B;

/// Stream of the key rotation's signs (one vector per layer and KV head).
pub const STREAM_KEY_SIGNS: u64 = 0;
/// Stream of the value rotation's signs (one vector per layer and KV head).
pub const STREAM_VALUE_SIGNS: u64 = 1;
/// Stream of TurboQuant-Prod's Gaussian sketch (one table per layer, head = 0).
pub const STREAM_PROD_SKETCH: u64 = 2;
/// Stream of QJL's Gaussian sketch (docs/contracts/qjl.md; one table per layer, head = 0).
pub const STREAM_QJL_SKETCH: u64 = 3;
/// Stream of VecInfer's key k-means (docs/contracts/vecinfer.md).
pub const STREAM_VECINFER_KMEANS_KEYS: u64 = 4;
/// Stream of VecInfer's value k-means (docs/contracts/vecinfer.md).
pub const STREAM_VECINFER_KMEANS_VALUES: u64 = 5;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 with the spec's initial state. All arithmetic is wrapping u64.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// `state0 = seed ^ (layer·0x9E3779B97F4A7C15) ^ (head·0xC2B2AE3D27D4EB4F)
    /// ^ (stream·0x165667B19E3779F9)`.
    pub fn new(seed: u64, layer: u64, head: u64, stream: u64) -> Self {
        let state = seed
            ^ layer.wrapping_mul(GOLDEN)
            ^ head.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ stream.wrapping_mul(0x1656_67B1_9E37_79F9);
        Self { state }
    }

    /// The spec's `next()`: advance the state by the golden gamma, then mix it.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform in (0, 1]: `((z >> 11) + 0.5) · 2^−53` in f64 (never 0, so `ln` is finite).
    pub fn next_uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }
}

/// An endless stream of `next()` outputs.
impl Iterator for SplitMix64 {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        Some(self.next_u64())
    }
}

/// The sign vector of (seed, layer, head, stream): `s_i = +1.0` if bit 63 of the i-th output
/// is 0, else `−1.0`, for i = 0..p.
pub fn signs(seed: u64, layer: u64, head: u64, stream: u64, p: usize) -> Vec<f32> {
    SplitMix64::new(seed, layer, head, stream)
        .take(p)
        .map(|z| if z >> 63 == 0 { 1.0 } else { -1.0 })
        .collect()
}

/// The same signs as P bits, LSB-first in u32 words (docs/contracts/bitpack.md with b = 1):
/// bit i is bit 63 of the i-th output, i.e. 1 where `s_i = −1` (the f32 sign bit to XOR in).
/// `ceil(p / 32)` words, unused high bits of the last word zero.
pub fn signs_packed(seed: u64, layer: u64, head: u64, stream: u64, p: usize) -> Vec<u32> {
    let mut words = vec![0u32; p.div_ceil(32)];
    for (i, z) in SplitMix64::new(seed, layer, head, stream)
        .take(p)
        .enumerate()
    {
        words[i / 32] |= ((z >> 63) as u32) << (i % 32);
    }
    words
}

/// The sign vectors of `heads` KV heads of one layer and stream: `[heads][p]`, row h from
/// (seed, layer, h, stream).
pub fn sign_table(seed: u64, layer: u64, heads: usize, stream: u64, p: usize) -> Vec<f32> {
    (0..heads as u64)
        .flat_map(|h| signs(seed, layer, h, stream, p))
        .collect()
}

/// A Gaussian table `[rows][cols]` (row-major) of (seed, layer, head = 0, stream): uniforms
/// from consecutive outputs, Box–Muller in f64 on pairs (u1, u2):
/// `g1 = √(−2 ln u1)·cos(2π u2)`, `g2 = √(−2 ln u1)·sin(2π u2)`, entries g1 then g2, each
/// rounded to f32. With an odd entry count the last pair's g2 is dropped.
pub fn gaussian_table(seed: u64, layer: u64, stream: u64, rows: usize, cols: usize) -> Vec<f32> {
    let n = rows * cols;
    let mut rng = SplitMix64::new(seed, layer, 0, stream);
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (u1, u2) = (rng.next_uniform(), rng.next_uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * u2;
        out.push((r * theta.cos()) as f32);
        out.push((r * theta.sin()) as f32);
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // The literals below were computed once with an independent pure-Python transcription of
    // the spec (Python ints masked to 64 bits, `math.log/cos/sin`, f32 rounding through
    // `struct.pack('f', ..)`), not with this code.

    #[test]
    fn seed_zero_is_textbook_splitmix64() {
        // seed 0, layer 0, head 0, stream 0 starts from state 0: the published sequence.
        let got: Vec<u64> = SplitMix64::new(0, 0, 0, 0).take(3).collect();
        assert_eq!(
            got,
            [0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f]
        );
    }

    #[test]
    fn first_outputs_default_seed() {
        let got: Vec<u64> = SplitMix64::new(DEFAULT_SEED, 2, 1, STREAM_KEY_SIGNS)
            .take(4)
            .collect();
        assert_eq!(
            got,
            [
                0x870d784b5c057f73,
                0x698432f8e250d850,
                0x2ccf5fdc0f11bb47,
                0x6174f29007b341cf
            ]
        );
    }

    #[test]
    fn signs_and_packed_signs() {
        let want = [
            -1., 1., 1., 1., 1., -1., -1., -1., 1., -1., -1., 1., -1., 1., 1., -1.,
        ];
        let s = signs(DEFAULT_SEED, 2, 1, STREAM_KEY_SIGNS, 16);
        assert_eq!(s, want);
        let w = signs_packed(DEFAULT_SEED, 2, 1, STREAM_KEY_SIGNS, 16);
        assert_eq!(w, [0b1001_0110_1110_0001]);
        // Longer vectors: packed bit i agrees with sign i, unused bits zero.
        let s = signs(DEFAULT_SEED, 3, 0, STREAM_VALUE_SIGNS, 70);
        let w = signs_packed(DEFAULT_SEED, 3, 0, STREAM_VALUE_SIGNS, 70);
        assert_eq!(w.len(), 3);
        for (i, &si) in s.iter().enumerate() {
            assert_eq!((w[i / 32] >> (i % 32)) & 1 == 1, si < 0.0, "bit {i}");
        }
        assert_eq!(w[2] >> 6, 0);
    }

    #[test]
    fn gaussian_first_entries() {
        let g = gaussian_table(DEFAULT_SEED, 5, STREAM_QJL_SKETCH, 2, 3);
        let bits: Vec<u32> = g.iter().map(|x| x.to_bits()).collect();
        assert_eq!(
            bits,
            [
                0xbe13695c, 0xbf62b5ca, 0xbe13e239, 0xbf16c29f, 0x3fc41538, 0x3fbc7647
            ]
        );
        // An odd count is a prefix of the even one.
        let g5 = gaussian_table(DEFAULT_SEED, 5, STREAM_QJL_SKETCH, 1, 5);
        assert_eq!(g5[..], g[..5]);
    }

    #[test]
    fn deterministic_and_distinct_streams() {
        let a = gaussian_table(DEFAULT_SEED, 1, STREAM_PROD_SKETCH, 8, 8);
        assert_eq!(a, gaussian_table(DEFAULT_SEED, 1, STREAM_PROD_SKETCH, 8, 8));
        assert_ne!(a, gaussian_table(DEFAULT_SEED, 1, STREAM_QJL_SKETCH, 8, 8));
        assert_ne!(a, gaussian_table(DEFAULT_SEED, 2, STREAM_PROD_SKETCH, 8, 8));
        assert_ne!(
            a,
            gaussian_table(DEFAULT_SEED + 1, 1, STREAM_PROD_SKETCH, 8, 8)
        );
        let s = sign_table(DEFAULT_SEED, 4, 3, STREAM_KEY_SIGNS, 64);
        assert_eq!(
            s[64..128],
            signs(DEFAULT_SEED, 4, 1, STREAM_KEY_SIGNS, 64)[..]
        );
        assert_ne!(s[..64], s[64..128]);
    }

    #[test]
    fn gaussian_moments() {
        let g = gaussian_table(DEFAULT_SEED, 0, STREAM_QJL_SKETCH, 1000, 1000);
        let n = g.len() as f64;
        let mean = g.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = g
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        let kurt = g
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(4))
            .sum::<f64>()
            / n
            / var
            / var;
        eprintln!("gaussian table 10^6: mean {mean:.5}, var {var:.5}, kurtosis {kurt:.4}");
        // Standard errors at n = 10^6: mean 0.001, var 0.0014, kurtosis 0.005; 5σ bounds.
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((var - 1.0).abs() < 0.007, "var {var}");
        assert!((kurt - 3.0).abs() < 0.025, "kurtosis {kurt}");
        // Signs: about half negative.
        let s = signs(DEFAULT_SEED, 0, 0, STREAM_KEY_SIGNS, 100_000);
        let neg = s.iter().filter(|&&x| x < 0.0).count() as f64 / 1e5;
        assert!((neg - 0.5).abs() < 0.008, "negative fraction {neg}");
    }
}
