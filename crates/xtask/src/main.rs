//! Developer workflows for the fork: `cargo xtask <command>` (see HELP).

use mlx_patched::CommandVars;
mod candidate;
mod demo;
mod deps;
mod fuzz;
mod install_paths;
mod mlx_lm;
mod mlx_rs;
mod provenance;
mod python;
mod race;
mod rebase;
mod sanitize;
mod upstream;
mod wheel;

use mlx_patched::{Env, Expectations, Options, Progress, Variant};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const HELP: &str = "\
usage: cargo xtask <command>

  deps                        install the system packages the build and tests need
                              (Debian/Ubuntu; elsewhere prints what to install)
  prefix <variant>            print the install prefix of that variant (patched, pristine,
                              suggested), building it if needed; progress goes to stderr
  demo [--cycles N]           the leak report's scenario on pristine and on patched,
                              through the Rust API and a plain C++ program
  test                        the whole regression suite (what CI runs)
  mlx-tests <variant>         run MLX's own C++ test suite built from that variant
  mlx-rs                      print what a user of mlx-rs adds to get this fork's fix
  mlx-rs-check                mlx-rs 0.33 through the drop-in mlx-sys, on patched and pristine:
                              the report's scenario written against mlx-rs, and mlx-rs's own tests
  python <patched|pristine>   build MLX's Python bindings for that variant into a virtual environment
                              and print the path of its python (progress goes to stderr)
  wheel                       build the installable `mlx` and `mlx-cpu` wheels of the patched variant;
                              print their paths, one per line
  python-check                the report's script verbatim, the ablation, the second-shape note and
                              MLX's Python suite, on patched and pristine; the wheels' install,
                              upgrade and removal paths, stubs, bytes and platform tags
  mlx-lm-check                mlx-lm 0.32.2 on patched and pristine: its own offline test suite,
                              a model server's load/unload cells on its model classes, and the
                              numerics of its logits (needs pip)
  leak-curve                  the report's scale (about 210 MiB, 20 cycles) on both variants,
                              drawn as docs/leak-curve.svg from the figures it measures
  provenance                  compare the pinned tree with the official wheels of the release
                              (headers and Python files, byte for byte; needs pip)
  upstream-pr [--out DIR] [--target <version|dir>]
                              stage each fix of the series as its own pull request: each must apply
                              alone with `git am` onto a clean upstream tree; leaves a branch,
                              the patch and the description per fix in DIR for review/sending.
                              --target stages them onto a newer upstream (in DIR/v<version>/)
  rebase --to <version|dir> [--series DIR] [--apply] [--no-suite]
                              replay the series onto another upstream tree (a carrier crate
                              version or a checkout), build and measure both variants there,
                              run the suite against it and give a verdict per patch: still
                              needed, redundant or broken. --apply moves the pin.
  sanitize [address|thread] [--record | --check]
                              build every variant with sanitizers and the live-descriptor census,
                              run MLX's suite, the probes and the Rust API tests on each and
                              print the reports by kind (long: not part of `test`); --check
                              only says whether the recorded run is current for this tree
  fuzz <patched|pristine> [--minutes N | --programs N] [--seed S] [--sanitizer address]
  fuzz --target <carrier-version> [...]
                              random-program search over MLX's graph lifetimes (leaks, crashes,
                              transforms that fail where eager does not); prints programs/s and
                              the findings, each shrunk and written as C++ under target/fuzz/.
                              `fuzz print <seed> <index> [--python]`: a seeded program as C++ (or Python)
  race [--variant V] [--trials N] [--processes P]
                              the release race of tests/release_race.rs at length: N trials of each
                              scenario (default 1,000,000 on patched) over P processes (default 10);
                              fails if a fixed variant leaks in any trial
  docs                        write the pages generated from the code (docs/variables.md)
  try <name> <patch>...       build upstream + a candidate fix (plus the series' tests) and run
                              the leak scenario, the held-output check and MLX's suite on it
";

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let result = match args.first().map(String::as_str) {
        Some("deps") => deps::install(),
        Some("prefix") => prefix(rest),
        Some("demo") => demo::run(rest),
        Some("test") => test(),
        Some("mlx-tests") => mlx_tests(rest),
        Some("provenance") => provenance::run(rest),
        Some("mlx-rs") => mlx_rs::print_setup(rest),
        Some("python") => python::python_cmd(rest),
        Some("wheel") => python::wheel_cmd(rest),
        Some("python-check") => python::check_cmd(rest),
        Some("mlx-rs-check") => mlx_rs_check(rest),
        Some("mlx-lm-check") => mlx_lm::check_cmd(rest),
        Some("leak-curve") => mlx_lm::curve_cmd(rest),
        Some("upstream-pr") => upstream::upstream_pr(rest),
        Some("rebase") => rebase::run(rest),
        Some("race") => race::run(rest),
        Some("try") => candidate::run(rest),
        Some("sanitize") => sanitize::run(rest),
        Some("fuzz") => fuzz::run(rest),
        Some("docs") => docs(rest),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Cargo as the developer invoked it (`$CARGO`), in the workspace root.
fn cargo() -> Command {
    let mut cmd = Command::new(Env::process().cargo());
    cmd.current_dir(workspace_root());
    cmd
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = Env::process().cargo_target_dir() {
        return Ok(workspace_root().join(dir));
    }
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let key = "\"target_directory\":\"";
    let start = text
        .find(key)
        .ok_or("cargo metadata printed no target_directory")?
        + key.len();
    let end = start + text[start..].find('"').ok_or("malformed cargo metadata")?;
    Ok(PathBuf::from(&text[start..end]))
}

/// Options for builds run by xtask: progress on stderr, library only.
fn options() -> Result<Options> {
    let mut opts =
        Options::from_env(Env::process(), &target_dir()?, false).map_err(|e| e.to_string())?;
    opts.progress = Progress::for_stderr();
    Ok(opts)
}

/// What each variant must show in this run (`MLX_FORK_UPSTREAM_FIXED`
/// included), as the suite's build script reads it.
fn expectations() -> Expectations {
    Expectations::from_env(&Env::process())
}

/// The variants this run builds and checks.
fn variants_to_build() -> Vec<Variant> {
    expectations().variants()
}

/// Checks counted as they are made: each failure is printed when it happens.
pub(crate) struct Tally {
    pub passed: u32,
    pub failures: Vec<String>,
}

impl Tally {
    pub fn new() -> Self {
        Tally {
            passed: 0,
            failures: Vec::new(),
        }
    }

    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
        } else {
            let what = what();
            println!("FAILED: {what}");
            self.failures.push(what);
        }
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

fn prefix(args: &[String]) -> Result<()> {
    let [variant] = args else {
        return Err("usage: cargo xtask prefix <variant>   (patched, pristine, suggested)".into());
    };
    let variant = Variant::parse(variant).map_err(|e| e.to_string())?;
    let mlx = mlx_patched::build(variant, &options()?).map_err(|e| e.to_string())?;
    println!("{}", mlx.prefix.display());
    Ok(())
}

fn mlx_rs_check(args: &[String]) -> Result<()> {
    deps::install()?;
    let (_, failed) = mlx_rs::check(args, &mut Vec::new())?;
    if failed > 0 {
        return Err(format!("{failed} mlx-rs checks failed"));
    }
    Ok(())
}

/// Writes the pages rendered from the code's own tables.
fn docs(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        return Err("usage: cargo xtask docs".into());
    }
    let path = workspace_root().join(mlx_patched::VARIABLES_PAGE);
    std::fs::write(&path, mlx_patched::variables_markdown())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

/// MLX's doctest suite of one variant, as built with that variant.
fn mlx_tests(args: &[String]) -> Result<()> {
    let [variant, doctest_args @ ..] = args else {
        return Err("usage: cargo xtask mlx-tests <patched|pristine> [doctest args]".into());
    };
    let variant = Variant::parse(variant).map_err(|e| e.to_string())?;
    let mut opts = options()?;
    opts.tests = true;
    let mlx = mlx_patched::build(variant, &opts).map_err(|e| e.to_string())?;
    run(Command::new(&mlx.mlx_tests).args(doctest_args))
}

/// The whole suite: every variant built (with MLX's tests, showing
/// progress), the workspace's tests with the Rust API on the patched
/// variant, the variant-dependent tests again on the pristine control (where
/// the leak checks must see the leak), the provenance check against the
/// official wheels, and the series' readiness for upstream.
fn test() -> Result<()> {
    deps::install()?;
    let started = std::time::Instant::now();
    let mut opts = options()?;
    opts.tests = true;
    mlx_patched::build_all(&variants_to_build(), &opts).map_err(|e| e.to_string())?;
    eprintln!(
        "all variants built in {}",
        mlx_patched::progress::elapsed(started.elapsed())
    );

    // The table of this run only: tests append to it while they run.
    let report = target_dir()?.join("suite-report");
    let _ = std::fs::remove_dir_all(&report);
    std::fs::create_dir_all(&report).map_err(|e| e.to_string())?;
    let rows = report.join("rows.tsv");
    let mut patched = cargo();
    // The drop-in mlx-sys is tested on its own: it compiles mlx-c, which may
    // not support a rebase's target yet, and that must not stop every other
    // Rust test from running.
    patched.args([
        "test",
        "--workspace",
        "--exclude",
        "mlx-sys",
        "--no-fail-fast",
    ]);
    let mut sys = cargo();
    sys.args(["test", "--package", "mlx-sys", "--no-fail-fast"]);
    let mut control = cargo();
    control.args([
        "test",
        "--no-fail-fast",
        "--package",
        "mlx-fork",
        "--features",
        mlx_patched::CONTROL_FEATURE,
    ]);
    for t in PRISTINE_PASS {
        control.args(["--test", t]);
    }
    let (mut passed, mut failed) = (0, 0);
    let mut outcome = Ok(());
    for cmd in [&mut patched, &mut sys, &mut control] {
        cmd.var(mlx_patched::vars::MLX_FORK_REPORT_FILE, &rows);
        let (p, f, status) = run_counting(cmd)?;
        passed += p;
        // A run that failed without a failed test did not build: one failure.
        failed += if f == 0 && !status.success() { 1 } else { f };
        if outcome.is_ok() && !status.success() {
            outcome = Err(format!("{cmd:?} failed ({status})"));
        }
    }
    // The fuzz slice ran on both variants: where both ran a program, the
    // same bits (the differential oracle, over the slice's digests).
    let differential = fuzz::slice_differential(&report);
    match &differential {
        Ok(line) => {
            println!("{line}");
            passed += 1;
        }
        Err(e) => {
            println!("FAILED: {e}");
            failed += 1;
        }
    }
    outcome = outcome.and(differential.map(|_| ()));
    let series = mlx_patched::patch::fix_series(&opts.patches_dir).map_err(|e| e.to_string())?;
    let upstream = mlx_patched::upstream(&opts).map_err(|e| e.to_string())?;

    // mlx-rs 0.33 through the drop-in mlx-sys: the report's scenario written
    // against its API, and its own tests, on patched and on pristine.
    let mut extra_rows = Vec::new();
    let mlx_rs = match mlx_rs::check(&[], &mut extra_rows) {
        Ok((p, f)) => {
            passed += p;
            failed += f;
            if f == 0 {
                Ok(())
            } else {
                Err(format!("{f} mlx-rs checks failed"))
            }
        }
        Err(e) => {
            println!("FAILED: the mlx-rs check: {e}");
            failed += 1;
            Err(e)
        }
    };
    // The fork as a Python package: the report's own script and MLX's Python suite.
    let python = match python::check(&mut extra_rows) {
        Ok((p, f)) => {
            passed += p;
            failed += f.len() as u32;
            for e in &f {
                println!("FAILED: {e}");
            }
            if f.is_empty() {
                Ok(())
            } else {
                Err(format!("{} Python checks failed", f.len()))
            }
        }
        Err(e) => {
            println!("FAILED: the Python check: {e}");
            failed += 1;
            Err(e)
        }
    };
    // mlx-lm, a peer's code: its suite, a model server's cells, its logits.
    let mlx_lm = match mlx_lm::check(&mut extra_rows) {
        Ok((p, f)) => {
            passed += p;
            failed += f.len() as u32;
            if f.is_empty() {
                Ok(())
            } else {
                Err(format!("{} mlx-lm checks failed", f.len()))
            }
        }
        Err(e) => {
            println!("FAILED: the mlx-lm check: {e}");
            failed += 1;
            Err(e)
        }
    };
    if !extra_rows.is_empty() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&rows)
            .map_err(|e| e.to_string())?;
        for row in &extra_rows {
            writeln!(f, "{row}").map_err(|e| e.to_string())?;
        }
    }

    // The tree is upstream's release: its files against the official wheels.
    let pinned = matches!(upstream.origin, mlx_patched::Origin::Pinned);
    let version = mlx_patched::version_of(&upstream.dir).map_err(|e| e.to_string())?;
    let provenance = match provenance::check(
        &version,
        &upstream.dir,
        pinned,
        &target_dir()?.join("provenance").join(&version),
    )? {
        provenance::Outcome::Skipped(why) => {
            println!("\nprovenance: skipped: {why}");
            Ok(())
        }
        provenance::Outcome::Checked(f) => {
            println!("\nprovenance: {}", f.summary());
            passed += f.identical() as u32;
            failed += !f.identical() as u32;
            if f.identical() {
                Ok(())
            } else {
                Err("the tree differs from the official wheels of its release".to_string())
            }
        }
    };

    // The sanitizer run is too long for CI: its recorded report must belong
    // to this tree, series and probes (a rebase's trial tree is not checked).
    let mut sanitized = Ok(());
    if matches!(upstream.origin, mlx_patched::Origin::Pinned)
        && opts.patches_dir == mlx_patched::patch::series_dir()
    {
        for sanitizer in [
            mlx_patched::Sanitizer::Address,
            mlx_patched::Sanitizer::Thread,
        ] {
            match sanitize::check_recorded(sanitizer, &opts) {
                Ok(summary) => {
                    println!("recorded {} run: current, {summary}", sanitizer.name());
                    passed += 1;
                }
                Err(e) => {
                    println!("FAILED: recorded {} run: {e}", sanitizer.name());
                    failed += 1;
                    sanitized = sanitized.and(Err(e));
                }
            }
        }
    } else {
        println!("recorded sanitizer runs: not checked (not the pinned tree and series)");
    }

    // The figures belong to this tree and series, and only once every
    // check above passed: `upstream-pr` quotes them only then, and only
    // while both are unchanged.
    let measured_for = report.join("measured-for");
    let _ = std::fs::remove_file(&measured_for);
    if outcome.is_ok()
        && mlx_rs.is_ok()
        && python.is_ok()
        && mlx_lm.is_ok()
        && provenance.is_ok()
        && sanitized.is_ok()
    {
        let fingerprint = mlx_patched::patch::fingerprint(&upstream.tree_id, &series)
            .map_err(|e| e.to_string())?;
        std::fs::write(&measured_for, fingerprint).map_err(|e| e.to_string())?;
    }

    // The series must stay ready for upstream: `git am` onto a clean tree.
    // (An empty series, when a rebase checks a fixed upstream, has nothing to send.)
    let upstream_pr = if series.is_empty() {
        println!("the series is empty: nothing to send upstream");
        Ok(())
    } else {
        upstream::upstream_pr(&[])
    };
    passed += (upstream_pr.is_ok() && !series.is_empty()) as u32;
    failed += upstream_pr.is_err() as u32;
    print_summary(&rows);
    println!(
        "\nxtask test: {passed} passed, {failed} failed ({})",
        mlx_patched::progress::elapsed(started.elapsed())
    );
    outcome
        .and(mlx_rs)
        .and(python)
        .and(mlx_lm)
        .and(provenance)
        .and(sanitized)
        .and(upstream_pr)
}

