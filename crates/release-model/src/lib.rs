//! A model of how MLX lets go of the outputs of a multi-output primitive,
//! checked over every interleaving of two or three threads with loom.
//!
//! The outputs of one primitive (a *group*) hold each other through their
//! siblings lists, a reference cycle: each member's count includes one
//! reference from the list of every other member. The cycle must be broken
//! once no reference from outside the group is left, and must not be broken
//! while one is.
//!
//! The model keeps the state the C++ keeps, in the C++'s own kinds of
//! storage: per descriptor, its `shared_ptr` count (an atomic), its `group`
//! word (an atomic: 0, or the lock it uses plus one), and its siblings and
//! inputs lists (loom `UnsafeCell`s, so that an access not ordered after a
//! write is caught as a data race). Descriptors form a small graph: groups,
//! their inputs, and consumers of their outputs, so that a group can be the
//! input of another and the teardown of one descriptor can cascade into
//! others, as `~ArrayDesc` does. Each [`Protocol`] is one version of the C++
//! (`patches/0001-*`, and `patches/0008-*` before and after the group lock
//! became per group).
//!
//! Beside the model's own state, the [`World`] keeps the truth the C++ cannot
//! see, in plain atomics that loom's one-thread-at-a-time execution reads
//! exactly: how many handles user code holds to each descriptor, and which
//! descriptors are freed. A break while a handle is held, a touch of a freed
//! descriptor, or an execution that ends with every handle gone and a
//! descriptor still allocated (an orphan) is a [`Violation`]; so is a data
//! race on a list.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Mutex, MutexGuard};
use std::sync::atomic::AtomicBool as Truth;
use std::sync::atomic::AtomicUsize as TruthCounter;
use std::sync::atomic::Ordering::SeqCst;

/// What must never happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    /// Every handle is gone and a descriptor is still allocated: a group
    /// keeps itself, and its inputs, for the life of the process.
    Orphaned,
    /// A release broke the cycle while user code still held a member:
    /// evaluating it would find its siblings gone.
    BrokenWhileHeld,
    /// A freed descriptor was touched, or freed twice: in the C++, two
    /// threads walk and clear the same siblings lists at once.
    UseAfterFree,
    /// Two threads touched a siblings or inputs list, one of them writing,
    /// with nothing ordering the two (loom's causality check).
    DataRace,
}

/// Which version of the C++ runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `patches/0001-*`: the release reads the counts, decides, then drops
    /// its reference; membership is `!siblings.empty()`; no lock.
    CheckThenDrop,
    /// `patches/0008-*` as first written: one lock for every group, a
    /// `grouped` flag read relaxed, and `detach` clearing the flag before
    /// moving the lists out.
    OneLock,
    /// `patches/0008-*` now: each group uses one of a fixed set of locks,
    /// named by its `group` word; the word is cleared, with release order,
    /// only once the lists are gone, and read with acquire order before a
    /// list is read.
    GroupLocks,
}

/// A descriptor's index in the [`World`].
pub type Desc = usize;

/// What a scenario starts from: the graph and the handles user code holds.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Each group's members and the lock it uses (an index into the locks,
    /// of which there are as many as the largest index plus one).
    pub groups: Vec<(Vec<Desc>, usize)>,
    /// Each descriptor's inputs (a group's members each hold their own copy
    /// of the group's inputs, as `make_arrays` gives them).
    pub inputs: Vec<(Desc, Vec<Desc>)>,
    /// The handles user code holds to each descriptor.
    pub handles: Vec<(Desc, usize)>,
    /// How many descriptors there are.
    pub descs: usize,
}

struct State {
    count: AtomicUsize,
    group: AtomicUsize,
    siblings: UnsafeCell<Vec<Desc>>,
    inputs: UnsafeCell<Vec<Desc>>,
    /// The truth: freed.
    freed: Truth,
    /// The truth: user handles held now.
    held: TruthCounter,
}

/// The descriptors, the locks, and the truth.
pub struct World {
    protocol: Protocol,
    descs: Vec<State>,
    locks: Vec<Mutex<()>>,
    /// The group each descriptor was made in (the truth: which members a
    /// break must not find held).
    made_in: Vec<Option<usize>>,
    members: Vec<Vec<Desc>>,
    violation: TruthCounter,
}

/// A lock held, or none.
type Held<'a> = Option<MutexGuard<'a, ()>>;

