//! `cargo xtask fuzz`: campaigns of the graph-lifetime fuzzer (`crates/fuzz`).
//!
//! * `fuzz <patched|pristine> [--minutes N | --programs N] [--seed S] [--threads] [--sanitizer address|thread] [--debug]`:
//!   with `--threads`, the programs also let go of arrays on two threads at
//!   once (`mlx_fuzz::Releases::TwoThreads`), and ThreadSanitizer may watch.
//! * `fuzz --target <carrier-version> [...]`: upstream's tree of that carrier
//!   release untouched (the tree `rebase --to` recovers), e.g. 0.2.19 for
//!   MLX 0.32.4, to show what upstream's own fix misses.
//! * `fuzz print <seed> <index> [--python]`: that seeded program as a C++ file
//!   (or as a Python script, if Python can express it).
//! * `fuzz replay <patched|pristine> <program.json>`: one program's findings.
//! * `fuzz differential [--minutes N | --programs N] [--seed S]`: the same
//!   programs on patched and on pristine, in two processes at once; where
//!   both ran a program, their values must have the same bits.
//!
//! A campaign prints its throughput (`<rate> programs/s`) and its findings
//! by kind, then shrinks each distinct finding and writes it as
//! `target/fuzz/<label>/findings/<kind>-<seed>-<index>.{json,cpp}`.

mod coverage;
mod engine;
mod worker;

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::target_dir;
use mlx_fuzz::campaign::{shrink_finding, Confirm, Tally};
use mlx_fuzz::{cpp, Program, Releases};
use mlx_patched::{Sanitizer, Variant};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use worker::{keep, worker, Args, SHRINK_AT_MOST};

/// Programs per worker session: a crash costs at most a restart.
const BATCH: u64 = 2000;
/// `cargo xtask fuzz`: a campaign, or one of the tools around campaigns.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct FuzzArgs {
    #[command(subcommand)]
    pub command: Option<FuzzCommand>,
    #[command(flatten)]
    pub campaign: CampaignArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum FuzzCommand {
    /// Print a seeded program (`<seed> <index>`) or a kept one (`<file.json>`) as C++.
    Print {
        /// Print it as Python instead.
        #[arg(long)]
        python: bool,
        /// The two-thread program of that seed and index.
        #[arg(long)]
        threads: bool,
        #[arg(num_args = 1..=2, required = true, value_names = ["SEED|FILE", "INDEX"])]
        program: Vec<String>,
    },
    /// Run one program (a JSON file) on a variant and name its findings.
    Replay {
        #[arg(value_parser = linkable)]
        variant: Variant,
        file: PathBuf,
    },
    /// Patched against pristine, program by program.
    Differential {
        #[command(flatten)]
        budget: Budget,
    },
    /// What MLX's C++ and Python suites, our regression suite and the blind
    /// and guided fuzzers each reach of the code the lifetime question lives
    /// in (the coverage build of patched; a table and HTML reports under
    /// target/fuzz/coverage).
    Coverage(coverage::CoverageArgs),
}

/// How long a campaign runs, and from which seed.
#[derive(clap::Args, Debug, Clone)]
pub struct Budget {
    /// Wall time (ignored when --programs is given).
    #[arg(long, default_value_t = 1.0)]
    pub minutes: f64,
    /// Programs 0..N of the seed, however long they take.
    #[arg(long, conflicts_with = "minutes")]
    pub programs: Option<u64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(clap::Args, Debug)]
pub struct CampaignArgs {
    /// The variant the worker links: patched or pristine.
    #[arg(value_parser = linkable, required_unless_present = "target")]
    pub variant: Option<Variant>,
    /// Fuzz upstream's tree of this carrier version, as it is.
    #[arg(long, conflicts_with = "variant")]
    pub target: Option<String>,
    #[command(flatten)]
    pub budget: Budget,
    /// Build the worker's MLX with a sanitizer (thread needs --threads), or
    /// with coverage (what `--guided` reads).
    #[arg(long, value_parser = mlx_harness::cli::instrumentation)]
    pub sanitizer: Option<Sanitizer>,
    /// A debug worker.
    #[arg(long)]
    pub debug: bool,
    /// Programs that also release two arrays on two threads at once.
    #[arg(long)]
    pub threads: bool,
    /// Coverage-guided: keep programs that reach new edges of libmlx and
    /// mutate them (needs --sanitizer coverage). Without it, a campaign on
    /// the coverage build runs the seed's programs in order and counts the
    /// edges they reach.
    #[arg(long)]
    pub guided: bool,
    /// A folder of programs (JSON) a guided campaign starts from, such as
    /// another campaign's `corpus/`.
    #[arg(long, requires = "guided")]
    pub corpus: Option<PathBuf>,
}

