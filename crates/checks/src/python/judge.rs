//! The Python check's rules: what it measured ([`Evidence`], plain data),
//! the claims it must make ([`judge`]) and its rows in the run's table
//! ([`render`]). Both are pure, and tested here on made-up evidence.

use mlx_expectations::outcomes::{by_word, regressions};
use mlx_expectations::report::Row;
use mlx_expectations::Cell;
use mlx_harness::tally::Tally;
use mlx_patched::{Expectations, Variant};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The control first, then the fix.
pub const VARIANTS: [Variant; 2] = [Variant::PRISTINE, Variant::PATCHED];

/// How one test did, run alone over and over, each run in a process of
/// its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeats {
    /// Runs made.
    pub runs: u64,
    /// Runs that failed, hung or died without a result included.
    pub failures: u64,
    /// Runs that did not end within the time allowed (killed, and counted
    /// among the failures).
    pub hung: u64,
}

/// How often a test that is flaky on patched runs alone on each variant,
/// each run a process of its own, two at a time (100 runs took 11 s on 2
/// busy cores). The one flaky test seen here, `test_eval.TestEval.
/// test_async_eval_error_in_synchronize` (an error that surfaces in
/// `async_eval` instead of `synchronize` when the work finishes first),
/// failed in 2 of 1000 fresh processes on pristine and 4 of 1000 on
/// patched: rare on both, so the judge compares rates
/// ([`flaky_regression`]) and asks no failure of pristine.
pub const FLAKY_REPEATS: u32 = 1000;

/// MLX Python tests whose outcome depends on timing, run apart from
/// patched's whole suite (which shares the machine with the check's other
/// work) and then alone. Beside that work, `test_async_eval_error_in_
/// synchronize` failed and passed on its retry, and the check spent its
/// 2 x 1000 repeats on it. A name here that matches no test is an error
/// result on patched, so a stale entry fails the check.
pub const RUN_APART: &[&str] = &["test_eval.TestEval.test_async_eval_error_in_synchronize"];

/// MLX's Python suite on one variant: outcome and detail per test id.
pub type SuiteResults = BTreeMap<String, (String, String)>;

/// The tests each patch of the series adds to MLX's Python suite that show
/// its bug: each fails on the control, which runs the series' tests, and
/// passes on the fix. A patch that adds Python tests names them here.
pub const SHOW_THE_BUG: &[(&str, &[&str])] = &[
    (
        "0043-buffer-protocol-raises-evaluation-errors",
        &["test_eval.TestEval.test_buffer_read_after_failed_async_eval_raises"],
    ),
    (
        "0044-indexing-clamps-slice-bounds-past-the-axis",
        &["test_array.TestArray.test_indexing_past_the_axes_in_a_child"],
    ),
    (
        "0045-python-numbers-convert-from-exact-values",
        &["test_array.TestArray.test_python_numbers_to_wider_types_keep_their_value"],
    ),
    (
        "0046-iter-of-a-scalar-is-a-type-error",
        &["test_array.TestArray.test_iterating_a_scalar_is_a_type_error"],
    ),
];

/// The Python test methods a patch adds, by name (`test_…`), read from its
/// hunks under `python/tests/`.
#[cfg(test)]
fn new_python_tests(patch_text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_python_tests = false;
    for line in patch_text.lines() {
        if let Some(path) = line.strip_prefix("+++ b/") {
            in_python_tests = path.starts_with("python/tests/");
        } else if in_python_tests {
            if let Some(rest) = line.strip_prefix("+    def test_") {
                names.push(format!("test_{}", rest.split('(').next().unwrap_or("")));
            }
        }
    }
    names
}

/// The (patch stem, test id) pairs of [`SHOW_THE_BUG`] whose patch is in
/// `series`: on a base where upstream has the fix, neither is there.
pub fn shown_in(series: &[PathBuf]) -> Vec<(String, String)> {
    series
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter_map(|stem| {
            SHOW_THE_BUG
                .iter()
                .find(|(s, _)| *s == stem)
                .map(|(_, ids)| (stem, *ids))
        })
        .flat_map(|(stem, ids)| ids.iter().map(move |id| (stem.clone(), id.to_string())))
        .collect()
}

