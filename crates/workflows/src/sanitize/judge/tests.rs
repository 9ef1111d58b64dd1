use super::*;

fn leak(frames: &[&str]) -> Report {
    Report {
        tool: "LSan",
        kind: "indirect leak".into(),
        summary: String::new(),
        frames: frames.iter().map(|f| f.to_string()).collect(),
        other: Vec::new(),
        sites: Vec::new(),
        bytes: 8,
    }
}

fn outcome(scenario: &str, reports: Vec<Report>) -> Outcome {
    Outcome {
        scenario: scenario.into(),
        status: "exit 0".into(),
        success: true,
        reports,
        census: vec![0],
        counts_census: true,
    }
}

/// Every ArrayDesc leak shares its top frames, so a control's leak must
/// never excuse a fixed variant's leak through make_arrays or ArrayDesc.
#[test]
fn a_leak_of_the_fix_s_kind_is_never_excused_by_the_control() {
    let ours = leak(&[
        "operator new",
        "mlx::core::array::make_arrays(...)",
        "mlx::core::split(...)",
    ]);
    let blas = leak(&["malloc", "openblas_init", "_dl_init"]);
    let mut control = outcome("report's scenario", vec![ours.clone(), blas.clone()]);
    control.census = vec![120];
    let runs = |fixed: Vec<Report>| {
        vec![
            VariantRun {
                name: mlx_patched::Variant::PRISTINE.name,
                verdict: Expect::Leaks,
                outcomes: vec![outcome("report's scenario", control.reports.clone())],
                planned: 1,
            },
            VariantRun {
                name: mlx_patched::Variant::PATCHED.name,
                verdict: Expect::Fixed,
                outcomes: vec![outcome("report's scenario", fixed)],
                planned: 1,
            },
        ]
    };
    let verdict = |fixed: Vec<Report>| {
        checks(Sanitizer::Address, &runs(fixed), &[])
            .into_iter()
            .find(|c| c.what.starts_with("patched: no report"))
            .unwrap()
    };
    let upstream_only = verdict(vec![blas.clone()]);
    assert!(
        upstream_only.ok
            && upstream_only.what.contains("excused as upstream's")
            && upstream_only.what.contains("openblas_init"),
        "{upstream_only:?}"
    );
    let fix_kind = verdict(vec![ours]);
    assert!(!fix_kind.ok, "{fix_kind:?}");
    assert!(verdict(vec![]).ok);
}

/// A race on upstream's allocator counters, reached from an ArrayDesc
/// destructor, is upstream's when the control shows the same bare read
/// (whichever locked writer TSan pairs it with); a function the control
/// never saw racing bare is a new race, even in the same file; and a
/// race with an access in a file the fix changes never is.
#[test]
fn a_race_is_judged_by_its_accesses_not_by_its_callers() {
    let race = |sites: &[(&str, &str, bool)]| Report {
        tool: "TSan",
        kind: "data race".into(),
        summary: String::new(),
        frames: vec![
            "mlx::core::allocator::CommonAllocator::free".into(),
            "mlx::core::array::ArrayDesc::~ArrayDesc()".into(),
        ],
        other: Vec::new(),
        sites: sites
            .iter()
            .map(|(file, function, locked)| Site {
                file: file.to_string(),
                function: function.to_string(),
                locked: *locked,
            })
            .collect(),
        bytes: 0,
    };
    const ALLOCATOR: &str = "mlx/backend/no_gpu/allocator.cpp";
    // The active-memory counter, written under the allocator's lock by
    // malloc and free, read bare by get_active_memory.
    let allocator = race(&[
        (ALLOCATOR, "free", true),
        (ALLOCATOR, "get_active_memory", false),
    ]);
    // The same bare read, paired by TSan with the other writer.
    let paired_otherwise = race(&[
        (ALLOCATOR, "malloc", true),
        (ALLOCATOR, "get_active_memory", false),
    ]);
    // A function the control never saw touching the state bare, in the
    // same file.
    let new_in_the_file = race(&[(ALLOCATOR, "clear_cache", false), (ALLOCATOR, "free", true)]);
    let ours = race(&[
        ("mlx/array.cpp", "release_group", false),
        (ALLOCATOR, "free", true),
    ]);
    let control_saw = vec![allocator.clone(), ours.clone()];
    let runs = |fixed: Vec<Report>| {
        vec![
            VariantRun {
                name: mlx_patched::Variant::PRISTINE.name,
                verdict: Expect::Leaks,
                outcomes: vec![outcome("threads", control_saw.clone())],
                planned: 1,
            },
            VariantRun {
                name: mlx_patched::Variant::PATCHED.name,
                verdict: Expect::Fixed,
                outcomes: vec![outcome("threads", fixed)],
                planned: 1,
            },
        ]
    };
    let touched = ["mlx/array.cpp".to_string()];
    let verdicts = |fixed: Vec<Report>| {
        checks(Sanitizer::Thread, &runs(fixed), &touched)
            .into_iter()
            .filter(|c| c.what.starts_with("patched: no r"))
            .collect::<Vec<_>>()
    };
    let upstream_only = verdicts(vec![allocator.clone(), paired_otherwise]);
    assert!(upstream_only.iter().all(|c| c.ok), "{upstream_only:?}");
    let new_race = verdicts(vec![new_in_the_file]);
    assert!(
        new_race.iter().any(|c| !c.ok
            && c.what
                .contains("clear_cache in mlx/backend/no_gpu/allocator.cpp")),
        "{new_race:?}"
    );
    let in_the_fix = verdicts(vec![ours.clone()]);
    assert!(
        in_the_fix
            .iter()
            .any(|c| !c.ok && c.what.contains("mlx/array.cpp")),
        "{in_the_fix:?}"
    );
}

