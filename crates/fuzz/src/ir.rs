//! The program IR: straight-line programs over MLX arrays, typed so that
//! every program the generator or the shrinker makes is valid by
//! construction ([`check`]).
//!
//! A value is a single array (`v3`) or a group (`g5`): the vector a
//! multi-output op or a function call returns, whose elements are released
//! one by one (assigned over, moved from, erased). Functions are defined by
//! [`Stmt::Def`]: a closure over parameters and captured values, or a
//! transform of an earlier function. Constants come from explicit PRNG keys,
//! so a program computes the same bits wherever it runs.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A value's name; closure parameters and locals share the numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Var(pub u32);

/// A function's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FnId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dtype {
    F32,
    C64,
    U32,
}

impl Dtype {
    /// MLX's name of the dtype, the same in C++ (`mx::float32`) and Python.
    pub fn mlx_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::C64 => "complex64",
            Dtype::U32 => "uint32",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ty {
    pub dtype: Dtype,
    pub shape: Vec<i32>,
}

impl Ty {
    pub fn f32(shape: &[i32]) -> Ty {
        Ty {
            dtype: Dtype::F32,
            shape: shape.to_vec(),
        }
    }

    pub fn size(&self) -> i64 {
        self.shape.iter().map(|&d| d as i64).product()
    }

    pub fn is_f32(&self) -> bool {
        self.dtype == Dtype::F32
    }
}

/// An operand: a single value, or element `i` of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ref {
    Var(Var),
    Elem(Var, u32),
}

