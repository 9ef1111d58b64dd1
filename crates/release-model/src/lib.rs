//! A model of how MLX lets go of the outputs of a multi-output primitive,
//! checked over every interleaving of two or three threads with loom.
//!
//! The outputs of one primitive (a *group*) hold each other through their
//! siblings lists, a reference cycle: each member's count includes one
//! reference from the list of every other member. The cycle must be broken
//! once no reference from outside the group is left, and must not be broken
//! while one is. The model keeps what the C++ decides on — each member's
//! reference count, the `grouped` flag, and the group lock — and nothing
//! else; each [`Protocol`] is one version of the C++ (`patches/0001-*` and
//! `patches/0008-*`).
//!
//! Beside the model's own state, the [`Group`] keeps the truth the C++ cannot
//! see, in plain (unmodelled) atomics that loom's one-thread-at-a-time
//! execution reads exactly: how many handles user code holds. A break while
//! one is held, or an execution that ends with every handle gone and the
//! group still whole (an orphan), is a [`Violation`].

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Mutex;
use std::sync::atomic::AtomicUsize as TruthCounter;
use std::sync::atomic::Ordering::SeqCst;

/// What must never happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    /// Every handle is gone and the group is still whole: it keeps itself,
    /// and its inputs, allocated for the life of the process.
    Orphaned,
    /// The cycle was broken while user code still held a member: evaluating
    /// it would find its siblings gone.
    BrokenWhileHeld,
    /// The cycle was broken twice, a count falling below zero: in the C++,
    /// two threads walk and clear the same siblings lists at once.
    BrokenTwice,
}

/// One group of `members` outputs.
pub struct Group {
    /// `shared_ptr` use counts: handles, the map copies of a consumer being
    /// destroyed, and `members - 1` references from the siblings lists while
    /// the group is whole.
    counts: Vec<AtomicUsize>,
    /// `ArrayDesc::grouped` (before 0008: `!siblings.empty()`).
    grouped: Vec<AtomicBool>,
    /// The group lock of 0008.
    lock: Mutex<()>,
    /// The truth: handles user code holds now (not modelled by loom).
    held: TruthCounter,
    /// The truth: the first violation seen, as `Violation as usize + 1`.
    violation: TruthCounter,
}

impl Group {
    /// A whole group of `members` outputs with `handles[i]` user handles to
    /// member i.
    pub fn new(handles: &[usize]) -> Self {
        let n = handles.len() - 1;
        Group {
            counts: handles.iter().map(|h| AtomicUsize::new(h + n)).collect(),
            grouped: handles.iter().map(|_| AtomicBool::new(true)).collect(),
            lock: Mutex::new(()),
            held: TruthCounter::new(handles.iter().sum()),
            violation: TruthCounter::new(0),
        }
    }

    fn siblings(&self) -> usize {
        self.counts.len() - 1
    }

    fn flag(&self, v: Violation) {
        let _ = self
            .violation
            .compare_exchange(0, v as usize + 1, SeqCst, SeqCst);
    }

    /// The violation this execution produced, checked once every thread has
    /// finished and let go of every handle.
    pub fn verdict(&self) -> Option<Violation> {
        if self.violation.load(SeqCst) == 0
            && self.counts.iter().any(|c| c.load(Ordering::SeqCst) != 0)
        {
            self.flag(Violation::Orphaned);
        }
        match self.violation.load(SeqCst) {
            0 => None,
            1 => Some(Violation::Orphaned),
            2 => Some(Violation::BrokenWhileHeld),
            _ => Some(Violation::BrokenTwice),
        }
    }

    fn count(&self, m: usize) -> usize {
        // `shared_ptr::use_count()`: a relaxed load.
        self.counts[m].load(Ordering::Relaxed)
    }

    /// A copy of a reference (an increment: relaxed, as `shared_ptr` does).
    fn increment(&self, m: usize) {
        self.counts[m].fetch_add(1, Ordering::Relaxed);
    }

    /// Drops one reference to member `m` (acquire-release, as `shared_ptr`).
    fn decrement(&self, m: usize) {
        if self.counts[m].fetch_sub(1, Ordering::AcqRel) == 0 {
            self.flag(Violation::BrokenTwice);
        }
    }

    /// Whether any member has a reference from outside the group beyond
    /// `own` references to member `m` (the releaser's or the consumer's).
    fn held_beyond(&self, own: &[(usize, usize)]) -> bool {
        let n = self.siblings();
        (0..self.counts.len()).any(|i| {
            let mine: usize = own.iter().filter(|(m, _)| *m == i).map(|(_, k)| k).sum();
            self.count(i) != n + mine
        })
    }

    /// Breaks the cycle: every member stops being grouped, and the
    /// references of the siblings lists go. `before_drop` runs between the
    /// two (0008 unlocks there). A release may break only an unheld group;
    /// evaluation (`detach`) breaks the group it holds.
    fn break_cycle(&self, release: bool, before_drop: impl FnOnce()) {
        if release && self.held.load(SeqCst) != 0 {
            self.flag(Violation::BrokenWhileHeld);
        }
        for g in &self.grouped {
            g.store(false, Ordering::Relaxed);
        }
        before_drop();
        for m in 0..self.counts.len() {
            for _ in 0..self.siblings() {
                self.decrement(m);
            }
        }
    }

