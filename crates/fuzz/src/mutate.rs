//! Mutations of a program on the IR, for a guided engine: each result
//! type-checks ([`crate::check`]), so every mutant is a program the worker
//! can run, as every generated one is.
//!
//! The kinds a guided campaign counts ([`Mutation`]): insert statements the
//! generator makes in the scope of the insertion point, delete or simplify
//! one (the shrinker's own steps), replace one, change a constant's shape or
//! seed, change how an array is let go of, move an evaluation point, change
//! or add a transform around a function, and splice another program in.

use crate::gen::{insert_with, next_names};
use crate::ir::*;
use crate::shrink::{candidates, renumber_from, substitutions};
use crate::Releases;
use arbitrary::Unstructured;
use rand_core::RngCore;

/// What a mutant was made by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutation {
    Insert,
    /// One of the shrinker's one-step simplifications: a statement, a
    /// closure's statement, result or capture gone, an operand replaced by
    /// an earlier value, a move made a copy.
    Simplify,
    Replace,
    Shape,
    Seed,
    ReleasePath,
    EvalPoint,
    Transform,
    Splice,
}

impl Mutation {
    pub const ALL: [Mutation; 9] = [
        Mutation::Insert,
        Mutation::Simplify,
        Mutation::Replace,
        Mutation::Shape,
        Mutation::Seed,
        Mutation::ReleasePath,
        Mutation::EvalPoint,
        Mutation::Transform,
        Mutation::Splice,
    ];

    /// How often each is tried, relative to the others.
    fn weight(self) -> u32 {
        match self {
            Mutation::Insert => 30,
            Mutation::Simplify => 10,
            Mutation::Replace => 10,
            Mutation::Shape => 6,
            Mutation::Seed => 2,
            Mutation::ReleasePath => 10,
            Mutation::EvalPoint => 8,
            Mutation::Transform => 12,
            Mutation::Splice => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mutation::Insert => "insert",
            Mutation::Simplify => "simplify",
            Mutation::Replace => "replace",
            Mutation::Shape => "shape",
            Mutation::Seed => "seed",
            Mutation::ReleasePath => "release path",
            Mutation::EvalPoint => "evaluation point",
            Mutation::Transform => "transform",
            Mutation::Splice => "splice",
        }
    }
}

/// A random number below `n` (`n > 0`).
fn below(rng: &mut dyn RngCore, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

fn choose<'a, T>(rng: &mut dyn RngCore, items: &'a [T]) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[below(rng, items.len())])
}

/// The most statements (closures' included) a mutant may have: a large
/// generated program's size, so that inserts and splices do not grow the
/// corpus without end (a long program is slow to run and to mutate).
pub const MAX_STATEMENTS: usize = 32;

/// A valid mutant of `p` and how it was made, or `None` after a few tries
/// that gave none. `other` is a second program of the corpus, for a splice.
pub fn mutate(
    p: &Program,
    other: &Program,
    rng: &mut dyn RngCore,
    releases: Releases,
) -> Option<(Program, Mutation)> {
    for _ in 0..8 {
        let total: u32 = Mutation::ALL.iter().map(|m| m.weight()).sum();
        let mut x = (rng.next_u64() % total as u64) as u32;
        let mut kind = Mutation::Insert;
        for m in Mutation::ALL {
            if x < m.weight() {
                kind = m;
                break;
            }
            x -= m.weight();
        }
        if let Some(q) = apply(kind, p, other, rng, releases) {
            if q != *p && q.len() <= MAX_STATEMENTS && check(&q).is_ok() {
                return Some((q, kind));
            }
        }
    }
    None
}

