//! `kvpack eval --evict`: the Q-Filters Spearman check on the f16 run's recorded q and k
//! (kvpack::policy::spearman), and the perplexity-against-budget plot of the eviction rows.

use std::path::Path;

use kvpack::calib::qfilters;
use kvpack::model::QkvCapture;
use kvpack::policy::{Eviction, Policy, spearman};

use super::eval::Row;

/// The f16 run's keys and, per layer, the attention mass each key received.
pub struct Spearman {
    hq: usize,
    hkv: usize,
    d: usize,
    /// Per layer: keys `[T][Hkv][D]` and the mass `[Hkv][T − 1]`.
    layers: Vec<(Vec<f32>, Vec<Vec<f64>>)>,
    /// Over every (layer, KV head) of the recording: ρ of filters calibrated on the evaluated
    /// text itself and of the mean logit (`kvpack::calib::qfilters::References`), each as
    /// (mean, worst).
    pub references: Option<((f64, f64), (f64, f64))>,
}

/// (mean, worst) of `v`, `None` when it is empty.
fn mean_worst(v: &[f64]) -> Option<(f64, f64)> {
    (!v.is_empty()).then(|| {
        (
            v.iter().sum::<f64>() / v.len() as f64,
            v.iter().copied().fold(f64::INFINITY, f64::min),
        )
    })
}

impl Spearman {
    pub fn new(hq: usize, hkv: usize, d: usize) -> Self {
        Self {
            hq,
            hkv,
            d,
            layers: Vec::new(),
            references: None,
        }
    }

    /// Takes the f16 run's recording (the masses are computed once, for every filter) and
    /// measures the references on it (the spec's 3,000 query rows at most for the in-sample
    /// filters, as `kvpack calibrate`).
    pub fn capture(&mut self, cap: QkvCapture) {
        let (mut own, mut logit) = (Vec::new(), Vec::new());
        self.layers = cap
            .q
            .iter()
            .zip(cap.k)
            .enumerate()
            .map(|(l, (q, k))| {
                let m = spearman::attention_mass(q, &k, self.hq, self.hkv, self.d);
                let c = qfilters::references(q, &k, self.hq, self.hkv, self.d, l, 3000, &m);
                own.extend(c.in_sample.into_iter().flatten());
                logit.extend(c.mean_logit.into_iter().flatten());
                (k, m)
            })
            .collect();
        self.references = mean_worst(&own).zip(mean_worst(&logit));
    }

    /// (mean, worst, flipped mean) over (layer, KV head) for a Q-Filters policy (its own
    /// orientation: a `flip=true` row is scored with −u, its "flipped" with +u).
    pub fn of(
        &self,
        e: &Eviction,
        hkv: usize,
        d: usize,
    ) -> Result<Option<(f64, f64, f64)>, String> {
        let Policy::QFilters {
            calib,
            flip,
            calib_path,
        } = &e.policy
        else {
            return Ok(None);
        };
        let t = calib
            .qfilters
            .as_ref()
            .ok_or_else(|| format!("{}: no Q-Filters tables", calib_path.display()))?;
        let n = hkv * d;
        if t.filters.len() < self.layers.len() * n {
            return Err(format!(
                "{}: filters for {} layers, the model has {}",
                calib_path.display(),
                t.filters.len() / n.max(1),
                self.layers.len()
            ));
        }
        let sign = if *flip { -1.0f32 } else { 1.0 };
        let (mut own, mut flipped) = (Vec::new(), Vec::new());
        for (l, (k, mass)) in self.layers.iter().enumerate() {
            let u: Vec<f32> = t.filters[l * n..(l + 1) * n]
                .iter()
                .map(|x| sign * x)
                .collect();
            let neg: Vec<f32> = u.iter().map(|x| -x).collect();
            own.extend(
                spearman::filter_spearman_with_mass(k, hkv, d, &u, mass)
                    .into_iter()
                    .flatten(),
            );
            flipped.extend(
                spearman::filter_spearman_with_mass(k, hkv, d, &neg, mass)
                    .into_iter()
                    .flatten(),
            );
        }
        Ok(mean_worst(&own)
            .zip(mean_worst(&flipped))
            .map(|((mean, worst), (flipped, _))| (mean, worst, flipped)))
    }
}

/// Perplexity against tokens held per KV head: one line per eviction policy (its rows sorted by
/// tokens held), the f16 perplexity dashed. DejaVu Sans embedded (no system fonts).
pub fn plot(p: &Path, model: &str, tokens: usize, rows: &[Row]) -> Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::FontStyle;

    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", p.display());
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| err(&"the embedded font is invalid"))?;
    // Series: (label, points), the label being the policy and the method it runs over.
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows.iter().filter(|r| r.perplexity.is_finite()) {
        let Some((policy, _)) = &r.eviction else {
            continue;
        };
        let base = r.method.split('+').next().unwrap_or("");
        let flip = if r.method.contains("flip=true") {
            " (flipped)"
        } else {
            ""
        };
        let label = format!("{policy}{flip} over {base}");
        let pt = (r.tokens_held_per_head, r.perplexity);
        match series.iter_mut().find(|s| s.0 == label) {
            Some(s) => s.1.push(pt),
            None => series.push((label, vec![pt])),
        }
    }
    if series.is_empty() {
        return Err(format!(
            "{}: no eviction rows to plot (give --evict)",
            p.display()
        ));
    }
    for s in &mut series {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let f16 = rows.first().map(|r| r.perplexity).filter(|x| x.is_finite());
    let all = series.iter().flat_map(|s| s.1.iter());
    let xmax = all.clone().map(|p| p.0).fold(1.0, f64::max) * 1.08;
    let (mut ylo, mut yhi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
        (lo.min(p.1), hi.max(p.1))
    });
    if let Some(f) = f16 {
        ylo = ylo.min(f);
        yhi = yhi.max(f);
    }
    // A log axis: evicting with a flipped filter can cost orders of magnitude.
    let (y0, y1) = (ylo * 0.9, yhi * 1.15);
    let root = BitMapBackend::new(p, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{model}: perplexity vs tokens held per KV head ({tokens} tokens)"),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, (y0..y1).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("tokens held per KV head (the budget)")
        .y_desc("perplexity (log scale)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    if let Some(f) = f16 {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, f), (xmax, f)],
                6,
                4,
                RGBColor(120, 120, 120).stroke_width(1),
            ))
            .map_err(|e| err(&e))?
            .label("f16, no eviction")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RGBColor(120, 120, 120)));
    }
    for (i, (label, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&pt| Circle::new(pt, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