/// Everything the Python check ran, on both variants.
pub struct Evidence {
    /// The series' Python tests that must show their bug (patch stem, test
    /// id): [`shown_in`] the run's series.
    pub show_the_bug: Vec<(String, String)>,
    /// The report's script: whole MiB retained after each cycle.
    pub report: Vec<(Variant, Vec<i64>)>,
    /// The wheels' install paths (`crate::pip_installs`).
    pub install: crate::pip_installs::judge::Evidence,
    pub ablation: Vec<Ablation>,
    pub second_shape: Vec<SecondShape>,
    pub findings: Vec<FindingRun>,
    /// By variant name.
    pub suites: BTreeMap<&'static str, SuiteResults>,
    /// The tests flaky on patched that pristine's results do not explain,
    /// run alone: (on patched, on pristine).
    pub repeats: BTreeMap<String, (Repeats, Repeats)>,
    /// `tests/python/fixed_layout_leak.py` under the fixed heap layout
    /// (finding 013), twice per variant.
    pub fixed_layout: Vec<LayoutRuns>,
    /// How patched's environment compiles MLX's kernels: from the
    /// precompiled preamble (`mlx_harness::kernel_preamble`).
    pub preamble: mlx_harness::kernel_preamble::Use,
}

/// One variant's two runs of the fixed-layout sweep.
pub struct LayoutRuns {
    pub variant: Variant,
    /// The layouts that leaked, per run.
    pub leaked: [Vec<i64>; 2],
    pub layouts: usize,
    pub digest: String,
}

/// One ablation cell on each variant.
pub struct Ablation {
    pub cell: Cell,
    pub runs: Vec<AblationRun>,
    /// The C++ probe's output digest for the same computation (the report's
    /// cell only).
    pub cpp_digest: Option<String>,
}

pub struct AblationRun {
    pub variant: Variant,
    /// Bytes retained after each cycle.
    pub retained: Vec<i64>,
    /// The output digests it printed.
    pub digests: Vec<String>,
}

/// The report's side note: `shapes` compiled shapes, then the drop.
pub struct SecondShape {
    pub variant: Variant,
    pub shapes: i64,
    pub live_one: i64,
    pub live_all: i64,
    pub cache_all: i64,
    /// How many times the function was traced, per cycle.
    pub traces: Vec<i64>,
    pub retained: i64,
}

/// A kept fuzz finding as a Python script, run on one variant.
pub struct FindingRun {
    pub script: PathBuf,
    pub variant: Variant,
    pub kind: mlx_fuzz::Kind,
    /// Whether it must show there (its fix is not applied), or run clean.
    pub must_show: bool,
    pub status: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The script's last line of output.
    pub said: String,
}

