//! The graph-lifetime fuzzer in the suite: a fixed-seed slice of random
//! programs on the variant the Rust API links (patched, and pristine under
//! `--features pristine`), each program in the worker process
//! (`src/bin/mlx-fuzz-worker.rs`) so a crash is a finding, not the end.
//!
//! * On a fix the slice finds nothing.
//! * On the control of a base whose upstream fixed the report's leak
//!   (0.32.4) it must find a bug a kept fix is for, and nothing else: a
//!   finding of a kind that a checked-in finding fixed by the base's series
//!   has (the LU factor's overrun, say).
//! * On the control of a leaking base it must find the report's leak by itself: a leak that
//!   needs `compile` (the shrinker removes a compile the leak does not
//!   need) in every process it runs in, shrunk to at most 10 statements.
//!   That reproducer, printed as
//!   C++ and built on its own, leaks against the pristine prefix and not
//!   against the patched one.
//! * The two-thread slice (programs that also let go of two arrays on two
//!   threads at once) finds nothing on a fix, and on the control finds the
//!   release race by itself: a program that leaks, whose one-thread form
//!   (each pair released one after the other) never does.

use mlx_fork::{linked, variant};
use mlx_fuzz::campaign::{shrink_finding, still_fails, Confirm, Event, Worker};
use mlx_fuzz::findings::Kept;
use mlx_fuzz::ir::{FnDef, Stmt};
use mlx_fuzz::Releases;
use mlx_fuzz::{cpp, Finding, Kind, Program};
use std::process::Command;
use std::time::Duration;

/// The slice: programs `0..COUNT` of `SEED`.
const SEED: u64 = 1;
const COUNT: u64 = 3000;
/// The largest reproducer of the report's leak the slice may print.
const MAX_STATEMENTS: usize = 10;
/// The two-thread slice: programs `0..THREAD_COUNT` of `SEED` from the
/// generator that also releases on two threads at once.
const THREAD_COUNT: u64 = 10000;
/// Runs of a leaking program's one-thread form, none of which may leak for
/// its leak to count as the race's.
const ONE_THREAD_RUNS: usize = 3;

fn worker() -> Worker {
    Worker {
        exe: env!("CARGO_BIN_EXE_mlx-fuzz-worker").into(),
        launch: vec![],
        env: vec![],
        timeout: Duration::from_secs(60),
        releases: Releases::OneThread,
    }
}

/// The slice's findings; what each program it ran came to (bits or an
/// error) is recorded for the differential of patched against pristine.
fn slice() -> Vec<(u64, Vec<Finding>)> {
    let mut found = Vec::new();
    let mut results = std::collections::BTreeMap::new();
    worker()
        .run_seeds(SEED, 0, COUNT, |e: Event| {
            let f = e.findings();
            if let Event::Ran(i, o) = &e {
                results.insert(*i, o.result());
            }
            if !f.is_empty() {
                found.push((e.index(), f));
            }
        })
        .expect("the worker runs the slice");
    mlx_fork::report_results(linked().name, &results);
    found
}

fn compiles(p: &Program) -> bool {
    p.stmts.iter().any(|s| {
        matches!(
            s,
            Stmt::Def {
                def: FnDef::Compile { .. },
                ..
            }
        )
    })
}

/// Builds `p` as C++ against `prefix` and runs it: (exit success, stdout).
fn run_cpp(p: &Program, name: &str, prefix: &str) -> (bool, String) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-repro");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.cpp"));
    let exe = dir.join(name);
    std::fs::write(
        &src,
        cpp::print(p, "the report's leak, as the fuzzer found and shrank it"),
    )
    .unwrap();
    std::fs::write(dir.join(format!("{name}.json")), p.to_json()).unwrap();
    let build = cpp::build_command(
        &src.display().to_string(),
        &exe.display().to_string(),
        prefix,
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&build)
        .output()
        .expect("run the C++ compiler");
    assert!(
        out.status.success(),
        "{build}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the reproducer");
    (
        run.status.success(),
        String::from_utf8_lossy(&run.stdout).into_owned(),
    )
}

/// Whether the linked variant is the control (upstream's library).
fn linked_is_the_control() -> bool {
    linked().name == mlx_patched::Variant::PRISTINE.name
}

