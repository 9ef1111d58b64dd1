//! How far a fused kernel's rounding may carry an evaluated value.
//!
//! On 0.32.2 the CPU's fused element-wise kernels round differently from
//! eager evaluation (g++ contracts multiply-adds), so compiled values may
//! differ from eager in the last bits. How far that travels depends on what
//! the value went through: element-wise ops keep it within a few hundred
//! units in the last place of the value's largest element (measured), while
//! a sum whose terms cancel, a pivot choice or a floor can turn it into any
//! difference at all. So each evaluated value gets the [`Family`] of the
//! ops it depends on ([`value_families`]), and a family where a bound holds
//! gets one ([`Family::bound`]), measured on campaigns (`docs/fuzzing.md`).
//! A fused value beyond the tolerance and beyond its family's bound is a
//! finding; a family without a bound keeps only the rule that compiling
//! without fusion gives eager's bits exactly.

use crate::ir::{Binary, FnDef, FnId, Op, Program, Ref, Scope, Stmt, Unary, Val, Var};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a value went through, from least to most able to amplify a
/// difference in its inputs' last bits. A value's family is the largest
/// of its ops'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Family {
    /// Element-wise arithmetic, layout ops and random draws: each op
    /// rounds once, relative to its own result.
    Elementwise,
    /// Sums, means and matrix products, and the sums inside a derivative
    /// (`grad`'s loss, a broadcast operand's cotangent): a sum of
    /// cancelling terms turns a small difference in a term into one of
    /// any size relative to the sum.
    Reduction,
    /// The factorizations: eigenvectors near a repeated eigenvalue, and
    /// LU's pivot choice, can move by any amount.
    Linalg,
    /// Discontinuous ops: `divmod`'s floor, `quantize`'s rounding, and the
    /// derivative of `abs` or `maximum` (a sign, a selection). One ULP in
    /// an input can flip the result.
    Discontinuous,
}

impl Family {
    pub const ALL: [Family; 4] = [
        Family::Elementwise,
        Family::Reduction,
        Family::Linalg,
        Family::Discontinuous,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "element-wise",
            Family::Reduction => "reduction",
            Family::Linalg => "linalg",
            Family::Discontinuous => "discontinuous",
        }
    }

    /// How many float32 ULPs (of the value's largest magnitude,
    /// [`normwise_ulps`]) a fused value of this family may be from eager's
    /// beyond the tolerance, where the unfused compile gave eager's bits
    /// exactly; `None`: no bound holds, only that rule.
    ///
    /// Element-wise: 4 times the largest distance measured over every
    /// value of a 12-minute campaign (244, `docs/fuzzing.md`, "Fused
    /// rounding"). The others amplify without limit: a sum whose terms
    /// cancel, a pivot choice, a floor.
    pub fn bound(self) -> Option<u64> {
        match self {
            Family::Elementwise => Some(ELEMENTWISE_ULPS),
            Family::Reduction | Family::Linalg | Family::Discontinuous => None,
        }
    }

    /// An op's family as written, or once differentiated.
    fn of_op(op: &Op, derivative: bool) -> Family {
        match op {
            Op::Reduce { .. } | Op::Matmul(..) => Family::Reduction,
            Op::Linalg(..) => Family::Linalg,
            Op::Divmod(..) | Op::Quantize(_) => Family::Discontinuous,
            // A sign and a selection.
            Op::Unary(Unary::Abs, _) | Op::Binary(Binary::Maximum, ..) if derivative => {
                Family::Discontinuous
            }
            // The cotangent of a broadcast operand is summed over the
            // broadcast axes.
            Op::Binary(..) if derivative => Family::Reduction,
            _ => Family::Elementwise,
        }
    }
}

/// [`Family::Elementwise`]'s bound.
pub const ELEMENTWISE_ULPS: u64 = 1024;

