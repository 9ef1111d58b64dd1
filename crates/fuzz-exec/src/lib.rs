//! Runs `mlx-fuzz` programs on the MLX variant the bridge links, and the
//! worker process around it (`worker_main`, the protocol is in
//! `mlx_fuzz::campaign`).
//!
//! Values live in [`Slots`] (a C++ vector per name; a single array is a
//! vector of one), so every release path of the IR is the C++ one: the
//! vector's destructor, copy and move assignment, `overwrite_descriptor`,
//! erase. At the end of a program the names go in reverse order of
//! declaration, as a C++ scope ends.

use mlx_bridge::fuzz::{self as bf, Slots};
use mlx_bridge::{self as mlx, Array, Dtype as MxDtype};
use mlx_fuzz::conditioning::{judge_fused, normwise_ulps, value_families, Deviation, Family};
use mlx_fuzz::ir::*;
use mlx_fuzz::oracle::{fnv1a, within_tolerance, Outcome, FNV_START};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::rc::Rc;

type Func = Rc<dyn Fn(&[Array]) -> mlx::Result<Vec<Array>>>;

/// How the program's transforms are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AsWritten,
    /// Every `compile` is the function it compiles: the eager reference.
    Eager,
}

/// The values a run evaluated, in order: their dtype and their elements
/// as f64 (complex numbers as two), a digest of their bits, and the first
/// value whose data ran past its buffer.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub values: Vec<(MxDtype, Vec<f64>)>,
    pub digest: u64,
    pub overrun: Option<String>,
}

fn err(msg: String) -> mlx::Error {
    mlx::Error::new(msg)
}

fn dtype_of(d: Dtype) -> MxDtype {
    match d {
        Dtype::F32 => MxDtype::F32,
        Dtype::C64 => MxDtype::Complex64,
        Dtype::U32 => MxDtype::U32,
    }
}

/// The model's type against MLX's: a difference is a bug in the fuzzer.
fn agree(what: &str, a: &Array, t: &Ty) {
    assert!(
        a.dtype() == dtype_of(t.dtype) && a.shape() == t.shape,
        "[mlx-fuzz model] {what}: MLX made {:?} {:?}, the IR says {:?} {:?}",
        a.dtype(),
        a.shape(),
        t.dtype,
        t.shape
    );
}

fn observe(a: &Array, obs: &mut Observed) -> mlx::Result<()> {
    let bytes = a.to_bytes()?;
    obs.digest = fnv1a(obs.digest, &bytes);
    let values = match a.dtype() {
        MxDtype::U32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()) as f64)
            .collect(),
    };
    obs.values.push((a.dtype(), values));
    if obs.overrun.is_none() {
        obs.overrun = bf::buffer_overrun(a).map(|m| format!("value {}: {m}", obs.values.len() - 1));
    }
    Ok(())
}

