//! The expectations of a sanitizer run, checked against what each variant
//! showed. The verdicts come from `mlx_patched::Expectations`.

use super::logs::Report;
use super::record::Check;
use super::scenarios::Outcome;
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

/// The signatures of the control's reports that may excuse a fixed
/// variant's report as upstream's own.
fn excusing_signatures(runs: &[VariantRun]) -> BTreeSet<String> {
    runs.iter()
        .filter(|r| r.verdict == Expect::Leaks)
        .flat_map(|r| r.outcomes.iter())
        .flat_map(|o| o.reports.iter())
        .filter(|r| !r.of_the_fix_s_kind())
        .map(Report::signature)
        .collect()
}

/// Every expectation, in order; `touched` are MLX's library files the fix changes.
pub fn checks(sanitizer: Sanitizer, runs: &[VariantRun], touched: &[String]) -> Vec<Check> {
    let mut out = Vec::new();
    let mut check = |ok: bool, what: String| out.push(Check { ok, what });
    let excusing = excusing_signatures(runs);
    for run in runs {
        let name = run.name;
        let outcomes = &run.outcomes;
        // Every scenario of the table ran: a run that silently skipped some
        // would claim what it did not show.
        check(
            outcomes.len() == run.planned,
            format!(
                "{name}: ran all {} scenarios of the table ({} ran)",
                run.planned,
                outcomes.len()
            ),
        );
        match run.verdict {
            Expect::Fixed => {
                let own: Vec<(&str, &Report)> = outcomes
                    .iter()
                    .flat_map(|o| o.reports.iter().map(move |r| (o.scenario.as_str(), r)))
                    .collect();
                // A report is excused only when the control shows the same
                // finding and the finding cannot be a leak of the fix's own
                // kind (a stack through make_arrays or an ArrayDesc).
                let unexplained: Vec<String> = own
                    .iter()
                    .filter(|(_, r)| r.of_the_fix_s_kind() || !excusing.contains(&r.signature()))
                    .map(|(s, r)| format!("{s}: {}", r.signature()))
                    .collect();
                let excused: BTreeSet<String> = own
                    .iter()
                    .filter(|(_, r)| !r.of_the_fix_s_kind() && excusing.contains(&r.signature()))
                    .map(|(_, r)| r.signature())
                    .collect();
                let excused = if excused.is_empty() {
                    String::new()
                } else {
                    format!("; excused as upstream's, seen on the control and not of the fix's kind (a leak or memory error through make_arrays or ArrayDesc, a race in a file the fix changes): {}", excused.into_iter().collect::<Vec<_>>().join("; "))
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
                check(unexplained.is_empty(), format!("{name}: no report but upstream's ({} reports in all, {} unexcused{listed}{excused})", own.len(), unexplained.len()));
                let off: Vec<String> = outcomes
                    .iter()
                    .filter(|o| o.census.iter().any(|&n| n != 0))
                    .map(|o| format!("{} {:?}", o.scenario, o.census))
                    .collect();
                let counted = outcomes.iter().filter(|o| !o.census.is_empty()).count();
                let not = if off.is_empty() {
                    String::new()
                } else {
                    format!("; not in {}", off.join(", "))
                };
                check(counted > 0 && off.is_empty(), format!("{name}: the census is back at its baseline after every cycle of every scenario ({counted} scenarios counted{not})"));
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
                check(through > 0, format!("{name}: LeakSanitizer reports the orphaned group in the report's scenario ({} leak records, {bytes} bytes, {through} allocated through make_arrays)", leaks.len()));
                let census = cell.map(|o| o.census.clone()).unwrap_or_default();
                check(!census.is_empty() && census.iter().all(|&n| n > 0), format!("{name}: the census does not return to its baseline in the report's scenario (retained after each cycle: {census:?})"));
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
                    name: "pristine",
                    verdict: Expect::Leaks,
                    outcomes: vec![outcome("report's scenario", control.reports.clone())],
                    planned: 1,
                },
                VariantRun {
                    name: "patched",
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
    /// destructor, is upstream's when the control shows it; a race with an
    /// access in a file the fix changes never is.
    #[test]
    fn a_race_is_judged_by_its_accesses_not_by_its_callers() {
        let race = |sites: &[&str]| Report {
            tool: "TSan",
            kind: "data race".into(),
            summary: String::new(),
            frames: vec![
                "mlx::core::allocator::CommonAllocator::free".into(),
                "mlx::core::array::ArrayDesc::~ArrayDesc()".into(),
            ],
            other: Vec::new(),
            sites: sites.iter().map(|s| s.to_string()).collect(),
            bytes: 0,
        };
        let allocator = race(&[
            "mlx/backend/no_gpu/allocator.cpp",
            "mlx/backend/no_gpu/allocator.cpp",
        ]);
        let ours = race(&["mlx/array.cpp", "mlx/backend/no_gpu/allocator.cpp"]);
        let runs = |fixed: Vec<Report>| {
            vec![
                VariantRun {
                    name: "pristine",
                    verdict: Expect::Leaks,
                    outcomes: vec![outcome("threads", vec![allocator.clone(), ours.clone()])],
                    planned: 1,
                },
                VariantRun {
                    name: "patched",
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
        let upstream_only = verdicts(vec![allocator.clone()]);
        assert!(upstream_only.iter().all(|c| c.ok), "{upstream_only:?}");
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
            name: "patched",
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
}
