//! The generator: a random valid program from an `arbitrary::Unstructured`.
//!
//! Every choice reads the byte stream, so the same bytes give the same
//! program: a seed ([`program_of_seed`]) for the CI slice and campaigns, or
//! a fuzzing engine's input. Each statement is type-checked as it is made
//! ([`Scope::stmt`]), so the program is valid by construction; an exhausted
//! stream ends the program early rather than failing.

use crate::ir::*;
use arbitrary::{Result, Unstructured};
use rand_core::{RngCore, SeedableRng};

/// The shapes constants are made in: small, so a program runs in
/// microseconds, with axes that split in 2 and 3, square matrices for the
/// factorizations, and rows of 32 for `quantize`.
pub const SHAPES: &[&[i32]] = &[
    &[4],
    &[6],
    &[2, 4],
    &[4, 4],
    &[4, 2],
    &[3, 3],
    &[6, 4],
    &[2, 3, 4],
    &[2, 32],
    &[4, 32],
];

/// How many bytes of choices one program may read.
pub const BYTES_PER_PROGRAM: usize = 4096;

/// Program `index` of the campaign `seed`: the same on every machine.
pub fn program_of_seed(seed: u64, index: u64) -> Program {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    let mut bytes = vec![0u8; BYTES_PER_PROGRAM];
    rng.fill_bytes(&mut bytes);
    generate(&mut Unstructured::new(&bytes))
}

/// Program `index` of the campaign `seed` whose programs let go of their
/// arrays as `releases` says (the one-thread campaign is [`program_of_seed`]).
pub fn program_of_seed_with(seed: u64, index: u64, releases: Releases) -> Program {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    let mut bytes = vec![0u8; BYTES_PER_PROGRAM];
    rng.fill_bytes(&mut bytes);
    generate_with(&mut Unstructured::new(&bytes), releases)
}

/// Where a generated program lets go of its arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Releases {
    /// On the one thread that runs it.
    #[default]
    OneThread,
    /// Also on two threads at the same instant ([`Stmt::ReleaseTogether`]),
    /// mostly two outputs of one group, as a server's threads let go of the
    /// outputs of one op. The one-thread campaign's programs are unchanged.
    TwoThreads,
}

/// A valid program read from `u` (possibly empty, if `u` is).
pub fn generate(u: &mut Unstructured) -> Program {
    generate_with(u, Releases::OneThread)
}

/// [`generate`], with releases as `releases` says.
/// `p` with up to `n` statements made by the generator inserted before
/// statement `at` of its top level, over the values and functions in scope
/// there; their names are new to all of `p`. `None` if the statements after
/// `at` no longer type-check (one of the new ones let go of a value they use).
/// A guided engine's insertion, so that inserted code is the generator's own.
pub fn insert_with(
    p: &Program,
    at: usize,
    n: usize,
    u: &mut Unstructured,
    releases: Releases,
) -> Option<Program> {
    let (next_var, next_fn) = next_names(&p.stmts);
    let mut g = Gen {
        next_var,
        next_fn,
        releases,
    };
    let mut b = Block::default();
    for s in &p.stmts[..at] {
        if !b.push(s.clone()) {
            return None;
        }
    }
    for _ in 0..n {
        if g.statement(u, &mut b).is_err() {
            break;
        }
    }
    b.stmts.extend(p.stmts[at..].iter().cloned());
    let out = Program { stmts: b.stmts };
    check(&out).is_ok().then_some(out)
}

/// The first variable and function numbers no statement of `stmts` names.
pub fn next_names(stmts: &[Stmt]) -> (u32, u32) {
    fn walk(stmts: &[Stmt], v: &mut u32, f: &mut u32) {
        for s in stmts {
            match s {
                Stmt::Let { out, .. } => *v = (*v).max(out.0 + 1),
                Stmt::Def { id, def } => {
                    *f = (*f).max(id.0 + 1);
                    if let FnDef::Closure { params, body, .. } = def {
                        for (p, _) in params {
                            *v = (*v).max(p.0 + 1);
                        }
                        walk(body, v, f);
                    }
                }
                _ => {}
            }
        }
    }
    let (mut v, mut f) = (0, 0);
    walk(stmts, &mut v, &mut f);
    (v, f)
}

