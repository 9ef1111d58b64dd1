//! A program as a Python script against an installed `mlx`, for the
//! findings Python can express: those whose arrays are released only by
//! going out of scope or by `del`, which in Python, as in C++, runs the
//! array's destructor. Assignment over a held array, moving from it,
//! `overwrite_descriptor` and erasing from a vector are other release
//! paths in C++; Python's rebinding is always the destructor, so a script
//! of such a program would not be the same program ([`print`] says why).
//!
//! The script mirrors the C++ one ([`crate::cpp`]): `program()` runs once
//! to warm up, then again, and the script prints `leaked_bytes N` and exits
//! 1 if memory was left, or prints `error: ...` and exits 1 if MLX raised.
//! Names go in reverse order of declaration at the end of each body, with
//! explicit `del`s, as a C++ scope ends: CPython would otherwise release a
//! function's locals in declaration order.

use crate::ir::*;
use crate::oracle::Kind;
use std::collections::BTreeMap;
use std::fmt::Write as _;

const PRELUDE: &str = r#"import os
import sys
import tempfile

import mlx.core as mx


def normal(shape, seed):
    return mx.random.normal(shape, key=mx.random.key(seed))


def key_split(seed):
    keys = mx.split(mx.random.split(mx.random.key(seed), 2), 2)
    return [mx.reshape(k, (2,)) for k in keys]


def custom_vjp(f):
    # The interpreter's rule: each primal times the sum of the first
    # cotangent. One primal comes to the VJP as that array, several as a
    # tuple, and the VJP answers in the same form.
    def vjp(p, c, o):
        s = mx.sum(c[0])
        return tuple(x * s for x in p) if isinstance(p, tuple) else p * s

    g = mx.custom_function(f)
    g.vjp(vjp)
    return g


def grads(g):
    # mx.grad with argnums=[i] returns the one gradient, not a tuple of it.
    return list(g) if isinstance(g, tuple) else [g]


def export_import(f, example, shapeless):
    # The imported constants are read from the file when first evaluated:
    # the removed file stays open while the function lives.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.mlxfn")
        mx.export_function(path, f, *example, shapeless=shapeless)
        return mx.import_function(path)

"#;

const MAIN: &str = r#"

def main():
    try:
        program()  # warm-up: first-use allocations are not a leak
        mx.synchronize()
        before = mx.get_active_memory()
        program()
        mx.synchronize()
        leaked = mx.get_active_memory() - before
    except Exception as e:
        print(f"error: {e}")
        return 1
    print(f"leaked_bytes {leaked}")
    return 1 if leaked != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
"#;

fn shape(s: &[i32]) -> String {
    format!(
        "[{}]",
        s.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
    )
}