impl Ref {
    pub fn var(self) -> Var {
        match self {
            Ref::Var(v) | Ref::Elem(v, _) => v,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unary {
    Abs,
    Negative,
    Exp,
    Square,
    Sqrt,
    StopGradient,
    /// All axes reversed.
    Transpose,
    /// complex64 to float32.
    Real,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Binary {
    Add,
    Subtract,
    Multiply,
    Divide,
    Maximum,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reduce {
    Sum,
    Mean,
}

/// The linear-algebra factorizations: multi-output ops of square matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Linalg {
    Qr,
    Svd,
    Eigh,
    Eig,
    Lu,
    LuFactor,
}

pub const LINALG: [Linalg; 6] = [
    Linalg::Qr,
    Linalg::Svd,
    Linalg::Eigh,
    Linalg::Eig,
    Linalg::Lu,
    Linalg::LuFactor,
];

/// `quantize`'s fixed parameters: 4 bits in groups of 32.
pub const QUANT_GROUP: i32 = 32;
pub const QUANT_BITS: i32 = 4;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    // ---- single output ----
    /// `random::normal(shape, float32, 0, 1, random::key(seed))`.
    Normal {
        shape: Vec<i32>,
        seed: u32,
    },
    Unary(Unary, Ref),
    /// Element-wise, with broadcasting.
    Binary(Binary, Ref, Ref),
    Matmul(Ref, Ref),
    Reshape(Ref, Vec<i32>),
    Slice {
        a: Ref,
        start: Vec<i32>,
        stop: Vec<i32>,
    },
    Concat {
        parts: Vec<Ref>,
        axis: i32,
    },
    Reduce {
        how: Reduce,
        a: Ref,
        axis: i32,
    },
    // ---- multi-output: the result is a group ----
    Split {
        a: Ref,
        parts: i32,
        axis: i32,
    },
    SplitAt {
        a: Ref,
        indices: Vec<i32>,
        axis: i32,
    },
    Divmod(Ref, Ref),
    Linalg(Linalg, Ref),
    Quantize(Ref),
    Depends {
        inputs: Vec<Ref>,
        deps: Vec<Ref>,
    },
    /// `random::split(random::key(seed))`: two keys.
    KeySplit {
        seed: u32,
    },
    /// A call of a defined function: its results, as a group.
    Call {
        f: FnId,
        args: Vec<Ref>,
    },
}

impl Op {
    /// Whether the op returns a group (a vector) rather than one array.
    pub fn is_group(&self) -> bool {
        matches!(
            self,
            Op::Split { .. }
                | Op::SplitAt { .. }
                | Op::Divmod(..)
                | Op::Linalg(..)
                | Op::Quantize(_)
                | Op::Depends { .. }
                | Op::KeySplit { .. }
                | Op::Call { .. }
        )
    }

    /// The operands, in order.
    pub fn refs(&self) -> Vec<Ref> {
        match self {
            Op::Normal { .. } | Op::KeySplit { .. } => vec![],
            Op::Unary(_, a)
            | Op::Reshape(a, _)
            | Op::Slice { a, .. }
            | Op::Reduce { a, .. }
            | Op::Split { a, .. }
            | Op::SplitAt { a, .. }
            | Op::Linalg(_, a)
            | Op::Quantize(a) => vec![*a],
            Op::Binary(_, a, b) | Op::Matmul(a, b) | Op::Divmod(a, b) => vec![*a, *b],
            Op::Concat { parts, .. } => parts.clone(),
            Op::Depends { inputs, deps } => inputs.iter().chain(deps).copied().collect(),
            Op::Call { args, .. } => args.clone(),
        }
    }

    pub fn refs_mut(&mut self) -> Vec<&mut Ref> {
        match self {
            Op::Normal { .. } | Op::KeySplit { .. } => vec![],
            Op::Unary(_, a)
            | Op::Reshape(a, _)
            | Op::Slice { a, .. }
            | Op::Reduce { a, .. }
            | Op::Split { a, .. }
            | Op::SplitAt { a, .. }
            | Op::Linalg(_, a)
            | Op::Quantize(a) => vec![a],
            Op::Binary(_, a, b) | Op::Matmul(a, b) | Op::Divmod(a, b) => vec![a, b],
            Op::Concat { parts, .. } => parts.iter_mut().collect(),
            Op::Depends { inputs, deps } => inputs.iter_mut().chain(deps.iter_mut()).collect(),
            Op::Call { args, .. } => args.iter_mut().collect(),
        }
    }

    /// A short name for reports ("split", "compile" is not an op).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Normal { .. } => "normal",
            Op::Unary(u, _) => match u {
                Unary::Abs => "abs",
                Unary::Negative => "negative",
                Unary::Exp => "exp",
                Unary::Square => "square",
                Unary::Sqrt => "sqrt",
                Unary::StopGradient => "stop_gradient",
                Unary::Transpose => "transpose",
                Unary::Real => "real",
            },
            Op::Binary(b, ..) => match b {
                Binary::Add => "add",
                Binary::Subtract => "subtract",
                Binary::Multiply => "multiply",
                Binary::Divide => "divide",
                Binary::Maximum => "maximum",
            },
            Op::Matmul(..) => "matmul",
            Op::Reshape(..) => "reshape",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concatenate",
            Op::Reduce {
                how: Reduce::Sum, ..
            } => "sum",
            Op::Reduce {
                how: Reduce::Mean, ..
            } => "mean",
            Op::Split { .. } => "split",
            Op::SplitAt { .. } => "split_at_indices",
            Op::Divmod(..) => "divmod",
            Op::Linalg(l, _) => match l {
                Linalg::Qr => "qr",
                Linalg::Svd => "svd",
                Linalg::Eigh => "eigh",
                Linalg::Eig => "eig",
                Linalg::Lu => "lu",
                Linalg::LuFactor => "lu_factor",
            },
            Op::Quantize(_) => "quantize",
            Op::Depends { .. } => "depends",
            Op::KeySplit { .. } => "random_split",
            Op::Call { .. } => "call",
        }
    }
}

/// A function: a closure, or a transform of an earlier function.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FnDef {
    /// Parameters, the values it captures (by value, when it is defined),
    /// a body of `Let`s, and its results.
    Closure {
        params: Vec<(Var, Ty)>,
        captures: Vec<Var>,
        body: Vec<Stmt>,
        results: Vec<Ref>,
    },
    Compile {
        f: FnId,
        shapeless: bool,
    },
    Checkpoint {
        f: FnId,
    },
    /// `custom_vjp(f, vjp)` with the fixed rule `vjp_i = primal_i * sum(cotangent_0)`.
    CustomVjp {
        f: FnId,
    },
    /// `(primals..., cotangents...) -> (outputs..., vjps...)`.
    Vjp {
        f: FnId,
    },
    /// `(primals..., tangents...) -> (outputs..., jvps...)`.
    Jvp {
        f: FnId,
    },
    /// Mapped over a new leading axis of size [`VMAP_SIZE`] on every input and output.
    Vmap {
        f: FnId,
    },
    /// MLX's `grad` of the loss `sum(f(...)[0])`, with respect to every
    /// input: one gradient per parameter.
    Grad {
        f: FnId,
    },
    /// MLX's `value_and_grad` of `(sum(f(...)[0]), f(...)[1..])`, the rest
    /// auxiliary values, as a trainer's loss function returns them: the
    /// loss, the auxiliary values, then one gradient per parameter.
    ValueAndGrad {
        f: FnId,
    },
    /// `export_function` of `f`, traced on zeros of its parameter types,
    /// to a file, and `import_function` of that file: the function a
    /// program that loads an exported model calls. The trace is simplified
    /// as a compiled one is, and its captured arrays come back from the
    /// file. Its first seeded slice found finding 012 (docs/findings/012,
    /// fixed by `patches/0012-*`).
    ExportImport {
        f: FnId,
        shapeless: bool,
    },
}

pub const VMAP_SIZE: i32 = 2;

impl FnDef {
    /// Each kind of transform of `f` the generator makes, once.
    pub fn transforms_of(f: FnId) -> [FnDef; 11] {
        [
            FnDef::Compile {
                f,
                shapeless: false,
            },
            FnDef::Compile { f, shapeless: true },
            FnDef::Checkpoint { f },
            FnDef::CustomVjp { f },
            FnDef::Vjp { f },
            FnDef::Jvp { f },
            FnDef::Vmap { f },
            FnDef::Grad { f },
            FnDef::ValueAndGrad { f },
            FnDef::ExportImport {
                f,
                shapeless: false,
            },
            FnDef::ExportImport { f, shapeless: true },
        ]
    }

    /// The function it transforms, if it is a transform.
    pub fn inner(&self) -> Option<FnId> {
        match self {
            FnDef::Closure { .. } => None,
            FnDef::Compile { f, .. }
            | FnDef::Checkpoint { f }
            | FnDef::CustomVjp { f }
            | FnDef::Vjp { f }
            | FnDef::Jvp { f }
            | FnDef::Vmap { f }
            | FnDef::Grad { f }
            | FnDef::ValueAndGrad { f }
            | FnDef::ExportImport { f, .. } => Some(*f),
        }
    }