/// The claims the evidence supports or refutes.
pub fn judge(e: &Evidence, expectations: &Expectations) -> Tally {
    let mut t = Tally::new();
    for (v, mib) in &e.report {
        let bound = Cell::REPORT.bound(expectations.verdict(v));
        t.claim(
            mib.len() == 10 && mib.iter().all(|&m| bound.admits_mib(m)),
            || {
                format!(
                    "report.py on {}: {mib:?} MiB, expected {bound} every cycle",
                    v.name
                )
            },
        );
    }
    crate::pip_installs::judge::judge(&e.install, &mut t);
    let p = &e.preamble;
    t.claim(!p.mlx_parsed_header && !p.parsed_with && p.parsed_without, || {
        format!("the precompiled kernel preamble: {p:?}; expected MLX's compile and g++ with the environment's headers to read it, and g++ without it to parse the header")
    });
    t.claim(p.same_bytes, || {
        "a kernel compiled from the precompiled preamble differs from the same kernel compiled from the header".into()
    });
    for a in &e.ablation {
        let cell = a.cell.name();
        for r in &a.runs {
            let bound = a.cell.bound(expectations.verdict(&r.variant));
            t.claim(bound.admits_all(&r.retained), || {
                format!(
                    "Python {cell} on {}: retained {:?}, expected {bound} every cycle",
                    r.variant.name, r.retained
                )
            });
        }
        t.claim(outputs_agree(a), || {
            format!("Python {cell}: outputs differ: {:?}", digests(a))
        });
        if a.cell == Cell::REPORT {
            let cpp = a.cpp_digest.clone().unwrap_or_default();
            let python = digests(a).first().cloned();
            t.claim(python.as_ref() == Some(&cpp), || {
                format!("Python and C++ outputs differ: {python:?} vs {cpp}")
            });
        }
    }
    for s in &e.second_shape {
        t.claim(
            !s.traces.is_empty() && s.traces.iter().all(|&n| n == s.shapes),
            || {
                format!(
                    "{}: {} shapes traced {:?} times",
                    s.variant.name, s.shapes, s.traces
                )
            },
        );
    }
    for f in &e.findings {
        let ok = if f.must_show {
            mlx_fuzz::python::showed(f.kind, f.code, f.signal, &f.said)
        } else {
            mlx_fuzz::python::ran_clean(f.code, &f.said)
        };
        t.claim(ok, || {
            format!(
                "{} on {}: {} ({}), expected it {}",
                f.script.display(),
                f.variant.name,
                f.status,
                f.said,
                if f.must_show {
                    format!("to show its {}", f.kind.name())
                } else {
                    "to run clean".to_string()
                }
            )
        });
    }
    for l in &e.fixed_layout {
        let expect = expectations.verdict(&l.variant);
        let same = l.leaked[0] == l.leaked[1];
        let ok = same
            && match expect {
                mlx_patched::Expect::Leaks => !l.leaked[0].is_empty(),
                _ => l.leaked[0].is_empty(),
            };
        t.claim(ok && l.layouts > 0, || {
            format!(
                "Python fixed layout on {}: leaked at {:?} then at {:?} of {} layouts, expected {} and the same in both runs",
                l.variant.name,
                l.leaked[0],
                l.leaked[1],
                l.layouts,
                if expect == mlx_patched::Expect::Leaks { "some" } else { "none" }
            )
        });
    }
    t.claim(
        e.fixed_layout.len() >= 2
            && e.fixed_layout
                .iter()
                .all(|l| l.digest == e.fixed_layout[0].digest),
        || "Python fixed layout: the variants computed different bits or did not all run".into(),
    );
    let (Some(pristine), Some(patched)) = (
        e.suites.get(Variant::PRISTINE.name),
        e.suites.get(Variant::PATCHED.name),
    ) else {
        t.claim(false, || {
            "MLX's Python suite did not run on both variants".into()
        });
        return t;
    };
    // Each of the series' Python tests that shows a bug: failed (not flaky)
    // on the control, passed on the fix.
    for (stem, id) in &e.show_the_bug {
        let outcome = |r: &SuiteResults| r.get(id).map(|(o, _)| o.clone());
        let (on_pristine, on_patched) = (outcome(pristine), outcome(patched));
        t.claim(
            matches!(on_pristine.as_deref(), Some("failed" | "error"))
                && on_patched.as_deref() == Some("passed"),
            || {
                format!(
                    "{stem}'s Python test {id}: {on_pristine:?} on pristine, {on_patched:?} on patched; expected it to fail there and pass here"
                )
            },
        );
    }
    let words = |r: &SuiteResults| by_word(r.iter().map(|(n, (o, _))| (n, o.as_str())));
    // A lost pass repeated alone on both variants is judged by its rates
    // below, not by one run in a process that earlier tests shaped.
    let regressed: Vec<_> = regressions(&words(pristine), &words(patched))
        .into_iter()
        .filter(|r| !e.repeats.contains_key(r.test()))
        .collect();
    t.claim(regressed.is_empty(), || {
        format!("MLX Python tests worse on patched than on pristine: {regressed:?}")
    });
    // A test flaky on patched must be flaky on pristine too: one that never
    // fails there, over as many runs as it takes, is a regression that a
    // retry would hide. One that was not repeated is not excused.
    let only_patched: Vec<String> = judged_alone(pristine, patched)
        .into_iter()
        .filter(|id| {
            e.repeats
                .get(id)
                .is_none_or(|(on_patched, on_pristine)| flaky_regression(on_patched, on_pristine))
        })
        .collect();
    t.claim(only_patched.is_empty(), || {
        format!(
            "MLX Python tests flaky or failing on patched and not alike on pristine, alone in {FLAKY_REPEATS} processes each: {only_patched:?}"
        )
    });
    t
}