impl World {
    pub fn new(protocol: Protocol, graph: &Graph) -> Self {
        let mut count = vec![0; graph.descs];
        let mut siblings = vec![Vec::new(); graph.descs];
        let mut group = vec![0; graph.descs];
        let mut made_in = vec![None; graph.descs];
        let mut inputs = vec![Vec::new(); graph.descs];
        for (g, (members, lock)) in graph.groups.iter().enumerate() {
            for &m in members {
                siblings[m] = members.iter().copied().filter(|&s| s != m).collect();
                for &s in &siblings[m] {
                    count[s] += 1;
                }
                group[m] = lock + 1;
                made_in[m] = Some(g);
            }
        }
        for (d, ins) in &graph.inputs {
            inputs[*d] = ins.clone();
            for &i in ins {
                count[i] += 1;
            }
        }
        let mut held = vec![0; graph.descs];
        for &(d, h) in &graph.handles {
            count[d] += h;
            held[d] += h;
        }
        let locks = graph.groups.iter().map(|(_, l)| l + 1).max().unwrap_or(1);
        World {
            protocol,
            descs: (0..graph.descs)
                .map(|d| State {
                    count: AtomicUsize::new(count[d]),
                    group: AtomicUsize::new(group[d]),
                    siblings: UnsafeCell::new(std::mem::take(&mut siblings[d])),
                    inputs: UnsafeCell::new(std::mem::take(&mut inputs[d])),
                    freed: Truth::new(false),
                    held: TruthCounter::new(held[d]),
                })
                .collect(),
            locks: (0..locks).map(|_| Mutex::new(())).collect(),
            made_in,
            members: graph.groups.iter().map(|(m, _)| m.clone()).collect(),
            violation: TruthCounter::new(0),
        }
    }

    fn flag(&self, v: Violation) {
        let _ = self
            .violation
            .compare_exchange(0, v as usize + 1, SeqCst, SeqCst);
    }

    /// The violation this execution produced, checked once every thread has
    /// finished and let go of every handle.
    pub fn verdict(&self) -> Option<Violation> {
        let all_gone = self.descs.iter().all(|s| s.held.load(SeqCst) == 0);
        if all_gone && self.descs.iter().any(|s| !s.freed.load(SeqCst)) {
            self.flag(Violation::Orphaned);
        }
        match self.violation.load(SeqCst) {
            0 => None,
            1 => Some(Violation::Orphaned),
            2 => Some(Violation::BrokenWhileHeld),
            3 => Some(Violation::UseAfterFree),
            _ => Some(Violation::DataRace),
        }
    }

    fn live(&self, d: Desc) -> bool {
        if self.descs[d].freed.load(SeqCst) {
            self.flag(Violation::UseAfterFree);
            return false;
        }
        true
    }

    // ---- shared_ptr ----

    /// `use_count()`: a relaxed load.
    fn count(&self, d: Desc) -> usize {
        self.descs[d].count.load(Ordering::Relaxed)
    }