    /// The same transform of `g` instead (a closure stays as it is).
    pub fn with_inner(&self, g: FnId) -> FnDef {
        match self {
            FnDef::Closure { .. } => self.clone(),
            FnDef::Compile { shapeless, .. } => FnDef::Compile {
                f: g,
                shapeless: *shapeless,
            },
            FnDef::Checkpoint { .. } => FnDef::Checkpoint { f: g },
            FnDef::CustomVjp { .. } => FnDef::CustomVjp { f: g },
            FnDef::Vjp { .. } => FnDef::Vjp { f: g },
            FnDef::Jvp { .. } => FnDef::Jvp { f: g },
            FnDef::Vmap { .. } => FnDef::Vmap { f: g },
            FnDef::Grad { .. } => FnDef::Grad { f: g },
            FnDef::ValueAndGrad { .. } => FnDef::ValueAndGrad { f: g },
            FnDef::ExportImport { shapeless, .. } => FnDef::ExportImport {
                f: g,
                shapeless: *shapeless,
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            FnDef::Closure { .. } => "closure",
            FnDef::Compile {
                shapeless: false, ..
            } => "compile",
            FnDef::Compile {
                shapeless: true, ..
            } => "compile(shapeless)",
            FnDef::Checkpoint { .. } => "checkpoint",
            FnDef::CustomVjp { .. } => "custom_vjp",
            FnDef::Vjp { .. } => "vjp",
            FnDef::Jvp { .. } => "jvp",
            FnDef::Vmap { .. } => "vmap",
            FnDef::Grad { .. } => "grad",
            FnDef::ValueAndGrad { .. } => "value_and_grad",
            FnDef::ExportImport {
                shapeless: false, ..
            } => "export_import",
            FnDef::ExportImport {
                shapeless: true, ..
            } => "export_import(shapeless)",
        }
    }
}

/// How an assignment releases the value it replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum How {
    /// `dst = src;`
    Copy,
    /// `dst = std::move(src);` (`src` is then moved from).
    Move,
    /// `dst.overwrite_descriptor(src);`
    Overwrite,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stmt {
    Let {
        out: Var,
        op: Op,
    },
    Def {
        id: FnId,
        def: FnDef,
    },
    Eval {
        refs: Vec<Ref>,
        asynchronous: bool,
    },
    Synchronize,
    /// The value's destructor (the end of its scope).
    Drop(Var),
    /// The function's last handle goes: a compiled one erases its cache entry.
    DropFn(FnId),
    Assign {
        dst: Ref,
        src: Ref,
        how: How,
    },
    /// `group.erase(group.begin() + index)`.
    Erase {
        group: Var,
        index: u32,
    },
    /// Two threads let go at the same instant: each array is moved out of
    /// its slot and destroyed on a thread of its own.
    ReleaseTogether {
        refs: [Ref; 2],
    },
    /// The array is moved out of its slot and destroyed (its destructor),
    /// leaving the slot moved-from: one half of a [`Stmt::ReleaseTogether`]
    /// on the program's own thread.
    Release(Ref),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Program {
    pub stmts: Vec<Stmt>,
}

impl Program {
    /// Statements, those in closure bodies included.
    pub fn len(&self) -> usize {
        fn count(stmts: &[Stmt]) -> usize {
            stmts
                .iter()
                .map(|s| match s {
                    Stmt::Def {
                        def: FnDef::Closure { body, .. },
                        ..
                    } => 1 + count(body),
                    _ => 1,
                })
                .sum()
        }
        count(&self.stmts)
    }

    pub fn is_empty(&self) -> bool {
        self.stmts.is_empty()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a program serializes")
    }

    pub fn from_json(s: &str) -> Result<Program, String> {
        serde_json::from_str(s).map_err(|e| format!("not a program: {e}"))
    }
}

/// A function's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sig {
    pub params: Vec<Ty>,
    pub results: Vec<Ty>,
}

/// What a name holds while the program runs. `None`: moved from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    One(Option<Ty>),
    Group(Vec<Option<Ty>>),
}

/// The names in scope at one point of a program, with their types.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub vals: BTreeMap<Var, Val>,
    pub fns: BTreeMap<FnId, Sig>,
    /// Each function's definition with the scope it was defined in, to
    /// type a call with other shapes than its signature's ([`Scope::instantiate`]).
    pub defs: BTreeMap<FnId, std::sync::Arc<(FnDef, Scope)>>,
}

/// What an op returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    One(Ty),
    Group(Vec<Ty>),
}

pub type CheckResult<T> = Result<T, String>;

fn ensure(ok: bool, what: impl FnOnce() -> String) -> CheckResult<()> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Numpy broadcasting of two shapes.
pub fn broadcast(a: &[i32], b: &[i32]) -> Option<Vec<i32>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

fn axis_of(axis: i32, rank: usize) -> CheckResult<usize> {
    ensure(axis >= 0 && (axis as usize) < rank, || {
        format!("axis {axis} of a rank-{rank} array")
    })?;
    Ok(axis as usize)
}

