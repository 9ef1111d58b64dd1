//! `cargo xtask python-check`: the report's script verbatim, the ablation
//! and the second-shape note in Python, and MLX's Python suite, on both
//! variants; the install paths of the wheels (`crate::install_paths`).

use crate::python_env::{
    build_wheel, kernel_tmp, python_for, python_root, report_script, run_python,
};
use crate::workspace::{anyhow, Context};
use crate::workspace::{workspace_root, Result};
use mlx_expectations::outcomes::{by_word, regressions};
use mlx_expectations::record::{parse_records, Record};
use mlx_expectations::report::Row;
use mlx_expectations::Cell;
use mlx_patched::CommandVars;
use mlx_patched::Variant;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The `cycle` records a script printed.
fn records(stdout: &str) -> Vec<Record> {
    parse_records(stdout)
        .into_iter()
        .filter(|r| r.kind == "cycle")
        .collect()
}

/// MLX's Python suite on one interpreter: outcome and detail per test id.
/// A test that failed and passed when run again alone is `flaky`. The
/// runner streams its events, so a crash names the test that was running.
/// `tmp` is its `TMPDIR`, which holds MLX's kernel cache.
fn mlx_suite(
    python: &Path,
    tree: &Path,
    log: &Path,
    tmp: &Path,
) -> Result<BTreeMap<String, (String, String)>> {
    let runner = workspace_root().join("tests/python/run_mlx_suite.py");
    let out = Command::new(python)
        .arg(&runner)
        .arg(tree.join("python/tests"))
        .var(mlx_patched::other_vars::DEVICE, "cpu")
        .var(mlx_patched::other_vars::TMPDIR, tmp)
        .output()?;
    std::fs::write(
        log,
        [out.stdout.as_slice(), b"\n", out.stderr.as_slice()].concat(),
    )?;
    let (results, running) = suite_results(&suite_events(&String::from_utf8_lossy(&out.stdout))?);
    if let Some(id) = running {
        return Err(anyhow!(
            "MLX's Python suite died ({}) while running {id}; see {}",
            out.status,
            log.display()
        ));
    }
    if !out.status.success() {
        return Err(anyhow!(
            "MLX's Python suite exited with {} after {} results; see {}",
            out.status,
            results.len(),
            log.display()
        ));
    }
    if results.is_empty() {
        return Err(anyhow!(
            "MLX's Python suite reported nothing ({}); see {}",
            out.status,
            log.display()
        ));
    }
    Ok(results)
}

/// One line of the suite runner (see `tests/python/run_mlx_suite.py`).
#[derive(Debug, Default)]
struct SuiteEvent {
    event: String,
    id: String,
    outcome: String,
    detail: String,
    runs: u64,
    failures: u64,
    unjudged: u64,
    hung: bool,
}

/// The outcome of each test from the runner's events, and the test that
/// had started and not ended when they stop (the one a crash interrupted).
fn suite_results(events: &[SuiteEvent]) -> (BTreeMap<String, (String, String)>, Option<String>) {
    let mut results: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut running: Option<String> = None;
    for e in events {
        match e.event.as_str() {
            "start" => running = Some(e.id.clone()),
            "result" => {
                if running.as_deref() == Some(e.id.as_str()) {
                    running = None;
                }
                results.insert(e.id.clone(), (e.outcome.clone(), e.detail.clone()));
            }
            "retry" if e.outcome == "passed" => {
                let first = results
                    .get(&e.id)
                    .map(|(_, d)| d.clone())
                    .unwrap_or_default();
                results.insert(
                    e.id.clone(),
                    (
                        "flaky".into(),
                        format!("failed once ({first}), passed when run again"),
                    ),
                );
            }
            _ => {}
        }
    }
    (results, running)
}