    /// A copy of a reference: a relaxed increment.
    fn add_ref(&self, d: Desc) {
        if self.live(d) {
            self.descs[d].count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops a reference without any check (acquire-release, as
    /// `shared_ptr`); the last one destroys the descriptor.
    fn drop_ref(&self, d: Desc) {
        if self.live(d) && self.descs[d].count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.destroy(d);
        }
    }

    // ---- the lists ----

    fn siblings(&self, d: Desc) -> Vec<Desc> {
        self.descs[d].siblings.with(|v| unsafe { (*v).clone() })
    }

    fn take_siblings(&self, d: Desc) -> Vec<Desc> {
        self.descs[d]
            .siblings
            .with_mut(|v| unsafe { std::mem::take(&mut *v) })
    }

    fn take_inputs(&self, d: Desc) -> Vec<Desc> {
        self.descs[d]
            .inputs
            .with_mut(|v| unsafe { std::mem::take(&mut *v) })
    }

    /// Whether `d` belongs to a group, as the protocol's fast path asks it
    /// without a lock.
    fn looks_grouped(&self, d: Desc) -> bool {
        match self.protocol {
            Protocol::CheckThenDrop => !self.siblings(d).is_empty(),
            Protocol::OneLock | Protocol::GroupLocks => {
                self.descs[d].group.load(Ordering::Relaxed) != 0
            }
        }
    }

    /// The lock that guards `d`'s group, held: `GroupGuard` (the word read
    /// with acquire order, read again once locked) under [`GroupLocks`],
    /// the one lock when `d` looks grouped under [`OneLock`], none before.
    ///
    /// [`GroupLocks`]: Protocol::GroupLocks
    /// [`OneLock`]: Protocol::OneLock
    fn lock_group(&self, d: Desc) -> (bool, Held<'_>) {
        match self.protocol {
            Protocol::CheckThenDrop => (!self.siblings(d).is_empty(), None),
            Protocol::OneLock => {
                if self.descs[d].group.load(Ordering::Relaxed) == 0 {
                    return (false, None);
                }
                let held = self.locks[0].lock().unwrap();
                let grouped = self.descs[d].group.load(Ordering::Relaxed) != 0;
                (grouped, Some(held))
            }
            Protocol::GroupLocks => {
                let mut g = self.descs[d].group.load(Ordering::Acquire);
                while g != 0 {
                    let held = self.locks[g - 1].lock().unwrap();
                    let now = self.descs[d].group.load(Ordering::Acquire);
                    if now == g {
                        return (true, Some(held));
                    }
                    drop(held);
                    g = now;
                }
                (false, None)
            }
        }
    }

    /// Clears a member's membership and takes its siblings list: in the
    /// order each protocol's C++ does it.
    fn leave(&self, d: Desc) -> Vec<Desc> {
        match self.protocol {
            Protocol::CheckThenDrop => self.take_siblings(d),
            Protocol::OneLock => {
                self.descs[d].group.store(0, Ordering::Relaxed);
                self.take_siblings(d)
            }
            Protocol::GroupLocks => {
                let list = self.take_siblings(d);
                self.descs[d].group.store(0, Ordering::Release);
                list
            }
        }
    }

    /// A release broke the group `d` is in: no member may be held by user
    /// code.
    fn check_unheld(&self, d: Desc) {
        if let Some(g) = self.made_in[d] {
            if self.members[g]
                .iter()
                .any(|&m| self.descs[m].held.load(SeqCst) != 0)
            {
                self.flag(Violation::BrokenWhileHeld);
            }
        }
    }

    // ---- the C++ ----

    /// `release_descriptor` (and `release_group`): a reference to `d` goes.
    fn release(&self, d: Desc) {
        if !self.live(d) {
            return;
        }
        if !self.looks_grouped(d) {
            self.drop_ref(d);
            return;
        }
        let (grouped, held) = self.lock_group(d);
        if !grouped {
            drop(held);
            self.drop_ref(d);
            return;
        }
        let siblings = self.siblings(d);
        let n = siblings.len();
        let outside = self.count(d) != n + 1 || siblings.iter().any(|&s| self.count(s) != n);
        if outside {
            match self.protocol {
                // Decided, then dropped: another release may decide between.
                Protocol::CheckThenDrop => {
                    drop(held);
                    self.drop_ref(d);
                }
                _ => {
                    self.drop_ref(d);
                    drop(held);
                }
            }
            return;
        }
        self.check_unheld(d);
        let mut lists: Vec<Vec<Desc>> = siblings.iter().map(|&s| self.leave(s)).collect();
        lists.push(self.leave(d));
        drop(held);
        for list in lists {
            for s in list {
                self.drop_ref(s);
            }
        }
        self.drop_ref(d);
    }

    /// `array::detach` on `d`, which the calling thread holds.
    fn detach(&self, d: Desc) {
        let (grouped, held) = match self.protocol {
            Protocol::CheckThenDrop => (true, None),
            _ => self.lock_group(d),
        };
        let mut lists = Vec::new();
        if grouped {
            let siblings = self.siblings(d);
            for &s in siblings.iter().chain(std::iter::once(&d)) {
                lists.push(self.take_inputs(s));
                lists.push(self.leave(s));
            }
        } else {
            lists.push(self.take_inputs(d));
            lists.push(self.take_siblings(d));
        }
        drop(held);
        for list in lists {
            for s in list {
                self.release(s);
            }
        }
    }

    /// `~ArrayDesc`: `d`'s last reference went.
    fn destroy(&self, d: Desc) {
        if self.descs[d].freed.swap(true, SeqCst) {
            self.flag(Violation::UseAfterFree);
            return;
        }
        let mut for_deletion = Vec::new();
        self.append_deletable_inputs(d, &mut for_deletion);
        while let Some(top) = for_deletion.pop() {
            self.append_deletable_inputs(top, &mut for_deletion);
            // Nothing outside can reach `top`'s group: its list goes
            // without a check, and so does the reference `for_deletion` held.
            let list = self.take_siblings(top);
            self.descs[top].group.store(0, Ordering::Relaxed);
            for s in list {
                self.drop_ref(s);
            }
            self.drop_ref(top);
        }
        // A list left (a group destroyed whole): released entry by entry.
        for s in self.take_siblings(d) {
            self.release(s);
        }
    }

    /// `~ArrayDesc`'s `append_deletable_inputs(ad)`: a map takes a copy of
    /// each input and of its siblings; the inputs' own references go; each
    /// entry that nothing else holds moves to `for_deletion`, and the rest
    /// are released with the check.
    fn append_deletable_inputs(&self, ad: Desc, for_deletion: &mut Vec<Desc>) {
        let inputs = self.take_inputs(ad);
        if inputs.is_empty() {
            return;
        }
        let mut map: Vec<Desc> = Vec::new();
        let insert = |map: &mut Vec<Desc>, d: Desc| {
            if !map.contains(&d) {
                self.add_ref(d);
                map.push(d);
            }
        };
        // 0008 as first written: the one lock, for the whole teardown, if
        // any input looks grouped (read relaxed).
        let one_lock: Held<'_> = (self.protocol == Protocol::OneLock
            && inputs
                .iter()
                .any(|&a| self.descs[a].group.load(Ordering::Relaxed) != 0))
        .then(|| self.locks[0].lock().unwrap());
        for &a in &inputs {
            insert(&mut map, a);
            // The copies of the siblings are made while the list is read
            // (under the group's lock, with per-group locks).
            let held = if self.protocol == Protocol::GroupLocks {
                self.lock_group(a).1
            } else {
                None
            };
            for s in self.siblings(a) {
                insert(&mut map, s);
            }
            drop(held);
        }
        for &a in &inputs {
            if self.protocol == Protocol::CheckThenDrop {
                self.release(a);
            } else {
                // The map holds a copy: no check.
                self.drop_ref(a);
            }
        }
        let mut kept = Vec::new();
        for &a in &map {
            let held = if self.protocol == Protocol::GroupLocks {
                self.lock_group(a).1
            } else {
                None
            };
            let siblings = self.siblings(a);
            let n = siblings.len();
            let deletable = self.count(a) <= n + 1
                && siblings
                    .iter()
                    .all(|s| self.count(*s) <= n + usize::from(map.contains(s)));
            drop(held);
            if deletable {
                // A group still whole must be held by nobody; a detached
                // member is an array of its own.
                if n > 0 {
                    self.check_unheld(a);
                } else if self.descs[a].held.load(SeqCst) != 0 {
                    self.flag(Violation::BrokenWhileHeld);
                }
                for_deletion.push(a);
            } else {
                kept.push(a);
            }
        }
        drop(one_lock);
        for a in kept {
            self.release(a);
        }
    }

    // ---- what user code does ----

    /// User code lets go of a handle to `d`.
    pub fn let_go(&self, d: Desc) {
        self.descs[d].held.fetch_sub(1, SeqCst);
        self.release(d);
    }

    /// User code that holds `d` copies its handle.
    pub fn copy(&self, d: Desc) {
        self.add_ref(d);
        self.descs[d].held.fetch_add(1, SeqCst);
    }

    /// User code that holds `d` evaluates it: the evaluation detaches `d`'s
    /// group.
    pub fn evaluate(&self, d: Desc) {
        self.detach(d);
    }
}

/// Runs `actors[0]` on the model's main thread and each other actor on a
/// thread of its own, over every interleaving loom explores (all of them,
/// or those within `preemption_bound` preemptions), and returns the first
/// violation of each kind any execution produced. A data race ends loom's
/// exploration, so it is the last violation found.
pub fn explore(
    protocol: Protocol,
    graph: &Graph,
    actors: &[fn(&World)],
    preemption_bound: Option<usize>,
) -> Vec<Violation> {
    let found = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (graph, actors) = (graph.clone(), actors.to_vec());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemption_bound;
    let seen = found.clone();
    let explored = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        builder.check(move || {
            let world = loom::sync::Arc::new(World::new(protocol, &graph));
            let threads: Vec<_> = actors[1..]
                .iter()
                .map(|&actor| {
                    let world = world.clone();
                    loom::thread::spawn(move || actor(&world))
                })
                .collect();
            actors[0](&world);
            for t in threads {
                t.join().unwrap();
            }
            if let Some(v) = world.verdict() {
                let mut seen = seen.lock().unwrap();
                if !seen.contains(&v) {
                    seen.push(v);
                }
            }
        })
    }));
    let mut found = found.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Err(panic) = explored {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if what.contains("Causality violation") {
            found.push(Violation::DataRace);
        } else {
            std::panic::resume_unwind(panic);
        }
    }
    found.sort_by_key(|v| *v as usize);
    found.dedup();
    found
}
