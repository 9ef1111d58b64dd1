//! A sanitizer run's recorded evidence: `docs/sanitize/<sanitizer>.json`
//! for the default base (`docs/sanitize/v<release>/` for another), the
//! results as data (the expectations checked, the scenarios run per
//! variant), with the markdown report beside it rendered from the same run.
//! Both carry the fingerprint of every input that changes the result, taken
//! before the run starts; `cargo xtask test` checks both records against
//! the inputs of the tree it tests.

use super::judge::Check;
use super::scenarios::{options, suppressions, table, RUST_TESTS};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use mlx_patched::pin::{Base, BASES};
use mlx_patched::{probes, Expectations, Fingerprint, Options, Sanitizer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bumped whenever the runner changes what it runs, how it runs it, or how
/// it judges what it saw (not for comments or renames): a record made by
/// another runner is stale. Everything the runner runs is hashed besides.
pub const RUNNER_VERSION: u32 = 6;

/// The runner's sources that decide what it runs and how it judges, and
/// their sha256 when [`RUNNER_VERSION`] last moved (each path, a NUL, its
/// bytes, a NUL). A test fails when they change and this does not: someone
/// must decide whether the change is one [`RUNNER_VERSION`] counts (then
/// bump it and re-record both runs) before setting the new hash.
#[cfg(test)]
const RUNNER_SOURCES: &[&str] = &[
    "crates/workflows/src/sanitize/judge.rs",
    "crates/workflows/src/sanitize/logs.rs",
    "crates/workflows/src/sanitize/scenarios.rs",
    "crates/workflows/src/sanitize/mod.rs",
];
#[cfg(test)]
const RUNNER_SOURCES_SHA256: &str =
    "d3df1e46f3e9571ebabdfa4bd0a95160e7d24348241b9485d86732c8f161f5b3";

/// Where `--record` keeps a sanitizer's report (`md`) and its data (`json`)
/// on `base`: the default base's in `docs/sanitize/`, another's in a
/// folder of its own there.
pub fn recorded_path(sanitizer: Sanitizer, base: &Base, ext: &str) -> PathBuf {
    let dir = workspace_root().join("docs/sanitize");
    let dir = if base.is_default() {
        dir
    } else {
        dir.join(base.dir_name())
    };
    dir.join(format!("{}.{ext}", sanitizer.name()))
}

/// What each variant must show on the base `opts` builds: the run's own
/// (`MLX_FORK_UPSTREAM_FIXED` included) when that is the base the run was
/// started on, else that base's as pinned.
pub fn expectations_for(opts: &Options) -> Expectations {
    let here = mlx_harness::config::expectations();
    if here.base() == opts.base {
        here
    } else {
        Expectations::on_base(opts.base)
    }
}

/// The Rust files whose code runs under the sanitizer: the Rust API, its
/// C++ bridge and build script, the probe library, the suite's support
/// library and the test files of [`RUST_TESTS`].
fn rust_inputs() -> Result<Vec<PathBuf>> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in [
        "crates/mlx-bridge/src",
        "crates/mlx-bridge/cpp",
        "crates/probes/src",
        "src",
    ] {
        files.extend(files_under(&root.join(dir))?);
    }
    files.push(root.join("crates/mlx-bridge/build.rs"));
    for (package, test) in RUST_TESTS {
        files.push(if *package == "mlx-fork" {
            root.join(format!("tests/{test}.rs"))
        } else {
            root.join(format!("crates/{package}/tests/{test}.rs"))
        });
    }
    Ok(files)
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(files_under(&p)?);
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

/// The fixed-layout probe's files in `crates/probes/cpp/`.
const FIXED_LAYOUT_STEM: &str = "fixed_layout";

/// The source files a run compiles and runs besides MLX: the probes, and
/// under AddressSanitizer the Rust side too.
fn hashed_files(sanitizer: Sanitizer) -> Result<Vec<PathBuf>> {
    // The fixed-layout probe and its allocator (finding 013) replace the
    // allocation functions, so no sanitizer run builds or runs them, and no
    // other probe includes them: they change no recorded run.
    let mut files: Vec<PathBuf> = probes::source_files()?
        .into_iter()
        .filter(|f| {
            !f.file_stem()
                .is_some_and(|s| s.to_string_lossy().starts_with(FIXED_LAYOUT_STEM))
        })
        .collect();
    if sanitizer == Sanitizer::Address {
        files.extend(rust_inputs()?);
    }
    Ok(files)
}

/// Everything a sanitizer run's result depends on, hashed: per variant to
/// build, its entry in the variant table, its verdict and its build's
/// inputs (upstream's tree, every patch applied, the rejected fix and the
/// fork-only census included, the CMake arguments with the sanitizer flags
/// and -O1, the compilers and their versions, CMake, the system packages);
/// the flags programs are compiled with; the scenario table; the
/// sanitizers' options and suppressions; the probes' sources; the Rust code
/// that runs under the sanitizer and the rustc that builds it; the runner's
/// version.
pub fn fingerprint(sanitizer: Sanitizer, opts: &Options) -> Result<String> {
    let mut opts = opts.clone();
    opts.sanitizer = Some(sanitizer);
    let upstream = mlx_patched::upstream(&opts)?;
    let expectations = expectations_for(&opts);
    let mut f = Fingerprint::new(&format!("sanitizer run {RUNNER_VERSION}"));
    f.text("sanitizer", sanitizer.name());
    for v in expectations.variants() {
        f.text("variant", format!("{v:?}"))
            .text("verdict", format!("{:?}", expectations.verdict(&v)));
        f.text("build", mlx_patched::build_inputs(v, &upstream, &opts)?);
    }
    f.text("program flags", sanitizer.compile_flags().join(" "));
    f.text("scenarios", format!("{:?}", table(sanitizer)));
    f.text("options", format!("{:?}", options(sanitizer)))
        .text("suppressions", suppressions(sanitizer).unwrap_or(""));
    for p in hashed_files(sanitizer)? {
        f.file(&p)?;
    }
    if sanitizer == Sanitizer::Address {
        let rustc = std::process::Command::new("rustc")
            .arg("-V")
            .output()
            .context("cannot run rustc")?;
        f.text("rustc", String::from_utf8_lossy(&rustc.stdout).trim());
    }
    Ok(f.finish())
}

/// What a run records: the fingerprint of its inputs, the expectations
/// checked, and how many scenarios ran on each variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub fingerprint: String,
    pub sanitizer: String,
    pub checks: Vec<Check>,
    pub scenarios: BTreeMap<String, usize>,
}