fn suite_events(stdout: &str) -> Result<Vec<SuiteEvent>> {
    let mut events = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("bad line from the suite runner: {line}"))?;
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        events.push(SuiteEvent {
            event: s("event"),
            id: s("id"),
            outcome: s("outcome"),
            detail: s("detail"),
            runs: v["runs"].as_u64().unwrap_or(0),
            failures: v["failures"].as_u64().unwrap_or(0),
            unjudged: v["unjudged"].as_u64().unwrap_or(0),
            hung: v["hung"].as_bool().unwrap_or(false),
        });
    }
    Ok(events)
}

/// How one test did, run alone over and over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Repeats {
    /// Runs made: `times`, or fewer when one hung.
    runs: u64,
    /// Runs that failed, a hung one included.
    failures: u64,
    /// Whether the last run did not end (upstream's `async_eval` can
    /// deadlock): it counts as a failure, and the repeats end there.
    hung: bool,
}

/// Runs each of `ids` alone `times` times, each test in a process of its
/// own: how many runs failed. A run that does not end within `hang_after`
/// is a failure and ends that test's repeats. A run that gives no result to
/// count (skipped, or the test cannot be loaded alone) makes the comparison
/// impossible: an error.
fn repeat_tests(
    python: &Path,
    tree: &Path,
    ids: &[&String],
    times: u32,
    hang_after: std::time::Duration,
) -> Result<BTreeMap<String, Repeats>> {
    let runner = workspace_root().join("tests/python/run_mlx_suite.py");
    let mut found = BTreeMap::new();
    for id in ids {
        let out = Command::new(python)
            .arg(&runner)
            .arg(tree.join("python/tests"))
            .args(["--repeat", &times.to_string()])
            .args(["--hang-after", &hang_after.as_secs().to_string()])
            .arg(id.as_str())
            .var(mlx_patched::other_vars::DEVICE, "cpu")
            .output()?;
        let events = suite_events(&String::from_utf8_lossy(&out.stdout))?;
        let Some(e) = events.iter().find(|e| e.event == "repeat" && &e.id == *id) else {
            return Err(anyhow!(
                "repeating {id} reported nothing ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        };
        if !out.status.success() || e.unjudged > 0 || (!e.hung && e.runs != u64::from(times)) {
            return Err(anyhow!(
                "{id} alone: {} of {} runs gave no result to compare ({}; {})",
                e.unjudged,
                e.runs,
                e.detail,
                out.status
            ));
        }
        found.insert(
            id.to_string(),
            Repeats {
                runs: e.runs,
                failures: e.failures,
                hung: e.hung,
            },
        );
    }
    Ok(found)
}

/// How long one run of a repeated test may take before it counts as hung
/// (a run takes milliseconds; each hang seen costs this much).
const HANG_AFTER: std::time::Duration = std::time::Duration::from_secs(20);

/// How often a test that is flaky on patched runs alone on each variant
/// (a run takes milliseconds). The one flaky test seen here, `test_eval.
/// TestEval.test_async_eval_error_in_synchronize` (an error that surfaces
/// in `async_eval` instead of `synchronize` when the work finishes first),
/// failed alone within 2 to 392 runs on both variants, in ten tries; and it
/// deadlocks alone on both (after 185 runs on pristine and 93 on patched in
/// one cold run), which [`HANG_AFTER`] turns into a failure.
const FLAKY_REPEATS: u32 = 1000;

/// Whether a test flaky on patched regressed, from its failures alone in
/// [`FLAKY_REPEATS`] runs on each variant. It did if it never fails alone
/// on pristine, or if patched's count exceeds pristine's by more than three
/// standard deviations of the difference of two counts at one rate (about
/// the square root of their sum, as for Poisson counts) plus 3: two
/// variants with the same rate cross that about once in a thousand
/// comparisons.
fn flaky_regression(on_patched: u64, on_pristine: u64) -> bool {
    let spread = 3.0 * ((on_patched + on_pristine) as f64).sqrt() + 3.0;
    on_pristine == 0 || on_patched as f64 > on_pristine as f64 + spread
}

/// `cargo xtask python-check`; returns (checks passed, failures) and adds
/// rows to the suite's summary table.
pub fn check(rows: &mut Vec<Row>) -> Result<(u32, Vec<String>)> {
    let mut passed = 0;
    let mut failures = Vec::new();
    let mut expect = |ok: bool, what: String, passed: &mut u32| {
        if ok {
            *passed += 1;
        } else {
            failures.push(what);
        }
    };
    let expectations = crate::workspace::expectations();
    let variants = [Variant::PRISTINE, Variant::PATCHED];
    let mut pythons = Vec::new();
    for v in variants {
        pythons.push((v, python_for(v)?));
    }

    // 1. The report's script, verbatim.
    let (script, identity) = report_script()?;
    println!("the report's script: {} ({identity})", script.display());
    for (v, python) in &pythons {
        let out = run_python(python, &script, &[])?;
        let mib = crate::install_paths::report_mib(&out);
        println!("report.py on {}: {:?} MiB retained", v.name, mib);
        let bound = Cell::REPORT.bound(expectations.verdict(v));
        let ok = mib.len() == 10 && mib.iter().all(|&m| bound.admits_mib(m));
        expect(
            ok,
            format!(
                "report.py on {}: {mib:?} MiB, expected {bound} every cycle",
                v.name
            ),
            &mut passed,
        );
        rows.push(Row::note(format!(
            "Python, the report's script verbatim on {}: {mib:?} MiB retained",
            v.name
        )));
    }

    // The wheels as users install, replace and remove them, and their stubs.
    let mut t = crate::workspace::Tally::new();
    crate::install_paths::check(&mut t, rows)?;
    let patched_python = &pythons[1].1;
    crate::install_paths::type_check(
        &mut t,
        rows,
        patched_python,
        &build_wheel(Variant::PATCHED)?,
    )?;
    crate::install_paths::reproducible(&mut t, rows, Variant::PATCHED)?;
    crate::install_paths::platform_tags(&mut t, rows, &build_wheel(Variant::PATCHED)?)?;
    passed += t.passed;
    for f in t.failures {
        expect(false, f, &mut passed);
    }

    // 2. The ablation, with fixed keys: bit-identical across variants and with the C++ probe.
    let ablation = workspace_root().join("tests/python/ablation.py");
    // The report's cell over 10 cycles, the others over 3.
    let cells = [
        (Cell::REPORT, "10"),
        (Cell::SLICES, "3"),
        (Cell::NOT_EVALUATED, "3"),
        (Cell::EAGER, "3"),
    ];
    for (c, cycles) in cells {
        let cell = c.name();
        let args: Vec<&str> = ["--cycles", cycles].into_iter().chain(c.flags()).collect();
        let mut cols = Vec::new();
        let mut digests = Vec::new();
        let mut every_variant_digested = true;
        for (v, python) in &pythons {
            let recs = records(&run_python(python, &ablation, &args)?);
            let retained: Vec<i64> = recs
                .iter()
                .filter_map(|r| r.number("retained_bytes"))
                .collect();
            let before = digests.len();
            digests.extend(
                recs.iter()
                    .filter_map(|r| r.value("digest").map(String::from)),
            );
            every_variant_digested &= digests.len() > before;
            let bound = c.bound(expectations.verdict(v));
            println!("Python {cell} on {}: {retained:?}", v.name);
            expect(
                bound.admits_all(&retained),
                format!(
                    "Python {cell} on {}: retained {retained:?}, expected {bound} every cycle",
                    v.name
                ),
                &mut passed,
            );
            let mean = retained.iter().sum::<i64>() / retained.len().max(1) as i64;
            cols.push((v.name.to_string(), mean as f64));
        }
        // Every variant printed digests, and all of them agree.
        let same = every_variant_digested && digests.windows(2).all(|w| w[0] == w[1]);
        expect(
            same,
            format!("Python {cell}: outputs differ: {digests:?}"),
            &mut passed,
        );
        if c == Cell::REPORT {
            let cpp = crate::demo::cpp_probe(
                &mlx_patched::build(Variant::PATCHED, &crate::workspace::options()?)?,
                "leak_scenario",
            )?;
            let cpp_out = Command::new(cpp).args(["--cycles", "1"]).output()?;
            let cpp_digest = records(&String::from_utf8_lossy(&cpp_out.stdout))
                .first()
                .and_then(|r| r.value("digest").map(String::from))
                .unwrap_or_default();
            expect(
                digests.first() == Some(&cpp_digest),
                format!(
                    "Python and C++ outputs differ: {:?} vs {cpp_digest}",
                    digests.first()
                ),
                &mut passed,
            );
        }
        rows.push(Row::retained(format!("Python: {cell}"), cols, same));
    }

    // 3. The report's side note: a second compiled shape.
    let side = workspace_root().join("tests/python/second_shape.py");
    for (v, python) in &pythons {
        for shapes in ["1", "2"] {
            let recs = records(&run_python(
                python,
                &side,
                &["--shapes", shapes, "--cycles", "2"],
            )?);
            let get = |k: &str| recs.iter().filter_map(|r| r.number(k)).collect::<Vec<_>>();
            let (one, all, traces, retained) = (
                get("live_one"),
                get("live_all"),
                get("traces"),
                get("retained_bytes"),
            );
            let cache = get("cache_all");
            let note = format!(
                "Python, {}: {shapes} compiled shape(s): live {:.2} MiB after the first call, {:.2} MiB after every shape's (buffer cache {:.2} MiB), traced {:?} times, {:.2} MiB retained after the drop",
                v.name,
                *one.first().unwrap_or(&0) as f64 / 1048576.0,
                *all.first().unwrap_or(&0) as f64 / 1048576.0,
                *cache.first().unwrap_or(&0) as f64 / 1048576.0,
                traces,
                *retained.first().unwrap_or(&0) as f64 / 1048576.0
            );
            println!("{note}");
            rows.push(Row::note(note.to_string()));
            let want_traces: i64 = shapes.parse().unwrap();
            expect(
                !traces.is_empty() && traces.iter().all(|&t| t == want_traces),
                format!("{}: {shapes} shapes traced {traces:?} times", v.name),
                &mut passed,
            );
        }
    }

    // The fuzzer's kept findings, as Python scripts where Python can show
    // them: each must fail (an error, a leak, a crash) on the control and run
    // clean where its fix is applied, as the worker's replay does in C++.
    let kept = mlx_fuzz::findings::load_dir(&workspace_root().join("tests/fuzz-findings"))
        .map_err(anyhow::Error::msg)?;
    let series = mlx_patched::patch::names(&mlx_patched::patch::fix_series(
        &crate::workspace::options()?.patches_dir,
    )?);
    let scripts = python_root()?.join("fuzz-findings");
    std::fs::create_dir_all(&scripts)?;
    for k in &kept {
        let stem = k
            .file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let script = match mlx_fuzz::python::print(&k.program, &format!("mlx-fuzz finding {stem}"))
        {
            Err(why) => {
                println!("finding {stem}: no Python form ({why})");
                continue;
            }
            Ok(_) if !mlx_fuzz::python::shows(k.kind) => {
                println!("finding {stem}: a Python script cannot show this kind of finding ({}) by itself", k.kind.name());
                continue;
            }
            Ok(text) => text,
        };
        let file = scripts.join(format!("{stem}.py"));
        std::fs::write(&file, script)?;
        for (v, python) in &pythons {
            let with: &[String] = if v.name == Variant::PRISTINE.name {
                &[]
            } else {
                &series
            };
            let show = k.must_show(with, expectations.verdict(v) == mlx_patched::Expect::Fixed);
            let out = Command::new(python).arg(&file).output()?;
            let said = String::from_utf8_lossy(&out.stdout);
            let said = said.lines().last().unwrap_or("").to_string();
            println!(
                "finding {stem} as Python on {}: {} ({said})",
                v.name, out.status
            );
            let signal = {
                use std::os::unix::process::ExitStatusExt;
                out.status.signal()
            };
            expect(
                if show {
                    mlx_fuzz::python::showed(k.kind, out.status.code(), signal, &said)
                } else {
                    mlx_fuzz::python::ran_clean(out.status.code(), &said)
                },
                format!(
                    "{} on {}: {} ({said}), expected it {}",
                    file.display(),
                    v.name,
                    out.status,
                    if show {
                        format!("to show its {}", k.kind.name())
                    } else {
                        "to run clean".to_string()
                    }
                ),
                &mut passed,
            );
        }
    }

    // 4. MLX's Python suite on both, one after the other: side by side, the
    // load made upstream's timing-dependent `test_async_eval_error_in_
    // synchronize` fail in the suite. Patched runs first, in an empty kernel
    // cache of its own, so that it builds every kernel its suite needs with
    // its own code (0009 changes how kernels are built). Pristine, the
    // control, then starts from a copy of the kernels patched built: the
    // kernels' sources and names are the same on both, and compiling them a
    // second time would cost about three minutes on 2 cores.
    let mut suites = BTreeMap::new();
    for (v, python) in pythons.iter().rev() {
        let mlx = mlx_patched::build(*v, &crate::workspace::options()?)?;
        let cache = kernel_tmp(*v, true)?;
        let seeded = if *v == Variant::PATCHED {
            String::new()
        } else {
            let built = kernel_tmp(Variant::PATCHED, false)?;
            mlx_patched::copy_tree(&built, &cache)?;
            format!(", from the kernels patched built ({})", built.display())
        };
        eprintln!(
            "running MLX's Python test suite on {} (DEVICE=cpu){seeded}",
            v.name
        );
        let log = python_root()?.join(v.name).join("mlx-python-suite.log");
        suites.insert(v.name, mlx_suite(python, mlx.source_dir(), &log, &cache)?);
    }
    let count = |r: &BTreeMap<String, (String, String)>, o: &str| {
        r.values().filter(|(x, _)| x == o).count()
    };
    let flaky = |r: &BTreeMap<String, (String, String)>| -> Vec<String> {
        r.iter()
            .filter(|(_, (o, _))| o == "flaky")
            .map(|(id, _)| id.clone())
            .collect()
    };
    for (name, r) in variants.iter().map(|v| (v.name, &suites[v.name])) {
        let line = format!(
            "MLX's Python suite on {name}: {} passed, {} failed, {} errors, {} skipped, {} flaky (passed when run again), {} expected failures",
            count(r, "passed"),
            count(r, "failed"),
            count(r, "error"),
            count(r, "skipped"),
            count(r, "flaky"),
            count(r, "xfail")
        );
        println!("{line}");
        rows.push(Row::note(line.to_string()));
    }
    for (name, r) in variants.iter().map(|v| (v.name, &suites[v.name])) {
        let line = format!(
            "MLX's Python suite on {name}: flaky (failed, then passed alone): {:?}",
            flaky(r)
        );
        println!("{line}");
        rows.push(Row::note(line.to_string()));
    }
    let (pristine, patched) = (
        &suites[Variant::PRISTINE.name],
        &suites[Variant::PATCHED.name],
    );
    let words = |r: &BTreeMap<String, (String, String)>| {
        by_word(r.iter().map(|(n, (o, _))| (n, o.as_str())))
    };
    let regressions = regressions(&words(pristine), &words(patched));
    expect(
        regressions.is_empty(),
        format!("MLX Python tests worse on patched than on pristine: {regressions:?}"),
        &mut passed,
    );
    // A test flaky on patched must be flaky on pristine too: one that never
    // fails there, over as many runs as it takes, is a regression that a
    // retry would hide.
    let patched_flaky = flaky(patched);
    let unexplained: Vec<&String> = patched_flaky
        .iter()
        .filter(|id| {
            !pristine
                .get(*id)
                .is_some_and(|(o, _)| o == "flaky" || o == "failed" || o == "error")
        })
        .collect();
    let mut only_patched = Vec::new();
    if !unexplained.is_empty() {
        let (_, python) = &pythons[0];
        let tree = mlx_patched::build(Variant::PRISTINE, &crate::workspace::options()?)?
            .source_dir()
            .to_path_buf();
        let on_pristine = repeat_tests(python, &tree, &unexplained, FLAKY_REPEATS, HANG_AFTER)?;
        let patched_tree = mlx_patched::build(Variant::PATCHED, &crate::workspace::options()?)?
            .source_dir()
            .to_path_buf();
        let on_patched = repeat_tests(
            &pythons[1].1,
            &patched_tree,
            &unexplained,
            FLAKY_REPEATS,
            HANG_AFTER,
        )?;
        for id in &unexplained {
            let (p, q) = (on_patched[*id], on_pristine[*id]);
            let said = |r: Repeats| {
                format!(
                    "{} of {} runs{}",
                    r.failures,
                    r.runs,
                    if r.hung {
                        ", the last of them hung"
                    } else {
                        ""
                    }
                )
            };
            let line = format!(
                "{id}: flaky on patched; alone it failed {} on patched and {} on pristine",
                said(p),
                said(q)
            );
            println!("{line}");
            rows.push(Row::note(format!("MLX's Python suite: {line}")));
            if flaky_regression(p.failures, q.failures) {
                only_patched.push(id.to_string());
            }
        }
    }
    expect(
        only_patched.is_empty(),
        format!(
            "MLX Python tests flaky on patched and not alike on pristine, alone over {FLAKY_REPEATS} runs each: {only_patched:?}"
        ),
        &mut passed,
    );
    // Failures on both, grouped by cause.
    let mut causes: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (id, (o, detail)) in patched {
        if (o == "failed" || o == "error")
            && pristine
                .get(id)
                .is_some_and(|(p, _)| p == "failed" || p == "error")
        {
            causes.entry(detail.as_str()).or_default().push(id);
        }
    }
    for (cause, ids) in &causes {
        let line = format!("fail on both ({}): {cause}", ids.len());
        println!(
            "  {line}: {}",
            ids.iter()
                .take(3)
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        rows.push(Row::note(format!("MLX's Python suite, {line}")));
    }
    Ok((passed, failures))
}

pub fn check_cmd() -> Result<()> {
    crate::deps::install()?;
    let (passed, failures) = check(&mut Vec::new())?;
    for f in &failures {
        println!("FAILED: {f}");
    }
    println!("python-check: {passed} passed, {} failed", failures.len());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("{} Python checks failed", failures.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner on a small suite of its own: a pass, a failure, a test
    /// that fails only its first time, and one that kills the interpreter.
    #[test]
    fn a_flaky_test_is_excused_only_by_a_like_rate_on_pristine() {
        assert!(flaky_regression(3, 0), "never failing on pristine");
        assert!(flaky_regression(0, 0), "failing alone on neither");
        assert!(!flaky_regression(12, 9));
        assert!(!flaky_regression(5, 40));
        assert!(flaky_regression(200, 10), "far more often on patched");
    }

    #[test]
    fn the_suite_runner_streams_results_retries_failures_and_names_a_crash() {
        let dir = std::env::temp_dir().join(format!("xtask-suite-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("python/tests")).unwrap();
        let tests = dir.join("python/tests");
        let marker = dir.join("ran-once");
        std::fs::write(
            tests.join("test_fake.py"),
            format!(
                "import os, unittest\n\
                 class T(unittest.TestCase):\n\
                 \x20   def test_a_pass(self): pass\n\
                 \x20   def test_b_fail(self): self.assertEqual(1, 2)\n\
                 \x20   def test_c_flaky(self):\n\
                 \x20       first = not os.path.exists({m:?})\n\
                 \x20       open({m:?}, 'w').close()\n\
                 \x20       self.assertFalse(first)\n\
                 \x20   def test_d_raises(self): raise RuntimeError('upstream said no')\n",
                m = marker.display().to_string()
            ),
        )
        .unwrap();
        let python = mlx_patched::Env::process().python();
        let python = Path::new(&python);
        let log = dir.join("log");
        let results = mlx_suite(python, &dir, &log, &dir).unwrap();
        let outcome = |id: &str| results.get(id).map(|(o, _)| o.as_str());
        assert_eq!(outcome("test_fake.T.test_a_pass"), Some("passed"));
        assert_eq!(outcome("test_fake.T.test_b_fail"), Some("failed"));
        assert_eq!(outcome("test_fake.T.test_c_flaky"), Some("flaky"));
        assert_eq!(outcome("test_fake.T.test_d_raises"), Some("error"));
        // Repeated alone: the failing test fails at once, the flaky one no more.
        let ids = [
            &"test_fake.T.test_b_fail".to_string(),
            &"test_fake.T.test_c_flaky".to_string(),
        ];
        let hang_after = std::time::Duration::from_secs(2);
        let repeated = repeat_tests(python, &dir, &ids, 5, hang_after).unwrap();
        let count = |id: &str| (repeated[id].failures, repeated[id].runs, repeated[id].hung);
        assert_eq!(count("test_fake.T.test_b_fail"), (5, 5, false));
        assert_eq!(count("test_fake.T.test_c_flaky"), (0, 5, false));
        // A test that raises alone fails, as one whose assertion fails does.
        let raises = "test_fake.T.test_d_raises".to_string();
        let repeated = repeat_tests(python, &dir, &[&raises], 3, hang_after).unwrap();
        assert_eq!(repeated[&raises].failures, 3);
        // A test that cannot be loaded alone gives no count to compare.
        let missing = "test_fake.T.test_z_missing".to_string();
        assert!(repeat_tests(python, &dir, &[&missing], 2, hang_after).is_err());
        // A run that never ends is a failure, ends its test's repeats, and
        // leaves the next test its own process.
        let stuck = dir.join("stuck-once");
        std::fs::write(
            tests.join("test_hang.py"),
            format!(
                "import os, threading, unittest\n\
                 class H(unittest.TestCase):\n\
                 \x20   def test_hangs_on_its_third_run(self):\n\
                 \x20       n = int(open({m:?}).read()) if os.path.exists({m:?}) else 0\n\
                 \x20       open({m:?}, 'w').write(str(n + 1))\n\
                 \x20       if n == 2: threading.Event().wait()\n",
                m = stuck.display().to_string()
            ),
        )
        .unwrap();
        let hangs = "test_hang.H.test_hangs_on_its_third_run".to_string();
        let repeated = repeat_tests(python, &dir, &[&hangs, ids[0]], 5, hang_after).unwrap();
        assert_eq!(
            repeated[&hangs],
            Repeats {
                runs: 3,
                failures: 1,
                hung: true
            }
        );
        assert_eq!(repeated["test_fake.T.test_b_fail"].failures, 5);
        std::fs::remove_file(tests.join("test_hang.py")).unwrap();

        std::fs::write(tests.join("test_fake.py"), "import os, unittest\nclass T(unittest.TestCase):\n    def test_a_pass(self): pass\n    def test_b_crash(self): os._exit(3)\n").unwrap();
        let err = mlx_suite(python, &dir, &log, &dir).unwrap_err().to_string();
        assert!(
            err.contains("while running test_fake.T.test_b_crash"),
            "{err}"
        );
    }
}