/// Runs `cargo test`, echoing its output and adding up its result lines.
fn run_counting(cmd: &mut Command) -> Result<(u32, u32, std::process::ExitStatus)> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    // A test binary that could not start or crashed prints no result line;
    // cargo names it on stderr (a binary with failed tests exits with 101):
    // one failure each.
    let stderr = child.stderr.take().unwrap();
    let broken = std::thread::spawn(move || {
        let mut n = 0;
        for line in BufReader::new(stderr)
            .lines()
            .map_while(std::result::Result::ok)
        {
            eprintln!("{line}");
            n += (line.contains("process didn't exit successfully")
                && !line.contains("(exit status: 101)")) as u32;
        }
        n
    });
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        // test result: ok. 4 passed; 0 failed; 0 ignored; ...
        if let Some(rest) = line.strip_prefix("test result: ") {
            let words: Vec<&str> = rest
                .split_whitespace()
                .map(|w| w.trim_end_matches([';', '.']))
                .collect();
            let count = |what: &str| {
                words
                    .windows(2)
                    .find(|w| w[1] == what)
                    .and_then(|w| w[0].parse::<u32>().ok())
                    .unwrap_or(0)
            };
            passed += count("passed");
            failed += count("failed");
        }
    }
    failed += broken.join().unwrap_or(0);
    Ok((passed, failed, child.wait().map_err(|e| e.to_string())?))
}

