//! BENCHMARKS.md's generated tables are exactly what `benches/bench_report.rs` makes of the
//! committed JSON in `benches/results/h200/`: no number in them was typed or edited by hand,
//! and no result file was replaced without regenerating the report.

#[path = "../benches/bench_report.rs"]
#[allow(dead_code, unreachable_pub)]
mod bench_report;

use std::path::Path;

#[test]
fn benchmarks_md_matches_its_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let published = std::fs::read_to_string(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let out = std::env::temp_dir().join(format!("kvpack-benchmarks-{}.md", std::process::id()));
    std::fs::write(&out, &published).expect("temp copy");
    // Relative, as the report was generated (cargo runs tests in the package root); the
    // path is printed into the report.
    assert_eq!(std::env::current_dir().expect("cwd"), root);
    bench_report::run(Path::new("benches/results/h200"), &out).expect("bench_report");
    let regenerated = std::fs::read_to_string(&out).expect("regenerated");
    let _ = std::fs::remove_file(&out);
    if regenerated != published {
        let line = published
            .lines()
            .zip(regenerated.lines())
            .position(|(a, b)| a != b)
            .map_or(
                published.lines().count().min(regenerated.lines().count()),
                |i| i,
            );
        panic!(
            "BENCHMARKS.md differs from what bench_report makes of benches/results/h200 at line {}:\n  published:   {:?}\n  regenerated: {:?}\n(run `cargo bench --bench bench_report -- --results benches/results/h200`)",
            line + 1,
            published.lines().nth(line).unwrap_or(""),
            regenerated.lines().nth(line).unwrap_or("")
        );
    }
}