/// One mutation of the kind asked for, valid or not (the caller checks).
pub fn apply(
    kind: Mutation,
    p: &Program,
    other: &Program,
    rng: &mut dyn RngCore,
    releases: Releases,
) -> Option<Program> {
    let n = p.stmts.len();
    match kind {
        Mutation::Insert => insert(p, below(rng, n + 1), 1 + below(rng, 3), rng, releases),
        Mutation::Simplify => first_valid(candidates(p), rng),
        Mutation::Replace => {
            if n == 0 {
                return None;
            }
            let i = below(rng, n);
            let mut q = p.clone();
            q.stmts.remove(i);
            check(&q).ok()?;
            insert(&q, i, 1, rng, releases)
        }
        Mutation::Shape => {
            let at = constants(p);
            let &i = choose(rng, &at)?;
            let shape = crate::gen::SHAPES[below(rng, crate::gen::SHAPES.len())].to_vec();
            let mut q = p.clone();
            if let Stmt::Let {
                op: Op::Normal { shape: s, .. },
                ..
            } = &mut q.stmts[i]
            {
                *s = shape;
            }
            Some(q)
        }
        Mutation::Seed => {
            let at = constants(p);
            let &i = choose(rng, &at)?;
            let mut q = p.clone();
            if let Stmt::Let {
                op: Op::Normal { seed, .. },
                ..
            } = &mut q.stmts[i]
            {
                *seed = below(rng, 1000) as u32;
            }
            Some(q)
        }
        Mutation::ReleasePath => release_path(p, rng, releases),
        Mutation::EvalPoint => eval_point(p, rng),
        Mutation::Transform => transform(p, rng),
        Mutation::Splice => splice(p, other, rng),
    }
}

/// A random valid one of `all`, checking as few as it takes.
fn first_valid(mut all: Vec<Program>, rng: &mut dyn RngCore) -> Option<Program> {
    while !all.is_empty() {
        let c = all.swap_remove(below(rng, all.len()));
        if check(&c).is_ok() {
            return Some(c);
        }
    }
    None
}

/// Up to `count` generated statements before statement `at`, the
/// generator reading random bytes.
fn insert(
    p: &Program,
    at: usize,
    count: usize,
    rng: &mut dyn RngCore,
    releases: Releases,
) -> Option<Program> {
    let mut bytes = vec![0u8; 512];
    rng.fill_bytes(&mut bytes);
    insert_with(p, at, count, &mut Unstructured::new(&bytes), releases)
}

/// Where the top level makes constants.
fn constants(p: &Program) -> Vec<usize> {
    (0..p.stmts.len())
        .filter(|&i| {
            matches!(
                p.stmts[i],
                Stmt::Let {
                    op: Op::Normal { .. },
                    ..
                }
            )
        })
        .collect()
}

/// Another way of letting go of the same array: another kind of
/// assignment, a release where a destructor was, a pair of releases made
/// simultaneous (two-thread programs) or sequential.
fn release_path(p: &Program, rng: &mut dyn RngCore, releases: Releases) -> Option<Program> {
    let at: Vec<usize> = (0..p.stmts.len())
        .filter(|&i| {
            matches!(
                p.stmts[i],
                Stmt::Assign { .. }
                    | Stmt::Drop(_)
                    | Stmt::Release(_)
                    | Stmt::ReleaseTogether { .. }
                    | Stmt::Erase { .. }
            )
        })
        .collect();
    let &i = choose(rng, &at)?;
    let mut q = p.clone();
    let scope_before = {
        let mut s = Scope::default();
        for st in &p.stmts[..i] {
            s.stmt(st).ok()?;
        }
        s
    };
    let replacement: Vec<Stmt> = match &p.stmts[i] {
        Stmt::Assign { dst, src, how } => {
            let hows = [How::Copy, How::Move, How::Overwrite];
            let others: Vec<How> = hows.into_iter().filter(|h| h != how).collect();
            vec![Stmt::Assign {
                dst: *dst,
                src: *src,
                how: *choose(rng, &others)?,
            }]
        }
        Stmt::Drop(v) => match scope_before.vals.get(v)? {
            Val::One(Some(_)) => vec![Stmt::Release(Ref::Var(*v))],
            Val::Group(g) => {
                let live: Vec<u32> = (0..g.len() as u32)
                    .filter(|&k| g[k as usize].is_some())
                    .collect();
                if live.len() >= 2 && releases == Releases::TwoThreads {
                    let a = live[below(rng, live.len())];
                    let b = *live
                        .iter()
                        .filter(|&&k| k != a)
                        .nth(below(rng, live.len() - 1))?;
                    vec![
                        Stmt::ReleaseTogether {
                            refs: [Ref::Elem(*v, a), Ref::Elem(*v, b)],
                        },
                        Stmt::Drop(*v),
                    ]
                } else {
                    let &k = choose(rng, &live)?;
                    vec![Stmt::Release(Ref::Elem(*v, k)), Stmt::Drop(*v)]
                }
            }
            _ => return None,
        },
        Stmt::Release(r) => {
            // Another live array of the same group, released with it.
            let partner = scope_before
                .vals
                .get(&r.var())
                .and_then(|val| match (val, r) {
                    (Val::Group(g), Ref::Elem(v, k)) => {
                        let live: Vec<u32> = (0..g.len() as u32)
                            .filter(|&j| j != *k && g[j as usize].is_some())
                            .collect();
                        choose(rng, &live).map(|&j| Ref::Elem(*v, j))
                    }
                    _ => None,
                });
            match partner {
                Some(o) if releases == Releases::TwoThreads => {
                    vec![Stmt::ReleaseTogether { refs: [*r, o] }]
                }
                _ => vec![Stmt::Drop(r.var())],
            }
        }
        Stmt::ReleaseTogether { refs: [a, b] } => {
            if rng.next_u32() % 2 == 0 {
                vec![Stmt::Release(*a), Stmt::Release(*b)]
            } else {
                vec![Stmt::ReleaseTogether { refs: [*b, *a] }]
            }
        }
        Stmt::Erase { group, index } => vec![Stmt::Release(Ref::Elem(*group, *index))],
        _ => return None,
    };
    q.stmts.splice(i..=i, replacement);
    Some(q)
}

