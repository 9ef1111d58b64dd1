//! Shrinking on the IR: smaller candidates of a failing program, each kept
//! only if it is valid ([`check`]) and the caller's test says it still
//! fails the same way. Greedy, to a fixed point.
//!
//! Steps: drop a statement (top level or in a closure body), drop a
//! closure's result or capture, call a compiled (or checkpointed, or
//! custom-vjp) function's inner function instead, turn a move or
//! `overwrite_descriptor` into a copy and an `async_eval` into an `eval`,
//! evaluate fewer values. Names are renumbered at the end.

use crate::ir::*;
use std::collections::BTreeMap;

/// Shrinks `p` while `fails` holds; returns the smallest program found and
/// how many candidates were tried.
pub fn shrink(p: &Program, mut fails: impl FnMut(&Program) -> bool) -> (Program, usize) {
    let mut best = p.clone();
    let mut tried = 0;
    loop {
        let mut improved = false;
        for candidate in candidates(&best) {
            if check(&candidate).is_err() {
                continue;
            }
            tried += 1;
            if fails(&candidate) {
                best = candidate;
                improved = true;
                break;
            }
        }
        if !improved {
            break;
        }
    }
    let renamed = renumber(&best);
    if renamed != best && check(&renamed).is_ok() && fails(&renamed) {
        best = renamed;
    }
    (best, tried)
}

/// Every one-step simplification of `p`, most drastic first.
pub fn candidates(p: &Program) -> Vec<Program> {
    let mut out = Vec::new();
    let n = p.stmts.len();
    // Drop a statement, from the end (later statements depend on earlier ones).
    for i in (0..n).rev() {
        let mut c = p.clone();
        c.stmts.remove(i);
        out.push(c);
    }
    // Use an earlier value of the same type instead of an operand, so the
    // op that made the operand can go next. (Names grow in order of
    // declaration, as the generator and `renumber` make them.)
    for i in 0..n {
        out.extend(substitutions(p, i));
    }
    for i in 0..n {
        match &p.stmts[i] {
            Stmt::Def { id, def } => {
                if let FnDef::Closure {
                    params,
                    captures,
                    body,
                    results,
                } = def
                {
                    for j in (0..body.len()).rev() {
                        let mut b = body.clone();
                        b.remove(j);
                        out.push(with_stmt(
                            p,
                            i,
                            Stmt::Def {
                                id: *id,
                                def: FnDef::Closure {
                                    params: params.clone(),
                                    captures: captures.clone(),
                                    body: b,
                                    results: results.clone(),
                                },
                            },
                        ));
                    }
                    for j in 0..results.len() {
                        if results.len() > 1 {
                            let mut r = results.clone();
                            r.remove(j);
                            out.push(with_stmt(
                                p,
                                i,
                                Stmt::Def {
                                    id: *id,
                                    def: FnDef::Closure {
                                        params: params.clone(),
                                        captures: captures.clone(),
                                        body: body.clone(),
                                        results: r,
                                    },
                                },
                            ));
                        }
                    }
                    for j in 0..captures.len() {
                        let mut c = captures.clone();
                        c.remove(j);
                        out.push(with_stmt(
                            p,
                            i,
                            Stmt::Def {
                                id: *id,
                                def: FnDef::Closure {
                                    params: params.clone(),
                                    captures: c,
                                    body: body.clone(),
                                    results: results.clone(),
                                },
                            },
                        ));
                    }
                }
                // A transform with its inner function's signature: call the inner one.
                if let FnDef::Compile { f, .. }
                | FnDef::Checkpoint { f }
                | FnDef::CustomVjp { f }
                | FnDef::ExportImport { f, .. } = def
                {
                    out.push(redirect(p, *id, *f));
                }
                // Any function: an earlier one in its place, wherever the
                // signatures agree (`check` decides), so a closure that only
                // forwards to another can go.
                for earlier in p.stmts[..i].iter() {
                    if let Stmt::Def { id: to, .. } = earlier {
                        out.push(redirect(p, *id, *to));
                    }
                }
                if let FnDef::Compile { f, shapeless: true } = def {
                    out.push(with_stmt(
                        p,
                        i,
                        Stmt::Def {
                            id: *id,
                            def: FnDef::Compile {
                                f: *f,
                                shapeless: false,
                            },
                        },
                    ));
                }
            }
            Stmt::Assign { dst, src, how } if *how != How::Copy => out.push(with_stmt(
                p,
                i,
                Stmt::Assign {
                    dst: *dst,
                    src: *src,
                    how: How::Copy,
                },
            )),
            Stmt::Eval { refs, asynchronous } => {
                if *asynchronous {
                    out.push(with_stmt(
                        p,
                        i,
                        Stmt::Eval {
                            refs: refs.clone(),
                            asynchronous: false,
                        },
                    ));
                }
                for j in 0..refs.len() {
                    if refs.len() > 1 {
                        let mut r = refs.clone();
                        r.remove(j);
                        out.push(with_stmt(
                            p,
                            i,
                            Stmt::Eval {
                                refs: r,
                                asynchronous: *asynchronous,
                            },
                        ));
                    }
                }
            }
            Stmt::Let {
                out: v,
                op: Op::Normal { shape, seed },
            } if *seed != 0 => {
                out.push(with_stmt(
                    p,
                    i,
                    Stmt::Let {
                        out: *v,
                        op: Op::Normal {
                            shape: shape.clone(),
                            seed: 0,
                        },
                    },
                ));
            }
            _ => {}
        }
    }
    out
}

