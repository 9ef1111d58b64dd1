//! `cargo xtask fuzz coverage`: what each of our evidence's sources reaches
//! of the code the lifetime question lives in, measured on the coverage
//! build of patched (gcov's line and branch counters, read by gcovr).
//!
//! Collect, then tabulate (a pure function over gcovr's JSON, unit-tested),
//! then render. Sources, each run alone against zeroed counters:
//! MLX's C++ suite, MLX's Python suite, our regression suite (the kept
//! findings replayed and the C++ probes), the blind fuzzer and the guided
//! one for the same minutes from the same seed.

use super::engine::{engine_campaign, EngineRun, Summary};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_fuzz::guided::Strategy;
use mlx_fuzz::Releases;
use mlx_patched::{CommandVars, Sanitizer, Variant};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const COVERAGE_REQUIREMENTS: &str = "mlx-patched/python/requirements-coverage.txt";

/// The scopes of the table: files of MLX (relative to its tree) whole, or
/// the functions of a file that match.
#[derive(Clone, Debug)]
pub struct Scope {
    pub name: String,
    pub files: Vec<String>,
    /// Only lines inside functions whose demangled name matches this
    /// (`None`: the whole file).
    pub functions: Option<fn(&str) -> bool>,
}

/// Multi-output primitives' classes, from the primitive table.
fn group_primitive(function: &str) -> Option<&'static str> {
    mlx_fuzz::primitives::ROWS
        .iter()
        .filter(|r| r.group())
        .map(|r| r.name)
        .find(|name| {
            function.contains(&format!("mlx::core::{name}::"))
                || function.contains(&format!("mlx::core::fast::{name}::"))
        })
}

fn multi_output_rule(function: &str) -> bool {
    group_primitive(function).is_some()
        && ["::vmap(", "::vjp(", "::jvp("]
            .iter()
            .any(|m| function.contains(m))
}

fn multi_output_eval(function: &str) -> bool {
    group_primitive(function).is_some() && function.contains("::eval_cpu(")
}

/// CPU backend files that hold a multi-output primitive's `eval_cpu`.
const CPU_FILES: &[&str] = &[
    "mlx/backend/cpu/primitives.cpp",
    "mlx/backend/cpu/binary.cpp",
    "mlx/backend/cpu/compiled.cpp",
    "mlx/backend/cpu/eig.cpp",
    "mlx/backend/cpu/eigh.cpp",
    "mlx/backend/cpu/luf.cpp",
    "mlx/backend/cpu/qrf.cpp",
    "mlx/backend/cpu/svd.cpp",
    "mlx/backend/cpu/quantized.cpp",
];

pub fn scopes() -> Vec<Scope> {
    let whole = |f: &str| Scope {
        name: format!("`{f}`"),
        files: vec![f.to_string()],
        functions: None,
    };
    vec![
        whole("mlx/array.cpp"),
        whole("mlx/compile.cpp"),
        whole("mlx/transforms.cpp"),
        Scope {
            name: "`mlx/primitives.cpp`: vmap, vjp and jvp of multi-output primitives".into(),
            files: vec!["mlx/primitives.cpp".into()],
            functions: Some(multi_output_rule),
        },
        Scope {
            name: "CPU backend: `eval_cpu` of multi-output primitives".into(),
            files: CPU_FILES.iter().map(|s| s.to_string()).collect(),
            functions: Some(multi_output_eval),
        },
    ]
}

/// The object files whose counters the table reads (the rest are removed
/// before gcovr runs, which then reads a few files instead of every one).
fn wanted_object(path: &Path) -> bool {
    let s = path.to_string_lossy();
    scopes()
        .iter()
        .flat_map(|sc| sc.files.clone())
        .any(|f| s.ends_with(&format!("{f}.gcda")))
}

// ---- gcovr's JSON (the parts read) ----

