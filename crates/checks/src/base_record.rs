//! A base's recorded run: the whole suite on a base other than the default
//! (`cargo xtask test --base 0.32.4 --record`), kept as
//! `docs/bases/v<release>.json` (the result as data) and `.md` (the
//! report). CI runs the default base only; the `base_records` slow check holds
//! each other base's record to the inputs of the tree it tests, as the
//! sanitizer records are held: collect (the inputs now, the record), then a
//! pure judge.

use mlx_expectations::report::Row;
use mlx_harness::check::{outcome, Check};
use mlx_patched::Expectations;
use mlx_harness::paths::workspace_root;
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::tally::Tally;
use mlx_patched::pin::{Base, BASES};
use mlx_patched::{Fingerprint, Options};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Bumped when what a base's run checks changes in a way its inputs below
/// do not show (a check added to the suite, say): every record is stale.
pub const RUN_VERSION: u32 = 2;

/// Where a base's record lives (`ext`: `json` or `md`).
pub fn recorded_path(base: &Base, ext: &str) -> PathBuf {
    workspace_root()
        .join("docs/bases")
        .join(format!("{}.{ext}", base.dir_name()))
}

/// What a base's run depends on, hashed: the run's version, the base's row,
/// the bytes of its series, and per variant its verdict and its build's
/// inputs (upstream's tree, every patch, the CMake arguments, the compilers
/// and their versions, the system packages).
pub fn fingerprint(opts: &Options) -> Result<String> {
    let upstream = mlx_patched::upstream(opts)?;
    let expectations = mlx_patched::Expectations::on_base(opts.base);
    let mut f = Fingerprint::new(&format!("base run {RUN_VERSION}"));
    f.text("base", format!("{:?}", opts.base));
    for p in opts.series()? {
        f.file(&p)?;
    }
    for v in expectations.variants() {
        f.text("variant", format!("{v:?}"))
            .text("verdict", format!("{:?}", expectations.verdict(&v)));
        f.text("build", mlx_patched::build_inputs(v, &upstream, opts)?);
    }
    Ok(f.finish())
}

/// A finished run of the suite on a base, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub base: String,
    pub fingerprint: String,
    pub passed: u32,
    pub failed: Vec<String>,
}

impl Recorded {
    fn to_json(&self) -> Value {
        json!({
            "base": self.base,
            "fingerprint": self.fingerprint,
            "passed": self.passed,
            "failed": self.failed,
        })
    }

    fn from_json(v: &Value) -> Option<Recorded> {
        Some(Recorded {
            base: v["base"].as_str()?.to_string(),
            fingerprint: v["fingerprint"].as_str()?.to_string(),
            passed: v["passed"].as_u64()? as u32,
            failed: v["failed"]
                .as_array()?
                .iter()
                .map(|f| f.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
        })
    }
}

/// Writes a base's record: the data, and the report (`report_md`, the
/// run's table and counts as the suite printed them).
pub fn write(recorded: &Recorded, base: &Base, report_md: &str) -> Result<()> {
    let json_path = recorded_path(base, "json");
    std::fs::create_dir_all(json_path.parent().context("docs/bases")?)?;
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&recorded.to_json())? + "\n",
    )
    .with_context(|| format!("cannot write {}", json_path.display()))?;
    let md = recorded_path(base, "md");
    std::fs::write(&md, report_md).with_context(|| format!("cannot write {}", md.display()))?;
    println!("recorded {} and {}", json_path.display(), md.display());
    Ok(())
}

/// The report of a recorded run: what it is, how to check and redo it,
/// the table and the counts as the suite printed them.
pub fn report_md(recorded: &Recorded, table: &str, summary: &str) -> String {
    let base = &recorded.base;
    [
        format!("# The suite on MLX {base}"),
        String::new(),
        format!("`cargo xtask test --base {base} --record` wrote this page and `v{base}.json` beside it."),
        "CI runs the default base; the `base_records` slow check fails when this record no longer".into(),
        format!(
            "belongs to the tree (inputs `{}`: the base's row, its series, each variant's",
            recorded.fingerprint
        ),
        format!("build inputs and verdict, run version {RUN_VERSION})."),
        String::new(),
        "```".into(),
        table.to_string(),
        String::new(),
        summary.to_string(),
        "```".into(),
        String::new(),
    ]
    .join("\n")
}

/// What the judge needs of one base: its release, the record found (None:
/// missing or unreadable), and the fingerprint of its inputs now.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub base: String,
    pub recorded: Option<Recorded>,
    pub now: String,
}

