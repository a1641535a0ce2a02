//! Quickstart: describe the best context on this machine, pack and unpack codes on its best
//! path, check the round trip against the CPU reference, and print what ran where.
//!
//! `cargo run --release --example quickstart`

use std::time::Instant;

fn main() -> Result<(), kvpack::Error> {
    let ctx = kvpack::Context::headless()?;
    println!("{}", ctx.describe());

    let cpu = kvpack::BitPacker::new(&kvpack::Context::cpu())?;
    let packer = kvpack::BitPacker::new(&ctx)?;
    // Deterministic pseudo-random codes (a small LCG keeps the example dependency-free).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let n = 1_000_003;
    for bits in [2u32, 3, 4, 8] {
        let codes: Vec<u8> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 33) as u8) & ((1u16 << bits) - 1) as u8
            })
            .collect();
        let t = Instant::now();
        let words = packer.pack(&codes, bits)?;
        let back = packer.unpack(&words, bits, n)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let reference = cpu.pack(&codes, bits)?;
        let ok = back == codes && words == reference;
        println!(
            "bits {bits}: {n} codes -> {} words ({:.2}x smaller than bytes), pack on {}, unpack on {}, \
             round trip {} and bit-identical to the CPU reference: {} ({ms:.1} ms incl. upload/readback)",
            words.len(),
            n as f64 / (words.len() * 4) as f64,
            packer.pack_path(),
            packer.unpack_path(),
            if back == codes { "exact" } else { "WRONG" },
            words == reference,
        );
        if !ok {
            eprintln!("quickstart: mismatch at {bits} bits");
            std::process::exit(1);
        }
    }
    Ok(())
}
