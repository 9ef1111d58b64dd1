//! `cargo xtask race`: the release race at length, the slow counterpart of
//! `tests/release_race.rs` (the same probe and scenarios, many more trials).

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::config::options;
use mlx_expectations::record::parse_records;
use mlx_expectations::RACE;
use mlx_patched::Variant;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

/// The release race at length, over several processes.
#[derive(clap::Args, Debug)]
pub struct RaceArgs {
    /// The variant to measure.
    #[arg(long, default_value_t = Variant::PATCHED, value_parser = mlx_harness::cli::variant)]
    pub variant: Variant,
    /// Trials of each scenario, over all processes.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub trials: u64,
    /// Processes the trials are spread over (one at a time).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub processes: u64,
}

pub fn run(a: RaceArgs) -> Result<()> {
    let RaceArgs {
        variant,
        trials,
        processes,
    } = a;
    let per_process = trials.div_ceil(processes);
    let mlx = mlx_patched::build(variant, &options()?)?;
    let exe = mlx_harness::cpp_probe::cpp_probe(&mlx, mlx_patched::probes::RELEASE_RACE)?;
    let started = Instant::now();
    // Scenario -> (trials, leaked), and the processes that leaked at all.
    let mut totals: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut leaking_processes = 0;
    // One process at a time: each keeps two cores busy.
    for p in 0..processes {
        let out = Command::new(&exe)
            .arg(per_process.to_string())
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(anyhow!(
                "{} failed in process {p} ({}):\n{stdout}{}",
                exe.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut leaked_here = 0;
        for r in parse_records(&stdout).iter().filter(|r| r.kind == "race") {
            let t = totals.entry(r.get("race").to_string()).or_default();
            t.0 += r.int("trials");
            t.1 += r.int("leaked");
            leaked_here += r.int("leaked");
        }
        leaking_processes += (leaked_here > 0) as u64;
        eprintln!(
            "race: process {} of {processes} done after {}",
            p + 1,
            mlx_patched::progress::elapsed(started.elapsed())
        );
    }
    if totals.len() != RACE.scenarios {
        return Err(anyhow!(
            "the probe ran {} scenarios, expected {}",
            totals.len(),
            RACE.scenarios
        ));
    }
    println!("{:34} {:>10} {:>8}", "scenario", "trials", "leaked");
    for (s, (n, k)) in &totals {
        println!("{s:34} {n:>10} {k:>8}");
    }
    let leaked: i64 = totals.values().map(|t| t.1).sum();
    println!(
        "{}: {leaked} of {} trials leaked; {leaking_processes} of {processes} processes leaked ({})",
        variant.name,
        totals.values().map(|t| t.0).sum::<i64>(),
        mlx_patched::progress::elapsed(started.elapsed())
    );
    if !RACE.shows_on(variant.name) && leaked > 0 {
        return Err(anyhow!(
            "{}: concurrent releases orphaned groups",
            variant.name
        ));
    }
    Ok(())
}