/// The distance between two float32 values in units in the last place:
/// how many representable values lie between them, plus one. Zeros of
/// either sign are one value; NaN against NaN is 0, against anything else
/// the largest distance.
pub fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    // Float32 bits in the order of the values they stand for.
    fn ordered(x: f32) -> i64 {
        let bits = x.to_bits();
        if bits & 0x8000_0000 != 0 {
            -((bits & 0x7fff_ffff) as i64)
        } else {
            bits as i64
        }
    }
    ordered(a).abs_diff(ordered(b))
}

/// How far compiled `x` is from eager `y`, in float32 ULPs of `largest`,
/// the largest magnitude among the eager value's elements: the error
/// relative to the array, not to the element, so that an element where
/// terms cancel is not judged by its own tiny magnitude. At most the
/// element's own [`ulps`]. NaN or an infinity on one side only: the
/// largest distance.
pub fn normwise_ulps(x: f32, y: f32, largest: f32) -> u64 {
    let own = ulps(x, y);
    if own == 0 || !x.is_finite() || !y.is_finite() || !largest.is_finite() {
        return own;
    }
    let spacing = if largest == 0.0 {
        f32::from_bits(1)
    } else {
        f32::from_bits(largest.to_bits() + 1) - largest
    };
    let d = ((x as f64 - y as f64).abs() / spacing as f64).ceil() as u64;
    d.min(own)
}

/// The family of every value the program's `Eval`s evaluate, in the order
/// they evaluate them (the order of the worker's observed values). A
/// value's family is the largest among every op it may depend on: a call's
/// results depend on every op of the function, of the functions it calls,
/// of its captures and of its arguments; a function under `vjp`, `jvp`,
/// `grad`, `value_and_grad` or `custom_vjp` is differentiated. An invalid
/// program gives the families up to its first invalid statement.
pub fn value_families(p: &Program) -> Vec<Family> {
    let mut scope = Scope::default();
    let mut vals: BTreeMap<Var, Vec<Family>> = BTreeMap::new();
    let mut fns: BTreeMap<FnId, Lineage> = BTreeMap::new();
    let mut out = Vec::new();
    let slot = |r: Ref| match r {
        Ref::Var(v) => (v, 0),
        Ref::Elem(v, i) => (v, i as usize),
    };
    let get = |vals: &BTreeMap<Var, Vec<Family>>, r: Ref| -> Family {
        let (v, i) = slot(r);
        vals.get(&v)
            .and_then(|g| g.get(i))
            .copied()
            .unwrap_or(Family::Elementwise)
    };
    for s in &p.stmts {
        if scope.stmt(s).is_err() {
            break;
        }
        match s {
            Stmt::Let { out: v, op } => {
                let own = match op {
                    Op::Call { f, .. } => fns.get(f).map_or(Family::Elementwise, Lineage::family),
                    _ => Family::of_op(op, false),
                };
                let family = op
                    .refs()
                    .into_iter()
                    .map(|r| get(&vals, r))
                    .fold(own, Family::max);
                let n = match scope.vals.get(v) {
                    Some(Val::Group(g)) => g.len(),
                    _ => 1,
                };
                vals.insert(*v, vec![family; n]);
            }
            Stmt::Def { id, def } => {
                let lineage = match def {
                    FnDef::Closure { captures, body, .. } => {
                        let mut l = Lineage::default();
                        for c in captures {
                            l.captured = l
                                .captured
                                .max(vals.get(c).and_then(|g| g.iter().copied().max()));
                        }
                        for s in body {
                            match s {
                                Stmt::Let {
                                    op: Op::Call { f, .. },
                                    ..
                                } => {
                                    if let Some(inner) = fns.get(f) {
                                        l.absorb(inner);
                                    }
                                }
                                Stmt::Let { op, .. } => l.add(op),
                                _ => {}
                            }
                        }
                        l
                    }
                    _ => {
                        let mut l = def
                            .inner()
                            .and_then(|f| fns.get(&f))
                            .cloned()
                            .unwrap_or_default();
                        if matches!(
                            def,
                            FnDef::Vjp { .. }
                                | FnDef::Jvp { .. }
                                | FnDef::Grad { .. }
                                | FnDef::ValueAndGrad { .. }
                                | FnDef::CustomVjp { .. }
                        ) {
                            l.as_written = l.differentiated;
                        }
                        if matches!(
                            def,
                            FnDef::CustomVjp { .. }
                                | FnDef::Grad { .. }
                                | FnDef::ValueAndGrad { .. }
                        ) {
                            // The fixed rule sums the cotangent; the loss
                            // sums the first result.
                            l.as_written = l.as_written.max(Family::Reduction);
                        }
                        l
                    }
                };
                fns.insert(*id, lineage);
            }
            Stmt::Eval { refs, .. } => out.extend(refs.iter().map(|r| get(&vals, *r))),
            Stmt::Assign { dst, src, .. } => {
                let f = get(&vals, *src);
                let (v, i) = slot(*dst);
                if let Some(x) = vals.get_mut(&v).and_then(|g| g.get_mut(i)) {
                    *x = f;
                }
            }
            Stmt::Erase { group, index } => {
                if let Some(g) = vals.get_mut(group) {
                    if (*index as usize) < g.len() {
                        g.remove(*index as usize);
                    }
                }
            }
            Stmt::Drop(v) => {
                vals.remove(v);
            }
            Stmt::DropFn(_)
            | Stmt::Synchronize
            | Stmt::Release(_)
            | Stmt::ReleaseTogether { .. } => {}
        }
    }
    out
}