impl Scope {
    /// The type of a live operand.
    pub fn ty(&self, r: Ref) -> CheckResult<&Ty> {
        match (self.vals.get(&r.var()), r) {
            (Some(Val::One(Some(t))), Ref::Var(_)) => Ok(t),
            (Some(Val::Group(g)), Ref::Elem(_, i)) => match g.get(i as usize) {
                Some(Some(t)) => Ok(t),
                Some(None) => Err(format!("{r:?} was moved from")),
                None => Err(format!("{r:?} is past the group's end ({})", g.len())),
            },
            (Some(Val::One(None)), _) => Err(format!("{r:?} was moved from")),
            (Some(_), _) => Err(format!("{r:?}: a single and a group confused")),
            (None, _) => Err(format!("{r:?} is not in scope")),
        }
    }

    fn f32(&self, r: Ref) -> CheckResult<&Ty> {
        let t = self.ty(r)?;
        ensure(t.is_f32(), || {
            format!("{r:?} is {:?}, not float32", t.dtype)
        })?;
        Ok(t)
    }

    /// Whether a slot exists (live or moved from), for assignment targets.
    fn slot_exists(&self, r: Ref) -> bool {
        match (self.vals.get(&r.var()), r) {
            (Some(Val::One(_)), Ref::Var(_)) => true,
            (Some(Val::Group(g)), Ref::Elem(_, i)) => (i as usize) < g.len(),
            _ => false,
        }
    }

    fn set_slot(&mut self, r: Ref, t: Option<Ty>) {
        match (self.vals.get_mut(&r.var()), r) {
            (Some(Val::One(s)), Ref::Var(_)) => *s = t,
            (Some(Val::Group(g)), Ref::Elem(_, i)) => g[i as usize] = t,
            _ => unreachable!("checked by slot_exists"),
        }
    }