fn campaign(c: CampaignArgs) -> Result<Args> {
    let releases = if c.threads {
        Releases::TwoThreads
    } else {
        Releases::OneThread
    };
    if c.sanitizer == Some(Sanitizer::Thread) && releases != Releases::TwoThreads {
        return Err(anyhow!(
            "without --threads the fuzzer runs one thread: --sanitizer thread needs --threads"
        ));
    }
    if c.guided && c.sanitizer != Some(Sanitizer::Coverage) {
        return Err(anyhow!(
            "--guided reads the coverage build's edges: add --sanitizer coverage"
        ));
    }
    Ok(Args {
        // --target fuzzes upstream's tree with the control's recipe.
        variant: Some(c.variant.unwrap_or(Variant::PRISTINE)),
        target: c.target,
        minutes: c.budget.minutes,
        programs: c.budget.programs,
        seed: c.budget.seed,
        sanitizer: c.sanitizer,
        release: !c.debug,
        releases,
        guided: c.guided,
        corpus: c.corpus,
    })
}

/// A variant the worker can link (the Rust API links patched or the control).
fn linkable(name: &str) -> Result<Variant> {
    Variant::LINKABLE
        .into_iter()
        .find(|v| v.name == name)
        .ok_or_else(|| {
            anyhow!(
                "the fuzzer runs on {} or {}, not `{name}`",
                Variant::PATCHED,
                Variant::PRISTINE
            )
        })
}

fn print_program(python: bool, threads: bool, program: &[String]) -> Result<()> {
    let releases = if threads {
        Releases::TwoThreads
    } else {
        Releases::OneThread
    };
    let (p, title) = match program {
        [seed, index] => {
            let number = |what: &str, v: &str| {
                v.parse::<u64>()
                    .map_err(|_| anyhow!("the program's {what} is a number, not `{v}`"))
            };
            let (seed, index) = (number("seed", seed)?, number("index", index)?);
            (
                mlx_fuzz::program_of_seed_with(seed, index, releases),
                format!("mlx-fuzz program {index} of seed {seed} ({releases:?})"),
            )
        }
        // A kept finding or a campaign's shrunk program.
        [file] => {
            let text = std::fs::read_to_string(file).with_context(|| file.to_string())?;
            let v: serde_json::Value =
                serde_json::from_str(&text).with_context(|| file.to_string())?;
            let program = if v.get("program").is_some() {
                v["program"].to_string()
            } else {
                text
            };
            (
                Program::from_json(&program).map_err(|e| anyhow!("{file}: {e}"))?,
                format!("mlx-fuzz program {file}"),
            )
        }
        _ => return Err(anyhow!("print <seed> <index>, or print <file.json>")),
    };
    if !python {
        print!("{}", cpp::print(&p, &title));
    } else {
        print!(
            "{}",
            mlx_fuzz::python::print(&p, &title)
                .map_err(|why| anyhow!("{title} has no Python form: {why}"))?
        );
    }
    Ok(())
}

/// The differential campaign: patched against pristine, program by program.
fn differential(budget: Budget) -> Result<()> {
    let mut a = campaign(CampaignArgs {
        variant: Some(Variant::PATCHED),
        target: None,
        budget,
        sanitizer: None,
        debug: false,
        threads: false,
        guided: false,
        corpus: None,
    })?;
    mlx_harness::deps::install()?;
    let (patched, _) = worker(&a)?;
    a.variant = Some(Variant::PRISTINE);
    let (pristine, _) = worker(&a)?;
    let out = target_dir()?
        .join("fuzz")
        .join("differential")
        .join("findings");
    std::fs::create_dir_all(&out)?;

    let started = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let (mut on_patched, mut on_pristine) = (Tally::default(), Tally::default());
    let (mut compared, mut differing) = (0u64, Vec::new());
    let mut next = 0;
    while a.programs.map_or(started.elapsed() < budget, |n| next < n) {
        let count = a.programs.map_or(BATCH, |n| BATCH.min(n - next));
        mlx_fuzz::campaign::run_pair(&patched, &pristine, a.seed, next, count, |i, x, y| {
            x.iter().for_each(|e| on_patched.add(e));
            y.iter().for_each(|e| on_pristine.add(e));
            let both_ran = |e: &[mlx_fuzz::campaign::Event]| matches!(e, [mlx_fuzz::campaign::Event::Ran(_, o)] if o.error.is_none() && o.eager_error.is_none());
            compared += (both_ran(x) && both_ran(y)) as u64;
            if let Some(f) = mlx_fuzz::campaign::differ_events(x, y) {
                if differing.is_empty() {
                    eprintln!(
                        "fuzz differential: first difference at program {i}: {}",
                        f.detail
                    );
                }
                differing.push((i, f));
            }
        }).map_err(anyhow::Error::msg)?;
        next += count;
        eprintln!(
            "fuzz differential: {next} programs, {compared} run by both, {} differ, after {}",
            differing.len(),
            mlx_patched::progress::elapsed(started.elapsed())
        );
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fuzz differential, seed {}: {next} programs in {}",
        a.seed,
        mlx_patched::progress::elapsed(started.elapsed())
    );
    println!("  patched: {}", on_patched.summary());
    println!("  pristine: {}", on_pristine.summary());
    println!(
        "  run by both: {compared}; values that differ in any bit: {}",
        differing.len()
    );
    println!("{:.0} programs/s", next as f64 / secs);
    for (i, f) in differing.iter().take(SHRINK_AT_MOST) {
        let p = mlx_fuzz::program_of_seed_with(a.seed, *i, a.releases);
        let (small, tried) = mlx_fuzz::shrink::shrink(&p, |c| {
            mlx_fuzz::campaign::still_differs(&patched, &pristine, c)
        });
        let title = format!(
            "mlx-fuzz finding, patched against pristine: {} {} (program {i} of seed {}, shrunk from {} to {} statements)",
            f.kind.name(), f.detail, a.seed, p.len(), small.len()
        );
        let file = keep(
            &out,
            &format!("{}-{}-{i}", f.kind.name(), a.seed),
            &small,
            &title,
        )?;
        println!(
            "finding: {} at program {i}: shrunk to {} statements in {tried} tries: {}",
            f.kind.name(),
            small.len(),
            file.display()
        );
    }
    Ok(())
}