/// Statement `i` (or a statement of its closure body) with one operand
/// replaced by another value of the same type that is in scope there.
pub fn substitutions(p: &Program, i: usize) -> Vec<Program> {
    let mut scope = Scope::default();
    for s in &p.stmts[..i] {
        if scope.stmt(s).is_err() {
            return vec![];
        }
    }
    let mut out = Vec::new();
    let alternatives = |scope: &Scope, r: Ref| -> Vec<Ref> {
        let Ok(t) = scope.ty(r) else { return vec![] };
        let mut alts = Vec::new();
        for (v, val) in &scope.vals {
            match val {
                Val::One(Some(u)) if u == t => alts.push(Ref::Var(*v)),
                Val::Group(g) => alts.extend(
                    g.iter()
                        .enumerate()
                        .filter(|(_, u)| u.as_ref() == Some(t))
                        .map(|(j, _)| Ref::Elem(*v, j as u32)),
                ),
                _ => {}
            }
        }
        // Only earlier names (or an earlier element of the same group):
        // each substitution lowers the operands, so shrinking terminates.
        let key = |x: &Ref| match *x {
            Ref::Var(v) => (v, 0),
            Ref::Elem(v, j) => (v, j),
        };
        alts.retain(|a| key(a) < key(&r));
        alts
    };
    match &p.stmts[i] {
        Stmt::Let { out: v, op } => {
            for (k, r) in op.refs().into_iter().enumerate() {
                for alt in alternatives(&scope, r) {
                    let mut op = op.clone();
                    *op.refs_mut()[k] = alt;
                    out.push(with_stmt(p, i, Stmt::Let { out: *v, op }));
                }
            }
        }
        Stmt::Def {
            id,
            def:
                FnDef::Closure {
                    params,
                    captures,
                    body,
                    results,
                },
        } => {
            let mut inner = Scope {
                vals: Default::default(),
                fns: scope.fns.clone(),
                defs: scope.defs.clone(),
            };
            for c in captures {
                if let Some(v) = scope.vals.get(c) {
                    inner.vals.insert(*c, v.clone());
                }
            }
            for (v, t) in params {
                inner.vals.insert(*v, Val::One(Some(t.clone())));
            }
            for (j, s) in body.iter().enumerate() {
                if let Stmt::Let { out: v, op } = s {
                    for (k, r) in op.refs().into_iter().enumerate() {
                        for alt in alternatives(&inner, r) {
                            let mut op = op.clone();
                            *op.refs_mut()[k] = alt;
                            let mut b = body.clone();
                            b[j] = Stmt::Let { out: *v, op };
                            out.push(with_stmt(
                                p,
                                i,
                                Stmt::Def {
                                    id: *id,
                                    def: FnDef::Closure {
                                        params: params.clone(),
                                        captures: captures.clone(),
                                        body: b,
                                        results: results.clone(),
                                    },
                                },
                            ));
                        }
                    }
                }
                if inner.stmt(s).is_err() {
                    break;
                }
            }
            for (k, r) in results.iter().enumerate() {
                for alt in alternatives(&inner, *r) {
                    let mut rs = results.clone();
                    rs[k] = alt;
                    out.push(with_stmt(
                        p,
                        i,
                        Stmt::Def {
                            id: *id,
                            def: FnDef::Closure {
                                params: params.clone(),
                                captures: captures.clone(),
                                body: body.clone(),
                                results: rs,
                            },
                        },
                    ));
                }
            }
        }
        _ => {}
    }
    out
}