#[derive(Deserialize, Debug, Clone)]
pub struct GcovrReport {
    pub files: Vec<GcovrFile>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct GcovrFile {
    pub file: String,
    pub lines: Vec<GcovrLine>,
    #[serde(default)]
    pub functions: Vec<GcovrFunction>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct GcovrLine {
    pub line_number: u32,
    pub count: u64,
    #[serde(default)]
    pub branches: Vec<GcovrBranch>,
    #[serde(default)]
    pub function_name: Option<String>,
    #[serde(default)]
    pub gcovr_noncode: bool,
}

#[derive(Deserialize, Debug, Clone)]
pub struct GcovrBranch {
    pub count: u64,
}

#[derive(Deserialize, Debug, Clone)]
pub struct GcovrFunction {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub demangled_name: Option<String>,
    #[serde(default)]
    pub lineno: u32,
}

/// Lines and branches reached, of those there are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reach {
    pub lines: u64,
    pub lines_total: u64,
    pub branches: u64,
    pub branches_total: u64,
}

impl Reach {
    pub fn cell(&self) -> String {
        let pct = |a: u64, b: u64| {
            if b == 0 {
                "-".to_string()
            } else {
                format!("{:.1}%", 100.0 * a as f64 / b as f64)
            }
        };
        format!(
            "{}/{} lines ({}), {}/{} branches ({})",
            self.lines,
            self.lines_total,
            pct(self.lines, self.lines_total),
            self.branches,
            self.branches_total,
            pct(self.branches, self.branches_total)
        )
    }
}

/// Which function each line of `f` is in: the one that starts last at or
/// before it (gcovr names functions by their first line).
fn function_of_lines(f: &GcovrFile) -> BTreeMap<u32, String> {
    let mut starts: Vec<(u32, String)> = f
        .functions
        .iter()
        .map(|g| {
            (
                g.lineno,
                g.demangled_name
                    .clone()
                    .or_else(|| g.name.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    starts.sort();
    let mut out = BTreeMap::new();
    for l in &f.lines {
        let name = l.function_name.clone().or_else(|| {
            starts
                .iter()
                .rev()
                .find(|(start, _)| *start <= l.line_number)
                .map(|(_, n)| n.clone())
        });
        if let Some(n) = name {
            out.insert(l.line_number, n);
        }
    }
    out
}

/// What `report` reaches of `scope`. Paths in the report end with the
/// scope's file names (gcovr reports them relative to its root).
pub fn reach(report: &GcovrReport, scope: &Scope) -> Reach {
    let mut r = Reach::default();
    for f in &report.files {
        if !scope.files.iter().any(|s| f.file.ends_with(s.as_str())) {
            continue;
        }
        let names = function_of_lines(f);
        for l in &f.lines {
            if l.gcovr_noncode {
                continue;
            }
            if let Some(matches) = scope.functions {
                if !names.get(&l.line_number).is_some_and(|n| matches(n)) {
                    continue;
                }
            }
            r.lines_total += 1;
            r.lines += (l.count > 0) as u64;
            r.branches_total += l.branches.len() as u64;
            r.branches += l.branches.iter().filter(|b| b.count > 0).count() as u64;
        }
    }
    r
}

/// The table: a row per scope, a column per source.
pub fn tabulate(sources: &[(String, GcovrReport)]) -> Vec<(String, Vec<Reach>)> {
    scopes()
        .iter()
        .map(|sc| {
            (
                sc.name.clone(),
                sources.iter().map(|(_, rep)| reach(rep, sc)).collect(),
            )
        })
        .collect()
}

pub fn render(sources: &[(String, GcovrReport)], notes: &[String]) -> String {
    let mut t = String::from("| code | ");
    t += &sources
        .iter()
        .map(|(s, _)| s.as_str())
        .collect::<Vec<_>>()
        .join(" | ");
    t += " |\n|---|";
    t += &"---|".repeat(sources.len());
    t += "\n";
    for (scope, cells) in tabulate(sources) {
        t += &format!(
            "| {scope} | {} |\n",
            cells
                .iter()
                .map(|c| c.cell())
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    for n in notes {
        t += &format!("\n{n}");
    }
    t
}

// ---- collecting ----

#[derive(clap::Args, Debug, Clone)]
pub struct CoverageArgs {
    /// Minutes of each fuzzer, blind and guided.
    #[arg(long, default_value_t = 5.0)]
    pub minutes: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn remove_counters(build: &Path) -> Result<()> {
    for f in files_with_ext(build, "gcda") {
        std::fs::remove_file(&f).with_context(|| format!("{}", f.display()))?;
    }
    Ok(())
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    out
}

/// gcovr over what the last source left in `build`: JSON and an HTML page.
fn read_counters(
    gcovr: &Path,
    mlx: &mlx_patched::Artifacts,
    build: &Path,
    out: &Path,
    source: &str,
) -> Result<GcovrReport> {
    let counters = files_with_ext(build, "gcda");
    if counters.is_empty() {
        return Err(anyhow!(
            "{source} left no gcov counters in {}: did it run the coverage build?",
            build.display()
        ));
    }
    for f in counters.iter().filter(|f| !wanted_object(f)) {
        std::fs::remove_file(f)?;
    }
    let slug: String = source
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let html = out.join("html").join(&slug);
    std::fs::create_dir_all(&html)?;
    let json = out.join(format!("{slug}.json"));
    let mut cmd = Command::new(gcovr);
    cmd.args(["-m", "gcovr", "--root"])
        .arg(mlx.source_dir())
        // Relative filters are anchored at the working folder.
        .current_dir(mlx.source_dir());
    for f in scopes().iter().flat_map(|s| s.files.clone()) {
        cmd.arg("--filter")
            .arg(format!("{}$", f.replace('.', "\\.")));
    }
    let status = cmd
        .arg("--json")
        .arg(&json)
        .arg("--html-details")
        .arg(html.join("index.html"))
        .arg("--gcov-ignore-parse-errors=all")
        .arg(build)
        .status()
        .context("cannot run gcovr")?;
    if !status.success() {
        return Err(anyhow!("gcovr failed on {source}'s counters ({status})"));
    }
    let text = std::fs::read_to_string(&json)?;
    serde_json::from_str(&text).with_context(|| format!("{}: not gcovr's JSON", json.display()))
}

/// `cargo xtask fuzz coverage`.
pub fn run(args: CoverageArgs) -> Result<()> {
    mlx_harness::deps::install()?;
    let started = std::time::Instant::now();
    let mut opts = mlx_harness::config::options()?;
    opts.sanitizer = Some(Sanitizer::Coverage);
    opts.tests = true;
    let mlx = mlx_patched::build(Variant::PATCHED, &opts)?;
    let build = mlx
        .prefix()
        .parent()
        .context("a variant's prefix is in its folder")?
        .join("build");
    let out = mlx_harness::paths::target_dir()?
        .join("fuzz")
        .join("coverage");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let gcovr = mlx_harness::python_env::venv_with(
        &mlx_harness::python_env::python_root()?.join("coverage-venv"),
        &[COVERAGE_REQUIREMENTS],
        &[],
    )?;
    let (worker, label) = super::worker::coverage_worker(Releases::OneThread)?;
    let mut sources: Vec<(String, GcovrReport)> = Vec::new();
    let mut notes = Vec::new();

    // MLX's C++ suite.
    eprintln!(
        "fuzz coverage: MLX's C++ suite on the coverage build, after {}",
        mlx_patched::progress::elapsed(started.elapsed())
    );
    remove_counters(&build)?;
    let status = Command::new(mlx.mlx_tests())
        .status()
        .with_context(|| format!("cannot run {}", mlx.mlx_tests().display()))?;
    notes.push(format!("MLX's C++ suite: {status}."));
    sources.push((
        "MLX's C++ suite".into(),
        read_counters(&gcovr, &mlx, &build, &out, "mlx-cpp")?,
    ));

    // MLX's Python suite, through the coverage build's own wheels.
    eprintln!(
        "fuzz coverage: MLX's Python suite (a few minutes) on the coverage build, after {}",
        mlx_patched::progress::elapsed(started.elapsed())
    );
    remove_counters(&build)?;
    let wheel_dir = mlx_harness::python_env::python_root()?.join("patched-cov");
    let wheels = mlx_harness::python_env::wheels_of(Variant::PATCHED, &mlx, &opts, &wheel_dir)?;
    let python = mlx_harness::python_env::venv_with(
        &wheel_dir.join("venv"),
        &[mlx_harness::python_env::TEST_REQUIREMENTS],
        &wheels.files(),
    )?;
    let tmp = out.join("python-tmp");
    std::fs::create_dir_all(&tmp)?;
    let suite = Command::new(&python)
        .arg(mlx_harness::paths::workspace_root().join("tests/python/run_mlx_suite.py"))
        .arg(mlx.source_dir().join("python/tests"))
        .var(mlx_patched::other_vars::DEVICE, "cpu")
        .var(mlx_patched::other_vars::TMPDIR, &tmp)
        .output()
        .context("cannot run MLX's Python suite")?;
    std::fs::write(out.join("python-suite.log"), &suite.stdout)?;
    let (results, running) = mlx_checks::python::suite_results(&mlx_checks::python::suite_events(
        &String::from_utf8_lossy(&suite.stdout),
    )?);
    notes.push(format!(
        "MLX's Python suite: {}, {} results{}.",
        suite.status,
        results.len(),
        running
            .map(|id| format!(", died while running {id}"))
            .unwrap_or_default()
    ));
    sources.push((
        "MLX's Python suite".into(),
        read_counters(&gcovr, &mlx, &build, &out, "mlx-python")?,
    ));

    // Our regression suite: every kept finding replayed, and the probes.
    eprintln!(
        "fuzz coverage: our regression suite on the coverage build, after {}",
        mlx_patched::progress::elapsed(started.elapsed())
    );
    remove_counters(&build)?;
    let mut served =
        mlx_fuzz::campaign::Served::new(worker.clone(), None).map_err(anyhow::Error::msg)?;
    let dir = mlx_harness::paths::workspace_root().join("tests/fuzz-findings");
    let mut replayed = 0;
    let mut kept: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    kept.sort();
    for f in &kept {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f)?)?;
        let p = mlx_fuzz::Program::from_json(&v["program"].to_string())
            .map_err(|e| anyhow!("{}: {e}", f.display()))?;
        let (event, _) = served.run(replayed, &p).map_err(anyhow::Error::msg)?;
        if !event.findings().is_empty() {
            notes.push(format!(
                "regression suite: {} shows {:?} on patched",
                f.display(),
                event.findings()
            ));
        }
        replayed += 1;
    }
    drop(served);
    let probes = out.join("probes");
    for (probe, args) in [
        (mlx_patched::probes::LEAK_SCENARIO, &["--cycles", "3"][..]),
        (mlx_patched::probes::HELD_OUTPUT, &[][..]),
    ] {
        let exe = mlx_harness::cpp_probe::cpp_probe_in(&mlx, probe, &probes)?;
        let status = Command::new(&exe).args(args).status()?;
        if !status.success() {
            notes.push(format!("regression suite: the probe {probe}: {status}"));
        }
    }
    notes.push(format!(
        "Our regression suite: the {replayed} kept findings (`tests/fuzz-findings/`) replayed by the worker, and the probes `leak_scenario --cycles 3` and `held_output`."
    ));
    sources.push((
        "our regression suite".into(),
        read_counters(&gcovr, &mlx, &build, &out, "regression")?,
    ));

    // The fuzzers, the same minutes from the same seed.
    let mut campaigns: Vec<Summary> = Vec::new();
    for strategy in [Strategy::Blind, Strategy::Guided] {
        remove_counters(&build)?;
        eprintln!(
            "fuzz coverage: the {strategy:?} fuzzer for {} min, after {}",
            args.minutes,
            mlx_patched::progress::elapsed(started.elapsed())
        );
        let run = EngineRun {
            seed: args.seed,
            releases: Releases::OneThread,
            strategy,
            minutes: args.minutes,
            programs: None,
            corpus: None,
            shrink: false,
        };
        let s = engine_campaign(&run, &worker, &label, &out)?;
        eprintln!("{}", s.render());
        sources.push((
            format!("{} fuzzer, {} min", s.strategy, args.minutes),
            read_counters(&gcovr, &mlx, &build, &out, &s.strategy)?,
        ));
        campaigns.push(s);
    }
    for s in &campaigns {
        notes.push(format!(
            "The {} fuzzer: {} programs in {:.0} s ({:.0} programs/s), {} edges of libmlx, {} features{}.",
            s.strategy,
            s.programs,
            s.seconds,
            s.programs_per_second,
            s.edges,
            s.features,
            if s.strategy == "guided" {
                format!(", corpus {}", s.corpus)
            } else {
                String::new()
            }
        ));
    }
    let table = render(&sources, &notes);
    std::fs::write(out.join("table.md"), &table)?;
    std::fs::write(
        out.join("reach.json"),
        serde_json::to_string_pretty(
            &tabulate(&sources)
                .into_iter()
                .map(|(scope, cells)| {
                    (
                        scope,
                        sources
                            .iter()
                            .map(|(s, _)| s.clone())
                            .zip(cells)
                            .collect::<Vec<_>>(),
                    )
                })
                .collect::<Vec<_>>(),
        )?,
    )?;
    println!("{table}");
    println!(
        "\nHTML: {} (one report per source); in {}",
        out.join("html").display(),
        mlx_patched::progress::elapsed(started.elapsed())
    );
    Ok(())
}

#[cfg(test)]
mod tests;