/// One op on operands fetched by `get`, functions by `fns`.
fn apply(
    op: &Op,
    get: &dyn Fn(Ref) -> mlx::Result<Array>,
    fns: &dyn Fn(FnId) -> mlx::Result<Func>,
) -> mlx::Result<Vec<Array>> {
    let one = |a: mlx::Result<Array>| a.map(|a| vec![a]);
    match op {
        Op::Normal { shape, seed } => one(mlx::random::normal(
            shape,
            MxDtype::F32,
            &mlx::random::key(*seed as u64),
        )),
        Op::Unary(u, a) => {
            let a = get(*a)?;
            one(match u {
                Unary::Abs => mlx::abs(&a),
                Unary::Negative => mlx::negative(&a),
                Unary::Exp => mlx::exp(&a),
                Unary::Square => mlx::square(&a),
                Unary::Sqrt => mlx::sqrt(&a),
                Unary::StopGradient => mlx::stop_gradient(&a),
                Unary::Transpose => mlx::transpose(&a),
                Unary::Real => mlx::real(&a),
            })
        }
        Op::Binary(b, x, y) => {
            let (x, y) = (get(*x)?, get(*y)?);
            one(match b {
                Binary::Add => mlx::add(&x, &y),
                Binary::Subtract => mlx::subtract(&x, &y),
                Binary::Multiply => mlx::multiply(&x, &y),
                Binary::Divide => mlx::divide(&x, &y),
                Binary::Maximum => mlx::maximum(&x, &y),
            })
        }
        Op::Matmul(a, b) => one(mlx::matmul(&get(*a)?, &get(*b)?)),
        Op::Reshape(a, s) => one(mlx::reshape(&get(*a)?, s)),
        Op::Slice { a, start, stop } => {
            one(mlx::slice(&get(*a)?, start, stop, &vec![1; start.len()]))
        }
        Op::Concat { parts, axis } => one(mlx::concatenate(
            parts
                .iter()
                .map(|p| get(*p))
                .collect::<mlx::Result<Vec<_>>>()?,
            *axis,
        )),
        Op::Reduce { how, a, axis } => one(match how {
            Reduce::Sum => mlx::sum_axis(&get(*a)?, &[*axis], false),
            Reduce::Mean => mlx::mean_axis(&get(*a)?, &[*axis], false),
        }),
        Op::Split { a, parts, axis } => mlx::split(&get(*a)?, *parts, *axis),
        Op::SplitAt { a, indices, axis } => mlx::split_at(&get(*a)?, indices, *axis),
        Op::Divmod(a, b) => mlx::divmod(&get(*a)?, &get(*b)?).map(|(q, r)| vec![q, r]),
        Op::Linalg(l, a) => {
            let a = get(*a)?;
            match l {
                Linalg::Qr => mlx::linalg::qr(&a).map(|(q, r)| vec![q, r]),
                Linalg::Svd => mlx::linalg::svd(&a).map(|(u, s, v)| vec![u, s, v]),
                Linalg::Eigh => mlx::linalg::eigh(&a, "L").map(|(w, v)| vec![w, v]),
                Linalg::Eig => mlx::linalg::eig(&a).map(|(w, v)| vec![w, v]),
                Linalg::Lu => mlx::linalg::lu(&a).map(|(p, l, u)| vec![p, l, u]),
                Linalg::LuFactor => mlx::linalg::lu_factor(&a).map(|(lu, p)| vec![lu, p]),
            }
        }
        Op::Quantize(a) => {
            mlx::quantize(&get(*a)?, QUANT_GROUP, QUANT_BITS).map(|(w, s, b)| vec![w, s, b])
        }
        Op::Depends { inputs, deps } => {
            let i: Vec<Array> = inputs.iter().map(|r| get(*r)).collect::<mlx::Result<_>>()?;
            let d: Vec<Array> = deps.iter().map(|r| get(*r)).collect::<mlx::Result<_>>()?;
            mlx::depends(&i, &d)
        }
        Op::KeySplit { seed } => {
            mlx::random::split(&mlx::random::key(*seed as u64)).map(|(a, b)| vec![a, b])
        }
        Op::Call { f, args } => {
            let f = fns(*f)?;
            let args: Vec<Array> = args.iter().map(|r| get(*r)).collect::<mlx::Result<_>>()?;
            f(&args)
        }
    }
}

/// A closure's names while it runs, in order of declaration: captures (the
/// lambda's own copies, never dropped by a call), then parameters and
/// locals, which go in reverse order when it returns, as a C++ body's do.
/// Handles are not copied more than the C++ program copies them: the
/// destruction order decides whether pristine MLX breaks a sibling cycle.
struct Frame<'a> {
    caps: &'a [(Var, Vec<Array>)],
    locals: Vec<(Var, Vec<Array>)>,
}

impl Frame<'_> {
    fn get(&self, r: Ref) -> mlx::Result<Array> {
        let (v, i) = match r {
            Ref::Var(v) => (v, 0),
            Ref::Elem(v, i) => (v, i as usize),
        };
        self.locals
            .iter()
            .rev()
            .chain(self.caps.iter())
            .find(|(n, _)| *n == v)
            .and_then(|(_, g)| g.get(i))
            .cloned()
            .ok_or_else(|| err(format!("[mlx-fuzz] {r} is not in the closure's scope")))
    }
}

impl Drop for Frame<'_> {
    fn drop(&mut self) {
        while let Some(last) = self.locals.pop() {
            drop(last);
        }
    }
}

