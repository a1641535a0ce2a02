//! KIVI kernels one by one, on every path including the MSL emulator: the four kernels run
//! from their dispatch plans with poisoned outputs and a destination offset inside the
//! segment, inputs split between the residual ring and the incoming rows, and are compared
//! with the CPU reference. The emulated MSL must be bit-identical to the reference; WGSL on a
//! GPU follows the spec's cross-backend rule (±1 codes only at half-integers, the FMA bound
//! on reconstructions). The CPU target checks the reference against a direct per-element
//! oracle of the spec.

mod common;

use common::Target;
use common::kivi_plans::{Case, case, check, on_target, reference};
use half::f16;
use kvpack::KiviConfig;
use kvpack::codecs::kivi::Layout;
use kvpack::codecs::kivi::plans::rows_to_words;

fn kivi_kernels_match_reference(t: &Target) {
    let mut rng = common::rng("kivi_kernels_match_reference");
    let mut boundary = 0;
    let configs = common::kivi_plans::configs();
    for (cfg, h, d, blocks, from_ring, dst_blocks, amp) in configs {
        let c = case(&mut rng, &cfg, h, d, blocks, from_ring, dst_blocks, amp);
        let what = format!(
            "kb={} kg={} vb={} vg={} H={h} D={d} blocks={blocks} ring={from_ring} {:?}",
            cfg.key_bits, cfg.key_group, cfg.value_bits, cfg.value_group, cfg.params
        );
        boundary += check(t, &c, &what);
    }
    eprintln!("kivi_kernels[{}]: {boundary} boundary codes", t.name());
}
parity_tests!(kivi_kernels_match_reference, msl, gl);

/// b = 1 with f16 parameters and a range of 120000: the status flag is raised on every path.
fn kivi_kernels_flag_f16_overflow(t: &Target) {
    let cfg = KiviConfig::uniform(1, 4, 0);
    let l = Layout::new(1, 8, &cfg).expect("layout");
    let mut x: Vec<f16> = (0..4 * 8).map(|i| f16::from_f32(i as f32)).collect();
    x[0] = f16::from_f32(-60000.0);
    x[8] = f16::from_f32(60000.0);
    let c = Case {
        l,
        q_old: 0,
        n: 4,
        t_old: 0,
        dst_tokens: 0,
        ring: vec![0; l.ring_tokens() * 4],
        incoming: rows_to_words(&l, &x),
        x: x.iter().map(|v| v.to_f32()).collect(),
    };
    assert_eq!(reference(&c).status, 1);
    if t.is_gpu() || matches!(t, Target::MslEmulated(_)) {
        assert_eq!(
            on_target(t, &c).status,
            1,
            "{}: overflow not flagged",
            t.name()
        );
    }
}
parity_tests!(kivi_kernels_flag_f16_overflow, msl, gl);
