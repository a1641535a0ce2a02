//! Source rewriting before clang sees a kernel: what a header alone cannot do.
//!
//! Every rewrite keeps the line structure, so clang's diagnostics and the emulator's
//! divergence reports name lines of the original source.
//!
//! * `device T*` → `::metal::__dptr<T>`, `constant T*` → `::metal::__dptr<const T>` (checked
//!   pointers; references keep the plain type, the header's macros drop the keyword).
//! * `threadgroup T name[N]...;` at statement level → a reference to per-threadgroup storage
//!   (bounds-checked `__tgarr`), keyed by declaration site.
//! * C-style vector casts `(float4)x` → `::metal::__vcast<float4>() ->* x` (converting, as
//!   Metal does; clang would bit-cast) and `static_cast<float4>` likewise.
//! * Float literals: `1.5` → `1.5f` (no double in Metal), `1.5h` → `1.5f16`.
//! * The kernel's signature is parsed into [`Param`]s for the generated adapter.

use crate::EmuError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Number,
    Punct,
    Str,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
}

fn tokenize(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i = (i + 2).min(b.len());
        } else if c == b'"' || c == b'\'' {
            let s = i;
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            out.push(Tok {
                kind: Kind::Str,
                start: s,
                end: i,
            });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok {
                kind: Kind::Ident,
                start: s,
                end: i,
            });
        } else if c.is_ascii_digit()
            || (c == b'.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let s = i;
            while i < b.len() {
                let d = b[i];
                let sign =
                    (d == b'+' || d == b'-') && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P');
                if d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || sign {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Tok {
                kind: Kind::Number,
                start: s,
                end: i,
            });
        } else {
            let s = i;
            let two = &src[i..(i + 2).min(b.len())];
            let len = if src[i..].starts_with("->*") {
                3
            } else if matches!(
                two,
                "::" | "->"
                    | "&&"
                    | "||"
                    | "=="
                    | "!="
                    | "<="
                    | ">="
                    | "++"
                    | "--"
                    | "+="
                    | "-="
                    | "*="
                    | "/="
                    | "|="
                    | "&="
                    | "^="
                    | "%="
                    | "<<"
                    | ">>"
            ) {
                2
            } else {
                1
            };
            i += len;
            out.push(Tok {
                kind: Kind::Punct,
                start: s,
                end: i,
            });
        }
    }
    out
}

/// What a kernel parameter binds to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// `[[buffer(n)]]`.
    Buffer(u32),
    /// A builtin attribute (`thread_position_in_grid`, ...), with the canonical type.
    Builtin { attr: String, ty: String },
}

/// One kernel parameter.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
}

/// The rewritten source and what the adapter needs.
pub struct Prepared {
    pub source: String,
    pub params: Vec<Param>,
    /// Expression text of `[[max_total_threads_per_threadgroup(N)]]`, if present.
    pub max_threads_expr: Option<String>,
}

const VEC_BASES: &[&str] = &[
    "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "float",
];

fn is_vec_type(s: &str) -> bool {
    let s = s.strip_prefix("metal::").unwrap_or(s);
    let Some(n) = s.chars().last() else {
        return false;
    };
    matches!(n, '2' | '3' | '4') && VEC_BASES.contains(&&s[..s.len() - 1])
}

struct Edit {
    start: usize,
    end: usize,
    text: String,
}

fn newlines(s: &str) -> String {
    "\n".repeat(s.matches('\n').count())
}