/// A closure's function: captures are copied now, as a C++ lambda's are.
fn closure(def: &FnDef, top: &Top) -> mlx::Result<Func> {
    let FnDef::Closure {
        params,
        captures,
        body,
        results,
    } = def
    else {
        unreachable!()
    };
    let mut caps = Vec::new();
    for c in captures {
        let slots = top
            .vals
            .get(c)
            .ok_or_else(|| err(format!("[mlx-fuzz] captured {c} is gone")))?;
        caps.push((
            *c,
            (0..slots.len())
                .map(|i| slots.get(i))
                .collect::<mlx::Result<Vec<_>>>()?,
        ));
    }
    let mut fns = HashMap::new();
    for s in body {
        if let Stmt::Let {
            op: Op::Call { f, .. },
            ..
        } = s
        {
            fns.insert(*f, top.func(*f)?);
        }
    }
    let params: Vec<Var> = params.iter().map(|(v, _)| *v).collect();
    let (body, results) = (body.clone(), results.clone());
    Ok(Rc::new(move |inputs: &[Array]| {
        if inputs.len() != params.len() {
            return Err(err(format!(
                "[mlx-fuzz] closure of {} parameters called with {}",
                params.len(),
                inputs.len()
            )));
        }
        let mut frame = Frame {
            caps: &caps,
            locals: Vec::new(),
        };
        for (p, a) in params.iter().zip(inputs) {
            frame.locals.push((*p, vec![a.clone()]));
        }
        for s in &body {
            if let Stmt::Let { out, op } = s {
                let r = apply(op, &|r| frame.get(r), &|f| {
                    fns.get(&f)
                        .cloned()
                        .ok_or_else(|| err(format!("[mlx-fuzz] {f} not captured")))
                })?;
                frame.locals.push((*out, r));
            }
        }
        let out = results.iter().map(|r| frame.get(*r)).collect();
        drop(frame);
        out
    }))
}

/// `f` exported, traced on zeros of `params`, to a file of this process's
/// own and imported back. The file is unlinked at once: the imported
/// function keeps it open, and reads its constants when first evaluated.
fn export_import(f: Func, params: &[Ty], shapeless: bool) -> mlx::Result<Func> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "mlx-fuzz-{}-{}.mlxfn",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ));
    let example = params
        .iter()
        .map(|t| mlx::zeros(&t.shape, dtype_of(t.dtype)))
        .collect::<mlx::Result<Vec<_>>>()?;
    let exported = mlx::export_function(&path, move |x: &[Array]| f(x), &example, shapeless);
    let imported = exported.and_then(|()| mlx::import_function(&path));
    let _ = std::fs::remove_file(&path);
    let g = imported?;
    Ok(Rc::new(move |x: &[Array]| g.call(x)))
}

fn transformed(def: &FnDef, f: Func, params: &[Ty], mode: Mode) -> mlx::Result<Func> {
    let n_params = params.len();
    let inner = move || {
        let f = f.clone();
        move |x: &[Array]| f(x)
    };
    Ok(match def {
        FnDef::Compile { shapeless, .. } => {
            if mode == Mode::Eager {
                return Ok(Rc::new(inner()));
            }
            let c = Rc::new(if *shapeless {
                mlx::compile_shapeless(inner())
            } else {
                mlx::compile(inner())
            });
            Rc::new(move |x: &[Array]| c.call(x))
        }
        FnDef::ExportImport { shapeless, .. } => {
            if mode == Mode::Eager {
                return Ok(Rc::new(inner()));
            }
            export_import(Rc::new(inner()), params, *shapeless)?
        }
        FnDef::Checkpoint { .. } => {
            let t = mlx::checkpoint(inner())?;
            Rc::new(move |x: &[Array]| t.call(x))
        }
        FnDef::CustomVjp { .. } => {
            let t = mlx::custom_vjp(inner(), |p: &[Array], c: &[Array], _: &[Array]| {
                let s = mlx::sum(&c[0])?;
                p.iter().map(|x| mlx::multiply(x, &s)).collect()
            })?;
            Rc::new(move |x: &[Array]| t.call(x))
        }
        FnDef::Vjp { .. } | FnDef::Jvp { .. } => {
            let vjp = matches!(def, FnDef::Vjp { .. });
            Rc::new(move |x: &[Array]| {
                if x.len() < n_params {
                    return Err(err("[mlx-fuzz] too few inputs for vjp/jvp".into()));
                }
                let (p, t) = x.split_at(n_params);
                let (mut o, d) = if vjp {
                    mlx::vjp(inner(), p, t)?
                } else {
                    mlx::jvp(inner(), p, t)?
                };
                o.extend(d);
                Ok(o)
            })
        }
        FnDef::Vmap { .. } => {
            let t = mlx::vmap(inner(), &[], &[])?;
            Rc::new(move |x: &[Array]| t.call(x))
        }
        FnDef::Grad { .. } | FnDef::ValueAndGrad { .. } => {
            // The loss is the sum of the first output (see `FnDef::Grad`).
            let f = inner();
            let loss = move |x: &[Array]| {
                let mut o = f(x)?;
                let first = o
                    .first()
                    .ok_or_else(|| err("[mlx-fuzz] a loss of no output".into()))?;
                o[0] = mlx::sum(first)?;
                Ok(o)
            };
            let argnums: Vec<i32> = (0..n_params as i32).collect();
            let t = if matches!(def, FnDef::Grad { .. }) {
                mlx::grad(loss, &argnums)?
            } else {
                mlx::value_and_grad(loss, &argnums)?
            };
            Rc::new(move |x: &[Array]| t.call(x))
        }
        FnDef::Closure { .. } => unreachable!(),
    })
}