/// An evaluation moved elsewhere, made asynchronous or not, or a new one
/// of live values; or a synchronization added.
fn eval_point(p: &Program, rng: &mut dyn RngCore) -> Option<Program> {
    let evals: Vec<usize> = (0..p.stmts.len())
        .filter(|&i| matches!(p.stmts[i], Stmt::Eval { .. } | Stmt::Synchronize))
        .collect();
    let mut q = p.clone();
    match rng.next_u32() % 4 {
        0 if !evals.is_empty() => {
            let &i = choose(rng, &evals)?;
            let s = q.stmts.remove(i);
            let j = below(rng, q.stmts.len() + 1);
            q.stmts.insert(j, s);
        }
        1 if !evals.is_empty() => {
            let &i = choose(rng, &evals)?;
            if let Stmt::Eval { asynchronous, .. } = &mut q.stmts[i] {
                *asynchronous = !*asynchronous;
            } else {
                return None;
            }
        }
        2 => {
            let j = below(rng, p.stmts.len() + 1);
            q.stmts.insert(j, Stmt::Synchronize);
        }
        _ => {
            // Evaluate what is live at a random point.
            let j = below(rng, p.stmts.len() + 1);
            let mut scope = Scope::default();
            for s in &p.stmts[..j] {
                scope.stmt(s).ok()?;
            }
            let mut live = Vec::new();
            for (v, val) in &scope.vals {
                match val {
                    Val::One(Some(_)) => live.push(Ref::Var(*v)),
                    Val::Group(g) => live.extend(
                        (0..g.len())
                            .filter(|&k| g[k].is_some())
                            .map(|k| Ref::Elem(*v, k as u32)),
                    ),
                    _ => {}
                }
            }
            let &r = choose(rng, &live)?;
            q.stmts.insert(
                j,
                Stmt::Eval {
                    refs: vec![r],
                    asynchronous: rng.next_u32() % 4 == 0,
                },
            );
        }
    }
    Some(q)
}

