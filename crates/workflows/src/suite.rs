//! `cargo xtask test`: the whole regression suite.

use crate::workspace::{cargo, options, target_dir, variants_to_build, Result};
use crate::{deps, fuzz, mlx_lm, mlx_rs, provenance, python, sanitize, upstream};
use mlx_patched::CommandVars;
use std::process::Command;

/// The whole suite: every variant built (with MLX's tests, showing
/// progress), the workspace's tests with the Rust API on the patched
/// variant, the variant-dependent tests again on the pristine control (where
/// the leak checks must see the leak), the provenance check against the
/// official wheels, and the series' readiness for upstream.
pub fn run() -> Result<()> {
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
    let mlx_rs = match mlx_rs::check(&mut extra_rows) {
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
        upstream::upstream_pr(Default::default())
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
