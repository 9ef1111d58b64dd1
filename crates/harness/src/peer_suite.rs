//! A peer package's own pytest suite, run against an MLX it did not choose:
//! what the mlx-lm and mlx-audio checks share. A [`Site`] is one
//! environment (its interpreter, where the tests are, its kernel folder);
//! the suite streams each result through `tests/python/exact_deselect.py`,
//! which also drops the exclusions by exact id; the rules that compare a
//! control's outcomes with a fix's are pure functions here.

use crate::error::{anyhow, Context, Result};
use crate::paths::workspace_root;
use mlx_expectations::outcomes::{by_word, regressions};
use mlx_patched::CommandVars;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// One outcome per test id: outcome and first line of why.
pub type Suite = BTreeMap<String, (String, String)>;

/// How often a test that came out worse on the fix than on the control in
/// the suite runs again alone, on each. The one seen, mlx-lm's
/// `test_gemma3n_kv_shared_layers_ignore_chunking`, compares logits of
/// unseeded random weights with `allclose`: on this project's builds of
/// both variants it failed in 4 of 6 runs (it passed 6 of 6 on the
/// official wheel).
pub const RERUNS: u32 = 10;

/// Where one environment runs a peer's suite.
pub struct Site {
    /// What the environment is, in messages: `pristine`, `official 0.32.4`.
    pub label: String,
    /// The environment's interpreter.
    pub python: PathBuf,
    /// Its own folder for results and logs.
    pub dir: PathBuf,
    /// MLX's kernel folder (`TMPDIR`), its own.
    pub kernels: PathBuf,
    /// The module under test, which must be imported from the environment.
    pub client: &'static str,
    /// Where pytest runs.
    pub cwd: PathBuf,
    /// The folder test ids are relative to, when not `cwd` (pytest's
    /// `--rootdir`): a suite installed in site-packages runs from a scratch
    /// folder, so that files its tests write land there.
    pub rootdir: Option<PathBuf>,
    /// Arguments for every run (`--timeout`, …).
    pub args: Vec<String>,
    /// The arguments that name the whole suite.
    pub tests: Vec<String>,
}

/// What one run of the whole suite left.
pub struct SuiteRun {
    pub results: Suite,
    /// Excluded (tests, whole modules).
    pub deselected: (usize, usize),
    pub status: ExitStatus,
    /// The libmlx files the run mapped.
    pub loaded: Vec<String>,
}

impl Site {
    /// pytest in the environment, offline, with the plugin that streams
    /// results to `results`. The `pytest` executable: `python -m pytest`
    /// would put the working folder on sys.path and could test a source
    /// tree's copy of the package instead of the installed one.
    pub fn pytest(&self, results: &Path) -> Command {
        let mut cmd = Command::new(self.python.with_file_name("pytest"));
        cmd.args(["-q", "-p", "no:cacheprovider", "-p", "exact_deselect"]);
        if let Some(root) = &self.rootdir {
            cmd.arg("--rootdir").arg(root);
        }
        cmd.args(&self.args)
            .current_dir(&self.cwd)
            .var(mlx_patched::other_vars::TMPDIR, &self.kernels)
            .var(
                mlx_patched::other_vars::PYTHONPATH,
                workspace_root().join("tests/python"),
            )
            .var(mlx_patched::other_vars::MLX_FORK_RESULTS, results)
            .var(mlx_patched::other_vars::MLX_FORK_CLIENT, self.client)
            .var(mlx_patched::other_vars::HF_HUB_OFFLINE, "1")
            .var(mlx_patched::other_vars::TRANSFORMERS_OFFLINE, "1")
            .var(mlx_patched::other_vars::HF_HOME, self.dir.join("hf-home"));
        cmd
    }

