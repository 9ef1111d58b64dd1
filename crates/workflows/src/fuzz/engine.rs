//! Campaigns on the coverage build (`--sanitizer coverage`): the guided
//! engine (`--guided`, `mlx_fuzz::guided`) or the seed's programs in order,
//! one served worker whose libmlx shares its edge map with this process.
//! Both count the edges and features reached, so the two compare on one
//! budget.

use super::worker::{keep, SHRINK_AT_MOST};
use mlx_harness::error::{anyhow, Result};
use mlx_fuzz::campaign::{is_release_race, shrink_finding, Confirm, Served, Tally, Worker};
use mlx_fuzz::guided::{Config, Engine, Execution, Origin, Strategy, Target};
use mlx_fuzz::{Finding, Program, Releases};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One engine campaign's settings.
pub struct EngineRun {
    pub seed: u64,
    pub releases: Releases,
    pub strategy: Strategy,
    pub minutes: f64,
    pub programs: Option<u64>,
    pub corpus: Option<PathBuf>,
    /// Shrink the findings (a coverage map's campaign only counts).
    pub shrink: bool,
}

/// What a campaign came to, as printed and as `summary.json`.
#[derive(Serialize, Debug, Clone)]
pub struct Summary {
    pub label: String,
    pub strategy: String,
    pub seed: u64,
    pub programs: u64,
    pub seconds: f64,
    pub programs_per_second: f64,
    pub edges: u64,
    pub features: u64,
    pub corpus: usize,
    /// Edges reached after each whole minute.
    pub edges_by_minute: Vec<u64>,
    /// Of `seconds`, the engine's own (choosing, mutating, keeping).
    pub engine_seconds: f64,
    /// Statements per corpus program, closures' included.
    pub mean_statements: f64,
    pub workers_started: u64,
    pub tally: String,
    /// Kept mutants by their last mutation, of those tried.
    pub mutations: Vec<(String, u64, u64)>,
    pub findings: Vec<FindingSummary>,
    /// Two-thread campaigns: the first leak that is the release race's
    /// (`is_release_race`), of the first [`RACE_CANDIDATES`] leaking
    /// programs that let go of two arrays at once.
    pub release_race: Option<RaceSummary>,
}

#[derive(Serialize, Debug, Clone)]
pub struct RaceSummary {
    pub run: u64,
    pub seconds: f64,
    pub origin: String,
    /// Candidates judged before it (one-thread leaks).
    pub passed_over: usize,
    pub statements: usize,
    pub kept: Option<PathBuf>,
    pub shrunk_to: Option<usize>,
}

/// Leaking two-thread programs a campaign keeps to judge for the race.
pub const RACE_CANDIDATES: usize = 40;

#[derive(Serialize, Debug, Clone)]
pub struct FindingSummary {
    pub kind: String,
    pub detail: String,
    /// The run that first showed it, and where its program came from.
    pub run: u64,
    pub origin: String,
    pub statements: usize,
    /// The shrunk program's files, when shrunk.
    pub kept: Option<PathBuf>,
    pub shrunk_to: Option<usize>,
}

impl Summary {
    pub fn render(&self) -> String {
        let mut t = format!(
            "fuzz {} ({}), seed {}: {} programs in {:.0} s ({:.0} s in the engine), {:.0} programs/s; {} edges, {} features, corpus {} of {:.1} statements on average; {}",
            self.label,
            self.strategy,
            self.seed,
            self.programs,
            self.seconds,
            self.engine_seconds,
            self.programs_per_second,
            self.edges,
            self.features,
            self.corpus,
            self.mean_statements,
            self.tally
        );
        if !self.mutations.is_empty() {
            let m: Vec<String> = self
                .mutations
                .iter()
                .map(|(k, kept, tried)| format!("{k} {kept}/{tried}"))
                .collect();
            t += &format!(
                "\nmutants kept/tried by their last mutation: {}",
                m.join(", ")
            );
        }
        for f in &self.findings {
            t += &format!(
                "\nfinding: {} {} at run {} ({}, {} statements){}",
                f.kind,
                f.detail,
                f.run,
                f.origin,
                f.statements,
                f.shrunk_to
                    .map(|n| format!(", shrunk to {n}"))
                    .unwrap_or_default(),
            );
            if let Some(k) = &f.kept {
                t += &format!(": {}", k.display());
            }
        }
        if let Some(r) = &self.release_race {
            t += &format!(
                "\nthe release race: at run {} ({:.0} s, {}), {} statements{}, after {} one-thread leaks passed over",
                r.run,
                r.seconds,
                r.origin,
                r.statements,
                r.shrunk_to
                    .map(|n| format!(", shrunk to {n}"))
                    .unwrap_or_default(),
                r.passed_over
            );
            if let Some(k) = &r.kept {
                t += &format!(": {}", k.display());
            }
        }
        t
    }
}