/// What a function's results may depend on besides its arguments: the
/// family of its ops as written and once differentiated, and of what it
/// captures.
#[derive(Clone, Copy, Debug)]
struct Lineage {
    as_written: Family,
    differentiated: Family,
    captured: Option<Family>,
}

impl Default for Lineage {
    fn default() -> Self {
        Lineage {
            as_written: Family::Elementwise,
            differentiated: Family::Elementwise,
            captured: None,
        }
    }
}

impl Lineage {
    fn add(&mut self, op: &Op) {
        self.as_written = self.as_written.max(Family::of_op(op, false));
        self.differentiated = self.differentiated.max(Family::of_op(op, true));
    }

    /// A call of `inner` in the body.
    fn absorb(&mut self, inner: &Lineage) {
        self.as_written = self.as_written.max(inner.as_written);
        self.differentiated = self.differentiated.max(inner.differentiated);
        self.captured = self.captured.max(inner.captured);
    }

    fn family(&self) -> Family {
        self.captured
            .map_or(self.as_written, |c| c.max(self.as_written))
    }
}

/// One fused value's distance from eager: its index among the evaluated
/// values, its family, and the largest ULP distance among its elements
/// that are beyond the tolerance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deviation {
    pub value: usize,
    pub family: Family,
    pub ulps: u64,
}

/// The first fused value beyond its family's bound, if any (`deviations`
/// are the values beyond the tolerance).
pub fn beyond_bound(deviations: &[Deviation]) -> Option<Deviation> {
    deviations
        .iter()
        .find(|d| d.family.bound().is_some_and(|b| d.ulps > b))
        .copied()
}