fn list(refs: &[Ref]) -> String {
    format!(
        "[{}]",
        refs.iter()
            .map(Ref::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn args(refs: &[Ref]) -> String {
    refs.iter()
        .map(Ref::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn expr(op: &Op) -> String {
    match op {
        Op::Normal { shape: s, seed } => format!("normal({}, {seed})", shape(s)),
        // The IR's unary, binary and reduction names are MLX's Python names too.
        Op::Unary(_, a) => format!("mx.{}({a})", op.name()),
        Op::Binary(_, a, b) => format!("mx.{}({a}, {b})", op.name()),
        Op::Matmul(a, b) => format!("mx.matmul({a}, {b})"),
        Op::Reshape(a, s) => format!("mx.reshape({a}, {})", shape(s)),
        Op::Slice { a, start, stop } => {
            let ix: Vec<String> = start
                .iter()
                .zip(stop)
                .map(|(b, e)| format!("{b}:{e}"))
                .collect();
            format!("{a}[{}]", ix.join(", "))
        }
        Op::Concat { parts, axis } => format!("mx.concatenate({}, {axis})", list(parts)),
        Op::Reduce { a, axis, .. } => format!("mx.{}({a}, {axis})", op.name()),
        Op::Split { a, parts, axis } => format!("mx.split({a}, {parts}, {axis})"),
        Op::SplitAt { a, indices, axis } => format!("mx.split({a}, {}, {axis})", shape(indices)),
        Op::Divmod(a, b) => format!("list(mx.divmod({a}, {b}))"),
        Op::Linalg(l, a) => match l {
            Linalg::Qr => format!("list(mx.linalg.qr({a}, stream=mx.cpu))"),
            Linalg::Svd => format!("list(mx.linalg.svd({a}, stream=mx.cpu))"),
            Linalg::Eigh => format!("list(mx.linalg.eigh({a}, UPLO=\"L\", stream=mx.cpu))"),
            Linalg::Eig => format!("list(mx.linalg.eig({a}, stream=mx.cpu))"),
            Linalg::Lu => format!("list(mx.linalg.lu({a}, stream=mx.cpu))"),
            Linalg::LuFactor => format!("list(mx.linalg.lu_factor({a}, stream=mx.cpu))"),
        },
        Op::Quantize(a) => format!("list(mx.quantize({a}, {QUANT_GROUP}, {QUANT_BITS}))"),
        Op::Depends { inputs, deps } => format!("mx.depends({}, {})", list(inputs), list(deps)),
        Op::KeySplit { seed } => format!("key_split({seed})"),
        Op::Call { f, args: a } => format!("list({f}({}))", args(a)),
    }
}

/// Names in order of declaration, with whether each still holds a value.
#[derive(Default)]
struct Names(Vec<(String, bool)>);

impl Names {
    fn declare(&mut self, n: String) {
        match self.0.iter_mut().find(|(m, _)| *m == n) {
            Some(e) => e.1 = true,
            None => self.0.push((n, true)),
        }
    }

    fn gone(&mut self, n: &str) {
        if let Some(e) = self.0.iter_mut().find(|(m, _)| m == n) {
            e.1 = false;
        }
    }

    /// `del` of the live names, latest first (nothing if none).
    fn end(&self, out: &mut String, indent: &str) {
        let live: Vec<&str> = self
            .0
            .iter()
            .rev()
            .filter(|(_, l)| *l)
            .map(|(n, _)| n.as_str())
            .collect();
        for n in live {
            writeln!(out, "{indent}del {n}").unwrap();
        }
    }
}

/// Why Python cannot express `s` as the same program, if it cannot.
fn inexpressible(s: &Stmt) -> Option<&'static str> {
    match s {
        Stmt::Assign { how: How::Overwrite, .. } => Some("`overwrite_descriptor` has no Python form"),
        Stmt::Assign { .. } => Some("assignment over a held array is the destructor in Python, copy or move assignment in C++"),
        Stmt::Erase { .. } => Some("erasing from a vector moves its later arrays down in C++; a Python list does not"),
        Stmt::ReleaseTogether { .. } => Some("two threads releasing at the same instant: CPython's lock serializes the releases"),
        Stmt::Release(_) => Some("a slot of a C++ vector left moved-from has no Python form"),
        Stmt::Def { def: FnDef::Closure { body, .. }, .. } => body.iter().find_map(inexpressible),
        _ => None,
    }
}

/// Zeros of each type, as a list.
fn zeros(tys: &[Ty]) -> String {
    let each: Vec<String> = tys
        .iter()
        .map(|t| {
            format!(
                "mx.zeros({}, dtype=mx.{})",
                shape(&t.shape),
                t.dtype.mlx_name()
            )
        })
        .collect();
    format!("[{}]", each.join(", "))
}

fn stmt(
    out: &mut String,
    s: &Stmt,
    primals: &BTreeMap<FnId, Vec<Ty>>,
    names: &mut Names,
    indent: &str,
) {
    let w = |out: &mut String, line: String| writeln!(out, "{indent}{line}").unwrap();
    match s {
        Stmt::Let { out: v, op } => {
            w(out, format!("{v} = {}", expr(op)));
            names.declare(v.to_string());
        }
        Stmt::Def { id, def } => {
            match def {
                FnDef::Closure {
                    params,
                    captures,
                    body,
                    results,
                } => {
                    // A factory, so the closure holds the values it captures
                    // now, as a C++ lambda's copies, not the names.
                    let mut caps: Vec<String> = captures.iter().map(Var::to_string).collect();
                    caps.extend(
                        body.iter()
                            .filter_map(|s| {
                                if let Stmt::Let {
                                    op: Op::Call { f, .. },
                                    ..
                                } = s
                                {
                                    Some(f.to_string())
                                } else {
                                    None
                                }
                            })
                            .collect::<std::collections::BTreeSet<_>>(),
                    );
                    w(out, format!("def make_{id}({}):", caps.join(", ")));
                    w(out, format!("    def {id}(*xs):"));
                    let inner = format!("{indent}        ");
                    let mut locals = Names::default();
                    for (i, (p, _)) in params.iter().enumerate() {
                        writeln!(out, "{inner}{p} = xs[{i}]").unwrap();
                        locals.declare(p.to_string());
                    }
                    for s in body {
                        stmt(out, s, primals, &mut locals, &inner);
                    }
                    writeln!(out, "{inner}results = {}", list(results)).unwrap();
                    locals.end(out, &inner);
                    writeln!(out, "{inner}return results").unwrap();
                    w(out, format!("    return {id}"));
                    w(out, format!("{id} = make_{id}({})", caps.join(", ")));
                }
                FnDef::Compile { f, shapeless } => w(
                    out,
                    format!(
                        "{id} = mx.compile({f}, shapeless={})",
                        if *shapeless { "True" } else { "False" }
                    ),
                ),
                FnDef::Checkpoint { f } => w(out, format!("{id} = mx.checkpoint({f})")),
                FnDef::CustomVjp { f } => w(out, format!("{id} = custom_vjp({f})")),
                FnDef::Vjp { f } | FnDef::Jvp { f } => {
                    let n = primals.get(f).map_or(0, Vec::len);
                    let t = if matches!(def, FnDef::Vjp { .. }) {
                        "vjp"
                    } else {
                        "jvp"
                    };
                    w(out, format!("def make_{id}({f}):"));
                    w(out, format!("    def {id}(*xs):"));
                    w(
                        out,
                        format!("        o, d = mx.{t}({f}, list(xs[:{n}]), list(xs[{n}:]))"),
                    );
                    w(out, "        return list(o) + list(d)".into());
                    w(out, format!("    return {id}"));
                    w(out, format!("{id} = make_{id}({f})"));
                }
                FnDef::Vmap { f } => w(out, format!("{id} = mx.vmap({f})")),
                FnDef::ExportImport { f, shapeless } => {
                    let example = zeros(primals.get(f).map_or(&[][..], Vec::as_slice));
                    let shapeless = if *shapeless { "True" } else { "False" };
                    w(
                        out,
                        format!("{id} = export_import({f}, {example}, {shapeless})"),
                    )
                }
                FnDef::Grad { f } | FnDef::ValueAndGrad { f } => {
                    let n = primals.get(f).map_or(0, Vec::len);
                    let argnums = format!("list(range({n}))");
                    w(out, format!("def make_{id}({f}):"));
                    if matches!(def, FnDef::Grad { .. }) {
                        w(out, format!("    g = mx.grad(lambda *xs: mx.sum({f}(*xs)[0]), argnums={argnums})"));
                        w(out, format!("    def {id}(*xs):"));
                        w(out, "        return grads(g(*xs))".into());
                    } else {
                        w(out, "    def loss(*xs):".into());
                        w(out, format!("        o = {f}(*xs)"));
                        w(out, "        return (mx.sum(o[0]),) + tuple(o[1:])".into());
                        w(
                            out,
                            format!("    vg = mx.value_and_grad(loss, argnums={argnums})"),
                        );
                        w(out, format!("    def {id}(*xs):"));
                        w(out, "        v, g = vg(*xs)".into());
                        w(out, "        return list(v) + grads(g)".into());
                    }
                    w(out, format!("    return {id}"));
                    w(out, format!("{id} = make_{id}({f})"));
                }
            }
            names.declare(id.to_string());
        }
        Stmt::Eval { refs, asynchronous } => w(
            out,
            format!(
                "mx.{}({})",
                if *asynchronous { "async_eval" } else { "eval" },
                args(refs)
            ),
        ),
        Stmt::Synchronize => w(out, "mx.synchronize()".into()),
        Stmt::Drop(v) => {
            w(out, format!("del {v}"));
            names.gone(&v.to_string());
        }
        Stmt::DropFn(f) => {
            w(out, format!("del {f}"));
            names.gone(&f.to_string());
        }
        Stmt::Assign { .. }
        | Stmt::Erase { .. }
        | Stmt::ReleaseTogether { .. }
        | Stmt::Release(_) => {
            unreachable!("checked by inexpressible")
        }
    }
}

/// Whether a script can show a failure of this kind by itself: it shows a
/// leak, a crash and an error, but Python has no view of an array's
/// `data_size`, so an overrun shows only under a sanitizer.
pub fn shows(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::Overrun | Kind::Mismatch | Kind::VariantsDiffer | Kind::Hang
    )
}

/// Whether a printed script's run showed a finding of `kind`, from its exit
/// (`code`, or the `signal` that ended it) and the last line it printed.
/// Only the failure the kind names counts: a leak prints a non-zero
/// `leaked_bytes` and exits 1, an error prints `error: ...` and exits 1, a
/// crash dies of a crash signal. Anything else (an interpreter that cannot
/// import mlx, a kill from outside) shows nothing.
pub fn showed(kind: Kind, code: Option<i32>, signal: Option<i32>, last_line: &str) -> bool {
    match kind {
        Kind::Leak => {
            code == Some(1)
                && last_line
                    .strip_prefix("leaked_bytes ")
                    .and_then(|b| b.trim().parse::<i64>().ok())
                    .is_some_and(|b| b != 0)
        }
        Kind::TransformError => code == Some(1) && last_line.starts_with("error: "),
        Kind::Crash => matches!(signal, Some(4 | 6 | 7 | 8 | 11)),
        _ => false,
    }
}

/// Whether a printed script's run was clean: exit 0 after it printed that
/// nothing leaked.
pub fn ran_clean(code: Option<i32>, last_line: &str) -> bool {
    code == Some(0) && last_line == "leaked_bytes 0"
}

/// The whole script, or why Python cannot express the program.
pub fn print(p: &Program, title: &str) -> Result<String, &'static str> {
    if let Some(why) = p.stmts.iter().find_map(inexpressible) {
        return Err(why);
    }
    let mut scope = Scope::default();
    let mut primals = BTreeMap::new();
    for s in &p.stmts {
        let _ = scope.stmt(s);
        if let Stmt::Def { id, .. } = s {
            if let Some(sig) = scope.fns.get(id) {
                primals.insert(*id, sig.params.clone());
            }
        }
    }
    let mut out = format!("# {title}\n# Written by mlx-fuzz. Run: python repro.py\n");
    out += PRELUDE;
    out += "\ndef program():\n";
    let mut names = Names::default();
    for s in &p.stmts {
        stmt(&mut out, s, &primals, &mut names, "    ");
    }
    names.end(&mut out, "    ");
    if p.stmts.is_empty() {
        out += "    pass\n";
    }
    out += MAIN;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_round_trip_is_traced_on_zeros_of_the_parameter_types_in_both_forms() {
        let p = Program {
            stmts: vec![
                Stmt::Def {
                    id: FnId(0),
                    def: FnDef::Closure {
                        params: vec![
                            (Var(0), Ty::f32(&[2, 3])),
                            (
                                Var(1),
                                Ty {
                                    dtype: Dtype::U32,
                                    shape: vec![2],
                                },
                            ),
                        ],
                        captures: vec![],
                        body: vec![],
                        results: vec![Ref::Var(Var(0))],
                    },
                },
                Stmt::Def {
                    id: FnId(1),
                    def: FnDef::ExportImport {
                        f: FnId(0),
                        shapeless: true,
                    },
                },
            ],
        };
        assert_eq!(check(&p), Ok(()));
        let script = print(&p, "t").unwrap();
        assert!(
            script.contains("f1 = export_import(f0, [mx.zeros([2, 3], dtype=mx.float32), mx.zeros([2], dtype=mx.uint32)], True)"),
            "{script}"
        );
        let source = crate::cpp::print(&p, "t");
        assert!(
            source.contains("Fn f1 = export_import(f0, Arrays{mx::zeros({2, 3}, mx::float32), mx::zeros({2}, mx::uint32)}, true);"),
            "{source}"
        );
    }

    #[test]
    fn a_program_with_an_assignment_has_no_python_form_and_says_why() {
        let v = |i| Var(i);
        let p = Program {
            stmts: vec![
                Stmt::Let {
                    out: v(0),
                    op: Op::Normal {
                        shape: vec![4, 4],
                        seed: 0,
                    },
                },
                Stmt::Let {
                    out: v(1),
                    op: Op::Split {
                        a: Ref::Var(v(0)),
                        parts: 2,
                        axis: 0,
                    },
                },
                Stmt::Assign {
                    dst: Ref::Elem(v(1), 0),
                    src: Ref::Var(v(0)),
                    how: How::Copy,
                },
            ],
        };
        assert!(print(&p, "t")
            .unwrap_err()
            .contains("copy or move assignment"));
    }

    #[test]
    fn names_go_latest_first_and_dropped_ones_are_not_deleted_twice() {
        let v = |i| Var(i);
        let p = Program {
            stmts: vec![
                Stmt::Let {
                    out: v(0),
                    op: Op::Normal {
                        shape: vec![4, 4],
                        seed: 0,
                    },
                },
                Stmt::Let {
                    out: v(1),
                    op: Op::Split {
                        a: Ref::Var(v(0)),
                        parts: 2,
                        axis: 0,
                    },
                },
                Stmt::Let {
                    out: v(2),
                    op: Op::Unary(Unary::Exp, Ref::Elem(v(1), 0)),
                },
                Stmt::Drop(v(1)),
            ],
        };
        let s = print(&p, "t").unwrap();
        let body = &s[s.find("def program").unwrap()..s.find("def main").unwrap()];
        assert!(
            body.contains("    del v1\n    del v2\n    del v0\n"),
            "{body}"
        );
    }

    #[test]
    fn a_script_shows_only_the_failure_its_kind_names() {
        assert!(showed(Kind::Leak, Some(1), None, "leaked_bytes 4096"));
        assert!(!showed(Kind::Leak, Some(1), None, ""));
        assert!(!showed(Kind::Leak, Some(1), None, "error: shapes"));
        assert!(showed(
            Kind::TransformError,
            Some(1),
            None,
            "error: [compile] x"
        ));
        assert!(!showed(Kind::TransformError, Some(1), None, "Traceback"));
        assert!(showed(Kind::Crash, None, Some(11), ""));
        assert!(!showed(Kind::Crash, None, Some(9), ""));
        assert!(!showed(Kind::Crash, Some(1), None, "error: x"));
        assert!(ran_clean(Some(0), "leaked_bytes 0"));
        assert!(!ran_clean(Some(0), ""));
        assert!(!ran_clean(Some(1), "error: x"));
    }
}
