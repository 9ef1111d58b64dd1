//! The expectations of a sanitizer run, checked against what each variant
//! showed. The verdicts come from `mlx_patched::Expectations`.

use super::logs::{Report, Site};
use super::scenarios::{Outcome, RELEASE_RACE};
use mlx_patched::{Expect, Sanitizer};
use std::collections::BTreeSet;

/// One variant's run: its name, its verdict, its outcomes, and how many
/// scenarios the table says it must run.
pub struct VariantRun<'a> {
    pub name: &'a str,
    pub verdict: Expect,
    pub outcomes: Vec<Outcome>,
    pub planned: usize,
}

/// Whether `name` is the control: upstream's library, with the series'
/// tests but none of its fixes. Its reports are the baseline that may
/// excuse a fixed variant's, whatever its verdict on the report's leak
/// (on a base whose upstream fixed the leak it leaks nothing, yet lacks
/// the series' other fixes).
fn is_control(name: &str) -> bool {
    name == mlx_patched::Variant::PRISTINE.name
}

/// The library files of the release race's fix, where the control's races
/// are.
const RELEASE_FILES: &[&str] = &["mlx/array.cpp", "mlx/array.h"];

/// What the control showed that may excuse a fixed variant's report as
/// upstream's own: the signatures of its reports that cannot be of the
/// fix's kind, and the MLX functions (with their files) that made a race's
/// unsynchronized access there.
struct Excusing {
    signatures: BTreeSet<String>,
    unsynchronized: BTreeSet<(String, String)>,
}

/// The accesses of a race that are its bug: those made without a lock (the
/// counter read bare, not its writers under their mutex), or every access
/// when each held one.
fn unsynchronized(r: &Report) -> Vec<&Site> {
    let bare: Vec<&Site> = r.sites.iter().filter(|s| !s.locked).collect();
    if bare.is_empty() {
        r.sites.iter().collect()
    } else {
        bare
    }
}

impl Excusing {
    fn of(runs: &[VariantRun]) -> Self {
        let reports: Vec<&Report> = runs
            .iter()
            .filter(|r| is_control(r.name))
            .flat_map(|r| r.outcomes.iter())
            .flat_map(|o| o.reports.iter())
            .filter(|r| !r.of_the_fix_s_kind())
            .collect();
        Excusing {
            signatures: reports.iter().map(|r| r.signature()).collect(),
            unsynchronized: reports
                .iter()
                .filter(|r| r.tool == "TSan")
                .flat_map(|r| unsynchronized(r))
                .map(|s| (s.file.clone(), s.function.clone()))
                .collect(),
        }
    }

    /// A report is upstream's when it cannot be a leak of the fix's kind (a
    /// stack through make_arrays or an ArrayDesc) and the control shows the
    /// same finding. A race must also make its unsynchronized access in an
    /// MLX function that made one on the control: which writer under a
    /// lock TSan pairs with a bare read varies from run to run, but a new
    /// function touching shared state without a lock is a new race, even in
    /// a file where the control has one.
    fn excuses(&self, r: &Report) -> bool {
        !r.of_the_fix_s_kind()
            && self.signatures.contains(&r.signature())
            && (r.tool != "TSan"
                || unsynchronized(r).iter().all(|s| {
                    self.unsynchronized
                        .contains(&(s.file.clone(), s.function.clone()))
                }))
    }
}

/// The expectations a run checks, by id (`<variant>: <what>`), for variants
/// with these verdicts: what a record of that run must hold, no more and no
/// fewer.
pub fn expected_ids(sanitizer: Sanitizer, variants: &[(&str, Expect)]) -> Vec<String> {
    let mut ids = Vec::new();
    for (name, verdict) in variants {
        let mut add = |what: &str| ids.push(format!("{name}: {what}"));
        add("ran every scenario");
        if is_control(name) && sanitizer == Sanitizer::Thread {
            add("shows the release race");
        }
        match verdict {
            Expect::Fixed if is_control(name) => {}
            Expect::Fixed => {
                add("no report but upstream's");
                add("census at its baseline");
                if sanitizer == Sanitizer::Thread {
                    add("no race in the fix's files");
                }
                add("clean exits");
            }
            Expect::Leaks if sanitizer == Sanitizer::Address => {
                add("LeakSanitizer sees the orphaned group");
                add("census sees the orphaned group");
            }
            Expect::Wrong if sanitizer == Sanitizer::Address => {
                add("AddressSanitizer sees the held output's crash");
            }
            _ => {}
        }
    }
    ids
}

