//! Cooperative matrices emulated lane by lane: the tensor-core prefill kernel
//! (wgsl/attend/attend_prefill_tc.wgsl) rewritten so that it runs on a device without them
//! (lavapipe in CI), for testing its logic (tiles, masks, rings, rescales, padded strides)
//! against the CPU reference. Correct and slow; never chosen by kvpack on its own:
//! [`crate::Context::with_emulated_tensor_cores`] asks for it.
//!
//! The rewrite works on the composed WGSL, whose `// @unroll` loops then stay loops:
//! - `TcA` / `TcB` become `array<f16, 8>` and `TcC` `array<f32, 8>`: lane l of a 32-lane
//!   subgroup holds row l / 2, columns 8·(l % 2) .. + 7 of a 16 × 16 matrix;
//! - `coopLoadT<T>(&arr[at], stride)` / `coopLoad` (row- / column-major) and
//!   `coopStoreT(m, &arr[at], stride)` / `coopStore` become calls of functions generated per
//!   array that read or write the lane's 8 elements;
//! - `coopMultiplyAdd(a, b, c)` becomes a 16 × 16 × 16 product with f32 accumulation through
//!   the subgroup's share of a workgroup scratch array (4 KiB for 128 invocations), between
//!   two workgroup barriers: the kernel must call every such operation in workgroup-uniform
//!   control flow (the tensor-core prefill kernel does; naga checks the barriers' uniformity).
//!   f16 products are exact in f32; only the order of the sums may differ from a tensor
//!   core's;
//! - `tc_axpy(x, y, a)` (the kernels' x + y·a on accumulators, a textual form because
//!   WGSL's matrix operators have no array counterpart) becomes a function on arrays; on real
//!   cooperative matrices [`expand_axpy`] turns it into the expression itself;
//! - `@builtin(subgroup_id) sg` and `@builtin(subgroup_invocation_id) sl` become
//!   `lid / 32` and `lid % 32` (the kernel's mapping assumes 32-wide subgroups; its only
//!   cross-lane step, `subgroupShuffleXor(x, 1u)`, pairs neighbouring invocations, which share
//!   a subgroup on any device that lays subgroups out in invocation order).
//!
//! What it cannot show: the emulated products' own barriers synchronize the workgroup at every
//! product, so a barrier missing between the kernel's subgroups (a race on a staged tile) goes
//! unseen here; only a device with cooperative matrices (tests/tensor_attend.rs) tests those.
//!
//! Anything the rewrite does not understand is an error, and so is a `coop` name left after
//! it: a kernel that uses more (the tensor-core decode kernels' wide reductions) is refused
//! ([`crate::Context::resolve`]), never run half-emulated.

/// `tc_axpy(x, y, a)` → `(x + y * a)` everywhere in `src` (real cooperative matrices).
pub fn expand_axpy(src: &str) -> String {
    if !src.contains("tc_axpy(") {
        return src.to_string();
    }
    rewrite_calls(
        src,
        &|name, args| match (name, args) {
            ("tc_axpy(", [x, y, a]) => Ok(format!("({x} + {y} * {a})")),
            (n, _) => Err(format!("{n} with {} arguments", args.len())),
        },
        &["tc_axpy("],
    )
    // A malformed call stays as written: naga then rejects the undefined `tc_axpy` by name.
    .unwrap_or_else(|_| src.to_string())
}