/// A record holds for this tree when it exists, is this base's, was made
/// for these inputs, and passed with nothing failed. One claim per base.
pub fn judge(evidence: &[Evidence]) -> Tally {
    let mut t = Tally::new();
    for e in evidence {
        let problem = match &e.recorded {
            None => Some(format!(
                "MLX {}: no recorded run (cargo xtask test --base {} --record)",
                e.base, e.base
            )),
            Some(r) if r.base != e.base => Some(format!(
                "MLX {}: the record is of MLX {}",
                e.base, r.base
            )),
            Some(r) if r.fingerprint != e.now => Some(format!(
                "MLX {}: the recorded run is stale: it was made for inputs {}, this tree's are {} (record it again: cargo xtask test --base {} --record)",
                e.base, r.fingerprint, e.now, e.base
            )),
            Some(r) if !r.failed.is_empty() || r.passed == 0 => Some(format!(
                "MLX {}: the recorded run is not green: {} passed, failed: {:?}",
                e.base, r.passed, r.failed
            )),
            Some(_) => None,
        };
        t.claim(problem.is_none(), || problem.clone().unwrap_or_default());
    }
    t
}

/// Collects the evidence for every base but the default.
fn collect() -> Result<Vec<Evidence>> {
    let default = mlx_harness::config::options()?;
    let mut out = Vec::new();
    for base in BASES.iter().filter(|b| !b.is_default()) {
        let opts = mlx_harness::config::options_on(&default, base)?;
        let recorded = std::fs::read_to_string(recorded_path(base, "json"))
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| Recorded::from_json(&v));
        out.push(Evidence {
            base: base.version.to_string(),
            recorded,
            now: fingerprint(&opts)?,
        });
    }
    Ok(out)
}


/// The recorded runs of the bases CI does not run.
pub struct BaseRecords;

impl Check for BaseRecords {
    type Evidence = Vec<Evidence>;

    fn collect(&self, _: &Expectations) -> Result<Vec<Evidence>> {
        collect()
    }

    fn judge(&self, evidence: &Vec<Evidence>, _: &Expectations) -> Tally {
        judge(evidence)
    }

    fn render(&self, evidence: &Vec<Evidence>) -> Vec<Row> {
        evidence
            .iter()
            .map(|e| {
                Row::note(format!(
                    "recorded run on MLX {}: {}",
                    e.base,
                    match &e.recorded {
                        Some(r) => format!(
                            "{} passed, {} failed, inputs {}",
                            r.passed,
                            r.failed.len(),
                            r.fingerprint
                        ),
                        None => "none".to_string(),
                    }
                ))
            })
            .collect()
    }
}

/// The `base_records` slow check: each other base's recorded run belongs to this
/// tree. Run on the default base only (on another, the run is the record).
pub fn check_records(rows: &mut Vec<Row>) -> Result<Tally> {
    let opts = mlx_harness::config::options()?;
    if !opts.base.is_default() || opts.patches_dir != mlx_patched::patch::series_dir() {
        println!(
            "recorded base runs: not checked (they are checked from the default base, with its series)"
        );
        return Ok(Tally::new());
    }
    outcome(&BaseRecords, rows)
}

/// For `cargo xtask test --record`: refuses the default base (CI runs it)
/// and a run with another tree or series than the base's.
pub fn can_record(opts: &Options) -> Result<()> {
    if opts.base.is_default() {
        return Err(anyhow!(
            "--record keeps the run of a base CI does not run; the default base (MLX {}) runs in CI: pass --base",
            opts.base.version
        ));
    }
    if mlx_patched::Env::process().source_dir().is_some()
        || opts.patches_dir != mlx_patched::patch::series_dir()
    {
        return Err(anyhow!(
            "--record records the base as pinned: unset MLX_SOURCE_DIR and MLX_PATCHED_SERIES_DIR"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(base: &str, fp: &str, passed: u32, failed: &[&str]) -> Recorded {
        Recorded {
            base: base.into(),
            fingerprint: fp.into(),
            passed,
            failed: failed.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ev(recorded: Option<Recorded>, now: &str) -> Evidence {
        Evidence {
            base: "0.32.4".into(),
            recorded,
            now: now.into(),
        }
    }

    #[test]
    fn a_current_green_record_holds() {
        let t = judge(&[ev(Some(rec("0.32.4", "f1", 120, &[])), "f1")]);
        assert_eq!((t.passed, t.failures.len()), (1, 0));
    }

    #[test]
    fn a_missing_stale_foreign_or_red_record_fails() {
        for (e, says) in [
            (ev(None, "f1"), "no recorded run"),
            (ev(Some(rec("0.32.4", "f0", 120, &[])), "f1"), "stale"),
            (
                ev(Some(rec("0.32.2", "f1", 120, &[])), "f1"),
                "is of MLX 0.32.2",
            ),
            (
                ev(Some(rec("0.32.4", "f1", 119, &["x"])), "f1"),
                "not green",
            ),
            (ev(Some(rec("0.32.4", "f1", 0, &[])), "f1"), "not green"),
        ] {
            let t = judge(&[e]);
            assert_eq!(t.passed, 0);
            assert!(t.failures[0].contains(says), "{:?}", t.failures);
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = rec("0.32.4", "f1", 3, &["a (exit status: 1)"]);
        assert_eq!(Recorded::from_json(&r.to_json()), Some(r));
    }
}
