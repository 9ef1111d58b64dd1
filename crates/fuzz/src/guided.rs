//! The coverage-guided engine: which program to run next, and what to keep.
//!
//! It knows programs ([`crate::ir`]), their mutations ([`crate::mutate`]) and
//! the features a run reached ([`crate::edges`]); it does not know what a
//! finding is. A [`Target`] runs a program and says which features it
//! reached and what its oracles concluded; the engine keeps the findings it
//! is handed and decides nothing from them.
//!
//! * **Corpus.** A program that reaches a feature no earlier run reached is
//!   kept, with its features.
//! * **Schedule.** As libFuzzer's entropic schedule does in spirit, a
//!   program is picked with a weight that favours rare features: the sum,
//!   over the features it was first to reach, of one over the number of
//!   runs that reached the edge since; less the more often it was picked
//!   already, and less the longer it is (AFL favours small, fast inputs).
//! * **Mutation.** One to three IR mutations of the picked program, the
//!   splice's donor another corpus program. A quarter of the runs are fresh
//!   programs of the seed's stream: the blind generator's breadth stays in
//!   the mix.
//! * **Reproducible.** A seed and a starting corpus name a campaign: the
//!   engine's own choices come from a ChaCha8 stream of the seed. (The
//!   features a worker reports can vary with thread timing and MLX's
//!   hash-map order, and then so does the campaign.)
//!
//! [`Strategy::Blind`] runs the seed's stream in order, the blind
//! generator's campaign, and only counts features, for comparison.

use crate::edges::{edge_of, Feature, MAP_SIZE};
use crate::mutate::{mutate, Mutation};
use crate::{program_of_seed_with, Program, Releases};
use rand_core::{RngCore, SeedableRng};
use std::collections::BTreeMap;

/// What a target reports of one run.
#[derive(Clone, Debug, Default)]
pub struct Execution<F> {
    /// Features reached (see [`crate::edges`]), any order.
    pub features: Vec<Feature>,
    /// What the target's oracles made of the run; the engine keeps them.
    pub findings: Vec<F>,
}

/// Something that runs programs: a worker on a coverage build, or a model.
pub trait Target {
    type Finding: Clone;
    fn run(&mut self, p: &Program) -> Result<Execution<Self::Finding>, String>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// The seed's programs in order; features only counted.
    Blind,
    /// Corpus, rare-feature schedule and IR mutations.
    Guided,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub releases: Releases,
    pub strategy: Strategy,
    /// Generated programs a guided campaign starts from, besides its corpus.
    pub initial: u64,
    /// Of every hundred guided runs, how many are fresh generated programs.
    pub fresh_percent: u32,
}

impl Config {
    pub fn new(seed: u64, releases: Releases, strategy: Strategy) -> Config {
        Config {
            seed,
            releases,
            strategy,
            initial: 64,
            fresh_percent: 25,
        }
    }
}

/// Where a program came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Program `index` of the seed's stream.
    Generated(u64),
    /// From the starting corpus.
    Corpus(usize),
    /// Mutations (the last named) of corpus entry `parent`.
    Mutated { parent: usize, last: Mutation },
}

pub struct Entry {
    pub program: Program,
    /// The features it was the first to reach: what it is kept for.
    pub features: Vec<Feature>,
    /// When it was kept: runs so far.
    pub found_at: u64,
    picked: u32,
}

/// What one run did to the campaign.
#[derive(Clone, Debug)]
pub struct Step<F> {
    pub run: u64,
    pub origin: Origin,
    pub program: Program,
    pub new_features: usize,
    pub kept: bool,
    pub findings: Vec<F>,
}

pub struct Engine {
    cfg: Config,
    rng: rand_chacha::ChaCha8Rng,
    pub corpus: Vec<Entry>,
    /// Buckets seen per edge, one bit each.
    seen: Vec<u8>,
    /// Runs that reached each edge.
    hits: Vec<u32>,
    pub features: u64,
    pub edges: u64,
    pub runs: u64,
    next_generated: u64,
    pending: Vec<Program>,
    weights: Vec<f64>,
    weights_at: u64,
    /// Mutants kept, by the kind of their last mutation.
    pub kept_by: BTreeMap<Mutation, u64>,
    pub tried_by: BTreeMap<Mutation, u64>,
}