fn with_stmt(p: &Program, i: usize, s: Stmt) -> Program {
    let mut c = p.clone();
    c.stmts[i] = s;
    c
}

/// `p` with every use of function `from` (calls, transforms, drops) made a
/// use of `to`, and `from`'s definition removed.
fn redirect(p: &Program, from: FnId, to: FnId) -> Program {
    fn fix(s: &Stmt, from: FnId, to: FnId) -> Option<Stmt> {
        let swap = |f: FnId| if f == from { to } else { f };
        Some(match s {
            Stmt::Def { id, .. } if *id == from => return None,
            Stmt::DropFn(f) if *f == from => return None,
            Stmt::Let {
                out,
                op: Op::Call { f, args },
            } => Stmt::Let {
                out: *out,
                op: Op::Call {
                    f: swap(*f),
                    args: args.clone(),
                },
            },
            Stmt::Def { id, def } => {
                let def = match def {
                    FnDef::Closure {
                        params,
                        captures,
                        body,
                        results,
                    } => FnDef::Closure {
                        params: params.clone(),
                        captures: captures.clone(),
                        body: body.iter().filter_map(|s| fix(s, from, to)).collect(),
                        results: results.clone(),
                    },
                    other => other.with_inner(swap(other.inner().unwrap())),
                };
                Stmt::Def { id: *id, def }
            }
            other => other.clone(),
        })
    }
    Program {
        stmts: p.stmts.iter().filter_map(|s| fix(s, from, to)).collect(),
    }
}

/// Names renumbered in order of first appearance: `v0, v1, ...`, `f0, ...`.
pub fn renumber(p: &Program) -> Program {
    renumber_from(p, 0, 0)
}