/// The emulated form of a composed kernel that uses cooperative matrices, or why it cannot be
/// emulated.
pub fn emulate(src: &str) -> Result<String, String> {
    let mut s = strip_comments(src);
    s = s.replace("enable wgpu_cooperative_matrix;\n", "");
    for (from, to) in [
        (
            "alias TcA = coop_mat16x16<f16, A>;",
            "alias TcA = array<f16, 8>;",
        ),
        (
            "alias TcB = coop_mat16x16<f16, B>;",
            "alias TcB = array<f16, 8>;",
        ),
        (
            "alias TcC = coop_mat16x16<f32, C>;",
            "alias TcC = array<f32, 8>;",
        ),
    ] {
        if !s.contains(from) {
            return Err(format!("expected `{from}`"));
        }
        s = s.replace(from, to);
    }
    let types = array_types(&s);
    let mut loads: Vec<String> = Vec::new();
    let mut stores: Vec<String> = Vec::new();
    let f = |name: &str, args: &[String]| -> Result<String, String> {
        let target = |a: &str| -> Result<(String, String), String> {
            let a = a.trim();
            let rest = a
                .strip_prefix('&')
                .ok_or_else(|| format!("a matrix pointer that is not `&array[index]`: `{a}`"))?;
            let open = rest.find('[').ok_or_else(|| format!("no index in `{a}`"))?;
            if !rest.ends_with(']') {
                return Err(format!(
                    "a matrix pointer that is not `&array[index]`: `{a}`"
                ));
            }
            Ok((
                rest[..open].trim().to_string(),
                rest[open + 1..rest.len() - 1].to_string(),
            ))
        };
        match (name, args) {
            ("coopLoadT<" | "coopLoad<", [p, st]) => {
                let (arr, at) = target(p)?;
                Ok(format!(
                    "tc_emu_load_{arr}({at}, {st}, {})",
                    name == "coopLoadT<"
                ))
            }
            ("coopStoreT(" | "coopStore(", [m, p, st]) => {
                let (arr, at) = target(p)?;
                Ok(format!(
                    "tc_emu_store_{arr}({m}, {at}, {st}, {})",
                    name == "coopStoreT("
                ))
            }
            ("coopMultiplyAdd(", [a, b, c]) => Ok(format!("tc_emu_mma({a}, {b}, {c})")),
            ("tc_axpy(", [x, y, a]) => Ok(format!("tc_emu_axpy({x}, {y}, {a})")),
            (n, _) => Err(format!("`{n}` with {} arguments", args.len())),
        }
    };
    s = rewrite_calls(
        &s,
        &f,
        &[
            "coopLoadT<",
            "coopLoad<",
            "coopStoreT(",
            "coopStore(",
            "coopMultiplyAdd(",
            "tc_axpy(",
        ],
    )?;
    for (prefix, list) in [("tc_emu_load_", &mut loads), ("tc_emu_store_", &mut stores)] {
        let mut at = 0;
        while let Some(i) = s[at..].find(prefix) {
            let start = at + i + prefix.len();
            let end = start
                + s[start..]
                    .find('(')
                    .ok_or("a generated call without arguments")?;
            let arr = s[start..end].to_string();
            if !list.contains(&arr) {
                list.push(arr);
            }
            at = end;
        }
    }
    s = entry_lanes(&s)?;
    let mut lib = String::from(LIBRARY);
    for (list, store) in [(&loads, false), (&stores, true)] {
        for arr in list {
            let t = types
                .iter()
                .find(|(n, _)| n == arr)
                .map(|(_, t)| t.as_str())
                .ok_or_else(|| format!("no declaration of `{arr}` as an f16 or f32 array"))?;
            lib.push_str(&access_fn(arr, t, store));
        }
    }
    s.push_str(&lib);
    if s.contains("coop") {
        return Err("cooperative-matrix code left after the rewrite".into());
    }
    Ok(s)
}

/// The emulation's lanes, scratch, product and x + y·a. Lane l of a 32-lane subgroup holds
/// row l / 2, columns 8·(l % 2) .. + 7 of each matrix (8 elements); a product goes through
/// the subgroup's 512 f16 of workgroup scratch (its A and B), between two workgroup barriers
/// (the kernel calls every cooperative-matrix operation in workgroup-uniform control flow).
const LIBRARY: &str = "
var<private> tc_emu_lid: u32;
var<workgroup> tc_emu_s: array<f16, WORKGROUP_SIZE * 16u>;
fn tc_emu_rc() -> vec2<u32> {
    let l = tc_emu_lid % 32u;
    return vec2<u32>(l / 2u, (l % 2u) * 8u);
}
fn tc_emu_mma(a0: array<f16, 8>, b0: array<f16, 8>, c0: array<f32, 8>) -> array<f32, 8> {
    let base = (tc_emu_lid / 32u) * 512u;
    let rc = tc_emu_rc();
    var a = a0;
    var b = b0;
    var r = c0;
    for (var i = 0u; i < 8u; i++) {
        tc_emu_s[base + rc.x * 16u + rc.y + i] = a[i];
        tc_emu_s[base + 256u + rc.x * 16u + rc.y + i] = b[i];
    }
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
        var acc = r[i];
        for (var k = 0u; k < 16u; k++) {
            acc = fma(f32(tc_emu_s[base + rc.x * 16u + k]), f32(tc_emu_s[base + 256u + k * 16u + rc.y + i]), acc);
        }
        r[i] = acc;
    }
    workgroupBarrier();
    return r;
}
fn tc_emu_axpy(x0: array<f32, 8>, y0: array<f32, 8>, f: f32) -> array<f32, 8> {
    var x = x0;
    var y = y0;
    for (var i = 0u; i < 8u; i++) {
        x[i] = x[i] + y[i] * f;
    }
    return x;
}
";