enum Name {
    V(Var),
    F(FnId),
}

/// The program's top-level state.
#[derive(Default)]
struct Top {
    vals: HashMap<Var, Slots>,
    fns: HashMap<FnId, Func>,
    order: Vec<Name>,
}

impl Top {
    fn func(&self, f: FnId) -> mlx::Result<Func> {
        self.fns
            .get(&f)
            .cloned()
            .ok_or_else(|| err(format!("[mlx-fuzz] {f} is not defined")))
    }

    fn slot(r: Ref) -> (Var, usize) {
        match r {
            Ref::Var(v) => (v, 0),
            Ref::Elem(v, i) => (v, i as usize),
        }
    }

    fn get(&self, r: Ref) -> mlx::Result<Array> {
        let (v, i) = Self::slot(r);
        self.vals
            .get(&v)
            .ok_or_else(|| err(format!("[mlx-fuzz] {v} is not in scope")))?
            .get(i)
    }

    fn slots(&mut self, v: Var) -> mlx::Result<&mut Slots> {
        self.vals
            .get_mut(&v)
            .ok_or_else(|| err(format!("[mlx-fuzz] {v} is not in scope")))
    }

    /// Ends the scope: every name, latest first.
    fn end(mut self) {
        while let Some(n) = self.order.pop() {
            match n {
                Name::V(v) => drop(self.vals.remove(&v)),
                Name::F(f) => drop(self.fns.remove(&f)),
            }
        }
    }
}