/// Compiled against eager: the mismatch, if any, and the fused rounding,
/// if that is what it is. `beyond_tolerance`: where the fused values first
/// go beyond the tolerance; `unfused_difference`: where the values compiled
/// without fusion first differ from eager's in any bit; `deviations`: the
/// fused values beyond the tolerance. Without fusion the bits must be
/// eager's; with it, a value beyond the tolerance is rounding only within
/// its family's bound.
pub fn judge_fused(
    beyond_tolerance: Option<String>,
    unfused_difference: Option<String>,
    deviations: &[Deviation],
) -> (Option<String>, Option<String>) {
    match (beyond_tolerance, unfused_difference) {
        (_, Some(u)) => (Some(format!("compiled without fusion: {u}")), None),
        (Some(m), None) => match beyond_bound(deviations) {
            Some(d) => (
                Some(format!(
                    "fused value {} ({}) is {} ULPs from eager, beyond the {} its family admits ({m})",
                    d.value,
                    d.family.name(),
                    d.ulps,
                    d.family.bound().unwrap_or(0)
                )),
                None,
            ),
            None => (None, Some(m)),
        },
        (None, None) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{check, Reduce, Ty};

    fn let_(v: u32, op: Op) -> Stmt {
        Stmt::Let { out: Var(v), op }
    }
    fn var(v: u32) -> Ref {
        Ref::Var(Var(v))
    }
    fn eval(refs: &[Ref]) -> Stmt {
        Stmt::Eval {
            refs: refs.to_vec(),
            asynchronous: false,
        }
    }
    /// `f(p) = op(p)`, capturing `captures`.
    fn closure(id: u32, param: u32, captures: &[u32], body: Vec<Stmt>, result: u32) -> Stmt {
        Stmt::Def {
            id: FnId(id),
            def: FnDef::Closure {
                params: vec![(Var(param), Ty::f32(&[4]))],
                captures: captures.iter().map(|&c| Var(c)).collect(),
                body,
                results: vec![var(result)],
            },
        }
    }

    #[test]
    fn ulps_count_representable_values_between() {
        assert_eq!(ulps(1.0, 1.0), 0);
        assert_eq!(ulps(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulps(-0.0, 0.0), 0);
        assert_eq!(ulps(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(ulps(f32::NAN, f32::NAN), 0);
        assert_eq!(ulps(f32::NAN, 1.0), u64::MAX);
        assert!(ulps(1.0, -1.0) > 2_000_000_000);
    }

    #[test]
    fn a_value_has_the_family_of_the_worst_op_it_depends_on() {
        let p = Program {
            stmts: vec![
                let_(
                    0,
                    Op::Normal {
                        shape: vec![4],
                        seed: 1,
                    },
                ),
                let_(1, Op::Unary(Unary::Exp, var(0))),
                let_(2, Op::Divmod(var(1), var(0))),
                let_(
                    3,
                    Op::Reduce {
                        how: Reduce::Sum,
                        a: var(1),
                        axis: 0,
                    },
                ),
                let_(4, Op::Binary(Binary::Maximum, var(1), Ref::Elem(Var(2), 1))),
                eval(&[var(1), Ref::Elem(Var(2), 0), var(3), var(4)]),
                // An assignment carries the source's family; an erase
                // shifts the group.
                Stmt::Assign {
                    dst: Ref::Elem(Var(2), 0),
                    src: var(1),
                    how: crate::ir::How::Copy,
                },
                eval(&[Ref::Elem(Var(2), 0), Ref::Elem(Var(2), 1)]),
                Stmt::Erase {
                    group: Var(2),
                    index: 0,
                },
                eval(&[Ref::Elem(Var(2), 0)]),
            ],
        };
        assert_eq!(check(&p), Ok(()));
        use Family::*;
        assert_eq!(
            value_families(&p),
            [
                Elementwise,
                Discontinuous,
                Reduction,
                Discontinuous,
                Elementwise,
                Discontinuous,
                Discontinuous
            ]
        );
    }

    #[test]
    fn a_call_depends_on_its_function_its_captures_and_what_it_differentiates() {
        let p = Program {
            stmts: vec![
                let_(
                    0,
                    Op::Normal {
                        shape: vec![4],
                        seed: 1,
                    },
                ),
                let_(
                    1,
                    Op::Reduce {
                        how: Reduce::Sum,
                        a: var(0),
                        axis: 0,
                    },
                ),
                // f0(p) = abs(p): element-wise as written, a sign once differentiated.
                closure(
                    0,
                    10,
                    &[],
                    vec![let_(11, Op::Unary(Unary::Abs, var(10)))],
                    11,
                ),
                Stmt::Def {
                    id: FnId(1),
                    def: FnDef::Compile {
                        f: FnId(0),
                        shapeless: false,
                    },
                },
                Stmt::Def {
                    id: FnId(2),
                    def: FnDef::Grad { f: FnId(0) },
                },
                // f3(p) = negative(p) + the captured sum.
                closure(
                    3,
                    20,
                    &[1],
                    vec![
                        let_(21, Op::Unary(Unary::Negative, var(20))),
                        let_(22, Op::Binary(Binary::Add, var(21), var(1))),
                    ],
                    22,
                ),
                // f4 calls the gradient inside a closure, then compiles it.
                Stmt::Def {
                    id: FnId(4),
                    def: FnDef::Closure {
                        params: vec![(Var(30), Ty::f32(&[4]))],
                        captures: vec![],
                        body: vec![let_(
                            31,
                            Op::Call {
                                f: FnId(2),
                                args: vec![var(30)],
                            },
                        )],
                        results: vec![Ref::Elem(Var(31), 0)],
                    },
                },
                Stmt::Def {
                    id: FnId(5),
                    def: FnDef::Compile {
                        f: FnId(4),
                        shapeless: false,
                    },
                },
                let_(
                    2,
                    Op::Call {
                        f: FnId(1),
                        args: vec![var(0)],
                    },
                ),
                let_(
                    3,
                    Op::Call {
                        f: FnId(2),
                        args: vec![var(0)],
                    },
                ),
                let_(
                    4,
                    Op::Call {
                        f: FnId(3),
                        args: vec![var(0)],
                    },
                ),
                let_(
                    5,
                    Op::Call {
                        f: FnId(5),
                        args: vec![var(0)],
                    },
                ),
                eval(&[
                    Ref::Elem(Var(2), 0),
                    Ref::Elem(Var(3), 0),
                    Ref::Elem(Var(4), 0),
                    Ref::Elem(Var(5), 0),
                ]),
            ],
        };
        assert_eq!(check(&p), Ok(()));
        use Family::*;
        assert_eq!(
            value_families(&p),
            [Elementwise, Discontinuous, Reduction, Discontinuous]
        );
    }

    #[test]
    fn a_fused_value_is_rounding_only_within_its_family_s_bound() {
        let d = |family, ulps| Deviation {
            value: 2,
            family,
            ulps,
        };
        let beyond = || Some("value 2 (F32) element 0: 1.5 compiled, 1 eagerly".to_string());
        // Unfused bits differ: a mismatch, whatever the fused values do.
        let (m, r) = judge_fused(None, Some("value 0 element 1".into()), &[]);
        assert!(m.unwrap().starts_with("compiled without fusion: value 0"));
        assert_eq!(r, None);
        // Within the tolerance: nothing.
        assert_eq!(judge_fused(None, None, &[]), (None, None));
        // Beyond it, within the family's bound: fused rounding.
        let within = d(Family::Elementwise, ELEMENTWISE_ULPS);
        assert_eq!(judge_fused(beyond(), None, &[within]), (None, beyond()));
        // Beyond the bound: a mismatch naming the value and its family.
        let (m, r) = judge_fused(beyond(), None, &[d(Family::Elementwise, 4_000_000)]);
        assert_eq!(r, None);
        let m = m.unwrap();
        assert!(
            m.starts_with("fused value 2 (element-wise) is 4000000 ULPs from eager"),
            "{m}"
        );
        // An unbounded family keeps only the unfused-exact rule.
        assert_eq!(
            judge_fused(beyond(), None, &[d(Family::Discontinuous, u64::MAX)]),
            (None, beyond())
        );
    }

    #[test]
    fn only_a_bounded_family_beyond_its_bound_is_a_finding() {
        let d = |family, ulps| Deviation {
            value: 0,
            family,
            ulps,
        };
        let b = ELEMENTWISE_ULPS;
        assert_eq!(beyond_bound(&[d(Family::Elementwise, b)]), None);
        assert_eq!(
            beyond_bound(&[
                d(Family::Discontinuous, u64::MAX),
                d(Family::Elementwise, b + 1)
            ]),
            Some(d(Family::Elementwise, b + 1))
        );
        assert_eq!(
            beyond_bound(&[
                d(Family::Reduction, u64::MAX),
                d(Family::Linalg, u64::MAX),
                d(Family::Discontinuous, u64::MAX)
            ]),
            None
        );
    }
}