/// The load or store function of array `arr` (elements `t`) for the lane's 8 elements:
/// element (r, c) at `at + r·stride + c` (row-major) or `at + c·stride + r`.
fn access_fn(arr: &str, t: &str, store: bool) -> String {
    let index = "at + select(c * st + rc.x, rc.x * st + c, rows)";
    if store {
        format!(
            "fn tc_emu_store_{arr}(m0: array<{t}, 8>, at: u32, st: u32, rows: bool) {{
    let rc = tc_emu_rc();
    var m = m0;
    for (var i = 0u; i < 8u; i++) {{
        let c = rc.y + i;
        {arr}[{index}] = m[i];
    }}
}}
"
        )
    } else {
        format!(
            "fn tc_emu_load_{arr}(at: u32, st: u32, rows: bool) -> array<{t}, 8> {{
    let rc = tc_emu_rc();
    var m: array<{t}, 8>;
    for (var i = 0u; i < 8u; i++) {{
        let c = rc.y + i;
        m[i] = {arr}[{index}];
    }}
    return m;
}}
"
        )
    }
}

/// `src` without `//` comments (WGSL has no string literals).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for l in src.lines() {
        out.push_str(l.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// (name, element type) of every module-scope `array<f16 …>` / `array<f32 …>` variable.
fn array_types(s: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for l in s.lines() {
        let l = l.trim();
        let Some(rest) = l.strip_prefix("var<") else {
            continue;
        };
        let Some(close) = rest.find('>') else {
            continue;
        };
        let Some((name, ty)) = rest[close + 1..].split_once(':') else {
            continue;
        };
        let ty = ty.trim();
        for t in ["f16", "f32"] {
            if ty.starts_with(&format!("array<{t}")) {
                v.push((name.trim().to_string(), t.to_string()));
            }
        }
    }
    v
}

/// What replaces a call: from its name and rewritten arguments.
type CallRewrite<'a> = dyn Fn(&str, &[String]) -> Result<String, String> + 'a;

/// Replaces every call of one of `names` (each written with what precedes its arguments:
/// `"f("`, or `"f<"` for a call with a type argument) by `f(name, arguments)`; arguments are
/// rewritten first, so calls nest.
fn rewrite_calls(s: &str, f: &CallRewrite<'_>, names: &[&str]) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    loop {
        let next = names
            .iter()
            .filter_map(|n| {
                // A whole name: not the tail of a longer identifier.
                let mut from = 0;
                while let Some(i) = rest[from..].find(n) {
                    let i = from + i;
                    let before = rest[..i].chars().next_back();
                    if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        return Some((i, *n));
                    }
                    from = i + n.len();
                }
                None
            })
            .min_by_key(|(i, _)| *i);
        let Some((i, name)) = next else {
            out.push_str(rest);
            return Ok(out);
        };
        out.push_str(&rest[..i]);
        let mut j = i + name.len();
        if name.ends_with('<') {
            let close = rest[j..]
                .find(">(")
                .ok_or_else(|| format!("`{name}` without `>(`"))?;
            j += close + 2;
        }
        let (args, end) = split_args(rest, j)?;
        let args = args
            .iter()
            .map(|a| rewrite_calls(a, f, names))
            .collect::<Result<Vec<_>, _>>()?;
        out.push_str(&f(name, &args)?);
        rest = &rest[end..];
    }
}

