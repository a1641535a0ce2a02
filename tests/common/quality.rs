//! Perplexity bands: a compressed cache's perplexity against the f16 cache's on the same ids,
//! within a stated band around the measured excess (issue 19, point 5).
//!
//! Every band is `measured excess ± slack` in percent of f16's perplexity. The runs are on the
//! CPU reference, teacher-forced over fixed ids: they are deterministic, and what can move a
//! measured excess without a quality bug is a change of f32 summation order in the forward or
//! the attention (≈ 1e-4 relative on these texts) or a deliberate change of a codec's rounding
//! or defaults, which must re-measure and update the constant. The slack is therefore wide
//! against noise and narrow against bugs: a KIVI scale off by 2×, a wrong group, a wrong bit
//! width or values never leaving the window all move the excess far outside it (the note of
//! issue 19 lists the planted bugs and what each did).

/// One measured point and its allowed band.
#[derive(Clone, Copy, Debug)]
pub struct Band {
    /// The method string the run used.
    pub method: &'static str,
    /// Measured `(ppl / ppl_f16 − 1) · 100` when the constant was set.
    pub measured_pct: f64,
    /// Allowed distance below the measured excess, in percentage points.
    pub below: f64,
    /// Allowed distance above it, in percentage points.
    pub above: f64,
    /// Where the measurement comes from (printed on failure).
    pub source: &'static str,
}

impl Band {
    /// Panics unless `ppl` is within the band around `f16`.
    pub fn check(&self, what: &str, ppl: f64, f16: f64) {
        assert!(
            ppl.is_finite() && f16.is_finite() && f16 > 1.0,
            "{what} {}: perplexity {ppl} (f16 {f16})",
            self.method
        );
        let pct = (ppl / f16 - 1.0) * 100.0;
        let (lo, hi) = (
            self.measured_pct - self.below,
            self.measured_pct + self.above,
        );
        eprintln!(
            "{what} {:>14}: perplexity {ppl:.4} = f16 {f16:.4} {pct:+.3} % (band [{lo:+.2}, {hi:+.2}] %, measured {:+.2} % in {})",
            self.method, self.measured_pct, self.source
        );
        assert!(
            (lo..=hi).contains(&pct),
            "{what} {}: perplexity {ppl:.4} is {pct:+.3} % from f16's {f16:.4}, outside the band [{lo:+.2}, {hi:+.2}] % around the measured {:+.2} % ({})",
            self.method,
            self.measured_pct,
            self.source
        );
    }
}