#[test]
fn a_run_that_skipped_scenarios_fails() {
    let runs = vec![VariantRun {
        name: mlx_patched::Variant::PATCHED.name,
        verdict: Expect::Fixed,
        outcomes: vec![outcome("a", vec![])],
        planned: 2,
    }];
    let c = checks(Sanitizer::Address, &runs, &[]);
    assert!(
        c.iter()
            .any(|c| !c.ok && c.what.contains("ran all 2 scenarios")),
        "{c:?}"
    );
}

/// A program that counts the census must print it: a fixed variant whose
/// probe printed none proves nothing about its descriptors.
#[test]
fn every_scenario_that_counts_the_census_must_print_it() {
    let run = |census: Vec<i64>| {
        let mut silent = outcome("report's scenario", vec![]);
        silent.census = census;
        let mut suite = outcome("MLX's C++ suite", vec![]);
        (suite.census, suite.counts_census) = (Vec::new(), false);
        let runs = vec![VariantRun {
            name: mlx_patched::Variant::PATCHED.name,
            verdict: Expect::Fixed,
            outcomes: vec![outcome("two slices", vec![]), silent, suite],
            planned: 3,
        }];
        checks(Sanitizer::Address, &runs, &[])
            .into_iter()
            .find(|c| c.id == "patched: census at its baseline")
            .unwrap()
    };
    let printed = run(vec![0, 0]);
    assert!(printed.ok, "{printed:?}");
    let silent = run(vec![]);
    assert!(
        !silent.ok && silent.what.contains("printed no census: report's scenario"),
        "{silent:?}"
    );
    assert!(!run(vec![0, 3]).ok);
}

/// The judge checks exactly the expectations `expected_ids` names, for
/// every verdict under both sanitizers: what a record is verified
/// against.
#[test]
fn the_checks_are_the_expected_ones() {
    // The default base's verdicts, and a base whose upstream fixed the
    // report's leak (its control leaks nothing; no rejected fix).
    let bases: [&[(&str, Expect)]; 2] = [
        &[
            (mlx_patched::Variant::PRISTINE.name, Expect::Leaks),
            (mlx_patched::Variant::PATCHED.name, Expect::Fixed),
            (mlx_patched::Variant::SUGGESTED.name, Expect::Wrong),
        ],
        &[
            (mlx_patched::Variant::PRISTINE.name, Expect::Fixed),
            (mlx_patched::Variant::PATCHED.name, Expect::Fixed),
        ],
    ];
    for (sanitizer, variants) in [Sanitizer::Address, Sanitizer::Thread]
        .into_iter()
        .flat_map(|s| bases.iter().map(move |b| (s, *b)))
    {
        let runs: Vec<VariantRun> = variants
            .iter()
            .map(|(name, verdict)| VariantRun {
                name,
                verdict: *verdict,
                outcomes: vec![outcome("report's scenario", vec![])],
                planned: 1,
            })
            .collect();
        let ids: Vec<String> = checks(sanitizer, &runs, &[])
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, expected_ids(sanitizer, variants), "{sanitizer:?}");
    }
}

/// The control lacks the release race's fix on every base: under TSan
/// it must show that race, in the fix's files or in its census, and a
/// control that leaks nothing is still the baseline that excuses
/// upstream's own races on the fixed variant.
#[test]
fn the_control_must_show_the_release_race_and_excuses_upstream_s_races_on_any_base() {
    let race = |file: &str, function: &str| Report {
        tool: "TSan",
        kind: "data race".into(),
        summary: String::new(),
        frames: vec![function.into()],
        other: Vec::new(),
        sites: vec![Site {
            file: file.into(),
            function: function.into(),
            locked: false,
        }],
        bytes: 0,
    };
    let scheduler = race("mlx/scheduler.h", "n_active_tasks");
    let release = race("mlx/array.cpp", "release");
    let run = |control: Vec<Report>, census: i64| {
        let mut raced = outcome(RELEASE_RACE, control);
        raced.census = vec![census];
        vec![
            VariantRun {
                name: mlx_patched::Variant::PRISTINE.name,
                verdict: Expect::Fixed,
                outcomes: vec![raced],
                planned: 1,
            },
            VariantRun {
                name: mlx_patched::Variant::PATCHED.name,
                verdict: Expect::Fixed,
                outcomes: vec![outcome(RELEASE_RACE, vec![scheduler.clone()])],
                planned: 1,
            },
        ]
    };
    let by_id = |runs: &[VariantRun], id: &str| {
        checks(Sanitizer::Thread, runs, &["mlx/array.cpp".to_string()])
            .into_iter()
            .find(|c| c.id == id)
            .unwrap()
    };
    let control = "pristine: shows the release race";
    let patched = "patched: no report but upstream's";
    let seen = run(vec![release.clone(), scheduler.clone()], 0);
    assert!(by_id(&seen, control).ok && by_id(&seen, patched).ok);
    assert!(by_id(&run(vec![scheduler.clone()], 171), control).ok);
    let missed = run(vec![scheduler.clone()], 0);
    assert!(!by_id(&missed, control).ok, "{:?}", by_id(&missed, control));
    let unexcused = run(vec![release], 0);
    assert!(!by_id(&unexcused, patched).ok);
}
