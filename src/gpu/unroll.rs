//! Loop unrolling for kvpack's WGSL, applied when a kernel is composed: naga emits every loop
//! as a loop, and an array indexed by a loop variable may then be placed in memory by a driver
//! that does not unroll it (a private accumulator becomes a stack array: many times slower).
//! A loop written
//! ```text
//! // @unroll N
//! for (var i = 0u; i < BOUND; i++) { BODY }
//! ```
//! becomes `{ let i = 0u; BODY } { let i = 1u; BODY } ...` for every i < BOUND. BOUND is a
//! literal (`8u`) or the name of a module-scope `const` (its value comes from naga's constant
//! evaluator over the composed source); N is the largest BOUND the kernel is written for (a
//! bound above N is a kernel bug, as is a body that uses `break` or `continue`). Nested marked
//! loops unroll too. A marker that cannot be expanded leaves a token that no WGSL parser
//! accepts, so tests/shaders.rs catches it.
//!
//! A marker may carry a tag (`// @unroll 16 kch`): for measuring, `KVPACK_UNROLL_SKIP=kch,...`
//! leaves the loops of the listed tags as loops (benches/pipeline_stats.rs compares register
//! counts with and without).

use std::collections::HashMap;

const MARKER: &str = "// @unroll ";
const BAD: &str = "@unroll_marker_not_expanded ";

/// Expands every `// @unroll N` loop of `src`, reading constant bounds from `src` itself.
pub fn unroll(src: &str) -> String {
    if !src.contains(MARKER) {
        return src.to_string();
    }
    let skip: Vec<String> = std::env::var("KVPACK_UNROLL_SKIP")
        .map(|v| v.split(',').map(|t| t.trim().to_string()).collect())
        .unwrap_or_default();
    expand_all(
        src,
        &Ctx {
            consts: constants(src),
            skip,
        },
    )
}

struct Ctx {
    consts: HashMap<String, u64>,
    /// Tags whose loops stay loops.
    skip: Vec<String>,
}

/// The module-scope integer constants of `src` (empty when it does not parse: the unexpanded
/// markers then fail wherever the source is compiled).
fn constants(src: &str) -> HashMap<String, u64> {
    use naga::{Expression, Literal};
    let Ok(module) = naga::front::wgsl::parse_str(src) else {
        return HashMap::new();
    };
    let mut out = HashMap::new();
    for (_, c) in module.constants.iter() {
        let Some(name) = &c.name else { continue };
        let v = match module.global_expressions[c.init] {
            Expression::Literal(Literal::U32(v)) => Some(u64::from(v)),
            Expression::Literal(Literal::I32(v)) => u64::try_from(v).ok(),
            Expression::Literal(Literal::AbstractInt(v)) => u64::try_from(v).ok(),
            _ => None,
        };
        if let Some(v) = v {
            out.insert(name.clone(), v);
        }
    }
    out
}

fn expand_all(src: &str, cx: &Ctx) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find(MARKER) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match expand(rest, cx) {
            Some((text, used)) => {
                out.push_str(&text);
                rest = &rest[used..];
            }
            None => {
                out.push_str(BAD);
                rest = &rest[MARKER.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of a loop bound: `8u`, `8`, or a constant's name.
fn bound_value(bound: &str, consts: &HashMap<String, u64>) -> Option<u64> {
    let lit = bound.strip_suffix('u').unwrap_or(bound);
    lit.parse().ok().or_else(|| consts.get(bound).copied())
}

/// One marked loop at the start of `s`: its expansion and the bytes it replaces.
fn expand(s: &str, cx: &Ctx) -> Option<(String, usize)> {
    let line_end = s.find('\n')?;
    let mut words = s[MARKER.len()..line_end].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    // (No `let` chain here: rust-version 1.87 predates them.)
    if words
        .next()
        .is_some_and(|tag| cx.skip.iter().any(|t| t == tag))
    {
        // Left as written: the marker is a comment.
        return Some((s[..line_end].to_string(), line_end));
    }
    let after = &s[line_end + 1..];
    let lead = after.len() - after.trim_start().len();
    let head = after.trim_start();
    let open = head.find('{')?;
    let header = head[..open].trim();
    // for (var i = 0u; i < BOUND; i++)
    let inner = header.strip_prefix("for (")?.strip_suffix(')')?;
    let parts: Vec<&str> = inner.split(';').map(str::trim).collect();
    let [init, cond, step] = parts[..] else {
        return None;
    };
    let var = init.strip_prefix("var ")?.split('=').next()?.trim();
    if init.split('=').nth(1)?.trim() != "0u" || step != format!("{var}++") {
        return None;
    }
    let bound = cond.strip_prefix(var)?.trim().strip_prefix('<')?.trim();
    let count = bound_value(bound, &cx.consts).filter(|&b| b <= n)?;
    // The body: balanced braces from `open`.
    let body_start = open + 1;
    let mut depth = 1;
    let mut end = None;
    for (i, c) in head[body_start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(body_start + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let end = end?;
    let raw = &head[body_start..end];
    if raw.contains("break") || raw.contains("continue") {
        return None;
    }
    let body = expand_all(raw, cx);
    let mut text = String::new();
    for k in 0..count {
        text.push_str(&format!("{{ let {var} = {k}u; {body} }}\n"));
    }
    Some((text, line_end + 1 + lead + end + 1))
}

#[cfg(test)]
mod tests {
    use super::unroll;

    #[test]
    fn unrolls_nested_marked_loops_to_their_constant_bounds() {
        let src = "const K: u32 = 2u + 1u;\nfn f() {\nvar x: array<array<u32, 3>, 2>;\n// @unroll 2\nfor (var j = 0u; j < 2u; j++) {\n  // @unroll 4\n  for (var i = 0u; i < K; i++) { x[j][i] = 1u; }\n}\n}";
        let out = unroll(src);
        assert_eq!(out.matches("let j =").count(), 2);
        assert_eq!(
            out.matches("let i =").count(),
            6,
            "K = 3 copies per j: {out}"
        );
        assert!(!out.contains("for ("), "{out}");
        assert!(naga::front::wgsl::parse_str(&out).is_ok(), "{out}");
        // A bound above N, an unknown bound, a loop that breaks, or no loop: not expanded.
        for bad in [
            "const K: u32 = 5u;\n// @unroll 4\nfor (var i = 0u; i < K; i++) { }",
            "// @unroll 4\nfor (var i = 0u; i < N; i++) { }",
            "// @unroll 4\nfor (var i = 0u; i < 4u; i++) { break; }",
            "// @unroll 4\nlet x = 1;",
        ] {
            assert!(unroll(bad).contains(super::BAD), "{bad}");
        }
        // A tagged marker unrolls unless its tag is skipped (only this test sets the variable).
        let tagged = "// @unroll 2 t1\nfor (var i = 0u; i < 2u; i++) { }";
        assert!(!unroll(tagged).contains("for ("));
        // SAFETY: no other test reads KVPACK_UNROLL_SKIP.
        unsafe { std::env::set_var("KVPACK_UNROLL_SKIP", "t0,t1") };
        let kept = unroll(tagged);
        unsafe { std::env::remove_var("KVPACK_UNROLL_SKIP") };
        assert!(
            kept.contains("for (var i") && kept.contains("@unroll 2 t1"),
            "{kept}"
        );
    }
}