/// The check's rows in the run's table, in the order it ran.
pub fn render(e: &Evidence) -> Vec<Row> {
    let mut rows = Vec::new();
    for (v, mib) in &e.report {
        rows.push(Row::note(format!(
            "Python, the report's script verbatim on {}: {mib:?} MiB retained",
            v.name
        )));
    }
    rows.extend(crate::pip_installs::judge::render(&e.install));
    for a in &e.ablation {
        let cols = a
            .runs
            .iter()
            .map(|r| {
                let mean = r.retained.iter().sum::<i64>() / r.retained.len().max(1) as i64;
                (r.variant.name.to_string(), mean as f64)
            })
            .collect();
        rows.push(Row::retained(
            format!("Python: {}", a.cell.name()),
            cols,
            outputs_agree(a),
        ));
    }
    let mib = |b: i64| b as f64 / 1048576.0;
    for s in &e.second_shape {
        rows.push(Row::note(format!(
            "Python, {}: {} compiled shape(s): live {:.2} MiB after the first call, {:.2} MiB after every shape's (buffer cache {:.2} MiB), traced {:?} times, {:.2} MiB retained after the drop",
            s.variant.name,
            s.shapes,
            mib(s.live_one),
            mib(s.live_all),
            mib(s.cache_all),
            s.traces,
            mib(s.retained)
        )));
    }
    let count = |r: &SuiteResults, o: &str| r.values().filter(|(x, _)| x == o).count();
    // The control first, as the check runs them.
    let suites: Vec<(&str, &SuiteResults)> = VARIANTS
        .iter()
        .filter_map(|v| Some((v.name, e.suites.get(v.name)?)))
        .collect();
    for (name, r) in &suites {
        let what = if *name == Variant::PRISTINE.name {
            "the tests that did not pass on patched, and the series' own"
        } else {
            "the whole suite"
        };
        rows.push(Row::note(format!(
            "MLX's Python suite on {name} ({what}): {} passed, {} failed, {} errors, {} skipped, {} flaky (passed when run again), {} expected failures",
            count(r, "passed"),
            count(r, "failed"),
            count(r, "error"),
            count(r, "skipped"),
            count(r, "flaky"),
            count(r, "xfail")
        )));
    }
    for (name, r) in &suites {
        rows.push(Row::note(format!(
            "MLX's Python suite on {name}: flaky (failed, then passed alone): {:?}",
            flaky(r)
        )));
    }
    let said = |r: &Repeats| {
        let hung = if r.hung > 0 {
            format!(" ({} of them hung)", r.hung)
        } else {
            String::new()
        };
        format!("{} of {} runs{hung}", r.failures, r.runs)
    };
    for (id, (p, q)) in &e.repeats {
        rows.push(Row::note(format!(
            "MLX's Python suite: {id}: flaky on patched; alone it failed {} on patched and {} on pristine",
            said(p),
            said(q)
        )));
    }
    if let (Some(pristine), Some(patched)) = (
        e.suites.get(Variant::PRISTINE.name),
        e.suites.get(Variant::PATCHED.name),
    ) {
        for (cause, ids) in failing_on_both(pristine, patched) {
            rows.push(Row::note(format!(
                "MLX's Python suite, fail on both ({}): {cause}",
                ids.len()
            )));
        }
    }
    rows.push(Row::note(format!(
        "Python: MLX's kernels compile from a precompiled preamble in the fork's environments ({}), and the same kernel compiled from the header has the same bytes ({})",
        if e.preamble.mlx_parsed_header { "no: MLX's compile parsed the header" } else { "yes" },
        if e.preamble.same_bytes { "yes" } else { "no" }
    )));
    for l in &e.fixed_layout {
        rows.push(Row::note(format!(
            "Python, fixed heap layout (finding 013) on {}: leaked at {} of {} layouts, the same in 2 runs: {}",
            l.variant.name,
            l.leaked[0].len(),
            l.layouts,
            if l.leaked[0] == l.leaked[1] { "yes" } else { "no" }
        )));
    }
    rows
}