impl Recorded {
    pub fn to_json(&self) -> String {
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| json!({"id": c.id, "ok": c.ok, "what": c.what}))
            .collect();
        let doc = json!({"fingerprint": self.fingerprint, "runner_version": RUNNER_VERSION, "sanitizer": self.sanitizer, "checks": checks, "scenarios": self.scenarios});
        serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
    }

    pub fn from_json(text: &str) -> Result<Recorded> {
        let v: Value = serde_json::from_str(text).context("not the JSON a run records")?;
        let s = |k: &str| {
            v[k].as_str()
                .map(String::from)
                .with_context(|| format!("it has no `{k}`"))
        };
        let checks = v["checks"]
            .as_array()
            .context("it has no `checks`")?
            .iter()
            .map(|c| {
                Ok(Check {
                    id: c["id"]
                        .as_str()
                        .context("a check without `id`")?
                        .to_string(),
                    ok: c["ok"].as_bool().context("a check without `ok`")?,
                    what: c["what"]
                        .as_str()
                        .context("a check without `what`")?
                        .to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let scenarios = v["scenarios"]
            .as_object()
            .context("it has no `scenarios`")?
            .iter()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0) as usize))
            .collect();
        Ok(Recorded {
            fingerprint: s("fingerprint")?,
            sanitizer: s("sanitizer")?,
            checks,
            scenarios,
        })
    }
}

/// The first line of a recorded markdown report.
pub fn stamp(fingerprint: &str) -> String {
    format!("<!-- measured-for {fingerprint} -->")
}

/// Writes both records of a finished run on `base`.
pub fn write(sanitizer: Sanitizer, base: &Base, recorded: &Recorded, markdown: &str) -> Result<()> {
    let (json_path, md_path) = (
        recorded_path(sanitizer, base, "json"),
        recorded_path(sanitizer, base, "md"),
    );
    std::fs::create_dir_all(json_path.parent().unwrap())?;
    std::fs::write(
        &md_path,
        format!("{}\n{markdown}", stamp(&recorded.fingerprint)),
    )?;
    std::fs::write(&json_path, recorded.to_json())?;
    println!(
        "recorded: {} and {}",
        json_path.display(),
        md_path.display()
    );
    Ok(())
}

