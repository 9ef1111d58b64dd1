//! The markdown report of a sanitizer run, rendered from its results.

use super::judge::Check;
use super::judge::VariantRun;
use super::logs::Report;
use mlx_patched::{Expect, Sanitizer};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Per variant, the reports by tool and kind; per scenario, what each
/// variant showed; the expectations checked; each distinct finding with
/// its stack.
pub fn markdown(
    sanitizer: Sanitizer,
    results: &[VariantRun],
    checks: &[Check],
    total: std::time::Duration,
    build: std::time::Duration,
) -> String {
    let mut t = String::new();
    let names: Vec<&str> = results.iter().map(|r| r.name).collect();
    writeln!(
        t,
        "# Sanitizer run: {}\n",
        match sanitizer {
            Sanitizer::Address => "AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer",
            Sanitizer::Thread => "ThreadSanitizer",
            Sanitizer::Coverage => "coverage",
        }
    )
    .unwrap();
    writeln!(t, "Variants (GCC, -O1, frame pointers, -g1, census on) built or found built in {}; everything in {}.\n", mlx_patched::progress::elapsed(build), mlx_patched::progress::elapsed(total)).unwrap();

    // Reports by tool and kind, per variant.
    let mut kinds: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    for run in results {
        for o in &run.outcomes {
            for r in &o.reports {
                *kinds
                    .entry(format!("{} {}", r.tool, r.kind))
                    .or_default()
                    .entry(run.name)
                    .or_default() += 1;
            }
        }
    }
    writeln!(
        t,
        "## Reports by kind\n\n| report | {} |\n|---|{}",
        names.join(" | "),
        "---|".repeat(names.len())
    )
    .unwrap();
    if kinds.is_empty() {
        writeln!(t, "| (none) |{}", " 0 |".repeat(names.len())).unwrap();
    }
    for (kind, per) in &kinds {
        let cells: Vec<String> = names
            .iter()
            .map(|n| per.get(n).copied().unwrap_or(0).to_string())
            .collect();
        writeln!(t, "| {kind} | {} |", cells.join(" | ")).unwrap();
    }
    let totals: Vec<String> = results
        .iter()
        .map(|r| {
            r.outcomes
                .iter()
                .map(|o| o.reports.len())
                .sum::<usize>()
                .to_string()
        })
        .collect();
    writeln!(t, "| **all** | {} |", totals.join(" | ")).unwrap();

    // Per scenario.
    writeln!(t, "\n## Per scenario\n\nEach cell: exit status; reports (by tool); live descriptors retained after each cycle (census).\n").unwrap();
    writeln!(
        t,
        "| scenario | {} |\n|---|{}",
        names.join(" | "),
        "---|".repeat(names.len())
    )
    .unwrap();
    let scenario_names: Vec<&str> = results
        .first()
        .map(|r| r.outcomes.iter().map(|o| o.scenario.as_str()).collect())
        .unwrap_or_default();
    let all_scenarios: BTreeSet<&str> = results
        .iter()
        .flat_map(|r| r.outcomes.iter().map(|o| o.scenario.as_str()))
        .collect();
    let ordered: Vec<&str> = scenario_names
        .iter()
        .copied()
        .chain(
            all_scenarios
                .iter()
                .copied()
                .filter(|s| !scenario_names.contains(s)),
        )
        .collect();
    for s in &ordered {
        let cells: Vec<String> = results
            .iter()
            .map(|run| match run.outcomes.iter().find(|o| o.scenario == *s) {
                None => "not run".into(),
                Some(o) => {
                    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
                    for r in &o.reports {
                        *by.entry(r.tool).or_default() += 1;
                    }
                    let reports = if by.is_empty() {
                        "no report".to_string()
                    } else {
                        by.iter()
                            .map(|(k, v)| format!("{k} {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    let census = if o.census.is_empty() {
                        String::new()
                    } else {
                        format!("; census {:?}", o.census)
                    };
                    format!("{}; {reports}{census}", o.status)
                }
            })
            .collect();
        writeln!(t, "| {s} | {} |", cells.join(" | ")).unwrap();
    }

    writeln!(t, "\n## Expectations\n").unwrap();
    for c in checks {
        writeln!(t, "- {} {}", if c.ok { "ok:" } else { "FAILED:" }, c.what).unwrap();
    }

    // Each distinct finding once, with its stack: all of a fixed variant's;
    // of the control's and the wrong fixes' (hundreds of leak records), the
    // first few per scenario, memory errors and direct leaks first, then
    // leaks allocated through make_arrays.
    writeln!(t, "\n## Findings, with their first stack\n").unwrap();
    let mut seen = BTreeSet::new();
    let mut shown = 0;
    for run in results {
        for o in &run.outcomes {
            let mut distinct: Vec<&Report> = Vec::new();
            for r in &o.reports {
                if seen.insert((run.name, r.signature())) {
                    distinct.push(r);
                }
            }
            let rank = |r: &Report| match (r.tool, r.kind.as_str()) {
                ("LSan", "direct leak") => 1,
                ("LSan", _) if r.frames.iter().any(|f| f.contains("make_arrays")) => 2,
                ("LSan", _) => 3,
                _ => 0,
            };
            distinct.sort_by_key(|r| rank(r));
            let limit = if run.verdict == Expect::Fixed {
                distinct.len()
            } else {
                3
            };
            for r in distinct.iter().take(limit) {
                let sig = r.signature();
                let count = o.reports.iter().filter(|x| x.signature() == sig).count();
                writeln!(
                    t,
                    "### {} / {}: {} {} ({count}x in this scenario)\n\n{}\n\n```",
                    run.name, o.scenario, r.tool, r.kind, r.summary
                )
                .unwrap();
                for (i, f) in r.frames.iter().take(12).enumerate() {
                    writeln!(t, "#{i} {f}").unwrap();
                }
                if !r.other.is_empty() {
                    writeln!(
                        t,
                        "{}",
                        if r.tool == "TSan" {
                            "-- the other access:"
                        } else {
                            "-- then:"
                        }
                    )
                    .unwrap();
                    for (i, f) in r.other.iter().take(8).enumerate() {
                        writeln!(t, "#{i} {f}").unwrap();
                    }
                }
                writeln!(t, "```\n").unwrap();
                shown += 1;
            }
            if distinct.len() > limit {
                writeln!(t, "({} / {}: {} more distinct findings, in the run's logs, `<target>/sanitize/{}/{}/`)\n", run.name, o.scenario, distinct.len() - limit, sanitizer.name(), run.name).unwrap();
            }
        }
    }
    if shown == 0 {
        writeln!(t, "(none)").unwrap();
    }
    t
}