    /// The whole suite, with the exclusions of `excluded` (relative to the
    /// workspace). A run that dies names the test it was running; one that
    /// reports nothing, loads no libmlx or imports the package from outside
    /// the environment is an error.
    pub fn run_suite(&self, name: &str, excluded: &str) -> Result<SuiteRun> {
        std::fs::create_dir_all(&self.dir)?;
        let results = self.dir.join(format!("{name}-suite.jsonl"));
        let log = self.dir.join(format!("{name}-suite.log"));
        let _ = std::fs::remove_file(&results);
        let out = self
            .pytest(&results)
            .var(
                mlx_patched::other_vars::MLX_FORK_EXCLUDED,
                workspace_root().join(excluded),
            )
            .args(&self.tests)
            .output()
            .context("cannot run pytest")?;
        std::fs::write(
            &log,
            [out.stdout.as_slice(), b"\n", out.stderr.as_slice()].concat(),
        )?;
        let text = std::fs::read_to_string(&results).unwrap_or_default();
        let mut suite = Suite::new();
        let mut running = None;
        let mut deselected = (0, 0);
        let mut loaded = Vec::new();
        let mut imported = String::new();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{}: {line}", results.display()))?;
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            match s("event").as_str() {
                "start" => running = Some(s("id")),
                "result" => {
                    running = None;
                    suite.insert(s("id"), (s("outcome"), s("detail")));
                }
                "deselected" => {
                    deselected = (
                        v["count"].as_u64().unwrap_or(0) as usize,
                        v["modules"].as_u64().unwrap_or(0) as usize,
                    )
                }
                "loaded" => {
                    loaded = v["libmlx"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|p| p.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    imported = s("client");
                }
                _ => {}
            }
        }
        if let Some(id) = running {
            return Err(anyhow!(
                "{name}'s suite on {} died ({}) while running {id}; see {}",
                self.label,
                out.status,
                log.display()
            ));
        }
        if suite.is_empty() {
            return Err(anyhow!(
                "{name}'s suite on {} reported nothing ({}); see {}",
                self.label,
                out.status,
                log.display()
            ));
        }
        let venv = self.venv()?;
        if !Path::new(&imported).starts_with(&venv) {
            return Err(anyhow!(
                "{name}'s suite on {} imported {} from {imported}, not from {}",
                self.label,
                self.client,
                venv.display()
            ));
        }
        Ok(SuiteRun {
            results: suite,
            deselected,
            status: out.status,
            loaded,
        })
    }

    /// Runs `id` alone `times` times: in how many it failed. A run that
    /// ends without the test's own result, or with another result than
    /// passed or failed (skipped, not collected, a usage error, no results
    /// file), cannot be compared: it is an error, not a failure.
    pub fn failures_alone(&self, name: &str, id: &str, times: u32) -> Result<u32> {
        let results = self.dir.join(format!("{name}-rerun.jsonl"));
        let mut failed = 0;
        for run in 1..=times {
            let _ = std::fs::remove_file(&results);
            let node = match &self.rootdir {
                Some(root) => root.join(id).display().to_string(),
                None => id.to_string(),
            };
            let out = self
                .pytest(&results)
                .arg(node)
                .output()
                .context("cannot run pytest")?;
            match outcome_of(&std::fs::read_to_string(&results).unwrap_or_default(), id)
                .as_deref()
            {
                Some("passed") => {}
                Some("failed") => failed += 1,
                other => {
                    return Err(anyhow!(
                        "{id} alone on {} (run {run}) gave no result to compare ({other:?}, pytest {}): {}",
                        self.label,
                        out.status,
                        String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("")
                    ))
                }
            }
        }
        Ok(failed)
    }

    /// The environment's root, resolved.
    pub fn venv(&self) -> Result<PathBuf> {
        let venv = self
            .python
            .parent()
            .and_then(Path::parent)
            .context("an interpreter outside a virtual environment")?;
        Ok(venv.canonicalize()?)
    }
}

/// The outcome the results stream gives test `id`.
pub fn outcome_of(stream: &str, id: &str) -> Option<String> {
    stream.lines().find_map(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()
            .filter(|v| v["event"] == "result" && v["id"] == id)
            .and_then(|v| v["outcome"].as_str().map(String::from))
    })
}

/// The one libmlx a run loaded must lie in the environment `venv` and have
/// the sha256 `want` (that of the library wheel the environment installed).
pub fn check_loaded(label: &str, venv: &Path, loaded: &[String], want: &str) -> Result<()> {
    let [path] = loaded else {
        return Err(anyhow!(
            "expected one libmlx loaded from {}, saw {loaded:?}",
            venv.display()
        ));
    };
    let path = Path::new(path);
    let same = std::fs::read(path)
        .ok()
        .map(|b| crate::python_env::sha256_hex(&b))
        .as_deref()
        == Some(want);
    if !path.starts_with(venv) || !same {
        return Err(anyhow!(
            "{label}: loaded {} (in the environment: {}, the bytes of the installed library wheel's libmlx: {same})",
            path.display(),
            path.starts_with(venv),
        ));
    }
    Ok(())
}

