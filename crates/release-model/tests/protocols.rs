//! Each scenario over every interleaving: the protocol before the group lock
//! (`CheckThenDrop`, patches/0001) must be caught by the model in the
//! scenarios where it is wrong, and the group lock (`UnderLock`,
//! patches/0008) must be right in all of them.

use mlx_release_model::{explore, CheckThenDrop, Group, Protocol, UnderLock, Violation};

/// Two threads, each holding one output of a group of two, let go at once.
fn two_outputs<P: Protocol>() -> Vec<Violation> {
    explore(
        &[1, 1],
        &[|g: &Group| g.release::<P>(0), |g: &Group| g.release::<P>(1)],
        None,
    )
}

/// Two copies of the same output, on two threads.
fn one_output_twice<P: Protocol>() -> Vec<Violation> {
    explore(
        &[2, 0],
        &[|g: &Group| g.release::<P>(0), |g: &Group| g.release::<P>(0)],
        None,
    )
}

/// Three threads, one output of a group of three each.
fn three_outputs<P: Protocol>() -> Vec<Violation> {
    explore(
        &[1, 1, 1],
        &[
            |g: &Group| g.release::<P>(0),
            |g: &Group| g.release::<P>(1),
            |g: &Group| g.release::<P>(2),
        ],
        Some(3),
    )
}

/// A release racing with a copy: the second thread copies output 0 through
/// the output 1 it holds, then lets go of output 1, then of its copy.
fn release_and_copy<P: Protocol>() -> Vec<Violation> {
    explore(
        &[1, 1],
        &[
            |g: &Group| g.release::<P>(0),
            |g: &Group| {
                g.copy(0);
                g.release::<P>(1);
                g.release::<P>(0);
            },
        ],
        None,
    )
}

/// A release racing with the evaluation of a sibling, which detaches the
/// group, on another thread.
fn release_and_eval<P: Protocol>() -> Vec<Violation> {
    explore(
        &[1, 1],
        &[
            |g: &Group| {
                g.detach::<P>(0);
                g.release::<P>(0);
            },
            |g: &Group| g.release::<P>(1),
        ],
        None,
    )
}

/// Two consumers, one of each output, destroyed on two threads
/// (`~ArrayDesc`'s teardown of its inputs).
fn two_consumers<P: Protocol>() -> Vec<Violation> {
    explore(
        &[1, 1],
        &[
            |g: &Group| g.destroy_consumer::<P>(&[0]),
            |g: &Group| g.destroy_consumer::<P>(&[1]),
        ],
        None,
    )
}

/// A consumer of both outputs destroyed while another thread lets go of its
/// own handle to one of them.
fn consumer_and_release<P: Protocol>() -> Vec<Violation> {
    explore(
        &[1, 2],
        &[
            |g: &Group| g.destroy_consumer::<P>(&[0, 1]),
            |g: &Group| g.release::<P>(1),
        ],
        None,
    )
}

use Violation::*;

#[test]
fn the_model_finds_the_orphan_of_concurrent_releases_before_the_lock() {
    assert_eq!(two_outputs::<CheckThenDrop>(), [Orphaned]);
    assert_eq!(one_output_twice::<CheckThenDrop>(), [Orphaned]);
    assert_eq!(three_outputs::<CheckThenDrop>(), [Orphaned]);
    assert!(two_consumers::<CheckThenDrop>().contains(&Orphaned));
    assert!(consumer_and_release::<CheckThenDrop>().contains(&Orphaned));
}

#[test]
fn the_model_finds_releases_racing_with_a_copy_or_an_evaluation_wrong_before_the_lock() {
    // A copy made while the other thread decides: the group is orphaned, or
    // broken by both threads.
    assert_eq!(release_and_copy::<CheckThenDrop>(), [Orphaned, BrokenTwice]);
    // Evaluation detaches the group while a release breaks it: broken while
    // the evaluating thread holds it, and broken by both.
    assert_eq!(
        release_and_eval::<CheckThenDrop>(),
        [BrokenWhileHeld, BrokenTwice]
    );
}

#[test]
fn under_the_group_lock_no_interleaving_orphans_or_breaks_a_held_group() {
    assert_eq!(two_outputs::<UnderLock>(), []);
    assert_eq!(one_output_twice::<UnderLock>(), []);
    assert_eq!(three_outputs::<UnderLock>(), []);
    assert_eq!(release_and_copy::<UnderLock>(), []);
    assert_eq!(release_and_eval::<UnderLock>(), []);
    assert_eq!(two_consumers::<UnderLock>(), []);
    assert_eq!(consumer_and_release::<UnderLock>(), []);
}

#[test]
fn one_thread_is_right_under_both_protocols() {
    // The same releases in sequence: the old protocol was right here, which
    // is why single-threaded tests never saw the race.
    let sequential: [fn(&Group); 2] = [
        |g| {
            g.release::<CheckThenDrop>(0);
            g.release::<CheckThenDrop>(1);
        },
        |g| {
            g.release::<UnderLock>(0);
            g.release::<UnderLock>(1);
        },
    ];
    for actor in sequential {
        assert_eq!(explore(&[1, 1], &[actor], None), []);
    }
}