/// Runs `p` once; `obs` (if given) receives every value an `Eval` evaluated.
pub fn run(p: &Program, mode: Mode, mut obs: Option<&mut Observed>) -> mlx::Result<()> {
    let mut top = Top::default();
    let mut scope = Scope::default();
    let result = (|| {
        for s in &p.stmts {
            scope
                .stmt(s)
                .map_err(|e| err(format!("[mlx-fuzz] invalid program: {e}")))?;
            match s {
                Stmt::Let { out, op } => {
                    let arrays = apply(op, &|r| top.get(r), &|f| top.func(f))?;
                    match &scope.vals[out] {
                        Val::One(Some(t)) => agree(op.name(), &arrays[0], t),
                        Val::Group(g) => {
                            assert_eq!(
                                arrays.len(),
                                g.len(),
                                "[mlx-fuzz model] {}: MLX returned {} arrays, the IR says {}",
                                op.name(),
                                arrays.len(),
                                g.len()
                            );
                            for (a, t) in arrays.iter().zip(g) {
                                agree(op.name(), a, t.as_ref().unwrap());
                            }
                        }
                        Val::One(None) => unreachable!(),
                    }
                    top.vals.insert(*out, Slots::new(&arrays));
                    top.order.push(Name::V(*out));
                }
                Stmt::Def { id, def } => {
                    let f = match def {
                        FnDef::Closure { .. } => closure(def, &top)?,
                        _ => {
                            let inner = def.inner().unwrap();
                            // How many primals a vjp/jvp of `inner` takes,
                            // and what an export traces.
                            let params = scope
                                .fns
                                .get(&inner)
                                .map_or(&[][..], |s| s.params.as_slice());
                            transformed(def, top.func(inner)?, params, mode)?
                        }
                    };
                    top.fns.insert(*id, f);
                    top.order.push(Name::F(*id));
                }
                Stmt::Eval { refs, asynchronous } => {
                    let arrays: Vec<Array> = refs
                        .iter()
                        .map(|r| top.get(*r))
                        .collect::<mlx::Result<_>>()?;
                    if *asynchronous {
                        bf::async_eval(&arrays)?;
                    } else {
                        mlx::eval(&arrays)?;
                    }
                    if let Some(o) = obs.as_deref_mut() {
                        for a in &arrays {
                            observe(a, o)?;
                        }
                    }
                }
                Stmt::Synchronize => mlx::synchronize()?,
                Stmt::Drop(v) => drop(top.vals.remove(v)),
                Stmt::DropFn(f) => drop(top.fns.remove(f)),
                Stmt::Assign { dst, src, how } => {
                    let (dv, di) = Top::slot(*dst);
                    match how {
                        How::Copy => {
                            let a = top.get(*src)?;
                            top.slots(dv)?.assign_copy(di, &a)?;
                        }
                        How::Overwrite => {
                            let a = top.get(*src)?;
                            top.slots(dv)?.overwrite(di, &a)?;
                        }
                        How::Move => {
                            let (sv, si) = Top::slot(*src);
                            if sv == dv {
                                top.slots(dv)?.assign_move(di, None, si)?;
                            } else {
                                let mut from = top.vals.remove(&sv).ok_or_else(|| {
                                    err(format!("[mlx-fuzz] {sv} is not in scope"))
                                })?;
                                let r = top
                                    .slots(dv)
                                    .and_then(|d| d.assign_move(di, Some(&mut from), si));
                                top.vals.insert(sv, from);
                                r?;
                            }
                        }
                    }
                }
                Stmt::Erase { group, index } => top.slots(*group)?.erase(*index as usize)?,
                Stmt::Release(r) => {
                    let (v, i) = Top::slot(*r);
                    drop(top.slots(v)?.take(i)?);
                }
                Stmt::ReleaseTogether { refs: [a, b] } => {
                    let (av, ai) = Top::slot(*a);
                    let a = top.slots(av)?.take(ai)?;
                    let (bv, bi) = Top::slot(*b);
                    let b = top.slots(bv)?.take(bi)?;
                    bf::release_together(a, b)?;
                }
            }
        }
        Ok(())
    })();
    top.end();
    result
}

/// Where `a` and `b` differ beyond the tolerance, if they do.
pub fn compare(a: &Observed, b: &Observed) -> (Option<String>, f64) {
    let mut worst = 0.0f64;
    if a.values.len() != b.values.len() {
        return (
            Some(format!(
                "{} values evaluated, {} eagerly",
                a.values.len(),
                b.values.len()
            )),
            worst,
        );
    }
    for (k, ((da, va), (_, vb))) in a.values.iter().zip(&b.values).enumerate() {
        if va.len() != vb.len() {
            return (
                Some(format!(
                    "value {k}: {} elements, {} eagerly",
                    va.len(),
                    vb.len()
                )),
                worst,
            );
        }
        for (j, (x, y)) in va.iter().zip(vb).enumerate() {
            if y.is_finite() && *y != 0.0 && x.is_finite() {
                worst = worst.max((x - y).abs() / y.abs());
            }
            if !within_tolerance(*x, *y) {
                return (
                    Some(format!(
                        "value {k} ({da:?}) element {j}: {x} compiled, {y} eagerly"
                    )),
                    worst,
                );
            }
        }
    }
    (None, worst)
}