impl Engine {
    /// A campaign from `cfg`, starting with `corpus` (run first, in order).
    pub fn new(cfg: Config, corpus: Vec<Program>) -> Engine {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
        // The engine's stream is apart from the generator's (stream = index).
        rng.set_stream(u64::MAX);
        let mut pending = corpus;
        pending.reverse();
        Engine {
            cfg,
            rng,
            corpus: Vec::new(),
            seen: vec![0; MAP_SIZE],
            hits: vec![0; MAP_SIZE],
            features: 0,
            edges: 0,
            runs: 0,
            next_generated: 0,
            pending,
            weights: Vec::new(),
            weights_at: 0,
            kept_by: BTreeMap::new(),
            tried_by: BTreeMap::new(),
        }
    }

    fn generated(&mut self) -> (Program, Origin) {
        let i = self.next_generated;
        self.next_generated += 1;
        (
            program_of_seed_with(self.cfg.seed, i, self.cfg.releases),
            Origin::Generated(i),
        )
    }

    /// The next program to run.
    pub fn next(&mut self) -> (Program, Origin) {
        if let Some(p) = self.pending.pop() {
            let k = self.pending.len();
            return (p, Origin::Corpus(k));
        }
        if self.cfg.strategy == Strategy::Blind
            || self.corpus.is_empty()
            || self.next_generated < self.cfg.initial
            || self.rng.next_u32() % 100 < self.cfg.fresh_percent
        {
            return self.generated();
        }
        let parent = self.pick();
        self.corpus[parent].picked += 1;
        let mut p = self.corpus[parent].program.clone();
        let mut last = None;
        for _ in 0..1 + self.rng.next_u32() % 3 {
            let donor = (self.rng.next_u64() % self.corpus.len() as u64) as usize;
            let other = self.corpus[donor].program.clone();
            if let Some((q, m)) = mutate(&p, &other, &mut self.rng, self.cfg.releases) {
                p = q;
                last = Some(m);
            }
        }
        match last {
            Some(last) => {
                *self.tried_by.entry(last).or_default() += 1;
                (p, Origin::Mutated { parent, last })
            }
            None => self.generated(),
        }
    }

    /// A corpus entry, by weight: rare edges first.
    fn pick(&mut self) -> usize {
        // Weights change slowly: recomputed every 64 runs or on a new entry.
        if self.weights.len() != self.corpus.len() || self.runs >= self.weights_at + 64 {
            self.weights = self
                .corpus
                .iter()
                .map(|e| {
                    let rarity: f64 = e
                        .features
                        .iter()
                        .map(|&f| 1.0 / self.hits[edge_of(f)].max(1) as f64)
                        .sum();
                    // Short programs run and mutate faster, as AFL favours
                    // small, fast inputs; and a program loses weight each
                    // time it is picked.
                    rarity
                        / (1.0 + e.picked as f64 / 8.0)
                        / (1.0 + e.program.len() as f64 / 64.0)
                })
                .collect();
            self.weights_at = self.runs;
        }
        let total: f64 = self.weights.iter().sum();
        if total <= 0.0 {
            return (self.rng.next_u64() % self.corpus.len() as u64) as usize;
        }
        let mut x = (self.rng.next_u64() as f64 / u64::MAX as f64) * total;
        for (i, w) in self.weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        self.corpus.len() - 1
    }

    /// Takes a run's result: counts its features, keeps the program if any
    /// is new (a guided campaign).
    pub fn observe<F>(&mut self, program: Program, origin: Origin, exec: Execution<F>) -> Step<F> {
        self.runs += 1;
        let mut new_features = Vec::new();
        for &f in &exec.features {
            let (e, bit) = (edge_of(f), 1u8 << (f & 7));
            if self.seen[e] == 0 {
                self.edges += 1;
            }
            if self.seen[e] & bit == 0 {
                self.seen[e] |= bit;
                self.features += 1;
                new_features.push(f);
            }
            self.hits[e] = self.hits[e].saturating_add(1);
        }
        let new = new_features.len();
        let kept = new > 0 && self.cfg.strategy == Strategy::Guided;
        if kept {
            if let Origin::Mutated { last, .. } = origin {
                *self.kept_by.entry(last).or_default() += 1;
            }
            self.corpus.push(Entry {
                program: program.clone(),
                features: new_features,
                found_at: self.runs,
                picked: 0,
            });
        }
        Step {
            run: self.runs,
            origin,
            program,
            new_features: new,
            kept,
            findings: exec.findings,
        }
    }