/// Test targets whose expectations depend on the variant the Rust API links.
const PRISTINE_PASS: &[&str] = &["rust_api_leak", "semantics", "fuzz"];

/// The table the leak tests left in `rows.tsv`: per scenario, the bytes each
/// variant retained per cycle, and whether all variants computed the same bits.
fn print_summary(rows: &std::path::Path) {
    let Ok(text) = std::fs::read_to_string(rows) else {
        println!("\n(no leak test wrote a summary row)");
        return;
    };
    let fmt = |bytes: f64| match bytes {
        0.0 => "0".to_string(),
        b if b.abs() < 10240.0 => format!("{b:.0} B"),
        b => format!("{:.2} MiB", b / 1048576.0),
    };
    let mut names: Vec<String> = Vec::new();
    let mut table = Vec::new();
    let mut notes = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols[0] == "note" {
            notes.push(cols[1..].join(" "));
            continue;
        }
        let mut cells = Vec::new();
        let mut identical = "?";
        for cell in &cols[1..] {
            let Some((key, value)) = cell.split_once('=') else {
                continue;
            };
            if key == "bit-identical" {
                identical = value;
            } else {
                if !names.iter().any(|n| n == key) {
                    names.push(key.to_string());
                }
                cells.push((key.to_string(), fmt(value.parse().unwrap_or(f64::NAN))));
            }
        }
        table.push((cols[0].to_string(), cells, identical.to_string()));
    }
    let width = table.iter().map(|r| r.0.len()).max().unwrap_or(8).max(8);
    println!("\nRetained per cycle (active memory after synchronize), by variant:\n");
    let mut header = format!("{:width$}", "scenario");
    for n in &names {
        header += &format!(" | {n:>12}");
    }
    println!("{header} | bit-identical");
    println!("{}", "-".repeat(header.len() + 16));
    for (scenario, cells, identical) in &table {
        let mut line = format!("{scenario:width$}");
        for n in &names {
            let v = cells
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
                .unwrap_or("-");
            line += &format!(" | {v:>12}");
        }
        println!("{line} | {identical}");
    }
    for n in notes {
        println!("{n}");
    }
}
