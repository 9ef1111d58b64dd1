//! `cargo xtask sanitize [address|thread] [--record]`: every variant built
//! with sanitizers (and the fork-only live-descriptor census), the
//! project's test load run against each, every report collected by tool
//! and kind, and the expectations asserted ([`judge`]):
//!
//! * fixed variants: no report but one the control shows too that cannot
//!   be a leak of the fix's own kind (then it is upstream's, and listed with
//!   its stack; a race only when its access without a lock is in a
//!   function that made one on the control); under TSan, no race with an
//!   access in a file the fix
//!   changes; clean exits; the census printed by every probe and back at
//!   its baseline after every cycle;
//! * the control: LeakSanitizer reports the orphaned group, allocated
//!   through `make_arrays`, in the report's scenario; the census sees it;
//! * wrong fixes: AddressSanitizer reports the held-output probe's crash;
//! * every variant ran every scenario of the table ([`scenarios`]).
//!
//! A record holds exactly the expectations [`judge::expected_ids`] names
//! for the current variants, or it is stale.
//!
//! The report goes to `<target>/sanitize/<sanitizer>/report.md`; with
//! `--record` also to `docs/sanitize/<sanitizer>.{md,json}`, stamped with
//! the fingerprint of every input of the run, taken before it starts
//! ([`record`]). The sanitizer builds cost more than CI can spend (see
//! docs/sanitizers.md), so `cargo xtask test` checks that both records
//! are current instead.

pub(crate) mod elf;
mod judge;
mod logs;
mod record;
mod render;
pub(crate) mod scenarios;

pub use record::{check_recorded, check_records, recorded_path};

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::target_dir;
use judge::VariantRun;
use mlx_patched::{probes, Env, Sanitizer};
use std::collections::{BTreeMap, BTreeSet};

/// `cargo xtask sanitize`: every variant under a sanitizer.
#[derive(clap::Args, Debug)]
pub struct SanitizeArgs {
    /// address or thread.
    #[arg(default_value = "address", value_parser = mlx_harness::cli::sanitizer)]
    pub sanitizer: Sanitizer,
    /// Write the run as the record `cargo xtask test` checks.
    #[arg(long, conflicts_with = "check")]
    pub record: bool,
    /// Only say whether the recorded run is current for this tree.
    #[arg(long)]
    pub check: bool,
}

pub fn run(a: SanitizeArgs) -> Result<()> {
    let SanitizeArgs {
        sanitizer,
        record,
        check,
    } = a;
    if check {
        // Whether a change leaves the recorded run current, without running
        // anything: what `cargo xtask test` checks.
        let summary = check_recorded(sanitizer, &mlx_harness::config::options()?)?;
        println!("recorded {} run: current, {summary}", sanitizer.name());
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut opts = mlx_harness::config::options()?;
    opts.sanitizer = Some(sanitizer);
    // MLX's own suite runs under AddressSanitizer; ThreadSanitizer runs the
    // threaded scenarios only.
    opts.tests = sanitizer == Sanitizer::Address;
    // What the run is made of, before anything runs: a record stamped with
    // it can only describe these inputs.
    let fingerprint = record::fingerprint(sanitizer, &opts)?;
    let expectations = record::expectations_for(&opts);
    let variants = expectations.variants();
    let built = mlx_patched::build_all(&variants, &opts)?;
    let build_time = started.elapsed();
    eprintln!(
        "sanitizer variants built in {}",
        mlx_patched::progress::elapsed(build_time)
    );

    let out = target_dir()?
        .join("sanitize")
        .join(opts.base.dir_name())
        .join(sanitizer.name());
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let env = Env::process();
    let runtime = scenarios::runtime_library(sanitizer)?;
    let suppressions = match scenarios::suppressions(sanitizer) {
        Some(text) => {
            let path = out.join(format!("{}.supp", sanitizer.suffix()));
            std::fs::write(&path, text)?;
            Some(path)
        }
        None => None,
    };
    // The Rust API's test binaries, built once per variant it can link.
    let rust_tests = if sanitizer == Sanitizer::Address {
        scenarios::rust_test_binaries(&opts.root, sanitizer)?
    } else {
        BTreeMap::new()
    };

    let mut runs = Vec::new();
    let mut ops_seen: Option<Vec<String>> = None;
    for (variant, mlx) in variants.iter().zip(&built) {
        let dir = out.join(mlx.name());
        std::fs::create_dir_all(&dir)?;
        let mut programs = BTreeMap::new();
        for probe in probes::CPP_PROBES.iter().filter(|p| p.under_sanitizers) {
            let exe = dir.join(probe.name);
            mlx_patched::compile_program(mlx, &probes::source(probe.name), &exe, &env)?;
            programs.insert(probe.name, exe);
        }
        let ops = scenarios::multi_output_ops(&programs[mlx_patched::probes::MULTI_OUTPUT_OPS], mlx.name())?;
        // One probe source, one list: every variant runs the same ops.
        if let Some(seen) = &ops_seen {
            if *seen != ops {
                return Err(anyhow!(
                    "multi_output_ops lists {ops:?} on {}, but {seen:?} on the first variant",
                    mlx.name()
                ));
            }
        }
        ops_seen = Some(ops.clone());
        let table = scenarios::expand(sanitizer, &ops);
        let rust = rust_tests.get(mlx.name());
        let planned = table
            .iter()
            .filter(|p| rust.is_some() || !matches!(p.program, scenarios::Program::RustTest(_)))
            .count();
        let mut outcomes = Vec::new();
        for s in scenarios::resolve(&table, mlx, &programs, rust, &runtime)? {
            eprintln!(
                "sanitize {}: {} on {}",
                sanitizer.name(),
                s.name,
                mlx.name()
            );
            outcomes.push(scenarios::run_scenario(
                &s,
                sanitizer,
                &dir,
                suppressions.as_deref(),
            )?);
        }
        runs.push(VariantRun {
            name: variant.name,
            verdict: expectations.verdict(variant),
            outcomes,
            planned,
        });
    }

    let touched = fix_files(&opts)?;
    let checks = judge::checks(sanitizer, &runs, &touched);
    let text = render::markdown(sanitizer, &runs, &checks, started.elapsed(), build_time);
    print!("{text}");
    let path = out.join("report.md");
    std::fs::write(&path, &text)?;
    println!("\nreport: {}", path.display());
    let failures: Vec<&str> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.what.as_str())
        .collect();
    if !failures.is_empty() {
        return Err(anyhow!(
            "the sanitizer run does not show what it must:\n- {}",
            failures.join("\n- ")
        ));
    }
    if record {
        let scenarios_run = runs
            .iter()
            .map(|r| (r.name.to_string(), r.outcomes.len()))
            .collect();
        record::write(
            sanitizer,
            opts.base,
            &record::Recorded {
                fingerprint,
                sanitizer: sanitizer.name().into(),
                checks,
                scenarios: scenarios_run,
            },
            &text,
        )?;
    }
    Ok(())
}

/// MLX's library files the fix changes (its tests left out).
fn fix_files(opts: &mlx_patched::Options) -> Result<Vec<String>> {
    let mut files = BTreeSet::new();
    for p in mlx_patched::patch::fix_series(&opts.series()?)? {
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        for line in text.lines() {
            if let Some(path) = line
                .strip_prefix("diff --git a/")
                .and_then(|r| r.split_whitespace().next())
            {
                if path.starts_with("mlx/") {
                    files.insert(path.to_string());
                }
            }
        }
    }
    Ok(files.into_iter().collect())
}
