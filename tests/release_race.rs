//! The outputs of one multi-output op let go of on several threads at the
//! same instant (`crates/probes/cpp/release_race.cpp`): groups of two and
//! three (split, divmod, svd, lu), every release path against every other,
//! three threads, a release racing with an evaluation or a copy of a
//! sibling, an evaluation racing with a copy or a consumer's teardown, and
//! nested groups. The claim is over independent processes, not trials of one
//! process: the control leaks in every process, the fix in no trial of any.

use mlx_expectations::RACE;
use mlx_fork::{control_and_fixes, run_probe, ProbeRun, Variant};

fn leaked(run: &ProbeRun) -> Vec<(String, i64, i64)> {
    let races: Vec<_> = run
        .all("race")
        .iter()
        .map(|r| (r.get("race").to_string(), r.int("trials"), r.int("leaked")))
        .collect();
    assert_eq!(
        races.len(),
        RACE.scenarios,
        "{}: the probe ran another set of scenarios",
        run.variant.name
    );
    races
}

fn run_processes(v: &'static Variant) -> Vec<Vec<(String, i64, i64)>> {
    (0..RACE.processes)
        .map(|_| {
            leaked(&run_probe(
                v,
                |v| v.probe(mlx_patched::probes::RELEASE_RACE),
                &[&RACE.trials.to_string()],
            ))
        })
        .collect()
}

#[test]
fn concurrent_releases_orphan_groups_on_the_control_and_never_on_the_fix() {
    for variant in control_and_fixes() {
        let processes = run_processes(variant);
        for (i, races) in processes.iter().enumerate() {
            let race_only: i64 = races
                .iter()
                .filter(|(s, _, _)| RACE.race_only(s))
                .map(|(_, _, k)| k)
                .sum();
            let total: i64 = races.iter().map(|(_, _, k)| k).sum();
            let trials: i64 = races.iter().map(|(_, n, _)| n).sum();
            println!(
                "{} process {i}: {total} of {trials} trials leaked, {race_only} in the scenarios only a race can leak",
                variant.name
            );
            if RACE.shows_on(variant.name) {
                assert!(
                    race_only > 0,
                    "{} process {i}: no scenario that only a race can leak leaked: the probe did not race ({races:?})",
                    variant.name
                );
            } else {
                let leaking: Vec<_> = races.iter().filter(|(_, _, k)| *k > 0).collect();
                assert!(
                    leaking.is_empty(),
                    "{} process {i}: groups orphaned by concurrent releases: {leaking:?}",
                    variant.name
                );
            }
        }
    }
}