/// The top-level arguments of the call whose argument list starts at `s[start..]` (just
/// after its `(`), and the index just past its `)`.
fn split_args(s: &str, start: usize) -> Result<(Vec<String>, usize), String> {
    let mut depth = 0i32;
    let mut args = Vec::new();
    let mut from = start;
    for (k, c) in s[start..].char_indices() {
        let at = start + k;
        match c {
            '(' | '[' => depth += 1,
            ')' if depth == 0 => {
                let last = s[from..at].trim();
                if !last.is_empty() {
                    args.push(last.to_string());
                }
                return Ok((args, at + 1));
            }
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                args.push(s[from..at].trim().to_string());
                from = at + 1;
            }
            _ => {}
        }
    }
    Err("a call without its closing parenthesis".into())
}

/// The entry point's subgroup builtins replaced by the lanes of a 32-wide mapping.
fn entry_lanes(s: &str) -> Result<String, String> {
    let sg = "@builtin(subgroup_id) sg: u32,";
    let sl = "@builtin(subgroup_invocation_id) sl: u32,";
    if !s.contains(sg) && !s.contains(sl) {
        return Ok(s.to_string());
    }
    if !s.contains("@builtin(local_invocation_index) lid: u32") {
        return Err("an entry point with subgroup builtins but no `lid`".into());
    }
    let s = s.replace(sg, "").replace(sl, "");
    let main = s.find("fn main(").ok_or("no `fn main(`")?;
    let (_, end) = split_args(&s, main + "fn main(".len())?;
    let body = end + s[end..].find('{').ok_or("no body after `fn main(…)`")? + 1;
    Ok(format!(
        "{}\n    tc_emu_lid = lid;\n    let sg = lid / 32u;\n    let sl = lid % 32u;{}",
        &s[..body],
        &s[body..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_nest_and_arguments_split_at_the_top_level() {
        let src = "alias TcA = coop_mat16x16<f16, A>;\nalias TcB = coop_mat16x16<f16, B>;\nalias TcC = coop_mat16x16<f32, C>;\nvar<workgroup> t: array<f16, 512>;\nvar<workgroup> u: array<f32, 512>;\nfn main(@builtin(local_invocation_index) lid: u32,\n@builtin(subgroup_id) sg: u32,\n@builtin(subgroup_invocation_id) sl: u32,\n) {\n  let a = coopLoadT<TcA>(&t[f(1u, 2u) * 16u], 16u); // coopLoad in a comment\n  coopStoreT(tc_axpy(coopMultiplyAdd(a, a, TcC()), TcC(), 0.5), &u[sg * 16u], 32u);\n}\n";
        let e = emulate(src).expect("emulates");
        assert!(
            e.contains("let a = tc_emu_load_t(f(1u, 2u) * 16u, 16u, true);"),
            "{e}"
        );
        assert!(
            e.contains("tc_emu_store_u(tc_emu_axpy(tc_emu_mma(a, a, TcC()), TcC(), 0.5), sg * 16u, 32u, true);"),
            "{e}"
        );
        assert!(e.contains("let sg = lid / 32u;"), "{e}");
        assert!(e.contains("fn tc_emu_load_t(at: u32, st: u32, rows: bool) -> array<f16, 8>"));
        assert!(e.contains("fn tc_emu_store_u(m0: array<f32, 8>"));
        assert!(
            !e.contains("fn tc_emu_store_t("),
            "only stored arrays get a store function"
        );
        assert_eq!(
            expand_axpy("x = tc_axpy(f(a, b), o[j], TC_ILO);"),
            "x = (f(a, b) + o[j] * TC_ILO);"
        );
    }

    #[test]
    fn what_it_does_not_understand_is_an_error() {
        let base = "alias TcA = coop_mat16x16<f16, A>;\nalias TcB = coop_mat16x16<f16, B>;\nalias TcC = coop_mat16x16<f32, C>;\nvar<workgroup> t: array<f16, 512>;\n";
        for (body, why) in [
            ("let a = coopLoadT<TcA>(p, 16u);", "not `&array[index]`"),
            (
                "let a = coopLoadT<TcA>(&w[0], 16u);",
                "no declaration of `w`",
            ),
            ("let a = coopMultiplyAdd(x, y);", "2 arguments"),
            ("let a: coop_mat8x8<f32, C> = x;", "left after the rewrite"),
        ] {
            let e = emulate(&format!("{base}{body}\n")).expect_err(body);
            assert!(e.contains(why), "{body}: {e}");
        }
        assert!(emulate("fn main() {}").is_err(), "no aliases");
    }
}
