//! The README's eviction table (`<!-- generated:eviction -->`) is generated from the committed
//! JSON of `scripts/eval-eviction.sh` (`benches/results/eviction/*.json`, written by
//! `kvpack eval --evict`): no number in it is typed. After a new run, regenerate the block with
//! `KVPACK_BLESS=1 cargo test --test eviction_report`.

use std::path::Path;

/// The JSON files, in table order (the later files' f16 rows without eviction are the same
/// reference and are skipped, as are rows already listed).
const FILES: [&str; 3] = [
    "benches/results/eviction/smollm2-story512-f16.json",
    "benches/results/eviction/smollm2-story512-window.json",
    "benches/results/eviction/smollm2-story512-kivi4.json",
];

fn num(r: &serde_json::Value, k: &str) -> Option<f64> {
    r.get(k).and_then(serde_json::Value::as_f64)
}

/// The markdown table of every row of `FILES`.
fn table(root: &Path) -> String {
    let mut out = String::from(
        "| method + policy | tokens held / KV head | bits/value held | perplexity | Δ vs f16 | mean KL | top-1 | Spearman mean / worst (flipped) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut seen: Vec<String> = Vec::new();
    for f in FILES {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("a JSON list");
        for r in rows {
            let method = r["method"].as_str().expect("method").to_string();
            // The calibration's path is the script's; the table names it once below.
            let shown = method
                .split(',')
                .filter(|p| !p.starts_with("calib="))
                .collect::<Vec<_>>()
                .join(",");
            if seen.contains(&shown) {
                continue;
            }
            seen.push(shown.clone());
            let f = |k: &str| num(&r, k).unwrap_or_else(|| panic!("{f}: {method}: no {k}"));
            let delta = if r["policy"].is_null() && shown == "f16" {
                "—".to_string()
            } else {
                format!("{:+.2} %", f("delta_pct"))
            };
            let sp = match (num(&r, "spearman_mean"), num(&r, "spearman_worst")) {
                (Some(m), Some(w)) => format!(
                    "{m:+.3} / {w:+.3} ({:+.3})",
                    num(&r, "spearman_flipped_mean").unwrap_or(f64::NAN)
                ),
                _ => String::new(),
            };
            out.push_str(&format!(
                "| {shown} | {:.0} | {:.2} | {:.3} | {delta} | {:.4} | {:.3} | {sp} |\n",
                f("tokens_held_per_head"),
                f("bits_per_value"),
                f("perplexity"),
                f("kl"),
                f("top1"),
            ));
        }
    }
    out
}

#[test]
fn readme_eviction_table_is_generated_from_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let (open, close) = (
        "<!-- generated:eviction -->\n",
        "<!-- /generated:eviction -->",
    );
    let start = readme
        .find(open)
        .expect("README has the generated:eviction block")
        + open.len();
    let end = readme[start..].find(close).expect("the block's end") + start;
    let want = table(root);
    if std::env::var("KVPACK_BLESS").is_ok_and(|v| v == "1") {
        let new = format!("{}{want}{}", &readme[..start], &readme[end..]);
        std::fs::write(&readme_path, new).expect("write README.md");
        return;
    }
    assert_eq!(
        readme[start..end],
        want,
        "README's eviction table is not what the JSON gives (KVPACK_BLESS=1 cargo test --test eviction_report)"
    );
}