    /// One run on `target`.
    pub fn step<T: Target>(&mut self, target: &mut T) -> Result<Step<T::Finding>, String> {
        let (p, origin) = self.next();
        let exec = target.run(&p)?;
        Ok(self.observe(p, origin, exec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{FnDef, Op, Stmt};

    /// A model of MLX's code: each feature is one fact about the program,
    /// and the deep ones need several facts together, as a branch behind
    /// branches does. The "bug" is a compile of a vmap of a function that
    /// is also differentiated, with a group released on two threads, all
    /// in one program: rare for the generator to make at once.
    struct Maze;

    fn facts(p: &Program) -> Vec<u32> {
        let mut f = Vec::new();
        let (mut compile_of_vmap, mut grad, mut together, mut split_eval) =
            (false, false, false, false);
        let mut vmaps = Vec::new();
        for s in &p.stmts {
            match s {
                Stmt::Def { id, def } => {
                    f.push(1 + def.name().len() as u32);
                    match def {
                        FnDef::Vmap { .. } => vmaps.push(*id),
                        FnDef::Compile { f: inner, .. } if vmaps.contains(inner) => {
                            compile_of_vmap = true
                        }
                        FnDef::Grad { .. } | FnDef::ValueAndGrad { .. } => grad = true,
                        _ => {}
                    }
                }
                Stmt::Let { op, .. } => {
                    f.push(100 + op.name().len() as u32);
                    if matches!(op, Op::Split { .. }) {
                        split_eval = true;
                    }
                }
                Stmt::ReleaseTogether { .. } => together = true,
                _ => {}
            }
        }
        let depth = [compile_of_vmap, grad, together, split_eval];
        for (i, d) in depth.iter().enumerate() {
            if !*d {
                break;
            }
            f.push(1001 + i as u32);
        }
        f.into_iter().map(|x| x << 3).collect()
    }

    impl Target for Maze {
        type Finding = &'static str;
        fn run(&mut self, p: &Program) -> Result<Execution<&'static str>, String> {
            let features = facts(p);
            let bug = features.contains(&(1004 << 3));
            Ok(Execution {
                features,
                findings: if bug { vec!["bug"] } else { vec![] },
            })
        }
    }

    fn campaign(strategy: Strategy, runs: u64) -> (Engine, Option<u64>) {
        let cfg = Config::new(9, Releases::TwoThreads, strategy);
        let mut e = Engine::new(cfg, Vec::new());
        let mut first = None;
        for _ in 0..runs {
            let s = e.step(&mut Maze).unwrap();
            if first.is_none() && !s.findings.is_empty() {
                first = Some(s.run);
            }
        }
        (e, first)
    }

    /// The seeded test of the engine: on the model, the guided campaign
    /// reaches the deepest level in a budget where the blind one, over the
    /// same seed's stream, does not.
    #[test]
    fn guided_reaches_what_blind_does_not_on_the_same_budget() {
        let (blind, blind_found) = campaign(Strategy::Blind, 5000);
        let (guided, guided_found) = campaign(Strategy::Guided, 5000);
        eprintln!(
            "blind: {} features, bug at {blind_found:?}; guided: {} features, {} kept, bug at {guided_found:?}",
            blind.features,
            guided.features,
            guided.corpus.len()
        );
        assert!(
            guided_found.is_some(),
            "the guided engine did not reach the model's bug in 5000 runs ({} features)",
            guided.features
        );
        assert!(
            blind_found.is_none(),
            "the blind stream reached the model's bug at run {blind_found:?}: the model is too shallow to tell the engines apart"
        );
        assert!(guided.features > blind.features);
        assert!(blind.corpus.is_empty(), "a blind campaign keeps nothing");
    }

    /// A seed names a guided campaign: the same seed, the same runs.
    #[test]
    fn a_seed_names_a_campaign() {
        let (a, fa) = campaign(Strategy::Guided, 400);
        let (b, fb) = campaign(Strategy::Guided, 400);
        assert_eq!(fa, fb);
        let pa: Vec<&Program> = a.corpus.iter().map(|e| &e.program).collect();
        let pb: Vec<&Program> = b.corpus.iter().map(|e| &e.program).collect();
        assert_eq!(pa, pb);
    }
}