/// The fix series of this run's base, by file name.
fn base_fixes() -> Vec<String> {
    mlx_patched::patch::names(
        &mlx_patched::patch::fix_series(&mlx_patched::run_series().unwrap()).unwrap(),
    )
}

#[test]
fn the_seeded_slice_finds_what_the_linked_variant_must_show() {
    let v = linked();
    let found = slice();
    for (i, f) in found.iter().take(20) {
        eprintln!("program {i}: {f:?}");
    }
    if linked_is_the_control() && v.leak_free() {
        // Upstream fixed the report's leak here; the kept fixes' bugs remain.
        let fixes = base_fixes();
        let kinds: Vec<Kind> = checked_in()
            .iter()
            .filter(|c| fixes.contains(&c.fixed_by))
            .map(|c| c.kind)
            .collect();
        assert!(
            !found.is_empty(),
            "{}: the slice found none of the kept fixes' bugs in {COUNT} programs",
            v.name
        );
        let unexplained: Vec<&(u64, Vec<Finding>)> = found
            .iter()
            .filter(|(_, f)| f.iter().any(|f| !kinds.contains(&f.kind)))
            .collect();
        assert!(
            unexplained.is_empty(),
            "{}: findings of no kind a kept fix is for ({kinds:?}): {unexplained:?}",
            v.name
        );
        return;
    }
    if !linked_is_the_control() {
        let shown: Vec<String> = found
            .iter()
            .take(3)
            .map(|(i, _)| {
                cpp::print(
                    &mlx_fuzz::program_of_seed(SEED, *i),
                    &format!("program {i}"),
                )
            })
            .collect();
        assert!(
            found.is_empty(),
            "{}: {} of {COUNT} programs have findings; the first ones:\n{}",
            v.name,
            found.len(),
            shown.join("\n")
        );
        return;
    }

    // The control: some leak must need compile. Shrink leaks until one does.
    let leaks: Vec<u64> = found
        .iter()
        .filter(|(_, f)| f.iter().any(|f| f.kind == Kind::Leak))
        .map(|(i, _)| *i)
        .collect();
    assert!(
        !leaks.is_empty(),
        "{}: the slice found no leak in {COUNT} programs",
        v.name
    );
    let want = Finding {
        kind: Kind::Leak,
        detail: String::new(),
    };
    let w = worker();
    // Leaks that hang on hash-map order come and go between processes: the
    // reproducer must leak in every one of them, and again as C++ on its own.
    let every_time = Confirm::AllOf(3);
    let patched = variant(mlx_patched::Variant::PATCHED).prefix;
    let mut tried = Vec::new();
    for i in leaks.iter().copied() {
        let p = mlx_fuzz::program_of_seed(SEED, i);
        if tried.len() == 12 || !compiles(&p) || !still_fails(&w, &p, &want, every_time) {
            continue;
        }
        let repro = shrink_finding(&w, &p, &want, every_time).0;
        tried.push(i);
        if !compiles(&repro) {
            continue;
        }
        let (ok, out) = run_cpp(&repro, "on-pristine", v.prefix);
        if ok || !out.contains("leaked_bytes") || out.contains("leaked_bytes 0\n") {
            eprintln!(
                "program {i}: the shrunk leak does not show as C++ on its own ({}), next one:\n{}",
                out.trim(),
                cpp::print(&repro, "not reproduced")
            );
            continue;
        }
        eprintln!("{}", cpp::print(&repro, "the shrunk reproducer"));
        if repro.len() > MAX_STATEMENTS {
            // The shrinker's steps cannot make every leak this small (a
            // closure that only calls another stays): the next leak.
            eprintln!(
                "program {i}: shrunk to {} statements, more than {MAX_STATEMENTS}, next one",
                repro.len()
            );
            continue;
        }
        let (ok, out) = run_cpp(&repro, "on-patched", patched);
        assert!(
            ok && out.contains("leaked_bytes 0"),
            "against the patched prefix the reproducer must not leak: {out}"
        );
        return;
    }
    panic!("{}: no leak of the slice that needs compile reproduced as C++ in at most {MAX_STATEMENTS} statements (shrunk programs {tried:?}, of leaks {leaks:?})", v.name);
}

