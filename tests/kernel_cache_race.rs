//! Several processes build the same CPU kernels at one instant into one
//! empty cache folder (`crates/probes/cpp/kernel_cache_race.cpp`, with
//! `TMPDIR` pointing at the folder). The control, which writes each library
//! under its final name, fails in some process; a fix fails in none. The
//! claim is over rounds of processes, each round with a folder of its own.

use mlx_fork::{control_and_fixes, signal_or_code, Variant};
use mlx_patched::{Env, Expectations, KERNEL_CACHE_RACE};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One round: the processes' outcomes (`Ok` or what failed).
fn round(variant: &Variant, dir: &Path) -> Vec<Result<(), String>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let start = dir.join("start");
    let children: Vec<_> = (0..KERNEL_CACHE_RACE.processes)
        .map(|_| {
            Command::new(variant.kernel_cache_race)
                .arg(&start)
                .env("TMPDIR", dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("run {}: {e}", variant.kernel_cache_race))
        })
        .collect();
    // Long enough for every process to load MLX and wait at the start line;
    // one that is late only races less.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&start, "").unwrap();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let built = format!("kernels built {}", KERNEL_CACHE_RACE.kernels);
            if out.status.success() && stdout.lines().any(|l| l == built) {
                Ok(())
            } else {
                Err(format!(
                    "{}: {}{}",
                    signal_or_code(out.status),
                    stdout.trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
        .collect()
}

#[test]
fn processes_building_one_kernel_cache_at_once_fail_on_the_control_only() {
    mlx_patched::system::cpu_compile_works().unwrap();
    let expectations = Expectations::from_env(&Env::process());
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-cache-race");
    for variant in control_and_fixes() {
        let mut failed = Vec::new();
        for r in 0..KERNEL_CACHE_RACE.rounds {
            let outcomes = round(variant, &scratch.join(format!("{}-{r}", variant.name)));
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
                    e.contains("Could not load C++ shared library")
                        || e.contains("Failed to load compiled function"),
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