/// The served worker as the engine's target: features from the edge map,
/// findings from the oracles.
struct Worked<'a> {
    served: Served,
    tally: &'a mut Tally,
    next: u64,
}

impl Target for Worked<'_> {
    type Finding = Finding;
    fn run(&mut self, p: &Program) -> std::result::Result<Execution<Finding>, String> {
        let (event, features) = self.served.run(self.next, p)?;
        self.next += 1;
        self.tally.add(&event);
        Ok(Execution {
            features,
            findings: event.findings(),
        })
    }
}

fn origin_name(o: &Origin) -> String {
    match o {
        Origin::Generated(i) => format!("program {i} of the seed"),
        Origin::Corpus(i) => format!("corpus program {i}"),
        Origin::Mutated { parent, last } => {
            format!("a mutant of corpus entry {parent}, last by {}", last.name())
        }
    }
}

/// The programs of a corpus folder, in name order.
fn read_corpus(dir: &Path) -> Result<Vec<Program>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow!("cannot read the corpus {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f)?;
            Program::from_json(&text).map_err(|e| anyhow!("{}: {e}", f.display()))
        })
        .collect()
}

/// A campaign of `run` on `worker` (a coverage build), writing its corpus,
/// findings and `summary.json` into `<fuzz_dir>/<label>-<strategy>`.
pub fn engine_campaign(
    run: &EngineRun,
    worker: &Worker,
    label: &str,
    fuzz_dir: &Path,
) -> Result<Summary> {
    let corpus = match &run.corpus {
        Some(dir) => read_corpus(dir)?,
        None => Vec::new(),
    };
    let strategy = match run.strategy {
        Strategy::Guided => "guided",
        Strategy::Blind => "blind",
    };
    let label = format!("{label}-{strategy}");
    let out = fuzz_dir.join(&label);
    std::fs::create_dir_all(out.join("findings"))?;
    // The map in memory, where there is a tmpfs.
    let shm = Path::new("/dev/shm");
    let map_dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let mut tally = Tally::default();
    let mut engine_time = Duration::ZERO;
    let mut target = Worked {
        served: Served::new(
            worker.clone(),
            Some((
                &map_dir,
                mlx_patched::other_vars::MLX_FORK_COVERAGE_MAP.name,
            )),
        )
        .map_err(anyhow::Error::msg)?,
        tally: &mut tally,
        next: 0,
    };
    let mut engine = Engine::new(Config::new(run.seed, run.releases, run.strategy), corpus);
    let started = Instant::now();
    let budget = Duration::from_secs_f64(run.minutes * 60.0);
    let mut first_of: Vec<(Finding, Program, u64, String)> = Vec::new();
    let mut race_candidates: Vec<(Finding, Program, u64, f64, String)> = Vec::new();
    let mut by_minute = Vec::new();
    let mut last_report = Instant::now();
    while run
        .programs
        .map_or(started.elapsed() < budget, |n| engine.runs < n)
    {
        let t = Instant::now();
        let (p, origin) = engine.next();
        engine_time += t.elapsed();
        let exec = target.run(&p).map_err(anyhow::Error::msg)?;
        let t = Instant::now();
        let step = engine.observe(p, origin, exec);
        engine_time += t.elapsed();
        for f in &step.findings {
            if run.releases == Releases::TwoThreads
                && f.kind == mlx_fuzz::Kind::Leak
                && race_candidates.len() < RACE_CANDIDATES
                && step
                    .program
                    .stmts
                    .iter()
                    .any(|s| matches!(s, mlx_fuzz::ir::Stmt::ReleaseTogether { .. }))
            {
                race_candidates.push((
                    f.clone(),
                    step.program.clone(),
                    step.run,
                    started.elapsed().as_secs_f64(),
                    origin_name(&step.origin),
                ));
            }
            if !first_of
                .iter()
                .any(|(g, ..)| mlx_fuzz::oracle::same_failure(g, f))
            {
                eprintln!(
                    "fuzz {label}: first {} at run {} ({}): {}",
                    f.kind.name(),
                    step.run,
                    origin_name(&step.origin),
                    f.detail
                );
                first_of.push((
                    f.clone(),
                    step.program.clone(),
                    step.run,
                    origin_name(&step.origin),
                ));
            }
        }
        while started.elapsed() >= Duration::from_secs(60 * (by_minute.len() as u64 + 1)) {
            by_minute.push(engine.edges);
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "fuzz {label}: {} runs, {} edges, {} features, corpus {} after {}",
                engine.runs,
                engine.edges,
                engine.features,
                engine.corpus.len(),
                mlx_patched::progress::elapsed(started.elapsed())
            );
            last_report = Instant::now();
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let workers_started = target.served.starts;
    for (k, (at, stacks)) in target.served.hangs.iter().enumerate() {
        let dir = out.join("hangs");
        std::fs::create_dir_all(&dir)?;
        let file = dir.join(format!("run{at}.txt"));
        std::fs::write(&file, stacks)?;
        if k == 0 {
            eprintln!("fuzz {label}: the hung worker's stacks: {}", file.display());
        }
    }
    // The worker exits here, writing its gcov counters if it has them.
    drop(target);
    let corpus_dir = out.join("corpus");
    let _ = std::fs::remove_dir_all(&corpus_dir);
    std::fs::create_dir_all(&corpus_dir)?;
    for (k, e) in engine.corpus.iter().enumerate() {
        std::fs::write(
            corpus_dir.join(format!("{k:06}-run{}.json", e.found_at)),
            e.program.to_json(),
        )?;
    }
    let mut findings = Vec::new();
    for (k, (f, p, at, origin)) in first_of.iter().enumerate() {
        let mut s = FindingSummary {
            kind: f.kind.name().to_string(),
            detail: f.detail.clone(),
            run: *at,
            origin: origin.clone(),
            statements: p.len(),
            kept: None,
            shrunk_to: None,
        };
        if run.shrink && k < SHRINK_AT_MOST {
            let (small, tried) = if f.kind == mlx_fuzz::Kind::Hang {
                (p.clone(), 0)
            } else {
                shrink_finding(worker, p, f, Confirm::AnyOf(2))
            };
            let stem = format!("{}-{strategy}-{}-run{at}", f.kind.name(), run.seed);
            let title = format!(
                "mlx-fuzz finding on {label}: {} {} (run {at} of seed {}, {origin}; shrunk from {} to {} statements in {tried} tries)",
                f.kind.name(),
                f.detail,
                run.seed,
                p.len(),
                small.len()
            );
            s.kept = Some(keep(&out.join("findings"), &stem, &small, &title)?);
            s.shrunk_to = Some(small.len());
        }
        findings.push(s);
    }
    let mut release_race = None;
    for (k, (f, p, at, secs, origin)) in race_candidates.iter().enumerate() {
        if !is_release_race(worker, p, f, 3) {
            continue;
        }
        let mut r = RaceSummary {
            run: *at,
            seconds: *secs,
            origin: origin.clone(),
            passed_over: k,
            statements: p.len(),
            kept: None,
            shrunk_to: None,
        };
        if run.shrink {
            let (small, tried) = shrink_finding(worker, p, f, Confirm::AnyOf(2));
            // Shrinking may lose the race (keep a one-thread leak): kept
            // only if the small program is still the race's.
            let (small, tried) = if is_release_race(worker, &small, f, 3) {
                (small, tried)
            } else {
                (p.clone(), 0)
            };
            let stem = format!("release-race-{strategy}-{}-run{at}", run.seed);
            let title = format!(
                "mlx-fuzz finding on {label}: the release race, {} (run {at} of seed {}, {origin}; shrunk from {} to {} statements in {tried} tries)",
                f.detail,
                run.seed,
                p.len(),
                small.len()
            );
            r.kept = Some(keep(&out.join("findings"), &stem, &small, &title)?);
            r.shrunk_to = Some(small.len());
        }
        release_race = Some(r);
        break;
    }
    let summary = Summary {
        label,
        strategy: strategy.to_string(),
        seed: run.seed,
        programs: engine.runs,
        seconds,
        programs_per_second: engine.runs as f64 / seconds,
        edges: engine.edges,
        features: engine.features,
        corpus: engine.corpus.len(),
        edges_by_minute: by_minute,
        engine_seconds: engine_time.as_secs_f64(),
        mean_statements: if engine.corpus.is_empty() {
            0.0
        } else {
            engine.corpus.iter().map(|e| e.program.len()).sum::<usize>() as f64
                / engine.corpus.len() as f64
        },
        workers_started,
        tally: tally.summary(),
        mutations: engine
            .tried_by
            .iter()
            .map(|(m, tried)| {
                (
                    m.name().to_string(),
                    engine.kept_by.get(m).copied().unwrap_or(0),
                    *tried,
                )
            })
            .collect(),
        findings,
        release_race,
    };
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    Ok(summary)
}