    /// What `op` returns here, or why it is not valid here.
    pub fn op_type(&self, op: &Op) -> CheckResult<Out> {
        use Out::*;
        Ok(match op {
            Op::Normal { shape, .. } => {
                ensure(shape.iter().all(|&d| d > 0), || format!("shape {shape:?}"))?;
                One(Ty::f32(shape))
            }
            Op::Unary(u, a) => {
                let t = self.ty(*a)?;
                match u {
                    Unary::Real => {
                        ensure(t.dtype == Dtype::C64, || format!("real of {:?}", t.dtype))?;
                        One(Ty::f32(&t.shape))
                    }
                    Unary::Transpose => {
                        ensure(t.is_f32(), || "transpose of a non-float".into())?;
                        One(Ty::f32(&t.shape.iter().rev().copied().collect::<Vec<_>>()))
                    }
                    _ => One(self.f32(*a)?.clone()),
                }
            }
            Op::Binary(_, a, b) | Op::Divmod(a, b) => {
                let (ta, tb) = (self.f32(*a)?, self.f32(*b)?);
                let s = broadcast(&ta.shape, &tb.shape)
                    .ok_or_else(|| format!("{:?} and {:?} do not broadcast", ta.shape, tb.shape))?;
                if matches!(op, Op::Divmod(..)) {
                    Group(vec![Ty::f32(&s), Ty::f32(&s)])
                } else {
                    One(Ty::f32(&s))
                }
            }
            Op::Matmul(a, b) => {
                let (ta, tb) = (self.f32(*a)?, self.f32(*b)?);
                ensure(
                    ta.shape.len() == 2 && tb.shape.len() == 2 && ta.shape[1] == tb.shape[0],
                    || format!("matmul of {:?} and {:?}", ta.shape, tb.shape),
                )?;
                One(Ty::f32(&[ta.shape[0], tb.shape[1]]))
            }
            Op::Reshape(a, shape) => {
                let t = self.f32(*a)?;
                ensure(
                    shape.iter().all(|&d| d > 0) && Ty::f32(shape).size() == t.size(),
                    || format!("reshape {:?} to {shape:?}", t.shape),
                )?;
                One(Ty::f32(shape))
            }
            Op::Slice { a, start, stop } => {
                let t = self.f32(*a)?;
                ensure(
                    start.len() == t.shape.len() && stop.len() == t.shape.len(),
                    || "slice rank".into(),
                )?;
                let mut shape = Vec::new();
                for i in 0..t.shape.len() {
                    ensure(
                        0 <= start[i] && start[i] < stop[i] && stop[i] <= t.shape[i],
                        || format!("slice {start:?}..{stop:?} of {:?}", t.shape),
                    )?;
                    shape.push(stop[i] - start[i]);
                }
                One(Ty::f32(&shape))
            }
            Op::Concat { parts, axis } => {
                ensure(!parts.is_empty(), || "concatenate of nothing".into())?;
                let first = self.f32(parts[0])?.clone();
                let ax = axis_of(*axis, first.shape.len())?;
                let mut shape = first.shape.clone();
                for p in &parts[1..] {
                    let t = self.f32(*p)?;
                    ensure(
                        t.shape.len() == shape.len()
                            && (0..shape.len()).all(|i| i == ax || t.shape[i] == shape[i]),
                        || format!("concatenate {:?} with {:?}", first.shape, t.shape),
                    )?;
                    shape[ax] += t.shape[ax];
                }
                One(Ty::f32(&shape))
            }
            Op::Reduce { a, axis, .. } => {
                let t = self.f32(*a)?;
                let ax = axis_of(*axis, t.shape.len())?;
                let mut shape = t.shape.clone();
                shape.remove(ax);
                One(Ty::f32(&shape))
            }
            Op::Split { a, parts, axis } => {
                let t = self.f32(*a)?;
                let ax = axis_of(*axis, t.shape.len())?;
                ensure(*parts > 0 && t.shape[ax] % parts == 0, || {
                    format!("split {:?} in {parts} along {axis}", t.shape)
                })?;
                let mut shape = t.shape.clone();
                shape[ax] /= parts;
                Group(vec![Ty::f32(&shape); *parts as usize])
            }
            Op::SplitAt { a, indices, axis } => {
                let t = self.f32(*a)?;
                let ax = axis_of(*axis, t.shape.len())?;
                let mut last = 0;
                let mut out = Vec::new();
                for &i in indices.iter().chain(std::iter::once(&t.shape[ax])) {
                    ensure(i > last && i <= t.shape[ax], || {
                        format!("split {:?} at {indices:?}", t.shape)
                    })?;
                    let mut shape = t.shape.clone();
                    shape[ax] = i - last;
                    out.push(Ty::f32(&shape));
                    last = i;
                }
                Group(out)
            }
            Op::Linalg(l, a) => {
                let t = self.f32(*a)?;
                ensure(t.shape.len() == 2 && t.shape[0] == t.shape[1], || {
                    format!("{} of {:?}", op.name(), t.shape)
                })?;
                let n = t.shape[0];
                let (m, v) = (Ty::f32(&[n, n]), Ty::f32(&[n]));
                let c = |s: &[i32]| Ty {
                    dtype: Dtype::C64,
                    shape: s.to_vec(),
                };
                let u = Ty {
                    dtype: Dtype::U32,
                    shape: vec![n],
                };
                Group(match l {
                    Linalg::Qr => vec![m.clone(), m],
                    Linalg::Svd => vec![m.clone(), v, m],
                    Linalg::Eigh => vec![v, m],
                    Linalg::Eig => vec![c(&[n]), c(&[n, n])],
                    Linalg::Lu => vec![u, m.clone(), m],
                    Linalg::LuFactor => vec![m, u],
                })
            }
            Op::Quantize(a) => {
                let t = self.f32(*a)?;
                ensure(t.shape.len() == 2 && t.shape[1] % QUANT_GROUP == 0, || {
                    format!("quantize of {:?}", t.shape)
                })?;
                let (r, c) = (t.shape[0], t.shape[1]);
                let packed = Ty {
                    dtype: Dtype::U32,
                    shape: vec![r, c * QUANT_BITS / 32],
                };
                let g = Ty::f32(&[r, c / QUANT_GROUP]);
                Group(vec![packed, g.clone(), g])
            }
            Op::Depends { inputs, deps } => {
                ensure(!inputs.is_empty() && !deps.is_empty(), || {
                    "depends needs inputs and dependencies".into()
                })?;
                for d in deps {
                    self.ty(*d)?;
                }
                Group(
                    inputs
                        .iter()
                        .map(|i| self.ty(*i).cloned())
                        .collect::<CheckResult<_>>()?,
                )
            }
            Op::KeySplit { .. } => Group(vec![
                Ty {
                    dtype: Dtype::U32,
                    shape: vec![2]
                };
                2
            ]),
            Op::Call { f, args } => {
                let sig = self
                    .fns
                    .get(f)
                    .ok_or_else(|| format!("{f:?} is not defined here"))?;
                ensure(sig.params.len() == args.len(), || {
                    format!(
                        "{f:?} takes {} arguments, given {}",
                        sig.params.len(),
                        args.len()
                    )
                })?;
                let given = args
                    .iter()
                    .map(|a| self.ty(*a).cloned())
                    .collect::<CheckResult<Vec<_>>>()?;
                Group(self.instantiate(*f, &given)?)
            }
        })
    }

    /// The scope a closure's body sees: its captures (live, by value) and
    /// its parameters, with the functions defined here.
    fn closure_scope(&self, captures: &[Var], params: &[(Var, Ty)]) -> CheckResult<Scope> {
        let mut inside = Scope {
            vals: BTreeMap::new(),
            fns: self.fns.clone(),
            defs: self.defs.clone(),
        };
        for c in captures {
            let v = self
                .vals
                .get(c)
                .ok_or_else(|| format!("captured {c:?} is not in scope"))?;
            let live = match v {
                Val::One(t) => t.is_some(),
                Val::Group(g) => g.iter().all(Option::is_some),
            };
            ensure(live, || format!("captured {c:?} holds a moved-from array"))?;
            inside.vals.insert(*c, v.clone());
        }
        for (p, t) in params {
            ensure(
                inside.vals.insert(*p, Val::One(Some(t.clone()))).is_none(),
                || format!("{p:?} named twice"),
            )?;
        }
        Ok(inside)
    }