/// The differential over the slice of this run (the `fuzz_differential` slow check):
/// one claim, failed with the programs that differ.
pub fn check_differential(report: &std::path::Path) -> mlx_harness::tally::Tally {
    let mut t = mlx_harness::tally::Tally::new();
    let result = slice_differential(report);
    if let Ok(line) = &result {
        println!("{line}");
    }
    t.check(result.is_ok(), || format!("{:#}", result.unwrap_err()));
    t
}

/// The suite's differential: what each program of the fuzz slice came to on
/// patched and on pristine (recorded by `tests/fuzz.rs`'s `report_results`:
/// its bits or its error's class) must agree wherever both variants ran it.
pub fn slice_differential(report: &std::path::Path) -> Result<String> {
    type Results = std::collections::BTreeMap<u64, mlx_fuzz::oracle::RunResult>;
    let read = |v: &str| -> Result<Results> {
        let file = mlx_expectations::report::fuzz_slice(report, v);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            anyhow!(
                "the fuzz slice recorded no results on {v} ({}: {e})",
                file.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| format!("{}", file.display()))
    };
    let (patched, pristine) = (read(Variant::PATCHED.name)?, read(Variant::PRISTINE.name)?);
    let (both, differ) = mlx_fuzz::oracle::differ_runs(&patched, &pristine);
    let raised = |r: &Results| {
        r.values()
            .filter(|x| matches!(x, mlx_fuzz::oracle::RunResult::Raised(_)))
            .count()
    };
    if both == 0 {
        return Err(anyhow!(
            "the fuzz slice: no program ran on both variants, nothing compared"
        ));
    }
    if !differ.is_empty() {
        let shown: Vec<String> = differ
            .iter()
            .take(10)
            .map(|(i, d)| format!("program {i}: {d}"))
            .collect();
        return Err(anyhow!(
            "the fuzz slice: {} of {both} programs came out otherwise on patched than on pristine (`cargo xtask fuzz print <seed> <index>`):\n  {}",
            differ.len(),
            shown.join("\n  ")
        ));
    }
    Ok(format!(
        "fuzz slice, patched against pristine: all {both} programs both ran came out the same (the same bits, or the same class of error: {} raised on patched, {} on pristine)",
        raised(&patched),
        raised(&pristine)
    ))
}

