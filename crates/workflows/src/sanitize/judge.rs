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
mod tests;