    /// Whether `f`'s trace, replayed by a shapeless compile on arguments of
    /// other shapes, gives what tracing `f` on them again would (the IR's
    /// model of any call with other shapes). MLX replays the trace and asks
    /// each primitive for its output's shape from its inputs'
    /// (`output_shapes`); a primitive without that rule refuses (an allowed
    /// error, `oracle::NOT_IMPLEMENTED`). A closure's own ops hold to the
    /// model: the IR types them again with the new shapes, and where MLX
    /// infers a shape it infers the same one (1.96 million blind programs
    /// made such calls with no finding). The graphs MLX builds for a
    /// transform do not: `vjp`, `jvp`, `vmap` and `grad` insert broadcasts,
    /// reshapes and squeezes to the shapes of the trace, and `checkpoint`
    /// and `custom_vjp` wrap theirs in a primitive of their own; replayed on
    /// other shapes they raise shape errors or give other shapes than the
    /// model's (a guided campaign's `compile(jvp(f), shapeless=true)`
    /// called with `[2, 32]`, then `[4, 32]`). So a closure replays any
    /// shape when each function it calls does, and a transform only if it
    /// is a `compile` or an export (whose trace is a compile's).
    pub fn replays_any_shape(&self, f: FnId) -> bool {
        let Some((def, at)) = self.defs.get(&f).map(|d| &**d) else {
            return false;
        };
        match def {
            FnDef::Closure { body, .. } => body.iter().all(|s| match s {
                Stmt::Let {
                    op: Op::Call { f: g, .. },
                    ..
                } => at.replays_any_shape(*g),
                _ => true,
            }),
            FnDef::Compile { f: g, .. } | FnDef::ExportImport { f: g, .. } => {
                at.replays_any_shape(*g)
            }
            FnDef::Checkpoint { .. }
            | FnDef::CustomVjp { .. }
            | FnDef::Vjp { .. }
            | FnDef::Jvp { .. }
            | FnDef::Vmap { .. }
            | FnDef::Grad { .. }
            | FnDef::ValueAndGrad { .. } => false,
        }
    }

    /// What `f` returns when called with arguments of types `args`, which
    /// may have other shapes than its signature's (a compiled function
    /// traces again; a shapeless one runs its trace on them): its
    /// definition checked again with them, or why they do not fit it.
    pub fn instantiate(&self, f: FnId, args: &[Ty]) -> CheckResult<Vec<Ty>> {
        let sig = self
            .fns
            .get(&f)
            .ok_or_else(|| format!("{f:?} is not defined here"))?;
        if sig.params == args {
            return Ok(sig.results.clone());
        }
        let (def, at) = &**self
            .defs
            .get(&f)
            .ok_or_else(|| format!("{f:?} has no definition here"))?;
        let split = |n: usize| -> CheckResult<(&[Ty], &[Ty])> {
            ensure(args.len() >= n, || {
                format!("{f:?} given {} arguments", args.len())
            })?;
            Ok(args.split_at(n))
        };
        let primals = |g: &FnId| at.fns.get(g).map_or(0, |s| s.params.len());
        Ok(match def {
            FnDef::Closure {
                params,
                captures,
                body,
                results,
            } => {
                ensure(params.len() == args.len(), || {
                    format!(
                        "{f:?} takes {} arguments, given {}",
                        params.len(),
                        args.len()
                    )
                })?;
                let retyped: Vec<(Var, Ty)> = params
                    .iter()
                    .zip(args)
                    .map(|((v, _), t)| (*v, t.clone()))
                    .collect();
                let mut inside = at.closure_scope(captures, &retyped)?;
                for s in body {
                    inside.stmt(s)?;
                }
                results
                    .iter()
                    .map(|r| inside.ty(*r).cloned())
                    .collect::<CheckResult<_>>()?
            }
            FnDef::Compile {
                f: g,
                shapeless: true,
            } => {
                ensure(at.replays_any_shape(*g), || {
                    format!(
                        "a shapeless compile of {g:?} replays the trace of its first call, \
                         and its trace keeps shapes of its own"
                    )
                })?;
                at.instantiate(*g, args)?
            }
            // The file holds the trace of the exported shapes only.
            FnDef::ExportImport {
                shapeless: false, ..
            } => {
                return Err(format!(
                    "{f:?} is imported: it takes only the shapes it was exported with, {:?}",
                    sig.params
                ))
            }
            FnDef::ExportImport {
                f: g,
                shapeless: true,
            } => {
                ensure(at.replays_any_shape(*g), || {
                    format!(
                        "a shapeless export of {g:?} replays the trace of its export, \
                         and its trace keeps shapes of its own"
                    )
                })?;
                at.instantiate(*g, args)?
            }
            FnDef::Compile { f: g, .. }
            | FnDef::Checkpoint { f: g }
            | FnDef::CustomVjp { f: g } => at.instantiate(*g, args)?,
            FnDef::Vjp { f: g } => {
                let (p, c) = split(primals(g))?;
                let r = at.instantiate(*g, p)?;
                ensure(r == c, || format!("cotangents {c:?} for outputs {r:?}"))?;
                [&r[..], p].concat()
            }
            FnDef::Jvp { f: g } => {
                let (p, t) = split(primals(g))?;
                ensure(p == t, || format!("tangents {t:?} for primals {p:?}"))?;
                let r = at.instantiate(*g, p)?;
                [r.clone(), r].concat()
            }
            FnDef::Vmap { f: g } => {
                let mut inner = Vec::new();
                for t in args {
                    ensure(t.shape.first() == Some(&VMAP_SIZE), || {
                        format!("vmap of {:?}, not along an axis of {VMAP_SIZE}", t.shape)
                    })?;
                    inner.push(Ty {
                        dtype: t.dtype,
                        shape: t.shape[1..].to_vec(),
                    });
                }
                at.instantiate(*g, &inner)?
                    .iter()
                    .map(|t| Ty {
                        dtype: t.dtype,
                        shape: [&[VMAP_SIZE][..], &t.shape].concat(),
                    })
                    .collect()
            }
            FnDef::Grad { f: g } => {
                at.instantiate(*g, args)?;
                args.to_vec()
            }
            FnDef::ValueAndGrad { f: g } => {
                let r = at.instantiate(*g, args)?;
                [&[Ty::f32(&[])][..], &r[1..], args].concat()
            }
        })
    }