/// Each value's largest distance from eager in ULPs (of float32, or of
/// the integer for uint32), per family: over every element, and over the
/// elements beyond the tolerance, with those values as [`Deviation`]s.
/// Runs of the same program evaluate the same values ([`compare`] has
/// checked the counts).
fn deviations(
    a: &Observed,
    b: &Observed,
    families: &[Family],
) -> (BTreeMap<Family, u64>, BTreeMap<Family, u64>, Vec<Deviation>) {
    let (mut all, mut beyond, mut out) = (BTreeMap::new(), BTreeMap::new(), Vec::new());
    // Another number of values, or of elements, is no rounding: beyond any
    // bound, whatever the family.
    let structure = |value| Deviation {
        value,
        family: Family::Elementwise,
        ulps: u64::MAX,
    };
    if a.values.len() != b.values.len() {
        out.push(structure(a.values.len().min(b.values.len())));
    }
    for (k, ((da, va), (_, vb))) in a.values.iter().zip(&b.values).enumerate() {
        if va.len() != vb.len() {
            out.push(structure(k));
        }
        // A value the lineage does not know gets the strictest bound.
        let family = families.get(k).copied().unwrap_or(Family::Elementwise);
        let (mut most, mut most_beyond) = (0u64, None::<u64>);
        let largest = vb.iter().fold(0f32, |m, y| m.max((*y as f32).abs()));
        for (x, y) in va.iter().zip(vb) {
            let d = match da {
                MxDtype::U32 => (*x as i64).abs_diff(*y as i64),
                _ => normwise_ulps(*x as f32, *y as f32, largest),
            };
            most = most.max(d);
            if !within_tolerance(*x, *y) {
                most_beyond = Some(most_beyond.unwrap_or(0).max(d));
            }
        }
        let e = all.entry(family).or_insert(0);
        *e = (*e).max(most);
        if let Some(d) = most_beyond {
            let e = beyond.entry(family).or_insert(0);
            *e = (*e).max(d);
            out.push(Deviation {
                value: k,
                family,
                ulps: d,
            });
        }
    }
    (all, beyond, out)
}

fn census() -> Option<i64> {
    bf::live_array_descs()
}

/// Runs `p` as the oracle needs: as written (a warm-up, with its values),
/// again with memory and descriptors measured, and, if it compiles
/// anything, eagerly and compiled without fusion.
pub fn measure(p: &Program) -> Outcome {
    let mut o = Outcome::default();
    let mut written = Observed {
        digest: FNV_START,
        ..Default::default()
    };
    let first = run(p, Mode::AsWritten, Some(&mut written));
    // The same program again, measured: what a run leaves behind, on the
    // error path too (an exception through `compile` can leak as well).
    let _ = mlx::synchronize();
    let (bytes, descs) = (mlx::memory::active() as i64, census());
    let again = run(p, Mode::AsWritten, None);
    let _ = mlx::synchronize();
    o.leaked_bytes = mlx::memory::active() as i64 - bytes;
    o.leaked_descriptors = census().zip(descs).map(|(a, b)| a - b);
    match (first, again) {
        (Err(e), _) => o.error = Some(e.message().to_string()),
        (Ok(()), Err(e)) => o.error = Some(format!("on the second run only: {}", e.message())),
        (Ok(()), Ok(())) => {}
    }
    o.digest = written.digest;
    o.overrun = written.overrun.take();
    let compiles = p.stmts.iter().any(|s| {
        matches!(
            s,
            Stmt::Def {
                def: FnDef::Compile { .. },
                ..
            }
        )
    });
    if !compiles {
        // Without a compile the eager program is the program.
        o.eager_error = o.error.clone();
        o.eager_digest = o.error.is_none().then_some(o.digest);
        return o;
    }
    let mut eager = Observed {
        digest: FNV_START,
        ..Default::default()
    };
    match run(p, Mode::Eager, Some(&mut eager)) {
        Err(e) => o.eager_error = Some(e.message().to_string()),
        Ok(()) => o.eager_digest = Some(eager.digest),
    }
    o.overrun = o
        .overrun
        .take()
        .or_else(|| eager.overrun.take().map(|m| format!("eagerly, {m}")));
    if o.error.is_some() || o.eager_error.is_some() {
        return o;
    }
    let mut unfused = Observed {
        digest: FNV_START,
        ..Default::default()
    };
    bf::set_compile_fusion(false);
    let r = run(p, Mode::AsWritten, Some(&mut unfused));
    bf::set_compile_fusion(true);
    if let Err(e) = r {
        o.error = Some(format!("compiled without fusion: {}", e.message()));
        return o;
    }
    let unfused_exact = unfused.digest == eager.digest;
    let (m, worst) = compare(&written, &eager);
    o.max_rel_diff = worst;
    let (all, beyond, deviations) = deviations(&written, &eager, &value_families(p));
    o.fused_ulps = all;
    o.fused_ulps_beyond_tolerance = beyond;
    let unfused_difference = (!unfused_exact).then(|| exact_difference(&unfused, &eager));
    (o.mismatch, o.fused_rounding) = judge_fused(m, unfused_difference, &deviations);
    o
}

