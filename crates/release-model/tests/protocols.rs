//! Each scenario over every interleaving (or, with three threads, within a
//! preemption bound). The protocol before any lock (`CheckThenDrop`,
//! patches/0001) and 0008 as first written (`OneLock`) must be caught where
//! they are wrong; the per-group locks (`GroupLocks`, patches/0008 now) must
//! be right in every scenario.

use mlx_release_model::{explore, Graph, Protocol, Violation, World};
use Protocol::*;
use Violation::*;

/// The preemption bound of the three-thread scenarios: the largest that
/// keeps this file's tests to a few minutes on two cores.
const THREE_THREADS: Option<usize> = Some(5);

/// A group of `members` outputs, descriptors 0.., on lock 0, with `handles`
/// held to each; `extra` descriptors follow.
fn group(members: usize, handles: &[(usize, usize)], extra: usize) -> Graph {
    Graph {
        groups: vec![((0..members).collect(), 0)],
        inputs: vec![],
        handles: handles.to_vec(),
        descs: members + extra,
    }
}

/// User code evaluates output 0, which detaches the group, then lets go of
/// it.
fn evaluate_then_let_go(w: &World) {
    w.evaluate(0);
    w.let_go(0);
}

/// Two threads, each holding one output of a group of two, let go at once.
fn two_outputs(p: Protocol) -> Vec<Violation> {
    explore(
        p,
        &group(2, &[(0, 1), (1, 1)], 0),
        &[|w: &World| w.let_go(0), |w: &World| w.let_go(1)],
        None,
    )
}

/// Two copies of the same output, on two threads.
fn one_output_twice(p: Protocol) -> Vec<Violation> {
    explore(
        p,
        &group(2, &[(0, 2)], 0),
        &[|w: &World| w.let_go(0), |w: &World| w.let_go(0)],
        None,
    )
}

/// Three threads, one output of a group of three each.
fn three_outputs(p: Protocol) -> Vec<Violation> {
    explore(
        p,
        &group(3, &[(0, 1), (1, 1), (2, 1)], 0),
        &[
            |w: &World| w.let_go(0),
            |w: &World| w.let_go(1),
            |w: &World| w.let_go(2),
        ],
        THREE_THREADS,
    )
}

/// A release racing with a copy: the second thread copies output 1 it
/// holds, lets go of the original, then of the copy.
fn release_and_copy(p: Protocol) -> Vec<Violation> {
    explore(
        p,
        &group(2, &[(0, 1), (1, 1)], 0),
        &[
            |w: &World| w.let_go(0),
            |w: &World| {
                w.copy(1);
                w.let_go(1);
                w.let_go(1);
            },
        ],
        None,
    )
}

/// A release racing with the evaluation of a sibling, which detaches the
/// group, on another thread.
fn release_and_eval(p: Protocol) -> Vec<Violation> {
    explore(
        p,
        &group(2, &[(0, 1), (1, 1)], 0),
        &[evaluate_then_let_go, |w: &World| w.let_go(1)],
        None,
    )
}

/// A copy racing with the evaluation of a sibling.
fn copy_and_eval(p: Protocol) -> Vec<Violation> {
    explore(
        p,
        &group(2, &[(0, 1), (1, 1)], 0),
        &[evaluate_then_let_go, |w: &World| {
            w.copy(1);
            w.let_go(1);
            w.let_go(1);
        }],
        None,
    )
}

/// A group of two with consumers after it (descriptors 2..), each with its
/// inputs.
fn with_consumers(handles: &[(usize, usize)], consumers: &[&[usize]]) -> Graph {
    let mut g = group(2, handles, consumers.len());
    g.inputs = (2..)
        .zip(consumers.iter().map(|ins| ins.to_vec()))
        .collect();
    g
}

/// Two consumers (descriptors 2 and 3), one of each output, destroyed on
/// two threads: `~ArrayDesc`'s teardown of their inputs.
fn two_consumers(p: Protocol) -> Vec<Violation> {
    let g = with_consumers(&[(2, 1), (3, 1)], &[&[0], &[1]]);
    explore(
        p,
        &g,
        &[|w: &World| w.let_go(2), |w: &World| w.let_go(3)],
        None,
    )
}

/// A consumer of both outputs destroyed while another thread lets go of its
/// own handle to one of them.
fn consumer_and_release(p: Protocol) -> Vec<Violation> {
    let g = with_consumers(&[(2, 1), (1, 1)], &[&[0, 1]]);
    explore(
        p,
        &g,
        &[|w: &World| w.let_go(2), |w: &World| w.let_go(1)],
        None,
    )
}

/// A consumer of output 1 torn down while another thread evaluates output
/// 0, which detaches the group.
fn consumer_and_eval(p: Protocol) -> Vec<Violation> {
    let g = with_consumers(&[(0, 1), (2, 1)], &[&[1]]);
    explore(
        p,
        &g,
        &[evaluate_then_let_go, |w: &World| w.let_go(2)],
        None,
    )
}