/// CI's check of the recorded runs (the `sanitizer_records` slow check): the
/// sanitizer runs are too long for CI, so each base's recorded runs must
/// exist, belong to this tree, series and probes, and have every
/// expectation held. A rebase's trial tree or series has no record: not
/// checked (said).
pub fn check_records() -> Result<mlx_harness::tally::Tally> {
    let here = mlx_harness::config::options()?;
    let upstream = mlx_patched::upstream(&here)?;
    let mut t = mlx_harness::tally::Tally::new();
    if !matches!(upstream.origin, mlx_patched::Origin::Pinned(b) if b.is_default())
        || here.patches_dir != mlx_patched::patch::series_dir()
    {
        println!("recorded sanitizer runs: not checked (they are checked from the default base, with its series)");
        return Ok(t);
    }
    for base in BASES {
        let opts = mlx_harness::config::options_on(&here, base)?;
        for sanitizer in [Sanitizer::Address, Sanitizer::Thread] {
            let result = check_recorded(sanitizer, &opts);
            if let Ok(summary) = &result {
                println!(
                    "recorded {} run on MLX {}: current, {summary}",
                    sanitizer.name(),
                    base.version
                );
            }
            t.check(result.is_ok(), || {
                format!(
                    "recorded {} run on MLX {}: {}",
                    sanitizer.name(),
                    base.version,
                    result.unwrap_err()
                )
            });
        }
    }
    Ok(t)
}

pub fn check_recorded(sanitizer: Sanitizer, opts: &Options) -> Result<String> {
    let base = if opts.base.is_default() {
        String::new()
    } else {
        format!(" --base {}", opts.base.version)
    };
    let rerun = format!(
        "rerun `cargo xtask{base} sanitize {} --record` (about 30 minutes on 2 cores when its variants are not built yet)",
        sanitizer.name()
    );
    let (json_path, md_path) = (
        recorded_path(sanitizer, opts.base, "json"),
        recorded_path(sanitizer, opts.base, "md"),
    );
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|_| {
            anyhow!(
                "there is no recorded {} run ({}): {rerun}",
                sanitizer.name(),
                p.display()
            )
        })
    };
    let (json, md) = (read(&json_path)?, read(&md_path)?);
    let expectations = expectations_for(opts);
    let variants: Vec<(&str, mlx_patched::Expect)> = expectations
        .variants()
        .iter()
        .map(|v| (v.name, expectations.verdict(v)))
        .collect();
    let ids = super::judge::expected_ids(sanitizer, &variants);
    verify(&json, &md, &fingerprint(sanitizer, opts)?, &ids)
        .map_err(|e| anyhow!("{}: {e:#}; {rerun}", json_path.display()))
}