/// Another transform of the same function, or a new transform wrapped
/// around a function with its later calls redirected to the new one
/// (`compile(f)` becomes `compile(vmap(f))`, a closure gets a `checkpoint`).
fn transform(p: &Program, rng: &mut dyn RngCore) -> Option<Program> {
    let defs: Vec<usize> = (0..p.stmts.len())
        .filter(|&i| matches!(p.stmts[i], Stmt::Def { .. }))
        .collect();
    let &i = choose(rng, &defs)?;
    let Stmt::Def { id, def } = &p.stmts[i] else {
        return None;
    };
    let kinds = FnDef::transforms_of;
    let mut q = p.clone();
    match def.inner() {
        // Another transform of the same inner function.
        Some(f) if rng.next_u32() % 2 == 0 => {
            let options: Vec<FnDef> = kinds(f).into_iter().filter(|k| k != def).collect();
            q.stmts[i] = Stmt::Def {
                id: *id,
                def: choose(rng, &options)?.clone(),
            };
        }
        // A new transform of this function, right after it; each later
        // call of it becomes a call of the new one, half the time.
        _ => {
            let (_, next_fn) = next_names(&p.stmts);
            let wrapped = FnId(next_fn);
            let options = kinds(*id);
            q.stmts.insert(
                i + 1,
                Stmt::Def {
                    id: wrapped,
                    def: choose(rng, &options)?.clone(),
                },
            );
            for s in &mut q.stmts[i + 2..] {
                if let Stmt::Let {
                    op: Op::Call { f, .. },
                    ..
                } = s
                {
                    if *f == *id && rng.next_u32() % 2 == 0 {
                        *f = wrapped;
                    }
                }
            }
        }
    }
    Some(q)
}

/// `other`, with names of its own, inserted at a random point of `p`'s top
/// level; then, a few times, one operand of the spliced statements replaced
/// by an earlier value of the same type, so that the two programs share
/// values rather than run side by side.
fn splice(p: &Program, other: &Program, rng: &mut dyn RngCore) -> Option<Program> {
    if other.stmts.is_empty() {
        return None;
    }
    let (v0, f0) = next_names(&p.stmts);
    let donor = renumber_from(other, v0, f0);
    // A part of the donor: its first k statements (a prefix is valid).
    let k = 1 + below(rng, donor.stmts.len());
    let at = below(rng, p.stmts.len() + 1);
    let mut q = p.clone();
    q.stmts.splice(at..at, donor.stmts[..k].iter().cloned());
    check(&q).ok()?;
    for _ in 0..1 + below(rng, 3) {
        let i = at + below(rng, k);
        if let Some(c) = first_valid(substitutions(&q, i), rng) {
            q = c;
        }
    }
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program_of_seed_with;
    use rand_core::SeedableRng;

    /// Every kind of mutation makes valid programs, and each kind makes
    /// some mutants that differ from their parent, over a seeded sample.
    #[test]
    fn every_mutation_kind_makes_valid_programs() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut made = std::collections::BTreeMap::new();
        for i in 0..300 {
            let releases = if i % 2 == 0 {
                Releases::OneThread
            } else {
                Releases::TwoThreads
            };
            let p = program_of_seed_with(3, i, releases);
            let other = program_of_seed_with(4, i, releases);
            for kind in Mutation::ALL {
                if let Some(q) = apply(kind, &p, &other, &mut rng, releases) {
                    if q != p && check(&q).is_ok() {
                        *made.entry(kind).or_insert(0) += 1;
                    }
                }
            }
            if let Some((q, _)) = mutate(&p, &other, &mut rng, releases) {
                assert_eq!(check(&q), Ok(()), "an invalid mutant of {p:?}: {q:?}");
            }
        }
        for kind in Mutation::ALL {
            assert!(
                made.get(&kind).copied().unwrap_or(0) >= 10,
                "{} made {:?} valid mutants of 300 programs",
                kind.name(),
                made.get(&kind)
            );
        }
    }

    /// A two-thread campaign's release mutation makes simultaneous
    /// releases where a program had none.
    #[test]
    fn release_path_reaches_two_threads() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut together = 0;
        for i in 0..300 {
            let p = program_of_seed_with(5, i, Releases::OneThread);
            if let Some(q) = release_path(&p, &mut rng, Releases::TwoThreads) {
                if check(&q).is_ok()
                    && q.stmts
                        .iter()
                        .any(|s| matches!(s, Stmt::ReleaseTogether { .. }))
                {
                    together += 1;
                }
            }
        }
        assert!(together > 0, "no simultaneous release was made");
    }
}