/// Where two runs' values first differ in any bit.
fn exact_difference(a: &Observed, b: &Observed) -> String {
    for (k, ((da, va), (_, vb))) in a.values.iter().zip(&b.values).enumerate() {
        if let Some(j) = va
            .iter()
            .zip(vb)
            .position(|(x, y)| x.to_bits() != y.to_bits())
        {
            return format!(
                "value {k} ({da:?}) element {j}: {} compiled, {} eagerly",
                va[j], vb[j]
            );
        }
        if va.len() != vb.len() {
            return format!("value {k}: {} elements, {} eagerly", va.len(), vb.len());
        }
    }
    format!(
        "{} values evaluated, {} eagerly",
        a.values.len(),
        b.values.len()
    )
}

fn print_outcome(i: u64, p: &Program) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "start {i}");
    let _ = out.flush();
    drop(out);
    let o = measure(p);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "outcome {i} {}",
        serde_json::to_string(&o).expect("an outcome serializes")
    );
    let _ = out.flush();
}

const USAGE: &str =
    "usage: mlx-fuzz-worker seeds <seed> <first> <count> [two-threads] | program <file.json> | serve";

/// The size of the edge map of a coverage build's libmlx, if this worker
/// links one (`mlx-patched/coverage/edges.cpp`).
fn coverage_map_size() -> Option<u32> {
    // SAFETY: dlsym of the process's own symbols; the function, if there,
    // takes nothing and returns a u32.
    unsafe {
        let f = libc::dlsym(libc::RTLD_DEFAULT, c"mlx_fork_coverage_map_size".as_ptr());
        (!f.is_null()).then(|| {
            let f: extern "C" fn() -> u32 = std::mem::transmute(f);
            f()
        })
    }
}

/// `serve`: says `coverage <map size>` (or `coverage none`), then runs each
/// line of stdin as a program (JSON), numbered from 0, until stdin closes.
fn serve() -> Result<(), String> {
    use std::io::{BufRead, Write};
    {
        let mut out = std::io::stdout().lock();
        let _ = match coverage_map_size() {
            Some(n) => writeln!(out, "coverage {n}"),
            None => writeln!(out, "coverage none"),
        };
        let _ = out.flush();
    }
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let p = Program::from_json(&line)?;
        print_outcome(i as u64, &p);
    }
    Ok(())
}

/// The worker process: see `mlx_fuzz::campaign` for its protocol.
pub fn worker_main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = mlx_patched::system::cpu_compile_works() {
        eprintln!("mlx-fuzz-worker: refusing to run: {e}");
        return 2;
    }
    let num = |s: &String| s.parse::<u64>().map_err(|_| format!("not a number: {s}"));
    let r = match args.as_slice() {
        [cmd, seed, first, count, mode @ ..] if cmd == "seeds" => (|| {
            let (seed, first, count) = (num(seed)?, num(first)?, num(count)?);
            let releases = match mode {
                [] => mlx_fuzz::Releases::OneThread,
                [m] if m == "two-threads" => mlx_fuzz::Releases::TwoThreads,
                _ => return Err(USAGE.to_string()),
            };
            for i in first..first + count {
                print_outcome(i, &mlx_fuzz::program_of_seed_with(seed, i, releases));
            }
            Ok(())
        })(),
        [cmd] if cmd == "serve" => serve(),
        [cmd, file] if cmd == "program" => std::fs::read_to_string(file)
            .map_err(|e| format!("{file}: {e}"))
            .and_then(|s| Program::from_json(&s))
            .map(|p| print_outcome(0, &p)),
        _ => Err(USAGE.to_string()),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("mlx-fuzz-worker: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_infinite_or_nan_on_one_side_only_is_a_mismatch() {
        let seen = |v: &[f64]| Observed {
            values: vec![(MxDtype::F32, v.to_vec())],
            digest: 0,
            overrun: None,
        };
        let differs = |a: &[f64], b: &[f64]| compare(&seen(a), &seen(b)).0.is_some();
        assert!(!differs(&[1.0, f64::INFINITY], &[1.0, f64::INFINITY]));
        assert!(!differs(&[f64::NAN], &[f64::NAN]));
        assert!(!differs(&[1.0 + 1e-7], &[1.0]));
        assert!(differs(&[1e30], &[f64::INFINITY]));
        assert!(differs(&[f64::INFINITY], &[1e30]));
        assert!(differs(&[f64::NEG_INFINITY], &[f64::INFINITY]));
        assert!(differs(&[f64::NAN], &[1.0]));
        assert!(differs(&[1.0], &[f64::NAN]));
    }
}