/// A recorded run against the fingerprint it must have and the
/// expectations it must hold (by id, in order); its summary.
fn verify(json: &str, markdown: &str, expected: &str, ids: &[String]) -> Result<String> {
    let r = Recorded::from_json(json)?;
    if r.fingerprint != expected {
        return Err(anyhow!(
            "it was recorded for inputs {}, but this tree's inputs give {expected}",
            r.fingerprint
        ));
    }
    if markdown.lines().next() != Some(stamp(expected).as_str()) {
        return Err(anyhow!(
            "its markdown report was not rendered from the same run"
        ));
    }
    if r.checks.is_empty() {
        return Err(anyhow!("it lists no expectations"));
    }
    let held: Vec<&String> = r.checks.iter().map(|c| &c.id).collect();
    if held != ids.iter().collect::<Vec<_>>() {
        return Err(anyhow!(
            "it holds the expectations {held:?}, where this tree's variants need {ids:?}"
        ));
    }
    if let Some(failed) = r.checks.iter().find(|c| !c.ok) {
        return Err(anyhow!("an expectation did not hold: {}", failed.what));
    }
    if r.scenarios.is_empty() || r.scenarios.values().any(|&n| n == 0) {
        return Err(anyhow!("a variant ran no scenario: {:?}", r.scenarios));
    }
    let runs: Vec<String> = r
        .scenarios
        .iter()
        .map(|(v, n)| format!("{v} {n}"))
        .collect();
    Ok(format!(
        "{} expectations held; scenarios run: {}",
        r.checks.len(),
        runs.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(fp: &str) -> Recorded {
        Recorded {
            fingerprint: fp.into(),
            sanitizer: "address".into(),
            checks: vec![
                Check {
                    id: "patched: clean exits".into(),
                    ok: true,
                    what: "patched: clean".into(),
                },
                Check {
                    id: "pristine: census sees the orphaned group".into(),
                    ok: true,
                    what: "pristine: leaks".into(),
                },
            ],
            scenarios: [
                (mlx_patched::Variant::PATCHED.name.to_string(), 25),
                (mlx_patched::Variant::PRISTINE.name.to_string(), 25),
            ]
            .into(),
        }
    }

    #[test]
    fn the_fingerprint_covers_the_code_that_runs_under_the_sanitizer() {
        let files = hashed_files(Sanitizer::Address).unwrap();
        let root = workspace_root();
        for f in [
            "crates/probes/cpp/leak_scenario.cpp",
            "crates/probes/cpp/probe_output.h",
            "crates/mlx-bridge/cpp/array.cc",
            "crates/mlx-bridge/cpp/bridge.h",
            "crates/mlx-bridge/src/array.rs",
            "crates/mlx-bridge/tests/api.rs",
            "tests/rust_api_leak.rs",
            "tests/semantics.rs",
        ] {
            assert!(
                files.contains(&root.join(f)),
                "{f} is not hashed: {files:?}"
            );
        }
        // The runner's own source is not: its logic is RUNNER_VERSION.
        assert!(!files.iter().any(|f| f.to_string_lossy().contains("xtask")));
    }

    #[test]
    fn the_runner_version_moves_with_the_runner() {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for f in RUNNER_SOURCES {
            h.update(f.as_bytes());
            h.update([0]);
            h.update(std::fs::read(mlx_harness::paths::workspace_root().join(f)).unwrap());
            h.update([0]);
        }
        let now: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            now, RUNNER_SOURCES_SHA256,
            "the sanitizer runner changed ({RUNNER_SOURCES:?}): if what it runs or how it judges changed, bump RUNNER_VERSION (now {RUNNER_VERSION}) and re-record both runs; then set RUNNER_SOURCES_SHA256 to {now}"
        );
    }

    /// The compilers are inputs: with another `CXX`, a record is stale.
    /// (Needs upstream's tree, which `cargo xtask test` has recovered.)
    #[test]
    fn another_compiler_is_another_fingerprint() {
        let opts = mlx_harness::config::options().unwrap();
        let before = fingerprint(Sanitizer::Thread, &opts).unwrap();
        let dir = std::env::temp_dir().join(format!("xtask-cxx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wrapper = dir.join("c++");
        std::fs::write(&wrapper, "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'another c++ 1.0'; exit 0; }\nexec c++ \"$@\"\n").unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        // This test binary reads CXX nowhere else.
        std::env::set_var(mlx_patched::vars::CXX.name, &wrapper);
        let after = fingerprint(Sanitizer::Thread, &opts);
        std::env::remove_var(mlx_patched::vars::CXX.name);
        assert_ne!(before, after.unwrap());
    }

    #[test]
    fn a_record_must_be_for_these_inputs_rendered_from_one_run_and_all_ok() {
        let good = recorded("abc");
        let md = format!("{}\n# report\n", stamp("abc"));
        let ids: Vec<String> = good.checks.iter().map(|c| c.id.clone()).collect();
        assert_eq!(Recorded::from_json(&good.to_json()).unwrap(), good);
        assert!(verify(&good.to_json(), &md, "abc", &ids)
            .unwrap()
            .starts_with("2 expectations held"));
        // Recorded for other inputs: stale.
        assert!(verify(&good.to_json(), &md, "abd", &ids)
            .unwrap_err()
            .to_string()
            .contains("recorded for inputs abc"));
        assert!(
            verify(&good.to_json(), &format!("{}\n", stamp("old")), "abc", &ids)
                .unwrap_err()
                .to_string()
                .contains("same run")
        );
        let mut failed = good.clone();
        failed.checks[1].ok = false;
        assert!(verify(&failed.to_json(), &md, "abc", &ids)
            .unwrap_err()
            .to_string()
            .contains("pristine: leaks"));
        let mut empty = good.clone();
        empty.checks.clear();
        assert!(verify(&empty.to_json(), &md, "abc", &ids)
            .unwrap_err()
            .to_string()
            .contains("no expectations"));
        let mut idle = good.clone();
        idle.scenarios
            .insert(mlx_patched::Variant::SUGGESTED.name.into(), 0);
        assert!(verify(&idle.to_json(), &md, "abc", &ids)
            .unwrap_err()
            .to_string()
            .contains("ran no scenario"));
        assert!(verify("not json", &md, "abc", &ids).is_err());
        // A record that holds other expectations than this tree's variants
        // need (a check gone, or a variant added since): stale.
        let mut fewer = good.clone();
        fewer.checks.pop();
        assert!(verify(&fewer.to_json(), &md, "abc", &ids)
            .unwrap_err()
            .to_string()
            .contains("holds the expectations"));
        let more: Vec<String> = ids
            .iter()
            .cloned()
            .chain(["suggested: ran every scenario".into()])
            .collect();
        assert!(verify(&good.to_json(), &md, "abc", &more)
            .unwrap_err()
            .to_string()
            .contains("where this tree's variants need"));
    }
}