    /// `~ArrayDesc`'s teardown up to its judgement: the map takes a copy of
    /// every member, the consumer's own references go, and the group is
    /// deletable when nothing but those copies holds it from outside.
    fn take_map(&self, inputs: &[usize]) -> bool {
        let members = self.counts.len();
        for m in 0..members {
            self.increment(m);
        }
        for &m in inputs {
            self.decrement(m);
        }
        let own: Vec<(usize, usize)> = (0..members).map(|m| (m, 1)).collect();
        self.grouped[0].load(Ordering::Relaxed) && !self.held_beyond(&own)
    }

    /// The map's copies of a group the teardown broke itself.
    fn drop_map(&self) {
        for m in 0..self.counts.len() {
            self.decrement(m);
        }
    }

    /// User code lets go of a handle to `m` (the truth), then the protocol
    /// releases it.
    pub fn release<P: Protocol>(&self, m: usize) {
        self.held.fetch_sub(1, SeqCst);
        P::release(self, m);
    }

    /// User code that holds a handle to some member copies member `m`
    /// (through the siblings list of the one it holds, or its handle).
    pub fn copy(&self, m: usize) {
        self.increment(m);
        self.held.fetch_add(1, SeqCst);
    }

    /// Evaluation of member `m` detaches the group (the evaluating thread
    /// holds `m`).
    pub fn detach<P: Protocol>(&self, m: usize) {
        P::detach(self, m);
    }

    /// A consumer whose inputs are the handles `inputs` (one per member it
    /// reads) is destroyed: `~ArrayDesc`'s iterative teardown.
    pub fn destroy_consumer<P: Protocol>(&self, inputs: &[usize]) {
        self.held.fetch_sub(inputs.len(), SeqCst);
        P::destroy_consumer(self, inputs);
    }
}

/// One version of the C++.
pub trait Protocol {
    /// `array::release_descriptor` and what it calls.
    fn release(g: &Group, m: usize);
    /// `array::detach` on member `m`.
    fn detach(g: &Group, m: usize);
    /// `ArrayDesc::~ArrayDesc`'s `append_deletable_inputs` and the release of
    /// its copies: the consumer held one reference to each of `inputs`.
    fn destroy_consumer(g: &Group, inputs: &[usize]);
}

/// Before 0008 (`patches/0001-*`): the release reads the counts, decides,
/// then drops its reference; no lock.
pub struct CheckThenDrop;

impl Protocol for CheckThenDrop {
    fn release(g: &Group, m: usize) {
        if g.grouped[m].load(Ordering::Relaxed) && !g.held_beyond(&[(m, 1)]) {
            g.break_cycle(true, || {});
        }
        g.decrement(m);
    }

    fn detach(g: &Group, _m: usize) {
        g.break_cycle(false, || {});
    }

    fn destroy_consumer(g: &Group, inputs: &[usize]) {
        // Not deletable: the map's copies go through the release check
        // one by one.
        if g.take_map(inputs) {
            g.break_cycle(true, || {});
            g.drop_map();
            return;
        }
        for m in 0..g.counts.len() {
            Self::release(g, m);
        }
    }
}

/// 0008: the decision and the drop are one step under the group lock, and
/// nothing is let go of under it.
pub struct UnderLock;

impl Protocol for UnderLock {
    fn release(g: &Group, m: usize) {
        if !g.grouped[m].load(Ordering::Relaxed) {
            g.decrement(m);
            return;
        }
        let lock = g.lock.lock().unwrap();
        if !g.grouped[m].load(Ordering::Relaxed) {
            drop(lock);
            g.decrement(m);
        } else if g.held_beyond(&[(m, 1)]) {
            g.decrement(m);
            drop(lock);
        } else {
            let mut lock = Some(lock);
            g.break_cycle(true, || drop(lock.take()));
            g.decrement(m);
        }
    }

    fn detach(g: &Group, m: usize) {
        if g.grouped[m].load(Ordering::Relaxed) {
            let lock = g.lock.lock().unwrap();
            if g.grouped[m].load(Ordering::Relaxed) {
                let mut lock = Some(lock);
                g.break_cycle(false, || drop(lock.take()));
            }
        }
    }

    fn destroy_consumer(g: &Group, inputs: &[usize]) {
        let grouped = inputs.iter().any(|&m| g.grouped[m].load(Ordering::Relaxed));
        let mut lock = grouped.then(|| g.lock.lock().unwrap());
        if g.take_map(inputs) {
            // Deletable: the teardown owns the group and breaks it itself.
            g.break_cycle(true, || drop(lock.take()));
            g.drop_map();
            return;
        }
        drop(lock);
        for m in 0..g.counts.len() {
            Self::release(g, m);
        }
    }
}

/// Runs `actors[0]` on the model's main thread and each other actor on a
/// thread of its own, over every interleaving loom explores (all of them,
/// or those within `preemption_bound` preemptions), and returns the first
/// violation of each kind any execution produced.
pub fn explore(
    handles: &[usize],
    actors: &[fn(&Group)],
    preemption_bound: Option<usize>,
) -> Vec<Violation> {
    let found = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (handles, actors) = (handles.to_vec(), actors.to_vec());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemption_bound;
    let seen = found.clone();
    builder.check(move || {
        let group = loom::sync::Arc::new(Group::new(&handles));
        let threads: Vec<_> = actors[1..]
            .iter()
            .map(|&actor| {
                let group = group.clone();
                loom::thread::spawn(move || actor(&group))
            })
            .collect();
        actors[0](&group);
        for t in threads {
            t.join().unwrap();
        }
        if let Some(v) = group.verdict() {
            let mut seen = seen.lock().unwrap();
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
    });
    let mut found = found.lock().unwrap().clone();
    found.sort_by_key(|v| *v as usize);
    found
}