    /// The signature of `def` here.
    pub fn def_type(&self, def: &FnDef) -> CheckResult<Sig> {
        let inner = |f: &FnId| {
            self.fns
                .get(f)
                .cloned()
                .ok_or_else(|| format!("{f:?} is not defined here"))
        };
        let all_f32 = |tys: &[Ty]| tys.iter().all(Ty::is_f32);
        Ok(match def {
            FnDef::Closure {
                params,
                captures,
                body,
                results,
            } => {
                let mut inside = self.closure_scope(captures, params)?;
                for s in body {
                    let Stmt::Let { .. } = s else {
                        return Err("a closure body holds only Lets".into());
                    };
                    inside.stmt(s)?;
                }
                ensure(!results.is_empty(), || {
                    "a closure returns at least one array".into()
                })?;
                Sig {
                    params: params.iter().map(|(_, t)| t.clone()).collect(),
                    results: results
                        .iter()
                        .map(|r| inside.ty(*r).cloned())
                        .collect::<CheckResult<_>>()?,
                }
            }
            FnDef::Compile { f, .. } | FnDef::Checkpoint { f } | FnDef::ExportImport { f, .. } => {
                inner(f)?
            }
            FnDef::CustomVjp { f } => {
                let s = inner(f)?;
                ensure(
                    all_f32(&s.params) && s.results.first().is_some_and(Ty::is_f32),
                    || "custom_vjp needs float inputs and a float first output".into(),
                )?;
                s
            }
            FnDef::Vjp { f } => {
                let s = inner(f)?;
                ensure(all_f32(&s.params) && all_f32(&s.results), || {
                    "vjp of a function with non-float inputs or outputs".into()
                })?;
                Sig {
                    params: [s.params.clone(), s.results.clone()].concat(),
                    results: [s.results, s.params].concat(),
                }
            }
            FnDef::Jvp { f } => {
                let s = inner(f)?;
                ensure(all_f32(&s.params) && all_f32(&s.results), || {
                    "jvp of a function with non-float inputs or outputs".into()
                })?;
                Sig {
                    params: [s.params.clone(), s.params].concat(),
                    results: [s.results.clone(), s.results].concat(),
                }
            }
            FnDef::Grad { f } | FnDef::ValueAndGrad { f } => {
                let s = inner(f)?;
                ensure(
                    !s.params.is_empty()
                        && all_f32(&s.params)
                        && s.results.first().is_some_and(Ty::is_f32),
                    || format!("{} needs float inputs and a float first output", def.name()),
                )?;
                let results = if matches!(def, FnDef::Grad { .. }) {
                    s.params.clone()
                } else {
                    [&[Ty::f32(&[])][..], &s.results[1..], &s.params].concat()
                };
                Sig {
                    params: s.params,
                    results,
                }
            }
            FnDef::Vmap { f } => {
                let s = inner(f)?;
                ensure(!s.params.is_empty(), || {
                    "vmap of a function without inputs".into()
                })?;
                let batched = |t: &Ty| Ty {
                    dtype: t.dtype,
                    shape: [&[VMAP_SIZE][..], &t.shape].concat(),
                };
                Sig {
                    params: s.params.iter().map(batched).collect(),
                    results: s.results.iter().map(batched).collect(),
                }
            }
        })
    }