pub fn generate_with(u: &mut Unstructured, releases: Releases) -> Program {
    let mut g = Gen {
        next_var: 0,
        next_fn: 0,
        releases,
    };
    let mut top = Block::default();
    let _ = g.program(u, &mut top);
    let p = Program { stmts: top.stmts };
    debug_assert_eq!(
        check(&p),
        Ok(()),
        "the generator made an invalid program: {p:?}"
    );
    p
}

struct Gen {
    next_var: u32,
    next_fn: u32,
    releases: Releases,
}

/// Statements being made in one scope (the program, or a closure body).
#[derive(Default)]
struct Block {
    scope: Scope,
    stmts: Vec<Stmt>,
}

impl Block {
    /// Appends `s` if it is valid here; reports whether it was.
    fn push(&mut self, s: Stmt) -> bool {
        let mut next = self.scope.clone();
        if next.stmt(&s).is_ok() {
            self.scope = next;
            self.stmts.push(s);
            true
        } else {
            false
        }
    }

    /// Live operands whose type satisfies `pred`.
    fn refs(&self, pred: impl Fn(&Ty) -> bool) -> Vec<(Ref, Ty)> {
        let mut out = Vec::new();
        for (v, val) in &self.scope.vals {
            match val {
                Val::One(Some(t)) if pred(t) => out.push((Ref::Var(*v), t.clone())),
                Val::Group(g) => {
                    for (i, t) in g.iter().enumerate() {
                        if let Some(t) = t.as_ref().filter(|t| pred(t)) {
                            out.push((Ref::Elem(*v, i as u32), t.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Every slot, live or moved from (assignment targets).
    fn slots(&self) -> Vec<Ref> {
        let mut out = Vec::new();
        for (v, val) in &self.scope.vals {
            match val {
                Val::One(_) => out.push(Ref::Var(*v)),
                Val::Group(g) => out.extend((0..g.len()).map(|i| Ref::Elem(*v, i as u32))),
            }
        }
        out
    }
}

fn pick<T: Clone>(u: &mut Unstructured, items: &[T]) -> Result<Option<T>> {
    if items.is_empty() {
        return Ok(None);
    }
    Ok(Some(items[u.choose_index(items.len())?].clone()))
}

/// Picks an index with probability proportional to `weights`.
fn weighted(u: &mut Unstructured, weights: &[u32]) -> Result<usize> {
    let total: u32 = weights.iter().sum();
    let mut x = u.int_in_range(0..=total - 1)?;
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return Ok(i);
        }
        x -= w;
    }
    Ok(weights.len() - 1)
}

impl Gen {
    fn var(&mut self) -> Var {
        self.next_var += 1;
        Var(self.next_var - 1)
    }

    fn program(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        let n = u.int_in_range(2..=16)?;
        for _ in 0..n {
            self.statement(u, b)?;
        }
        Ok(())
    }

    /// One statement of a program (with the constants and closures it needs).
    fn statement(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        {
            let has_fns = !b.scope.fns.is_empty();
            let kind = weighted(
                u,
                &[
                    12,
                    24,
                    14,
                    if has_fns { 12 } else { 0 },
                    if has_fns { 18 } else { 0 },
                    8,
                    2,
                    14,
                    if has_fns { 1 } else { 0 },
                ],
            )?;
            match kind {
                0 => {
                    self.constant(u, b, None)?;
                }
                1 => self.op(u, b)?,
                2 => self.closure(u, b)?,
                3 => self.transform(u, b)?,
                4 => self.call(u, b)?,
                5 => {
                    let refs = b.refs(|_| true);
                    let k = u.int_in_range(1..=3)?;
                    let mut chosen = Vec::new();
                    for _ in 0..k {
                        if let Some((r, _)) = pick(u, &refs)? {
                            if !chosen.contains(&r) {
                                chosen.push(r);
                            }
                        }
                    }
                    if !chosen.is_empty() {
                        let asynchronous = u.ratio(1, 4)?;
                        b.push(Stmt::Eval {
                            refs: chosen,
                            asynchronous,
                        });
                    }
                }
                6 => {
                    b.push(Stmt::Synchronize);
                }
                7 => self.release(u, b)?,
                _ => self.trainer(u, b)?,
            }
        }
        Ok(())
    }

    /// A new constant of `shape` (a palette shape if `None`); its name.
    fn constant(
        &mut self,
        u: &mut Unstructured,
        b: &mut Block,
        shape: Option<&[i32]>,
    ) -> Result<Ref> {
        let shape = match shape {
            Some(s) => s.to_vec(),
            None => SHAPES[u.choose_index(SHAPES.len())?].to_vec(),
        };
        let out = self.var();
        let seed = u.int_in_range(0..=999)?;
        assert!(
            b.push(Stmt::Let {
                out,
                op: Op::Normal { shape, seed }
            }),
            "a constant is always valid"
        );
        Ok(Ref::Var(out))
    }

    /// A float operand: an existing one (usually) or a new constant.
    fn float(
        &mut self,
        u: &mut Unstructured,
        b: &mut Block,
        pred: impl Fn(&Ty) -> bool,
        make: &[i32],
    ) -> Result<Ref> {
        let refs = b.refs(|t| t.is_f32() && pred(t));
        if !refs.is_empty() && u.ratio(4, 5)? {
            return Ok(pick(u, &refs)?.unwrap().0);
        }
        self.constant(u, b, Some(make))
    }

    fn shape_of(b: &Block, r: Ref) -> Vec<i32> {
        b.scope.ty(r).map(|t| t.shape.clone()).unwrap_or_default()
    }

    /// One op with its operands (making constants it needs); appended to `b`.
    fn op(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        // Multi-output ops, the subject, weigh as much as all the others.
        let kind = weighted(u, &[3, 1, 4, 2, 1, 1, 1, 1, 1, 10, 3, 3, 6, 2, 2, 2])?;
        let op = match kind {
            0 => {
                let a = self.float(u, b, |_| true, &[4, 4])?;
                let un = [
                    Unary::Abs,
                    Unary::Negative,
                    Unary::Exp,
                    Unary::Square,
                    Unary::Sqrt,
                    Unary::StopGradient,
                    Unary::Transpose,
                ];
                Op::Unary(un[u.choose_index(un.len())?], a)
            }
            1 => match pick(u, &b.refs(|t| t.dtype == Dtype::C64))? {
                Some((a, _)) => Op::Unary(Unary::Real, a),
                None => return Ok(()),
            },
            2 => {
                let a = self.float(u, b, |_| true, &[4, 4])?;
                let sa = Self::shape_of(b, a);
                let other = self.float(u, b, |t| broadcast(&sa, &t.shape).is_some(), &sa)?;
                let bins = [
                    Binary::Add,
                    Binary::Subtract,
                    Binary::Multiply,
                    Binary::Divide,
                    Binary::Maximum,
                ];
                Op::Binary(bins[u.choose_index(bins.len())?], a, other)
            }
            3 => {
                let a = self.float(u, b, |t| t.shape.len() == 2, &[4, 4])?;
                let k = Self::shape_of(b, a)[1];
                let n = [2, 4][u.choose_index(2)?];
                let w = self.float(u, b, |t| t.shape.len() == 2 && t.shape[0] == k, &[k, n])?;
                Op::Matmul(a, w)
            }
            4 => {
                let a = self.float(u, b, |_| true, &[2, 4])?;
                let size: i32 = Self::shape_of(b, a).iter().product();
                let shapes: Vec<Vec<i32>> = SHAPES
                    .iter()
                    .filter(|s| s.iter().product::<i32>() == size)
                    .map(|s| s.to_vec())
                    .chain([vec![size]])
                    .collect();
                Op::Reshape(a, pick(u, &shapes)?.unwrap())
            }
            5 => {
                let a = self.float(u, b, |_| true, &[4, 4])?;
                let shape = Self::shape_of(b, a);
                let (mut start, mut stop) = (Vec::new(), Vec::new());
                for d in shape {
                    let s = u.int_in_range(0..=d - 1)?;
                    start.push(s);
                    stop.push(u.int_in_range(s + 1..=d)?);
                }
                Op::Slice { a, start, stop }
            }
            6 => {
                let a = self.float(u, b, |t| !t.shape.is_empty(), &[4, 4])?;
                let shape = Self::shape_of(b, a);
                let c = self.float(u, b, |t| t.shape == shape, &shape)?;
                Op::Concat {
                    parts: vec![a, c],
                    axis: u.int_in_range(0..=shape.len() as i32 - 1)?,
                }
            }
            7 | 8 => {
                let a = self.float(u, b, |t| !t.shape.is_empty(), &[4, 4])?;
                let rank = Self::shape_of(b, a).len() as i32;
                Op::Reduce {
                    how: if kind == 7 { Reduce::Sum } else { Reduce::Mean },
                    a,
                    axis: u.int_in_range(0..=rank - 1)?,
                }
            }
            9 => {
                let a = self.float(
                    u,
                    b,
                    |t| t.shape.iter().any(|d| d % 2 == 0 || d % 3 == 0),
                    &[4, 4],
                )?;
                let shape = Self::shape_of(b, a);
                let mut choices = Vec::new();
                for (ax, &d) in shape.iter().enumerate() {
                    for parts in [2, 3] {
                        if d % parts == 0 {
                            choices.push((ax as i32, parts));
                        }
                    }
                }
                let (axis, parts) = pick(u, &choices)?.unwrap();
                Op::Split { a, parts, axis }
            }
            10 => {
                let a = self.float(u, b, |t| t.shape.iter().any(|&d| d >= 2), &[4, 4])?;
                let shape = Self::shape_of(b, a);
                let axes: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] >= 2).collect();
                let ax = pick(u, &axes)?.unwrap();
                let first = u.int_in_range(1..=shape[ax] - 1)?;
                let mut indices = vec![first];
                if first + 1 < shape[ax] && u.ratio(1, 2)? {
                    indices.push(u.int_in_range(first + 1..=shape[ax] - 1)?);
                }
                Op::SplitAt {
                    a,
                    indices,
                    axis: ax as i32,
                }
            }
            11 => {
                let a = self.float(u, b, |_| true, &[4, 4])?;
                let sa = Self::shape_of(b, a);
                let d = self.float(u, b, |t| broadcast(&sa, &t.shape).is_some(), &sa)?;
                Op::Divmod(a, d)
            }
            12 => {
                let n = [2, 3, 4][u.choose_index(3)?];
                let a = self.float(
                    u,
                    b,
                    |t| t.shape.len() == 2 && t.shape[0] == t.shape[1],
                    &[n, n],
                )?;
                Op::Linalg(LINALG[u.choose_index(LINALG.len())?], a)
            }
            13 => {
                let a = self.float(
                    u,
                    b,
                    |t| t.shape.len() == 2 && t.shape[1] % QUANT_GROUP == 0,
                    &[2, 32],
                )?;
                Op::Quantize(a)
            }
            14 => {
                let refs = b.refs(|_| true);
                let (Some((i, _)), Some((d, _))) = (pick(u, &refs)?, pick(u, &refs)?) else {
                    return Ok(());
                };
                Op::Depends {
                    inputs: vec![i],
                    deps: vec![d],
                }
            }
            _ => Op::KeySplit {
                seed: u.int_in_range(0..=999)?,
            },
        };
        let out = self.var();
        b.push(Stmt::Let { out, op });
        Ok(())
    }

    fn closure(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        // Parameters: the types of live values (so calls find arguments) or palette shapes.
        let mut params = Vec::new();
        for _ in 0..u.int_in_range(1..=2)? {
            let live = b.refs(Ty::is_f32);
            let t = match pick(u, &live)? {
                Some((_, t)) if u.ratio(2, 3)? => t,
                _ => Ty::f32(SHAPES[u.choose_index(SHAPES.len())?]),
            };
            params.push((self.var(), t));
        }
        // Captures: single values, as a model's weights are.
        let singles: Vec<Var> = b
            .scope
            .vals
            .iter()
            .filter(|(_, v)| matches!(v, Val::One(Some(t)) if t.is_f32()))
            .map(|(v, _)| *v)
            .collect();
        let mut captures = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            if let Some(v) = pick(u, &singles)? {
                if !captures.contains(&v) {
                    captures.push(v);
                }
            }
        }
        let mut inner = Block::default();
        inner.scope.fns = b.scope.fns.clone();
        inner.scope.defs = b.scope.defs.clone();
        for c in &captures {
            inner.scope.vals.insert(*c, b.scope.vals[c].clone());
        }
        for (p, t) in &params {
            inner.scope.vals.insert(*p, Val::One(Some(t.clone())));
        }
        for _ in 0..u.int_in_range(1..=5)? {
            if !inner.scope.fns.is_empty() && u.ratio(1, 8)? {
                self.call(u, &mut inner)?;
            } else {
                self.op(u, &mut inner)?;
            }
        }
        // Results: prefer what the body computed, the later the likelier.
        let computed: Vec<Var> = inner
            .stmts
            .iter()
            .filter_map(|s| {
                if let Stmt::Let { out, .. } = s {
                    Some(*out)
                } else {
                    None
                }
            })
            .collect();
        let mut results = Vec::new();
        for _ in 0..u.int_in_range(1..=2)? {
            let candidates = if !computed.is_empty() && u.ratio(4, 5)? {
                let last = computed[computed.len() - 1 - u.choose_index(computed.len().min(2))?];
                inner
                    .refs(|_| true)
                    .into_iter()
                    .filter(|(r, _)| r.var() == last)
                    .collect()
            } else {
                inner.refs(|_| true)
            };
            if let Some((r, _)) = pick(u, &candidates)? {
                if !results.contains(&r) {
                    results.push(r);
                }
            }
        }
        if results.is_empty() {
            return Ok(());
        }
        let id = FnId(self.next_fn);
        if b.push(Stmt::Def {
            id,
            def: FnDef::Closure {
                params,
                captures,
                body: inner.stmts,
                results,
            },
        }) {
            self.next_fn += 1;
        }
        Ok(())
    }

    fn transform(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        let fns: Vec<FnId> = b.scope.fns.keys().copied().collect();
        let Some(f) = pick(u, &fns)? else {
            return Ok(());
        };
        // Compile, the subject, three times as often as each other kind.
        let compile = FnDef::Compile {
            f,
            shapeless: false,
        };
        let defs: Vec<FnDef> = [compile.clone(), compile]
            .into_iter()
            .chain(FnDef::transforms_of(f))
            .collect();
        let def = defs[u.choose_index(defs.len())?].clone();
        let id = FnId(self.next_fn);
        if b.push(Stmt::Def { id, def }) {
            self.next_fn += 1;
        }
        Ok(())
    }

    fn call(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        let fns: Vec<FnId> = b.scope.fns.keys().copied().collect();
        let Some(f) = pick(u, &fns)? else {
            return Ok(());
        };
        let params = b.scope.fns[&f].params.clone();
        // Sometimes with other shapes of the same ranks: a compiled function
        // traces again, a shapeless one runs its trace on them. Kept only
        // where the function's definition types with them.
        if u.ratio(1, 5)? {
            let mut args = Vec::new();
            for p in &params {
                let other =
                    b.refs(|t| t.dtype == p.dtype && t.shape.len() == p.shape.len() && t != p);
                match pick(u, &other)? {
                    Some((r, _)) => args.push(r),
                    None => return Ok(()),
                }
            }
            let out = self.var();
            let op = Op::Call { f, args };
            if b.scope.op_type(&op).is_ok() {
                b.push(Stmt::Let { out, op });
                return Ok(());
            }
        }
        let mut args = Vec::new();
        for p in &params {
            let same = b.refs(|t| t == p);
            match pick(u, &same)? {
                Some((r, _)) if u.ratio(3, 4)? => args.push(r),
                _ if p.is_f32() => args.push(self.constant(u, b, Some(&p.shape))?),
                _ => return Ok(()),
            }
        }
        let out = self.var();
        b.push(Stmt::Let {
            out,
            op: Op::Call { f, args },
        });
        Ok(())
    }

    /// A trainer's loop, as a C++ or a functional Python trainer writes one:
    /// a compiled step that takes the parameters, computes the loss and its
    /// gradients with `value_and_grad` of a defined function, and returns the
    /// loss and the updated parameters, which replace the old ones (by copy
    /// or move assignment, or by passing the outputs on) for the next step.
    /// In C++ the state is passed explicitly; Python's `mx.compile(step,
    /// inputs=state, outputs=state)` passes it the same way for the user.
    fn trainer(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        let losses: Vec<FnId> = b
            .scope
            .fns
            .iter()
            .filter(|(_, s)| {
                !s.params.is_empty()
                    && s.params.iter().all(Ty::is_f32)
                    && s.results.first().is_some_and(Ty::is_f32)
            })
            .map(|(f, _)| *f)
            .collect();
        let Some(loss) = pick(u, &losses)? else {
            return Ok(());
        };
        let params = b.scope.fns[&loss].params.clone();
        let n_aux = b.scope.fns[&loss].results.len() - 1;
        let def = |b: &mut Block, g: &mut Gen, def: FnDef| {
            let id = FnId(g.next_fn);
            let ok = b.push(Stmt::Def { id, def });
            g.next_fn += ok as u32;
            ok.then_some(id)
        };
        let Some(vg) = def(b, self, FnDef::ValueAndGrad { f: loss }) else {
            return Ok(());
        };
        // The step: loss, then each parameter minus its gradient.
        let ws: Vec<(Var, Ty)> = params.iter().map(|t| (self.var(), t.clone())).collect();
        let r = self.var();
        let mut body = vec![Stmt::Let {
            out: r,
            op: Op::Call {
                f: vg,
                args: ws.iter().map(|(w, _)| Ref::Var(*w)).collect(),
            },
        }];
        let mut results = vec![Ref::Elem(r, 0)];
        for (i, (w, _)) in ws.iter().enumerate() {
            let nw = self.var();
            body.push(Stmt::Let {
                out: nw,
                op: Op::Binary(
                    Binary::Subtract,
                    Ref::Var(*w),
                    Ref::Elem(r, (1 + n_aux + i) as u32),
                ),
            });
            results.push(Ref::Var(nw));
        }
        let step = FnDef::Closure {
            params: ws,
            captures: vec![],
            body,
            results,
        };
        let Some(step) = def(b, self, step) else {
            return Ok(());
        };
        let Some(compiled) = def(
            b,
            self,
            FnDef::Compile {
                f: step,
                shapeless: false,
            },
        ) else {
            return Ok(());
        };
        // The state: live values of the parameters' types, or new ones.
        let mut state = Vec::new();
        for t in &params {
            let live: Vec<Ref> = b
                .refs(|x| x == t)
                .into_iter()
                .map(|(r, _)| r)
                .filter(|r| !state.contains(r))
                .collect();
            match pick(u, &live)? {
                Some(r) if u.ratio(1, 2)? => state.push(r),
                _ => state.push(self.constant(u, b, Some(&t.shape))?),
            }
        }
        let rebind = [Some(How::Copy), Some(How::Move), None][u.choose_index(3)?];
        for _ in 0..u.int_in_range(1..=3)? {
            let o = self.var();
            if !b.push(Stmt::Let {
                out: o,
                op: Op::Call {
                    f: compiled,
                    args: state.clone(),
                },
            }) {
                return Ok(());
            }
            for (i, w) in state.iter_mut().enumerate() {
                let new = Ref::Elem(o, 1 + i as u32);
                match rebind {
                    Some(how) => {
                        b.push(Stmt::Assign {
                            dst: *w,
                            src: new,
                            how,
                        });
                    }
                    None => *w = new,
                }
            }
            if u.ratio(1, 2)? {
                let mut refs = vec![Ref::Elem(o, 0)];
                refs.extend(state.iter().filter(|r| b.scope.ty(**r).is_ok()));
                b.push(Stmt::Eval {
                    refs,
                    asynchronous: u.ratio(1, 4)?,
                });
            }
        }
        Ok(())
    }

    fn release(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        let weights: &[u32] = match self.releases {
            Releases::OneThread => &[5, 4, 4, 3, 3, 2],
            Releases::TwoThreads => &[5, 4, 4, 3, 3, 2, 12],
        };
        match weighted(u, weights)? {
            0 => {
                let vars: Vec<Var> = b.scope.vals.keys().copied().collect();
                if let Some(v) = pick(u, &vars)? {
                    b.push(Stmt::Drop(v));
                }
            }
            k @ 1..=3 => {
                let how = [How::Copy, How::Move, How::Overwrite][k - 1];
                let (Some(dst), Some((src, _))) =
                    (pick(u, &b.slots())?, pick(u, &b.refs(|_| true))?)
                else {
                    return Ok(());
                };
                b.push(Stmt::Assign { dst, src, how });
            }
            4 => {
                let groups: Vec<(Var, usize)> = b
                    .scope
                    .vals
                    .iter()
                    .filter_map(|(v, val)| {
                        if let Val::Group(g) = val {
                            Some((*v, g.len()))
                        } else {
                            None
                        }
                    })
                    .filter(|(_, n)| *n > 0)
                    .collect();
                if let Some((group, n)) = pick(u, &groups)? {
                    b.push(Stmt::Erase {
                        group,
                        index: u.choose_index(n)? as u32,
                    });
                }
            }
            5 => {
                let fns: Vec<FnId> = b.scope.fns.keys().copied().collect();
                if let Some(f) = pick(u, &fns)? {
                    b.push(Stmt::DropFn(f));
                }
            }
            _ => self.release_together(u, b)?,
        }
        Ok(())
    }

    /// Two live arrays let go of on two threads at once: mostly two outputs
    /// of one group, otherwise any two.
    fn release_together(&mut self, u: &mut Unstructured, b: &mut Block) -> Result<()> {
        let groups: Vec<(Var, Vec<u32>)> = b
            .scope
            .vals
            .iter()
            .filter_map(|(v, val)| match val {
                Val::Group(g) => Some((
                    *v,
                    (0..g.len() as u32)
                        .filter(|&i| g[i as usize].is_some())
                        .collect::<Vec<_>>(),
                )),
                Val::One(_) => None,
            })
            .filter(|(_, live)| live.len() >= 2)
            .collect();
        // Groups whose last two outputs these would be come first: letting
        // go of them is what must break the group.
        let last_two: Vec<(Var, Vec<u32>)> = groups
            .iter()
            .filter(|(_, live)| live.len() == 2)
            .cloned()
            .collect();
        let groups = if !last_two.is_empty() && u.ratio(2, 3)? {
            last_two
        } else {
            groups
        };
        let pair = match pick(u, &groups)? {
            Some((g, mut live)) if u.ratio(3, 4)? => {
                // Mostly the inputs of the group's op are evaluated
                // first, as a server's weights are, so that a group left
                // behind keeps memory that can be seen.
                let inputs: Vec<Ref> = b
                    .stmts
                    .iter()
                    .find_map(|s| match s {
                        Stmt::Let { out, op } if *out == g => Some(op.refs()),
                        _ => None,
                    })
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|r| b.scope.ty(*r).is_ok())
                    .collect();
                if !inputs.is_empty() && u.ratio(3, 4)? {
                    b.push(Stmt::Eval {
                        refs: inputs,
                        asynchronous: false,
                    });
                }
                let first = live.remove(u.choose_index(live.len())?);
                let second = live[u.choose_index(live.len())?];
                Some([Ref::Elem(g, first), Ref::Elem(g, second)])
            }
            _ => {
                let mut refs: Vec<Ref> = b.refs(|_| true).into_iter().map(|(r, _)| r).collect();
                if refs.len() < 2 {
                    None
                } else {
                    let first = refs.remove(u.choose_index(refs.len())?);
                    Some([first, refs[u.choose_index(refs.len())?]])
                }
            }
        };
        if let Some(refs) = pair {
            b.push(Stmt::ReleaseTogether { refs });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Every kind of statement the IR has, by name, and "call <transform>"
    /// for each kind of function a program calls.
    fn kinds(stmts: &[Stmt], out: &mut BTreeSet<String>, defs: &mut BTreeMap<FnId, &'static str>) {
        for s in stmts {
            let k = match s {
                Stmt::Let { op, .. } => {
                    if let Op::Call { f, .. } = op {
                        out.insert(format!("call {}", defs[f]));
                    }
                    format!("op {}", op.name())
                }
                Stmt::Def { id, def } => {
                    defs.insert(*id, def.name());
                    if let FnDef::Closure { body, captures, .. } = def {
                        kinds(body, out, defs);
                        if !captures.is_empty() {
                            out.insert("capture".into());
                        }
                    }
                    format!("fn {}", def.name())
                }
                Stmt::Eval {
                    asynchronous: true, ..
                } => "async_eval".into(),
                Stmt::Eval { .. } => "eval".into(),
                Stmt::Synchronize => "synchronize".into(),
                Stmt::Drop(_) => "drop".into(),
                Stmt::DropFn(_) => "drop fn".into(),
                Stmt::Assign { how, .. } => format!("assign {how:?}"),
                Stmt::Erase { .. } => "erase".into(),
                Stmt::ReleaseTogether { .. } => "release together".into(),
                Stmt::Release(_) => "release".into(),
            };
            out.insert(k);
        }
    }

    #[test]
    fn seeded_programs_are_valid_and_reach_every_statement_of_the_ir() {
        const PROGRAMS: u64 = 5000;
        let mut seen = BTreeSet::new();
        for i in 0..PROGRAMS {
            let p = program_of_seed(1, i);
            assert_eq!(check(&p), Ok(()), "program {i}");
            kinds(&p.stmts, &mut seen, &mut BTreeMap::new());
            // A call with other shapes than its function's signature.
            let mut scope = Scope::default();
            for s in &p.stmts {
                if let Stmt::Let {
                    op: Op::Call { f, args },
                    ..
                } = s
                {
                    let given: Vec<Ty> =
                        args.iter().map(|a| scope.ty(*a).unwrap().clone()).collect();
                    if scope.fns[f].params != given {
                        seen.insert(format!("call with other shapes {}", scope.defs[f].0.name()));
                    }
                }
                scope.stmt(s).unwrap();
            }
        }
        let mut want: BTreeSet<String> = [
            "capture",
            "async_eval",
            "eval",
            "synchronize",
            "drop",
            "drop fn",
            "assign Copy",
            "assign Move",
            "assign Overwrite",
            "erase",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for f in [
            "closure",
            "compile",
            "compile(shapeless)",
            "checkpoint",
            "custom_vjp",
            "vjp",
            "jvp",
            "vmap",
            "grad",
            "value_and_grad",
            "export_import",
            "export_import(shapeless)",
        ] {
            want.insert(format!("fn {f}"));
            want.insert(format!("call {f}"));
            if f.starts_with("compile") {
                want.insert(format!("call with other shapes {f}"));
            }
        }
        for op in [
            "normal",
            "abs",
            "negative",
            "exp",
            "square",
            "sqrt",
            "stop_gradient",
            "transpose",
            "real",
            "add",
            "subtract",
            "multiply",
            "divide",
            "maximum",
            "matmul",
            "reshape",
            "slice",
            "concatenate",
            "sum",
            "mean",
        ] {
            want.insert(format!("op {op}"));
        }
        for op in [
            "split",
            "split_at_indices",
            "divmod",
            "qr",
            "svd",
            "eigh",
            "eig",
            "lu",
            "lu_factor",
            "quantize",
            "depends",
            "random_split",
            "call",
        ] {
            want.insert(format!("op {op}"));
        }
        let missing: Vec<&String> = want.difference(&seen).collect();
        assert!(
            missing.is_empty(),
            "{PROGRAMS} seeded programs never made: {missing:?}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_program() {
        assert_eq!(program_of_seed(9, 17), program_of_seed(9, 17));
        assert_ne!(program_of_seed(9, 17), program_of_seed(9, 18));
    }
}