/// Names renumbered in order of first appearance, from `v<var0>` and
/// `f<fn0>`: a program spliced into another gets names of its own.
pub fn renumber_from(p: &Program, var0: u32, fn0: u32) -> Program {
    #[derive(Default)]
    struct Names {
        vars: BTreeMap<Var, Var>,
        fns: BTreeMap<FnId, FnId>,
        var0: u32,
        fn0: u32,
    }
    impl Names {
        fn var(&mut self, v: Var) -> Var {
            let n = self.var0 + self.vars.len() as u32;
            *self.vars.entry(v).or_insert(Var(n))
        }
        fn f(&mut self, f: FnId) -> FnId {
            let n = self.fn0 + self.fns.len() as u32;
            *self.fns.entry(f).or_insert(FnId(n))
        }
        fn r(&mut self, r: Ref) -> Ref {
            match r {
                Ref::Var(v) => Ref::Var(self.var(v)),
                Ref::Elem(v, i) => Ref::Elem(self.var(v), i),
            }
        }
        fn stmt(&mut self, s: &Stmt) -> Stmt {
            match s {
                Stmt::Let { out, op } => {
                    let mut op = op.clone();
                    for r in op.refs_mut() {
                        *r = self.r(*r);
                    }
                    if let Op::Call { f, .. } = &mut op {
                        *f = self.f(*f);
                    }
                    Stmt::Let {
                        out: self.var(*out),
                        op,
                    }
                }
                Stmt::Def { id, def } => {
                    let def = match def {
                        FnDef::Closure {
                            params,
                            captures,
                            body,
                            results,
                        } => {
                            let captures = captures.iter().map(|c| self.var(*c)).collect();
                            let params = params
                                .iter()
                                .map(|(v, t)| (self.var(*v), t.clone()))
                                .collect();
                            let body = body.iter().map(|s| self.stmt(s)).collect();
                            let results = results.iter().map(|r| self.r(*r)).collect();
                            FnDef::Closure {
                                params,
                                captures,
                                body,
                                results,
                            }
                        }
                        other => other.with_inner(self.f(other.inner().unwrap())),
                    };
                    Stmt::Def {
                        id: self.f(*id),
                        def,
                    }
                }
                Stmt::Eval { refs, asynchronous } => Stmt::Eval {
                    refs: refs.iter().map(|r| self.r(*r)).collect(),
                    asynchronous: *asynchronous,
                },
                Stmt::Synchronize => Stmt::Synchronize,
                Stmt::Drop(v) => Stmt::Drop(self.var(*v)),
                Stmt::DropFn(f) => Stmt::DropFn(self.f(*f)),
                Stmt::Assign { dst, src, how } => Stmt::Assign {
                    dst: self.r(*dst),
                    src: self.r(*src),
                    how: *how,
                },
                Stmt::Erase { group, index } => Stmt::Erase {
                    group: self.var(*group),
                    index: *index,
                },
                Stmt::ReleaseTogether { refs: [a, b] } => Stmt::ReleaseTogether {
                    refs: [self.r(*a), self.r(*b)],
                },
                Stmt::Release(r) => Stmt::Release(self.r(*r)),
            }
        }
    }
    let mut names = Names {
        var0,
        fn0,
        ..Names::default()
    };
    Program {
        stmts: p.stmts.iter().map(|s| names.stmt(s)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::program_of_seed;

    #[test]
    fn shrinking_keeps_only_what_the_failure_needs() {
        // A made-up failure: "the program has a split inside a compiled function".
        let has = |p: &Program| {
            let mut scope = Scope::default();
            let mut compiled_split = false;
            let mut splits = std::collections::BTreeSet::new();
            for s in &p.stmts {
                scope.stmt(s).unwrap();
                if let Stmt::Def {
                    id,
                    def: FnDef::Closure { body, .. },
                } = s
                {
                    if body.iter().any(|b| {
                        matches!(
                            b,
                            Stmt::Let {
                                op: Op::Split { .. },
                                ..
                            }
                        )
                    }) {
                        splits.insert(*id);
                    }
                }
                if let Stmt::Def {
                    def: FnDef::Compile { f, .. },
                    ..
                } = s
                {
                    compiled_split |= splits.contains(f);
                }
            }
            compiled_split
        };
        let found = (0..2000)
            .map(|i| program_of_seed(7, i))
            .find(|p| has(p))
            .expect("the generator makes a compiled split within 2000 programs");
        let (small, _) = shrink(&found, has);
        assert!(has(&small));
        assert_eq!(check(&small), Ok(()));
        // A constant, a closure of a split (and at most one op making its
        // operand: types are kept, so a split of a vector needs a vector),
        // its compile.
        assert!(small.len() <= 5, "{} statements: {small:?}", small.len());
        assert!(small.len() < found.len() || found.len() <= 5);
    }

    /// A leak of the CI slice on pristine, as an earlier shrinker left it
    /// (13 statements): f3 only calls f2, the value_and_grad of f1, and f4
    /// compiles f3.
    const FORWARDING: &str = r#"{"stmts":[{"Def":{"id":0,"def":{"Closure":{"params":[[0,{"dtype":"F32","shape":[6]}]],"captures":[],"body":[{"Let":{"out":1,"op":{"Split":{"a":{"Var":0},"parts":3,"axis":0}}}}],"results":[{"Elem":[1,0]}]}}}},{"Let":{"out":2,"op":{"Normal":{"shape":[6],"seed":0}}}},{"Let":{"out":3,"op":{"Call":{"f":0,"args":[{"Var":2}]}}}},{"Def":{"id":1,"def":{"Closure":{"params":[[4,{"dtype":"F32","shape":[2]}],[5,{"dtype":"F32","shape":[4,32]}]],"captures":[2],"body":[{"Let":{"out":6,"op":{"Call":{"f":0,"args":[{"Var":2}]}}}},{"Let":{"out":7,"op":{"Split":{"a":{"Elem":[6,0]},"parts":2,"axis":0}}}}],"results":[{"Elem":[7,0]}]}}}},{"Def":{"id":2,"def":{"ValueAndGrad":{"f":1}}}},{"Def":{"id":3,"def":{"Closure":{"params":[[8,{"dtype":"F32","shape":[2]}],[9,{"dtype":"F32","shape":[4,32]}]],"captures":[],"body":[{"Let":{"out":10,"op":{"Call":{"f":2,"args":[{"Var":8},{"Var":9}]}}}}],"results":[{"Elem":[10,0]}]}}}},{"Def":{"id":4,"def":{"Compile":{"f":3,"shapeless":false}}}},{"Let":{"out":11,"op":{"Normal":{"shape":[4,32],"seed":0}}}},{"Let":{"out":12,"op":{"Call":{"f":4,"args":[{"Elem":[3,0]},{"Var":11}]}}}}]}"#;

    #[test]
    fn a_closure_that_only_forwards_to_another_is_removed() {
        let p = Program::from_json(FORWARDING).unwrap();
        assert_eq!(check(&p), Ok(()));
        let forwards = |q: &Program| {
            q.stmts.iter().any(|s| {
                matches!(s, Stmt::Def { def: FnDef::Closure { body, .. }, .. }
                    if body.len() == 1 && matches!(body[0], Stmt::Let { op: Op::Call { .. }, .. }))
            })
        };
        assert!(forwards(&p));
        // A made-up failure: a compile, a value_and_grad and a split remain.
        let needs = |q: &Program| {
            let defs = |f: fn(&FnDef) -> bool| {
                q.stmts
                    .iter()
                    .any(|s| matches!(s, Stmt::Def { def, .. } if f(def)))
            };
            let split = q.stmts.iter().any(|s| match s {
                Stmt::Def {
                    def: FnDef::Closure { body, .. },
                    ..
                } => body.iter().any(|b| {
                    matches!(
                        b,
                        Stmt::Let {
                            op: Op::Split { .. },
                            ..
                        }
                    )
                }),
                _ => false,
            });
            defs(|d| matches!(d, FnDef::Compile { .. }))
                && defs(|d| matches!(d, FnDef::ValueAndGrad { .. }))
                && split
        };
        let (small, _) = shrink(&p, needs);
        assert!(needs(&small) && check(&small).is_ok());
        assert!(!forwards(&small), "{small:?}");
        assert!(small.len() < p.len(), "{} statements", small.len());
    }

    #[test]
    fn renumbering_gives_dense_names_and_keeps_the_program_valid() {
        for i in 0..200 {
            let p = program_of_seed(3, i);
            let r = renumber(&p);
            assert_eq!(check(&r), Ok(()), "program {i}");
            assert_eq!(r.len(), p.len());
        }
    }
}

/// `p` with each pair of releases on two threads made one release after the
/// other on the program's own thread: where `p` leaks and this never does,
/// the leak is the race of the two releases.
pub fn one_thread(p: &Program) -> Program {
    Program {
        stmts: p
            .stmts
            .iter()
            .flat_map(|s| match s {
                Stmt::ReleaseTogether { refs: [a, b] } => {
                    vec![Stmt::Release(*a), Stmt::Release(*b)]
                }
                s => vec![s.clone()],
            })
            .collect(),
    }
}