fn checked_in() -> Vec<Kept> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-findings");
    mlx_fuzz::findings::load_dir(&dir).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_checked_in_finding_shows_where_its_fix_is_missing_and_not_where_it_is_applied() {
    let v = linked();
    // The series the linked variant was built with (a base's, or another
    // a rebase passes).
    let series = mlx_patched::patch::names(
        &mlx_patched::patch::fix_series(&mlx_patched::run_series().unwrap()).unwrap(),
    );
    let findings = checked_in();
    assert!(!findings.is_empty(), "no checked-in finding to replay");
    let w = worker();
    for c in findings {
        // The control is built without the series.
        let with: &[String] = if v.name == mlx_patched::Variant::PRISTINE.name {
            &[]
        } else {
            &series
        };
        let show = c.must_show(with, v.leak_free());
        let event = w
            .run_program(&c.program)
            .expect("the worker runs the finding");
        let got = event.findings();
        let file = c.file.display();
        if show {
            assert!(
                got.iter().any(|f| f.kind == c.kind),
                "{file} on {} (without {}): expected a {}, got {got:?}",
                v.name,
                c.fixed_by,
                c.kind.name()
            );
        } else {
            assert!(
                got.is_empty(),
                "{file} on {} (with {}): {got:?}",
                v.name,
                c.fixed_by
            );
            // Fixed means it runs: an exception in place of the crash is not
            // a fix, unless it is the refusal a patch raises on purpose.
            if let Event::Ran(_, o) = &event {
                assert!(
                    o.error
                        .as_deref()
                        .is_none_or(mlx_fuzz::oracle::raised_by_the_fix),
                    "{file} on {} (with {}): it raised {:?}",
                    v.name,
                    c.fixed_by,
                    o.error
                );
            }
        }
    }
}

#[test]
fn the_two_thread_slice_finds_the_release_race_on_the_control_by_itself() {
    let v = linked();
    let two = Worker {
        releases: Releases::TwoThreads,
        ..worker()
    };
    let (mut leaks, mut others) = (Vec::new(), Vec::new());
    two.run_seeds(SEED, 0, THREAD_COUNT, |e: Event| {
        let f = e.findings();
        if f.iter().any(|f| f.kind == Kind::Leak) {
            leaks.push(e.index());
        } else if !f.is_empty() {
            others.push((e.index(), f));
        }
    })
    .expect("the worker runs the two-thread slice");
    let program = |i: u64| mlx_fuzz::program_of_seed_with(SEED, i, Releases::TwoThreads);
    let race_fixed_upstream = mlx_patched::Expectations::from_env(&mlx_patched::Env::process())
        .fixed_upstream(mlx_patched::pin::RELEASE_RACE_FIX);
    if !linked_is_the_control() || race_fixed_upstream {
        let shown: Vec<String> = leaks
            .iter()
            .take(3)
            .map(|i| cpp::print(&program(*i), &format!("two-thread program {i}")))
            .collect();
        assert!(
            leaks.is_empty() && others.is_empty(),
            "{}: of {THREAD_COUNT} two-thread programs, {} leak and {} have other findings ({others:?}); the first leaks:\n{}",
            v.name,
            leaks.len(),
            others.len(),
            shown.join("\n")
        );
        return;
    }
    // The control leaks for other reasons too (assignments, compile): the
    // race is a leak that its one-thread form never shows.
    let want = Finding {
        kind: Kind::Leak,
        detail: String::new(),
    };
    let one = worker();
    for &i in &leaks {
        let p = program(i);
        if !p
            .stmts
            .iter()
            .any(|s| matches!(s, Stmt::ReleaseTogether { .. }))
        {
            continue;
        }
        let serial = mlx_fuzz::shrink::one_thread(&p);
        if !still_fails(&one, &serial, &want, Confirm::AnyOf(ONE_THREAD_RUNS)) {
            eprintln!(
                "{}: two-thread program {i} leaks, and its one-thread form leaks in none of {ONE_THREAD_RUNS} runs (of {} leaking programs):\n{}",
                v.name,
                leaks.len(),
                cpp::print(&p, "the release race, as the two-thread slice found it")
            );
            return;
        }
    }
    panic!(
        "{}: no leak of the {THREAD_COUNT} two-thread programs is the race's ({} leaked: {leaks:?})",
        v.name,
        leaks.len()
    );
}