pub fn prepare(src: &str, fn_name: &str) -> Result<Prepared, EmuError> {
    let toks = tokenize(src);
    let t = |i: usize| -> &str { toks.get(i).map_or("", |k| &src[k.start..k.end]) };
    let mut edits: Vec<Edit> = Vec::new();
    let mut site = 0u32;
    let mut i = 0;
    while i < toks.len() {
        let tok = toks[i];
        let s = t(i);
        match tok.kind {
            Kind::Number => {
                let lower = s.to_ascii_lowercase();
                let hex = lower.starts_with("0x");
                let is_float = !hex && (s.contains('.') || lower.contains('e'));
                let hex_float = hex && lower.contains('p');
                if is_float || hex_float {
                    let last = s.as_bytes()[s.len() - 1];
                    match last {
                        b'h' | b'H' => edits.push(Edit {
                            start: tok.end - 1,
                            end: tok.end,
                            text: "f16".into(),
                        }),
                        b'f' | b'F' | b'l' | b'L' => {}
                        _ => edits.push(Edit {
                            start: tok.end,
                            end: tok.end,
                            text: "f".into(),
                        }),
                    }
                }
            }
            Kind::Ident if s == "device" || s == "constant" => {
                // device <type tokens> *  → checked pointer
                let mut j = i + 1;
                let mut depth = 0i32;
                while j < toks.len() {
                    let u = t(j);
                    if toks[j].kind == Kind::Ident || u == "::" {
                        j += 1;
                    } else if u == "<" {
                        depth += 1;
                        j += 1;
                    } else if u == ">" && depth > 0 {
                        depth -= 1;
                        j += 1;
                    } else if depth > 0 && (u == "," || toks[j].kind == Kind::Number) {
                        j += 1;
                    } else {
                        break;
                    }
                }
                if j > i + 1 && t(j) == "*" && depth == 0 {
                    let ty = &src[toks[i + 1].start..toks[j - 1].end];
                    let c = if s == "constant" { "const " } else { "" };
                    edits.push(Edit {
                        start: tok.start,
                        end: toks[j].end,
                        text: format!(
                            "::metal::__dptr<{c}{ty}>{}",
                            newlines(&src[tok.start..toks[j].end])
                        ),
                    });
                    i = j + 1;
                    continue;
                }
            }
            Kind::Ident if s == "threadgroup" => {
                let prev = if i == 0 { "" } else { t(i - 1) };
                if i == 0 || matches!(prev, ";" | "{" | "}") {
                    if let Some((end_idx, text)) = threadgroup_decl(src, &toks, i, &mut site) {
                        edits.push(Edit {
                            start: tok.start,
                            end: toks[end_idx].end,
                            text,
                        });
                        i = end_idx + 1;
                        continue;
                    }
                }
            }
            Kind::Ident
                if s == "static_cast"
                    && t(i + 1) == "<"
                    && is_vec_type(t(i + 2))
                    && t(i + 3) == ">" =>
            {
                edits.push(Edit {
                    start: tok.start,
                    end: tok.end,
                    text: "::metal::__vcastfn".into(),
                });
            }
            Kind::Punct if s == "(" => {
                // (vec)expr → converting cast
                let (ty_end, ok) = if t(i + 1) == "metal" && t(i + 2) == "::" {
                    (i + 3, is_vec_type(t(i + 3)))
                } else {
                    (i + 1, is_vec_type(t(i + 1)))
                };
                if ok && t(ty_end + 1) == ")" {
                    let prev_ok = i == 0
                        || toks[i - 1].kind != Kind::Ident
                        || matches!(t(i - 1), "return" | "case" | "else" | "do");
                    let prev_ok = prev_ok && !matches!(t(i.wrapping_sub(1)), ">" | "]");
                    let next = ty_end + 2;
                    let next_ok = next < toks.len()
                        && (matches!(toks[next].kind, Kind::Ident | Kind::Number)
                            || matches!(
                                t(next),
                                "(" | "-" | "+" | "!" | "~" | "*" | "::" | "++" | "--"
                            ));
                    if prev_ok && next_ok {
                        let ty = &src[toks[i + 1].start..toks[ty_end].end];
                        edits.push(Edit {
                            start: tok.start,
                            end: toks[ty_end + 1].end,
                            text: format!("::metal::__vcast<{ty}>() ->* "),
                        });
                        i = ty_end + 2;
                        continue;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }

    let (params, max_threads_expr) = parse_kernel(src, &toks, fn_name)?;

    edits.sort_by_key(|e| e.start);
    let mut out = String::with_capacity(src.len() + 1024);
    let mut pos = 0;
    for e in &edits {
        if e.start < pos {
            continue;
        }
        out.push_str(&src[pos..e.start]);
        out.push_str(&e.text);
        pos = e.end;
    }
    out.push_str(&src[pos..]);
    Ok(Prepared {
        source: out,
        params,
        max_threads_expr,
    })
}

/// `threadgroup T name[A][B];` starting at token `i` → (index of `;`, replacement).
fn threadgroup_decl(src: &str, toks: &[Tok], i: usize, site: &mut u32) -> Option<(usize, String)> {
    let t = |k: usize| -> &str { toks.get(k).map_or("", |x| &src[x.start..x.end]) };
    let mut j = i + 1;
    let mut angle = 0i32;
    let mut bracket = 0i32;
    let mut pointer = false;
    let mut unsupported = false;
    while j < toks.len() && !(t(j) == ";" && bracket == 0) {
        match t(j) {
            "<" => angle += 1,
            ">" => angle -= 1,
            "[" => bracket += 1,
            "]" => bracket -= 1,
            "*" | "&" | "&&" if bracket == 0 && !unsupported => pointer = true,
            "(" | "=" | "{" if bracket == 0 => unsupported = true,
            "," if angle == 0 && bracket == 0 => unsupported = true,
            _ => {}
        }
        if t(j) == "{" || t(j) == "}" {
            unsupported = true;
            break;
        }
        j += 1;
    }
    if pointer {
        return None; // `threadgroup float* p = ...;`: the keyword just vanishes
    }
    let semi = j;
    let whole = &src[toks[i].start..toks.get(semi).map_or(src.len(), |x| x.end)];
    let nl = newlines(whole);
    if unsupported || semi >= toks.len() {
        return Some((
            semi.min(toks.len() - 1),
            format!(
                "static_assert(false, \"msl-emu: unsupported threadgroup declaration (declare one variable per statement, without initializer)\");{nl}"
            ),
        ));
    }
    // trailing [dims]
    let mut dims = Vec::new();
    let mut k = semi;
    while k > i + 1 && t(k - 1) == "]" {
        let close = k - 1;
        let mut depth = 0;
        let mut open = close;
        loop {
            match t(open) {
                "]" => depth += 1,
                "[" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if open == 0 {
                return None;
            }
            open -= 1;
        }
        dims.push(src[toks[open].end..toks[close].start].trim().to_string());
        k = open;
    }
    dims.reverse();
    let name_idx = k - 1;
    if name_idx <= i || toks[name_idx].kind != Kind::Ident {
        return None;
    }
    let name = t(name_idx);
    let ty = &src[toks[i + 1].start..toks[name_idx - 1].end];
    let s = *site;
    *site += 1;
    let mut full = ty.to_string();
    for d in dims.iter().rev() {
        full = format!("::metal::__tgarr<{full}, ({d}), {s}u>");
    }
    Some((
        semi,
        format!("{full}& {name} = ::metal::__tg_decl<{full}>({s}u, \"{name}\");{nl}"),
    ))
}

const BUILTINS_VEC: &[&str] = &[
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "threadgroup_position_in_grid",
    "threadgroups_per_grid",
    "threads_per_threadgroup",
    "threads_per_grid",
];
const BUILTINS_SCALAR: &[&str] = &[
    "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup",
    "simdgroups_per_threadgroup",
    "thread_execution_width",
];

fn parse_kernel(
    src: &str,
    toks: &[Tok],
    fn_name: &str,
) -> Result<(Vec<Param>, Option<String>), EmuError> {
    let t = |k: usize| -> &str { toks.get(k).map_or("", |x| &src[x.start..x.end]) };
    let line_of = |k: usize| src[..toks[k].start].matches('\n').count() + 1;
    let Some(kpos) = (0..toks.len()).find(|&k| {
        t(k) == "kernel" && t(k + 1) == "void" && t(k + 2) == fn_name && t(k + 3) == "("
    }) else {
        return Err(EmuError::Signature(format!(
            "no `kernel void {fn_name}(...)` in the source"
        )));
    };
    // [[max_total_threads_per_threadgroup(N)]] right before `kernel`
    let mut max_expr = None;
    if kpos >= 2 && t(kpos - 1) == "]" && t(kpos - 2) == "]" {
        let mut k = kpos - 2;
        while k > 0 && !(t(k) == "[" && t(k + 1) == "[") {
            k -= 1;
        }
        if t(k + 2) == "max_total_threads_per_threadgroup" && t(k + 3) == "(" {
            let close = kpos - 3;
            if t(close) == ")" {
                max_expr = Some(src[toks[k + 3].end..toks[close].start].trim().to_string());
            }
        }
    }
    let open = kpos + 3;
    let mut depth = 0;
    let mut close = open;
    for k in open..toks.len() {
        match t(k) {
            "(" | "[" => depth += 1,
            ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    close = k;
                    break;
                }
            }
            _ => {}
        }
    }
    if close == open {
        return Err(EmuError::Signature(format!(
            "unbalanced parameter list of `{fn_name}`"
        )));
    }
    // split at depth-0 commas
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut start = open + 1;
    let mut d = 0;
    for k in open + 1..close {
        match t(k) {
            "(" | "[" | "<" => d += 1,
            ")" | "]" | ">" => d -= 1,
            "," if d == 0 => {
                parts.push((start, k));
                start = k + 1;
            }
            _ => {}
        }
    }
    if start < close {
        parts.push((start, close));
    }
    let mut params = Vec::new();
    let mut used = std::collections::BTreeMap::new();
    for (a, b) in parts {
        let Some(at) = (a..b).find(|&k| t(k) == "[" && t(k + 1) == "[") else {
            return Err(EmuError::Signature(format!(
                "line {}: kernel parameter `{}` has no [[attribute]]",
                line_of(a),
                &src[toks[a].start..toks[b - 1].end]
            )));
        };
        if at == a || toks[at - 1].kind != Kind::Ident {
            return Err(EmuError::Signature(format!(
                "line {}: cannot parse kernel parameter",
                line_of(a)
            )));
        }
        let name = t(at - 1).to_string();
        let ty: String = if at - 1 > a {
            src[toks[a].start..toks[at - 2].end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            String::new()
        };
        let attr = t(at + 2);
        let kind = if attr == "buffer" {
            let n: u32 = t(at + 4).parse().map_err(|_| {
                EmuError::Signature(format!(
                    "line {}: [[buffer(...)]] index must be an integer literal",
                    line_of(at)
                ))
            })?;
            if !(ty.contains('*') || ty.contains('&')) {
                return Err(EmuError::Signature(format!(
                    "line {}: buffer parameter `{name}` must be a pointer or reference, is `{ty}`",
                    line_of(at)
                )));
            }
            if !(ty.starts_with("device") || ty.starts_with("constant")) {
                return Err(EmuError::Signature(format!(
                    "line {}: buffer parameter `{name}` needs the device or constant address space",
                    line_of(at)
                )));
            }
            if let Some(prev) = used.insert(n, name.clone()) {
                return Err(EmuError::Signature(format!(
                    "[[buffer({n})]] is bound twice (`{prev}` and `{name}`)"
                )));
            }
            ParamKind::Buffer(n)
        } else if BUILTINS_VEC.contains(&attr) || BUILTINS_SCALAR.contains(&attr) {
            let norm: String = ty.chars().filter(|c| !c.is_whitespace()).collect();
            let norm = norm
                .trim_start_matches("const")
                .trim_start_matches("metal::")
                .to_string();
            let allowed: &[&str] = if BUILTINS_VEC.contains(&attr) {
                &["uint", "ushort", "uint2", "ushort2", "uint3", "ushort3"]
            } else {
                &["uint", "ushort"]
            };
            if !allowed.contains(&norm.as_str()) {
                return Err(EmuError::Signature(format!(
                    "line {}: [[{attr}]] parameter `{name}` has type `{ty}`; Metal allows {}",
                    line_of(at),
                    allowed.join(", ")
                )));
            }
            ParamKind::Builtin {
                attr: attr.to_string(),
                ty: norm,
            }
        } else {
            return Err(EmuError::Signature(format!(
                "line {}: attribute [[{attr}]] on `{name}` is not supported by the emulator",
                line_of(at)
            )));
        };
        params.push(Param { name, kind });
    }
    Ok((params, max_expr))
}

/// The per-kernel adapter appended after the kernel source.
pub fn adapter(fn_name: &str, p: &Prepared) -> String {
    let args: Vec<String> = p
        .params
        .iter()
        .map(|q| match &q.kind {
            ParamKind::Buffer(n) => format!("::metal::__buf_arg{{{n}u}}"),
            ParamKind::Builtin { attr, ty } => {
                let field = if attr == "thread_execution_width" {
                    "threads_per_simdgroup"
                } else {
                    attr.as_str()
                };
                let ptr = if BUILTINS_VEC.contains(&attr.as_str()) {
                    format!("__b->{field}")
                } else {
                    format!("&__b->{field}")
                };
                format!("::metal::__bi<::metal::{ty}>::get({ptr})")
            }
        })
        .collect();
    let max = p.max_threads_expr.clone().unwrap_or_else(|| "0".into());
    format!(
        "\n// ---- generated by kvpack-msl-emu ----\n\
         extern \"C\" void msl_emu_kernel_entry(const ::metal::__lane_builtins* __b) {{\n    {fn_name}({});\n}}\n\
         extern \"C\" __attribute__((visibility(\"default\"))) const unsigned msl_emu_max_total_threads = ({max});\n",
        args.join(",\n        ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites() {
        let src = "#include <metal_stdlib>\nusing namespace metal;\n[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]\nkernel void k(device const float4* a [[buffer(0)]], constant P& p [[buffer(1)]],\n uint3 g [[threadgroup_position_in_grid]], ushort l [[thread_index_in_threadgroup]]) {\n  threadgroup float tile[16][WORKGROUP_SIZE];\n  threadgroup float* q = tile[0];\n  float4 v = (float4)a[0] * 0.5 + 1.5h + 1e3;\n}\n";
        let p = prepare(src, "k").unwrap();
        assert_eq!(p.source.matches('\n').count(), src.matches('\n').count());
        assert!(
            p.source.contains("::metal::__dptr<const float4> a"),
            "{}",
            p.source
        );
        assert!(p.source.contains("constant P& p"));
        assert!(
            p.source
                .contains("__tgarr<::metal::__tgarr<float, (WORKGROUP_SIZE), 0u>, (16), 0u>& tile"),
            "{}",
            p.source
        );
        assert!(p.source.contains("threadgroup float* q"));
        assert!(
            p.source
                .contains("::metal::__vcast<float4>() ->* a[0] * 0.5f + 1.5f16 + 1e3f"),
            "{}",
            p.source
        );
        assert_eq!(p.max_threads_expr.as_deref(), Some("WORKGROUP_SIZE"));
        assert_eq!(p.params.len(), 4);
        assert_eq!(p.params[0].kind, ParamKind::Buffer(0));
        assert_eq!(
            p.params[3].kind,
            ParamKind::Builtin {
                attr: "thread_index_in_threadgroup".into(),
                ty: "ushort".into()
            }
        );
    }
}