    /// Checks one statement and applies it to the scope.
    pub fn stmt(&mut self, s: &Stmt) -> CheckResult<()> {
        match s {
            Stmt::Let { out, op } => {
                ensure(!self.vals.contains_key(out), || {
                    format!("{out:?} named twice")
                })?;
                let v = match self.op_type(op)? {
                    Out::One(t) => Val::One(Some(t)),
                    Out::Group(g) => Val::Group(g.into_iter().map(Some).collect()),
                };
                self.vals.insert(*out, v);
            }
            Stmt::Def { id, def } => {
                ensure(!self.fns.contains_key(id), || {
                    format!("{id:?} defined twice")
                })?;
                let sig = self.def_type(def)?;
                self.defs
                    .insert(*id, std::sync::Arc::new((def.clone(), self.clone())));
                self.fns.insert(*id, sig);
            }
            Stmt::Eval { refs, .. } => {
                ensure(!refs.is_empty(), || "eval of nothing".into())?;
                for r in refs {
                    self.ty(*r)?;
                }
            }
            Stmt::Synchronize => {}
            Stmt::Drop(v) => {
                self.vals
                    .remove(v)
                    .ok_or_else(|| format!("drop of {v:?}, not in scope"))?;
            }
            Stmt::DropFn(f) => {
                self.fns
                    .remove(f)
                    .ok_or_else(|| format!("drop of {f:?}, not defined"))?;
            }
            Stmt::Assign { dst, src, how } => {
                let t = self.ty(*src)?.clone();
                ensure(self.slot_exists(*dst), || {
                    format!("assignment to {dst:?}, which is not a slot here")
                })?;
                match how {
                    How::Copy => self.set_slot(*dst, Some(t)),
                    How::Move => {
                        ensure(dst != src, || "self-move-assignment".into())?;
                        self.set_slot(*src, None);
                        self.set_slot(*dst, Some(t));
                    }
                    How::Overwrite => {
                        // Only a live array has a descriptor to overwrite.
                        self.ty(*dst)?;
                        self.set_slot(*dst, Some(t));
                    }
                }
            }
            Stmt::Release(r) => {
                self.ty(*r)?;
                self.set_slot(*r, None);
            }
            Stmt::ReleaseTogether { refs } => {
                ensure(refs[0] != refs[1], || "one array let go of twice".into())?;
                for r in refs {
                    self.ty(*r)?;
                }
                for r in refs {
                    self.set_slot(*r, None);
                }
            }
            Stmt::Erase { group, index } => match self.vals.get_mut(group) {
                Some(Val::Group(g)) if (*index as usize) < g.len() => {
                    g.remove(*index as usize);
                }
                _ => return Err(format!("erase of {group:?}[{index}]")),
            },
        }
        Ok(())
    }
}

/// Whether `p` is a valid program, and if not, why.
pub fn check(p: &Program) -> CheckResult<()> {
    let mut scope = Scope::default();
    for (i, s) in p.stmts.iter().enumerate() {
        scope.stmt(s).map_err(|e| format!("statement {i}: {e}"))?;
    }
    Ok(())
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl fmt::Display for FnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "f{}", self.0)
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ref::Var(v) => write!(f, "{v}"),
            Ref::Elem(v, i) => write!(f, "{v}[{i}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f0(x) = exp(x)` on `[2, 4]`, `f1` = `outer` of `f0`, `f2` a shapeless
    /// compile of `f1`, then a call of `f2` on an array of `shape`.
    fn shapeless_call(outer: Option<FnDef>, shape: &[i32]) -> CheckResult<()> {
        // A jvp takes its tangents after its primals.
        let arity = if matches!(outer, Some(FnDef::Jvp { .. })) {
            2
        } else {
            1
        };
        let mut stmts = vec![Stmt::Def {
            id: FnId(0),
            def: FnDef::Closure {
                params: vec![(Var(0), Ty::f32(&[2, 4]))],
                captures: vec![],
                body: vec![Stmt::Let {
                    out: Var(1),
                    op: Op::Unary(Unary::Exp, Ref::Var(Var(0))),
                }],
                results: vec![Ref::Var(Var(1))],
            },
        }];
        let inner = match outer {
            Some(def) => {
                stmts.push(Stmt::Def { id: FnId(1), def });
                FnId(1)
            }
            None => FnId(0),
        };
        stmts.push(Stmt::Def {
            id: FnId(2),
            def: FnDef::Compile {
                f: inner,
                shapeless: true,
            },
        });
        stmts.push(Stmt::Let {
            out: Var(2),
            op: Op::Normal {
                shape: shape.to_vec(),
                seed: 0,
            },
        });
        stmts.push(Stmt::Let {
            out: Var(3),
            op: Op::Call {
                f: FnId(2),
                args: vec![Ref::Var(Var(2)); arity],
            },
        });
        check(&Program { stmts })
    }

    #[test]
    fn a_shapeless_compile_of_a_transform_takes_only_its_traced_shapes() {
        // A closure's trace replays on other shapes, directly or compiled.
        assert_eq!(shapeless_call(None, &[2, 4]), Ok(()));
        assert_eq!(shapeless_call(None, &[3, 5]), Ok(()));
        let compiled = FnDef::Compile {
            f: FnId(0),
            shapeless: false,
        };
        assert_eq!(shapeless_call(Some(compiled), &[3, 5]), Ok(()));
        // A transform's graph keeps the traced shapes: its own shapes only.
        for t in [FnDef::Jvp { f: FnId(0) }, FnDef::Grad { f: FnId(0) }] {
            assert_eq!(shapeless_call(Some(t.clone()), &[2, 4]), Ok(()));
            let e = shapeless_call(Some(t), &[3, 5]).unwrap_err();
            assert!(e.contains("replays the trace of its first call"), "{e}");
        }
    }

    #[test]
    fn an_imported_function_takes_its_exported_shapes_unless_exported_shapeless() {
        let export = |shapeless| FnDef::ExportImport {
            f: FnId(0),
            shapeless,
        };
        assert_eq!(shapeless_call(Some(export(false)), &[2, 4]), Ok(()));
        let e = shapeless_call(Some(export(false)), &[3, 5]).unwrap_err();
        assert!(
            e.contains("takes only the shapes it was exported with"),
            "{e}"
        );
        assert_eq!(shapeless_call(Some(export(true)), &[3, 5]), Ok(()));
    }
}