/// `f` of each item, each on a thread of its own, in the items' order.
pub fn side_by_side<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = items.iter().map(|item| s.spawn(|| f(item))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a thread panicked")))
            })
            .collect()
    })
}

/// The tests to run again alone: those worse on the fix than on the control.
pub fn candidates(control: &Suite, fix: &Suite) -> Vec<String> {
    regressions(&words(control), &words(fix))
        .iter()
        .map(|r| r.test().to_string())
        .collect()
}

/// A suite's outcomes as the shared rules read them.
pub fn words(s: &Suite) -> BTreeMap<String, mlx_expectations::outcomes::Outcome> {
    by_word(s.iter().map(|(n, (o, _))| (n, o.as_str())))
}

/// Whether a test that came out worse on the fix in the suite is a
/// regression, from its failures alone over the same number of runs on
/// each: it is unless it fails alone on the control as well (flaky on
/// both). A test that fails in the suite on the fix and never alone on
/// either depends on what ran before it, and only on the fix: that counts
/// too.
pub fn regression(failed_alone_on_fix: u32, failed_alone_on_control: u32) -> bool {
    failed_alone_on_control == 0 || failed_alone_on_fix > RERUNS / 2 + failed_alone_on_control
}

/// Why pytest's exit does not agree with the results it streamed, if it
/// does not: 0 with no failure, or 1 (tests failed) with failures named.
/// Anything else (interrupted, an internal error, a usage error, no tests,
/// a signal after the last test) is a failure no result shows.
pub fn pytest_exit_problem(status: ExitStatus, failed: usize) -> Option<String> {
    match status.code() {
        Some(0) if failed == 0 => None,
        Some(1) if failed > 0 => None,
        _ => Some(format!(
            "pytest ended with {status} with {failed} failed tests in its results"
        )),
    }
}

/// The failed or errored tests of a suite.
pub fn failed(s: &Suite) -> usize {
    s.values()
        .filter(|(o, _)| o == "failed" || o == "error")
        .count()
}

/// Every exclusion of the file `excluded` names a node under `prefix`
/// exactly and gives a reason; the node ids, in order.
pub fn read_exclusions(excluded: &str, prefix: &str) -> Result<Vec<String>> {
    let path = workspace_root().join(excluded);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let mut nodes = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let (node, reason) = line.split_once('#').unwrap_or((line, ""));
        if !node.trim().starts_with(prefix) || reason.trim().is_empty() {
            return Err(anyhow!(
                "{excluded}: `{line}` must name a node under {prefix} and give a reason after `#`"
            ));
        }
        nodes.push(node.trim().to_string());
    }
    if nodes.is_empty() {
        return Err(anyhow!("{excluded} excludes nothing"));
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn pytest_s_exit_must_agree_with_its_results() {
        let code = |c: i32| ExitStatus::from_raw(c << 8);
        assert_eq!(pytest_exit_problem(code(0), 0), None);
        assert_eq!(pytest_exit_problem(code(1), 2), None);
        // Failures reported but exit 0; exit 1 with none; a usage error;
        // a signal after the last test.
        assert!(pytest_exit_problem(code(0), 1).is_some());
        assert!(pytest_exit_problem(code(1), 0).is_some());
        assert!(pytest_exit_problem(code(4), 0).is_some());
        assert!(pytest_exit_problem(ExitStatus::from_raw(6), 0).is_some());
    }

    #[test]
    fn a_test_flaky_alike_on_both_is_no_regression() {
        assert!(regression(3, 0));
        assert!(regression(0, 0));
        assert!(!regression(6, 4));
        assert!(!regression(2, 5));
        assert!(regression(RERUNS, 1));
    }

    #[test]
    fn a_result_is_read_for_its_exact_id() {
        let stream = "{\"event\": \"start\", \"id\": \"t::a\"}\n\
                      {\"event\": \"result\", \"id\": \"t::ab\", \"outcome\": \"failed\"}\n\
                      {\"event\": \"result\", \"id\": \"t::a\", \"outcome\": \"passed\"}\n";
        assert_eq!(outcome_of(stream, "t::a").as_deref(), Some("passed"));
        assert_eq!(outcome_of(stream, "t::b"), None);
    }
}