fn replay(variant: Variant, file: &std::path::Path) -> Result<()> {
    let name = file.display();
    let p = Program::from_json(&std::fs::read_to_string(file).with_context(|| format!("{name}"))?)
        .map_err(anyhow::Error::msg)?;
    // The worker would refuse it as an error on both forms, which reads as
    // "no finding": say what it is instead.
    mlx_fuzz::check(&p)
        .map_err(|e| anyhow::anyhow!("{name} is not a valid program for this fuzzer's IR: {e}"))?;
    let a = campaign(CampaignArgs {
        variant: Some(variant),
        target: None,
        budget: Budget {
            minutes: 0.0,
            programs: None,
            seed: 1,
        },
        sanitizer: None,
        debug: false,
        threads: false,
        guided: false,
        corpus: None,
    })?;
    let (w, label) = worker(&a)?;
    let e = w.run_program(&p).map_err(anyhow::Error::msg)?;
    let findings = e.findings();
    println!(
        "{name} on {label}: {}",
        if findings.is_empty() {
            "no finding".to_string()
        } else {
            findings
                .iter()
                .map(|f| format!("{} ({})", f.kind.name(), f.detail))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    Ok(())
}

pub fn run(f: FuzzArgs) -> Result<()> {
    let a = match f.command {
        Some(FuzzCommand::Print {
            python,
            threads,
            program,
        }) => return print_program(python, threads, &program),
        Some(FuzzCommand::Replay { variant, file }) => return replay(variant, &file),
        Some(FuzzCommand::Differential { budget }) => return differential(budget),
        Some(FuzzCommand::Coverage(c)) => return coverage::run(c),
        None => campaign(f.campaign)?,
    };
    mlx_harness::deps::install()?;
    let (w, label) = worker(&a)?;
    let out = target_dir()?.join("fuzz").join(&label);
    std::fs::create_dir_all(out.join("findings"))?;
    if a.sanitizer == Some(Sanitizer::Coverage) {
        let run = engine::EngineRun {
            seed: a.seed,
            releases: a.releases,
            strategy: if a.guided {
                mlx_fuzz::guided::Strategy::Guided
            } else {
                mlx_fuzz::guided::Strategy::Blind
            },
            minutes: a.minutes,
            programs: a.programs,
            corpus: a.corpus.clone(),
            shrink: true,
        };
        let summary = engine::engine_campaign(&run, &w, &label, &target_dir()?.join("fuzz"))?;
        println!("{}", summary.render());
        return Ok(());
    }

    let started = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let mut tally = Tally::default();
    let mut first_of: Vec<(mlx_fuzz::Finding, u64)> = Vec::new();
    let mut next = 0;
    let mut last_report = Instant::now();
    while a.programs.map_or(started.elapsed() < budget, |n| next < n) {
        let count = a.programs.map_or(BATCH, |n| BATCH.min(n - next));
        w.run_seeds(a.seed, next, count, |e| {
            tally.add(&e);
            for f in e.findings() {
                if !first_of
                    .iter()
                    .any(|(g, _)| mlx_fuzz::oracle::same_failure(g, &f))
                {
                    // Named as soon as seen: shrinking comes after the campaign.
                    eprintln!(
                        "fuzz {label}: first {} at program {}: {}",
                        f.kind.name(),
                        e.index(),
                        f.detail
                    );
                    first_of.push((f, e.index()));
                }
            }
        })
        .map_err(anyhow::Error::msg)?;
        next += count;
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "fuzz {label}: {} after {}",
                tally.summary(),
                mlx_patched::progress::elapsed(started.elapsed())
            );
            last_report = Instant::now();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fuzz {label}, seed {}: {} in {}",
        a.seed,
        tally.summary(),
        mlx_patched::progress::elapsed(started.elapsed())
    );
    println!(
        "{:.0} programs/s, {:.0} executed to the end/s",
        tally.programs as f64 / secs,
        tally.executed as f64 / secs
    );
    for (f, i) in first_of.iter().take(SHRINK_AT_MOST) {
        let p = mlx_fuzz::program_of_seed_with(a.seed, *i, a.releases);
        // Each try of a hang waits out the worker's timeout: kept whole.
        let (small, tried) = if f.kind == mlx_fuzz::Kind::Hang {
            (p.clone(), 0)
        } else {
            shrink_finding(&w, &p, f, Confirm::AnyOf(2))
        };
        let stem = format!("{}-{}-{i}", f.kind.name(), a.seed);
        let title = format!("mlx-fuzz finding on {label}: {} {} (program {i} of seed {}, shrunk from {} to {} statements)", f.kind.name(), f.detail, a.seed, p.len(), small.len());
        let file = keep(&out.join("findings"), &stem, &small, &title)?;
        println!(
            "finding: {} {} at program {i}: shrunk to {} statements in {tried} tries: {}",
            f.kind.name(),
            f.detail,
            small.len(),
            file.display()
        );
    }
    if first_of.len() > SHRINK_AT_MOST {
        println!(
            "({} more distinct findings not shrunk)",
            first_of.len() - SHRINK_AT_MOST
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program the IR rejects is refused with why, before any build.
    #[test]
    fn replaying_an_invalid_program_says_why() {
        let file =
            std::env::temp_dir().join(format!("mlx-fuzz-invalid-{}.json", std::process::id()));
        // A call of a function nobody defined.
        std::fs::write(
            &file,
            r#"{"stmts":[{"Let":{"out":0,"op":{"Call":{"f":7,"args":[]}}}}]}"#,
        )
        .unwrap();
        let e = replay(Variant::PATCHED, &file).unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(
            e.contains("is not a valid program for this fuzzer's IR"),
            "{e}"
        );
        assert!(e.contains("FnId(7)") || e.contains("f7"), "{e}");
    }
}