/// The tests the control runs: every test that did not pass on patched
/// (whatever its outcome: the judge compares nothing else), and the
/// series' tests that must show their bug, in name order.
pub fn control_subset(patched: &SuiteResults, show_the_bug: &[(String, String)]) -> Vec<String> {
    let mut ids: std::collections::BTreeSet<String> = patched
        .iter()
        .filter(|(_, (o, _))| o != "passed")
        .map(|(id, _)| id.clone())
        .collect();
    ids.extend(show_the_bug.iter().map(|(_, id)| id.clone()));
    ids.into_iter().collect()
}

/// The tests to run alone, in independent processes, on both variants:
/// those flaky on patched that pristine's results do not explain (there
/// they neither failed nor were flaky), and those that failed on patched
/// (retry included) where pristine passed.
pub fn judged_alone(pristine: &SuiteResults, patched: &SuiteResults) -> Vec<String> {
    let bad = |o: &str| o == "flaky" || o == "failed" || o == "error";
    patched
        .iter()
        .filter(|(id, (o, _))| {
            // Flaky on patched, or failing there (its retry in the same
            // process failed too) where pristine passed: either way a
            // timing-dependent test is judged only over independent
            // processes, and a test that really regressed fails there at
            // once.
            let on_pristine = pristine.get(*id).map(|(p, _)| p.as_str());
            match o.as_str() {
                "flaky" => !on_pristine.is_some_and(bad),
                "failed" | "error" => on_pristine == Some("passed"),
                _ => false,
            }
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// Whether a test flaky on patched regressed, from its runs alone on each
/// variant (independent processes). Under the hypothesis that both fail at
/// one rate, each of the failures seen on either is patched's with the
/// share of runs patched made, so patched's count is binomial given the
/// total. It regressed if a count as high as patched's has a probability
/// below [`FLAKY_SIGNIFICANCE`] under that hypothesis: two variants with one
/// rate are judged apart about once in a thousand comparisons. A rare
/// failure seen on patched alone (3 of 1000, none on pristine) is no
/// evidence either way; a rate ten times pristine's is.
pub fn flaky_regression(patched: &Repeats, pristine: &Repeats) -> bool {
    let total = patched.failures + pristine.failures;
    let runs = patched.runs + pristine.runs;
    if patched.failures == 0 || runs == 0 {
        return false;
    }
    let share = patched.runs as f64 / runs as f64;
    binomial_tail(total, patched.failures, share) < FLAKY_SIGNIFICANCE
}

/// The probability at which [`flaky_regression`] calls a difference real.
pub const FLAKY_SIGNIFICANCE: f64 = 1e-3;

/// P(X >= k) for X ~ Binomial(n, p), summed in logarithms so that large
/// counts neither overflow nor underflow.
fn binomial_tail(n: u64, k: u64, p: f64) -> f64 {
    if p >= 1.0 {
        return 1.0;
    }
    let ln_choose = |i: u64| -> f64 { (1..=i).map(|j| ((n - i + j) as f64 / j as f64).ln()).sum() };
    (k..=n)
        .map(|i| (ln_choose(i) + i as f64 * p.ln() + (n - i) as f64 * (1.0 - p).ln()).exp())
        .sum::<f64>()
        .min(1.0)
}

/// The tests that failed on both variants, grouped by patched's detail.
fn failing_on_both<'a>(
    pristine: &SuiteResults,
    patched: &'a SuiteResults,
) -> BTreeMap<&'a str, Vec<&'a String>> {
    let failed = |o: &str| o == "failed" || o == "error";
    let mut causes: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (id, (o, detail)) in patched {
        if failed(o) && pristine.get(id).is_some_and(|(p, _)| failed(p)) {
            causes.entry(detail.as_str()).or_default().push(id);
        }
    }
    causes
}

fn flaky(r: &SuiteResults) -> Vec<String> {
    r.iter()
        .filter(|(_, (o, _))| o == "flaky")
        .map(|(id, _)| id.clone())
        .collect()
}

fn digests(a: &Ablation) -> Vec<String> {
    a.runs
        .iter()
        .flat_map(|r| r.digests.iter().cloned())
        .collect()
}

/// Every variant printed digests, and all of them agree.
fn outputs_agree(a: &Ablation) -> bool {
    let all = digests(a);
    a.runs.iter().all(|r| !r.digests.is_empty()) && all.windows(2).all(|w| w[0] == w[1])
}

#[cfg(test)]
mod tests;