/// Every expectation, in the order of [`expected_ids`]; `touched` are MLX's
/// library files the fix changes.
pub fn checks(sanitizer: Sanitizer, runs: &[VariantRun], touched: &[String]) -> Vec<Check> {
    let mut out = Vec::new();
    let excusing = Excusing::of(runs);
    for run in runs {
        let name = run.name;
        let mut check = |id: &str, ok: bool, what: String| {
            out.push(Check {
                id: format!("{name}: {id}"),
                ok,
                what,
            })
        };
        let outcomes = &run.outcomes;
        // Every scenario of the table ran: a run that silently skipped some
        // would claim what it did not show.
        check(
            "ran every scenario",
            outcomes.len() == run.planned,
            format!(
                "{name}: ran all {} scenarios of the table ({} ran)",
                run.planned,
                outcomes.len()
            ),
        );
        // The control lacks the release race's fix on every base: TSan or
        // the census must see the race there.
        if is_control(name) && sanitizer == Sanitizer::Thread {
            let race = outcomes.iter().find(|o| o.scenario == RELEASE_RACE);
            let races = race.map_or(0, |o| {
                o.reports
                    .iter()
                    .filter(|r| r.tool == "TSan" && r.touches(RELEASE_FILES))
                    .count()
            });
            let census = race.map(|o| o.census.clone()).unwrap_or_default();
            check(
                "shows the release race",
                races > 0 || census.iter().any(|&n| n != 0),
                format!("{name}: TSan or the census sees the release race it lacks the fix of ({races} TSan reports in {}; census {census:?})", RELEASE_FILES.join(" or ")),
            );
        }
        match run.verdict {
            // The control's own reports are the baseline, not a failure.
            Expect::Fixed if is_control(name) => {}
            Expect::Fixed => {
                let own: Vec<(&str, &Report)> = outcomes
                    .iter()
                    .flat_map(|o| o.reports.iter().map(move |r| (o.scenario.as_str(), r)))
                    .collect();
                let unexplained: Vec<String> = own
                    .iter()
                    .filter(|(_, r)| !excusing.excuses(r))
                    .map(|(s, r)| {
                        let sites: Vec<String> = r.sites.iter().map(|s| s.to_string()).collect();
                        format!("{s}: {} ({})", r.signature(), sites.join(" | "))
                    })
                    .collect();
                let excused: BTreeSet<String> = own
                    .iter()
                    .filter(|(_, r)| excusing.excuses(r))
                    .map(|(_, r)| r.signature())
                    .collect();
                let excused = if excused.is_empty() {
                    String::new()
                } else {
                    format!("; excused as upstream's, seen on the control and not of the fix's kind (a leak or memory error through make_arrays or ArrayDesc; a race only where its unsynchronized access is one the control made): {}", excused.into_iter().collect::<Vec<_>>().join("; "))
                };
                let listed = if unexplained.is_empty() {
                    String::new()
                } else {
                    format!(
                        ": {}",
                        unexplained
                            .iter()
                            .take(5)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                };
                check("no report but upstream's", unexplained.is_empty(), format!("{name}: no report but upstream's ({} reports in all, {} unexcused{listed}{excused})", own.len(), unexplained.len()));
                // Every program that counts the census printed it, and it is
                // back at its baseline after every cycle.
                let off: Vec<String> = outcomes
                    .iter()
                    .filter(|o| o.census.iter().any(|&n| n != 0))
                    .map(|o| format!("{} {:?}", o.scenario, o.census))
                    .collect();
                let silent: Vec<&str> = outcomes
                    .iter()
                    .filter(|o| o.counts_census && o.census.is_empty())
                    .map(|o| o.scenario.as_str())
                    .collect();
                let counted = outcomes.iter().filter(|o| !o.census.is_empty()).count();
                let must = outcomes.iter().filter(|o| o.counts_census).count();
                let mut not = String::new();
                if !off.is_empty() {
                    not += &format!("; not in {}", off.join(", "));
                }
                if !silent.is_empty() {
                    not += &format!("; printed no census: {}", silent.join(", "));
                }
                check("census at its baseline", must > 0 && silent.is_empty() && off.is_empty(), format!("{name}: the census is back at its baseline after every cycle of every scenario that counts it ({counted} scenarios counted, of {must} that must{not})"));
                if sanitizer == Sanitizer::Thread {
                    let files: Vec<&str> = touched.iter().map(String::as_str).collect();
                    let ours: Vec<String> = own
                        .iter()
                        .filter(|(_, r)| r.touches(&files))
                        .map(|(s, r)| format!("{s}: {}", r.signature()))
                        .collect();
                    let listed = if ours.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", ours.join("; "))
                    };
                    check(
                        "no race in the fix's files",
                        ours.is_empty(),
                        format!(
                            "{name}: no race with an access in a file the fix changes ({}){listed}",
                            files.join(", ")
                        ),
                    );
                }
                let failed: Vec<&str> = outcomes
                    .iter()
                    .filter(|o| !o.success)
                    .map(|o| o.scenario.as_str())
                    .collect();
                let not = if failed.is_empty() {
                    String::new()
                } else {
                    format!(" (not: {})", failed.join(", "))
                };
                check(
                    "clean exits",
                    failed.is_empty(),
                    format!("{name}: every scenario runs to a clean exit{not}"),
                );
            }
            Expect::Leaks if sanitizer == Sanitizer::Address => {
                let cell = outcomes.iter().find(|o| o.scenario == "report's scenario");
                let leaks: Vec<&Report> = cell
                    .map(|o| o.reports.iter().filter(|r| r.tool == "LSan").collect())
                    .unwrap_or_default();
                let through = leaks
                    .iter()
                    .filter(|r| r.frames.iter().any(|f| f.contains("make_arrays")))
                    .count();
                let bytes: u64 = leaks.iter().map(|r| r.bytes).sum();
                check("LeakSanitizer sees the orphaned group", through > 0, format!("{name}: LeakSanitizer reports the orphaned group in the report's scenario ({} leak records, {bytes} bytes, {through} allocated through make_arrays)", leaks.len()));
                let census = cell.map(|o| o.census.clone()).unwrap_or_default();
                check("census sees the orphaned group", !census.is_empty() && census.iter().all(|&n| n > 0), format!("{name}: the census does not return to its baseline in the report's scenario (retained after each cycle: {census:?})"));
            }
            Expect::Wrong if sanitizer == Sanitizer::Address => {
                let held = outcomes.iter().find(|o| o.scenario == "held output");
                let asan: Vec<&Report> = held
                    .map(|o| o.reports.iter().filter(|r| r.tool == "ASan").collect())
                    .unwrap_or_default();
                let first = asan
                    .first()
                    .map(|r| {
                        format!(
                            "{}, in {}",
                            r.kind,
                            r.frames
                                .iter()
                                .take(3)
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(" < ")
                        )
                    })
                    .unwrap_or("no report".into());
                check(
                    "AddressSanitizer sees the held output's crash",
                    !asan.is_empty(),
                    format!(
                        "{name}: AddressSanitizer reports the held-output probe's crash ({first})"
                    ),
                );
            }
            _ => {}
        }
    }
    out
}

/// One expectation of a run, and whether it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Which expectation: `<variant>: <what>` ([`expected_ids`]).
    pub id: String,
    pub ok: bool,
    pub what: String,
}

#[cfg(test)]
mod tests {
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
}