/// Three threads: an evaluation of output 0, the teardown of a consumer of
/// output 1, and a release of a handle to output 1.
fn eval_consumer_and_release(p: Protocol) -> Vec<Violation> {
    let g = with_consumers(&[(0, 1), (1, 1), (2, 1)], &[&[1]]);
    explore(
        p,
        &g,
        &[
            evaluate_then_let_go,
            |w: &World| w.let_go(2),
            |w: &World| w.let_go(1),
        ],
        THREE_THREADS,
    )
}

/// Nested groups: an outer group (0, 1) whose output 0 is the input of an
/// inner group (2, 3), the two on locks `outer` and `inner`. User code
/// holds the inner outputs and, if `outer_held`, output 1.
fn nested(outer: usize, inner: usize, outer_held: bool) -> Graph {
    let mut handles = vec![(2, 1), (3, 1)];
    if outer_held {
        handles.push((1, 1));
    }
    Graph {
        groups: vec![(vec![0, 1], outer), (vec![2, 3], inner)],
        inputs: vec![(2, vec![0]), (3, vec![0])],
        handles,
        descs: 4,
    }
}

/// The inner outputs let go of on two threads: the last breaks the inner
/// group, whose teardown judges and breaks the outer one.
fn nested_two(p: Protocol, same_lock: bool) -> Vec<Violation> {
    explore(
        p,
        &nested(0, usize::from(!same_lock), false),
        &[|w: &World| w.let_go(2), |w: &World| w.let_go(3)],
        None,
    )
}

/// The same with a third thread letting go of the outer group's other
/// output.
fn nested_three(p: Protocol, same_lock: bool) -> Vec<Violation> {
    explore(
        p,
        &nested(0, usize::from(!same_lock), true),
        &[
            |w: &World| w.let_go(2),
            |w: &World| w.let_go(3),
            |w: &World| w.let_go(1),
        ],
        THREE_THREADS,
    )
}

#[test]
fn before_any_lock_the_model_finds_orphans_and_races() {
    assert!(two_outputs(CheckThenDrop).contains(&Orphaned));
    assert!(one_output_twice(CheckThenDrop).contains(&Orphaned));
    assert!(three_outputs(CheckThenDrop).contains(&Orphaned));
    assert!(!release_and_copy(CheckThenDrop).is_empty());
    assert!(!release_and_eval(CheckThenDrop).is_empty());
    assert!(!two_consumers(CheckThenDrop).is_empty());
    assert!(!consumer_and_release(CheckThenDrop).is_empty());
}

#[test]
fn one_lock_for_all_groups_races_a_teardown_against_an_evaluation() {
    // 0008 as first written: right about the counts, but `detach` clears the
    // flag before it moves the lists out, and a teardown that reads the flag
    // cleared (relaxed) reads a list without the lock.
    assert_eq!(consumer_and_eval(OneLock), [DataRace]);
    assert_eq!(eval_consumer_and_release(OneLock), [DataRace]);
    assert_eq!(two_outputs(OneLock), []);
    assert_eq!(consumer_and_release(OneLock), []);
}

#[test]
fn per_group_locks_are_right_for_releases_copies_and_evaluations() {
    assert_eq!(two_outputs(GroupLocks), []);
    assert_eq!(one_output_twice(GroupLocks), []);
    assert_eq!(three_outputs(GroupLocks), []);
    assert_eq!(release_and_copy(GroupLocks), []);
    assert_eq!(release_and_eval(GroupLocks), []);
    assert_eq!(copy_and_eval(GroupLocks), []);
}

#[test]
fn per_group_locks_are_right_for_teardowns() {
    assert_eq!(two_consumers(GroupLocks), []);
    assert_eq!(consumer_and_release(GroupLocks), []);
    assert_eq!(consumer_and_eval(GroupLocks), []);
    assert_eq!(eval_consumer_and_release(GroupLocks), []);
}

#[test]
fn per_group_locks_are_right_for_nested_groups_on_one_lock_or_two() {
    for same_lock in [true, false] {
        assert_eq!(
            nested_two(GroupLocks, same_lock),
            [],
            "same lock: {same_lock}"
        );
        assert_eq!(
            nested_three(GroupLocks, same_lock),
            [],
            "same lock: {same_lock}"
        );
    }
}

#[test]
fn one_thread_is_right_under_every_protocol() {
    // The same releases in sequence: every version is right here, which is
    // why single-threaded tests never saw the race.
    for p in [CheckThenDrop, OneLock, GroupLocks] {
        let g = group(2, &[(0, 1), (1, 1)], 0);
        let sequential = |w: &World| {
            w.let_go(0);
            w.let_go(1);
        };
        assert_eq!(explore(p, &g, &[sequential], None), [], "{p:?}");
    }
}
