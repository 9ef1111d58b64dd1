//! Several processes build the same CPU kernels at one instant into one
//! empty cache folder (`crates/probes/cpp/kernel_cache_race.cpp`, with
//! `TMPDIR` pointing at the folder). The control, which writes each library
//! under its final name, fails in some process; a fix fails in none. The
//! claim is over rounds of processes, each round with a folder of its own.

use mlx_expectations::KERNEL_CACHE_RACE;
use mlx_fork::control_and_fixes;
use mlx_patched::probes::{is_kernel_cache_race, kernel_cache_round};
use mlx_patched::{Env, Expectations};
use std::path::Path;

#[test]
fn processes_building_one_kernel_cache_at_once_fail_on_the_control_only() {
    mlx_patched::system::cpu_compile_works().unwrap();
    let expectations = Expectations::from_env(&Env::process());
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-cache-race");
    for variant in control_and_fixes() {
        let mut failed = Vec::new();
        for r in 0..KERNEL_CACHE_RACE.rounds {
            let outcomes = kernel_cache_round(
                Path::new(variant.probe(mlx_patched::probes::KERNEL_CACHE_RACE)),
                &scratch.join(format!("{}-{r}", variant.name)),
                KERNEL_CACHE_RACE.processes,
                KERNEL_CACHE_RACE.kernels,
            )
            .unwrap();
            let errors: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
            println!(
                "{} round {r}: {} of {} processes failed",
                variant.name,
                errors.len(),
                KERNEL_CACHE_RACE.processes
            );
            failed.extend(errors);
        }
        if KERNEL_CACHE_RACE.shows_on(&expectations, variant.name) {
            assert!(
                !failed.is_empty(),
                "{}: no process failed in {} rounds: the probe did not race",
                variant.name,
                KERNEL_CACHE_RACE.rounds
            );
            // Each failure must be the race, not a broken probe.
            for e in &failed {
                assert!(
                    is_kernel_cache_race(e),
                    "{}: a process failed otherwise than by loading a kernel: {e}",
                    variant.name
                );
            }
        } else {
            assert!(
                failed.is_empty(),
                "{}: processes failed: {failed:?}",
                variant.name
            );
        }
    }
}
