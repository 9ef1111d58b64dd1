//! The fork under mlx-lm, the package most MLX users run for inference,
//! serving and fine-tuning: code nobody here wrote.
//!
//! * `cargo xtask mlx-lm-check` (in `cargo xtask test`): in a virtual
//!   environment per variant (the fork's wheel, then mlx-lm and its
//!   dependencies pinned by hash), mlx-lm's own offline test suite from its
//!   sdist on both variants, the model-server cells of
//!   `mlx_expectations::SERVER_CELLS` (`tests/python/model_server.py`), and the
//!   numerics of mlx-lm's logits.
//! * `cargo xtask leak-curve`: the report's scale (about 210 MiB of
//!   weights, 20 cycles) on both variants, drawn as `docs/leak-curve.svg`
//!   from the figures it measured, which it writes beside it.

use mlx_harness::peer_suite::{self, side_by_side, Site, RERUNS};
use mlx_harness::python_env::{python_root, sha256_hex, venv_with};
mod judge;
use mlx_harness::check::{outcome, Check};

use judge::{Aborted, Evidence, Logits, ServerRuns, SuiteRun, UserPath, EXCLUDED};
use mlx_expectations::record::{parse_records, Record};
use mlx_expectations::report::Row;
use mlx_expectations::{ServerLeak, SERVER_CELLS};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use mlx_harness::process::Ran;
use mlx_harness::tally::Tally;
use mlx_patched::CommandVars;
use mlx_patched::{Expectations, Variant};
use std::path::{Path, PathBuf};
use std::process::Command;

/// mlx-lm and everything its offline tests import, pinned by hash.
const REQUIREMENTS: &str = "mlx-patched/python/requirements-mlx-lm.txt";
const SCRIPT: &str = "tests/python/model_server.py";

/// The mlx-lm requirement of [`REQUIREMENTS`]: its line and the hash lines
/// that continue it.
fn mlx_lm_requirement() -> Result<(String, String)> {
    let path = workspace_root().join(REQUIREMENTS);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let mut block = String::new();
    let mut version = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("mlx-lm==") {
            version = Some(v.trim_end_matches(['\\', ' ']).to_string());
            block.push_str(line);
            block.push('\n');
        } else if !block.is_empty() && line.trim_start().starts_with("--hash") {
            block.push_str(line);
            block.push('\n');
        } else if !block.is_empty() {
            break;
        }
    }
    match version {
        Some(v) if block.contains("--hash=sha256:") => Ok((v, block)),
        _ => Err(anyhow!("{REQUIREMENTS} pins no mlx-lm with hashes")),
    }
}

/// The variant's mlx-lm environment: its two wheels, then the pinned
/// requirements. Fails unless the `mlx` and `mlx-cpu` installed are the
/// variant's own: a requirement that brought upstream's `mlx-cpu` would
/// replace the fork's `mlx/lib/libmlx.so`.
pub fn environment(variant: Variant) -> Result<PathBuf> {
    let wheels = mlx_harness::python_env::build_wheel(variant)?;
    let python = venv_with(
        &python_root()?.join(variant.name).join("mlx-lm-venv"),
        &[REQUIREMENTS],
        &wheels.files(),
    )?;
    let installed = crate::pip_installs::installed(&python)?;
    for name in ["mlx", "mlx-cpu"] {
        if installed.get(name) != Some(&wheels.version) {
            return Err(anyhow!(
                "{}: {name} is {:?}, not the {} build's {}",
                python.display(),
                installed.get(name),
                variant.name,
                wheels.version
            ));
        }
    }
    Ok(python)
}

/// mlx-lm's sdist (its tests are only there), checked against the pinned
/// hash by pip and unpacked once; its root.
fn sdist() -> Result<PathBuf> {
    let (version, requirement) = mlx_lm_requirement()?;
    let dir = python_root()?.join("mlx-lm-sdist");
    let root = dir.join(format!("mlx_lm-{version}"));
    let stamp = dir.join("unpacked.sha256");
    let key = sha256_hex(requirement.as_bytes());
    if root.join("tests").is_dir() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == key) {
        return Ok(root);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let req = dir.join("requirement.txt");
    std::fs::write(&req, &requirement)?;
    let python = python_root()?.join("build-venv/bin/python");
    let base = if python.is_file() {
        python
    } else {
        PathBuf::from(mlx_patched::Env::process().python())
    };
    mlx_harness::process::run(
        Command::new(base)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--require-hashes",
                "-d",
            ])
            .arg(&dir)
            .arg("-r")
            .arg(&req),
    )
    .with_context(|| format!("cannot download mlx-lm {version}'s sdist"))?;
    let archive = dir.join(format!("mlx_lm-{version}.tar.gz"));
    mlx_harness::process::run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&dir),
    )?;
    if !root.join("tests").is_dir() {
        return Err(anyhow!("{} has no tests/", archive.display()));
    }
    std::fs::write(&stamp, key)?;
    Ok(root)
}

pub fn compile_works() -> Result<()> {
    Ok(mlx_patched::system::cpu_compile_works()?)
}

/// The libmlx a run loaded must be the one the variant's library wheel
/// installed in that environment, byte for byte (the variant's build, as
/// auditwheel's repair left it).
pub fn check_loaded(variant: Variant, python: &Path, loaded: &[String]) -> Result<()> {
    let venv = python
        .parent()
        .and_then(Path::parent)
        .context("no venv")?
        .canonicalize()?;
    let wheels = mlx_harness::python_env::build_wheel(variant)?;
    let want = crate::pip_installs::libmlx_in_wheel(
        mlx_patched::Env::process().python().as_ref(),
        &wheels.library,
    )?;
    peer_suite::check_loaded(variant.name, &venv, loaded, &want)
}

/// Where the variant's environment runs mlx-lm's suite: from the sdist's
/// root, on its `tests`.
fn site(variant: Variant, python: &Path, root: &Path) -> Result<Site> {
    Ok(Site {
        label: variant.name.to_string(),
        python: python.to_path_buf(),
        dir: python_root()?.join(variant.name),
        kernels: mlx_harness::python_env::kernel_tmp(variant)?,
        client: "mlx_lm",
        cwd: root.to_path_buf(),
        rootdir: None,
        args: Vec::new(),
        tests: vec!["tests".into()],
    })
}

/// mlx-lm's suite on one environment, with the exclusions of [`EXCLUDED`],
/// having loaded the variant's own libmlx.
fn run_suite(variant: Variant, python: &Path, root: &Path) -> Result<peer_suite::SuiteRun> {
    let run = site(variant, python, root)?.run_suite("mlx-lm", EXCLUDED)?;
    check_loaded(variant, python, &run.loaded)?;
    Ok(run)
}

/// The records of one model-server process, after its libmlx is checked.
pub fn server_run(variant: Variant, python: &Path, args: &[&str]) -> Result<Vec<Record>> {
    let script = workspace_root().join(SCRIPT);
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .var(
            mlx_patched::other_vars::TMPDIR,
            mlx_harness::python_env::kernel_tmp(variant)?,
        )
        .output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "{} {args:?} on {} failed ({}):\n{}",
            script.display(),
            variant.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let records = parse_records(&String::from_utf8_lossy(&out.stdout));
    let loaded: Vec<String> = records
        .iter()
        .filter(|r| r.kind == "libmlx")
        .filter_map(|r| r.value("libmlx").map(String::from))
        .collect();
    check_loaded(variant, python, &loaded)?;
    Ok(records)
}

pub fn cycles_of(records: &[Record], key: &str) -> Vec<i64> {
    records
        .iter()
        .filter(|r| r.kind == "cycle")
        .filter_map(|r| r.number(key))
        .collect()
}

fn digests_of(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.kind == "cycle")
        .filter_map(|r| r.value("digest").map(String::from))
        .collect()
}

pub fn mib(bytes: i64) -> String {
    format!("{:.2} MiB", bytes as f64 / 1048576.0)
}

/// What the README tells a user to run after installing the fork's wheels.
pub fn user_install_args(version: &str) -> Vec<String> {
    vec!["install".into(), format!("mlx-lm=={version}")]
}

/// The install a user makes, tried as written: a clean environment, the
/// fork's two wheels alone, then `pip install mlx-lm==<version>` from the
/// index. The fork's `mlx` and `mlx-cpu` must stay installed and its libmlx
/// the one loaded. Then `mlx-lm[cpu]` as a dry run: its `mlx[cpu]` is the
/// fork's own `cpu` extra, the fork's `mlx-cpu`, so it must add no MLX.
fn user_path() -> Result<UserPath> {
    let (version, _) = mlx_lm_requirement()?;
    let wheels = mlx_harness::python_env::build_wheel(Variant::PATCHED)?;
    let venv = python_root()?.join("mlx-lm-user-venv");
    let _ = std::fs::remove_dir_all(&venv);
    let python = venv_with(&venv, &[], &[])?;
    let pip = |args: &[String]| -> Result<()> {
        mlx_harness::process::run(
            Command::new(&python)
                .args(["-m", "pip", "--quiet", "--disable-pip-version-check"])
                .args(args),
        )
    };
    let mut install = vec!["install".to_string(), "--no-index".into()];
    install.extend(wheels.files().iter().map(|w| w.display().to_string()));
    pip(&install)?;
    let args = user_install_args(&version);
    println!("mlx-lm as a user installs it: pip {}", args.join(" "));
    pip(&args)?;
    let probe = "import mlx.core, mlx_lm, importlib.metadata as m\n\
                 from loaded_libmlx import loaded_libmlx\n\
                 print(' '.join(sorted(d.metadata['Name'].lower() for d in m.distributions())))\n\
                 print(*loaded_libmlx())";
    let imported = Ran::from(
        &Command::new(&python)
            .args(["-c", probe])
            .var(
                mlx_patched::other_vars::PYTHONPATH,
                workspace_root().join("tests/python"),
            )
            .output()
            .with_context(|| format!("cannot run {}", python.display()))?,
    );
    let loaded: Vec<String> = imported
        .stdout
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect();
    let libmlx = check_loaded(Variant::PATCHED, &python, &loaded);
    let installed = crate::pip_installs::installed(&python)?;
    // What `mlx-lm[cpu]` would install over the fork.
    let report = venv.join("cpu-extra-report.json");
    pip(&[
        "install".into(),
        "--dry-run".into(),
        "--report".into(),
        report.display().to_string(),
        format!("mlx-lm[cpu]=={version}"),
    ])?;
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&report).with_context(|| format!("{}", report.display()))?,
    )
    .with_context(|| format!("{}", report.display()))?;
    let cpu_extra_adds = json["install"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(|n| n.to_lowercase()))
        .collect();
    Ok(UserPath {
        version,
        args,
        imported,
        installed,
        fork_version: wheels.version.clone(),
        libmlx,
        cpu_extra_adds,
    })
}

/// `cargo xtask mlx-lm-check`: collects the evidence, then judges it
/// ([`judge::judge`]) and renders its rows ([`judge::render`]).
/// mlx-lm over the fork: its suite, its model server's cells and a user's
/// install, on both variants.
pub struct MlxLm;

impl Check for MlxLm {
    type Evidence = Evidence;
    fn collect(&self, expectations: &Expectations) -> Result<Evidence> {
        compile_works()?;
        collect(expectations)
    }
    fn judge(&self, e: &Evidence, expectations: &Expectations) -> Tally {
        judge::judge(e, expectations)
    }
    fn render(&self, e: &Evidence) -> Vec<Row> {
        judge::render(e)
    }
    fn notes(&self, e: &Evidence) -> Vec<String> {
        judge::failing_on_both_lines(e)
            .into_iter()
            .map(|l| format!("fails on both: {l}"))
            .collect()
    }
}

/// The check as the suite and `cargo xtask mlx-lm-check` run it.
pub fn check(rows: &mut Vec<Row>) -> Result<Tally> {
    outcome(&MlxLm, rows)
}

fn collect(expectations: &Expectations) -> Result<Evidence> {
    let variants = [Variant::PRISTINE, Variant::PATCHED];
    // The wheels one at a time (they share the build environment), then the
    // two environments side by side.
    for v in variants {
        mlx_harness::python_env::build_wheel(v)?;
    }
    eprintln!("mlx-lm: the pristine and patched environments, side by side (the fork's wheel, then {REQUIREMENTS})");
    let mut envs = Vec::new();
    for (v, env) in variants
        .into_iter()
        .zip(side_by_side(&variants, |v| environment(*v)))
    {
        envs.push((v, env?));
    }

    // 1. mlx-lm's own suite, offline, on both, side by side.
    let root = sdist()?;
    eprintln!("running mlx-lm's test suite on pristine and patched side by side (offline)");
    let runs = side_by_side(&envs, |(v, python)| run_suite(*v, python, &root));
    let mut suites = Vec::new();
    for ((v, _), run) in envs.iter().zip(runs) {
        let run = run?;
        let suite = SuiteRun {
            variant: *v,
            results: run.results,
            deselected: run.deselected,
            status: run.status,
        };
        println!("{}", judge::suite_line(&suite));
        suites.push(suite);
    }
    // A test that passed on pristine and not on patched, or fails only on
    // patched, runs again alone on both variants, the same number of times.
    let mut reruns = Vec::new();
    for id in peer_suite::candidates(&suites[0].results, &suites[1].results) {
        let on_patched =
            site(Variant::PATCHED, &envs[1].1, &root)?.failures_alone("mlx-lm", &id, RERUNS)?;
        let on_pristine =
            site(Variant::PRISTINE, &envs[0].1, &root)?.failures_alone("mlx-lm", &id, RERUNS)?;
        println!("mlx-lm's {id}: alone, failed {on_patched} of {RERUNS} runs on patched and {on_pristine} of {RERUNS} on pristine");
        reruns.push((id, on_patched, on_pristine));
    }
    // The exit check must see a crash after the last test: one passing
    // test again on patched, the interpreter aborting as it unloads a
    // preloaded library.
    let test = suites[1]
        .results
        .iter()
        .find(|(_, (o, _))| o == "passed")
        .map(|(id, _)| id.clone())
        .context("no mlx-lm test passed on patched")?;
    let lib =
        mlx_patched::probes::abort_at_exit_library(&python_root()?.join(Variant::PATCHED.name))?;
    let results = python_root()?
        .join(Variant::PATCHED.name)
        .join("mlx-lm-aborted.jsonl");
    let _ = std::fs::remove_file(&results);
    let out = site(Variant::PATCHED, &envs[1].1, &root)?
        .pytest(&results)
        .arg(&test)
        .env(mlx_patched::probes::PRELOAD, &lib)
        .output()
        .context("cannot run pytest")?;
    let passed_alone = std::fs::read_to_string(&results)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| v["event"] == "result" && v["id"] == test.as_str() && v["outcome"] == "passed");
    let aborted = Aborted {
        test,
        passed_alone,
        status: out.status,
    };

    // 2. The model-server cells. Each variant's first process runs apart
    // from the others of its variant: it JIT-builds the cell's kernels,
    // which the control writes in place, so two processes building the same
    // one can load it half-written (finding 008; the fork's 0009 fixes that,
    // the control keeps it). The variants build in caches of their own
    // (`kernel_tmp`), so their first processes run side by side, then all
    // the others two at a time.
    let mut server = Vec::new();
    for cell in SERVER_CELLS {
        let cycles = cell.cycles.to_string();
        let args = [
            "--arch",
            cell.arch,
            "--cell",
            cell.workload,
            "--cycles",
            &cycles,
        ];
        let firsts = side_by_side(&envs, |(v, python)| server_run(*v, python, &args));
        let rest: Vec<&(Variant, PathBuf)> = envs
            .iter()
            .flat_map(|env| (1..cell.processes()).map(move |_| env))
            .collect();
        let mut rest_runs: Vec<(Variant, Result<Vec<Record>>)> = Vec::new();
        for pair in rest.chunks(2) {
            let done = side_by_side(pair, |(v, python)| server_run(*v, python, &args));
            rest_runs.extend(pair.iter().map(|(v, _)| *v).zip(done));
        }
        let mut on = Vec::new();
        for ((v, _), first) in envs.iter().zip(firsts) {
            let first = first?;
            let weights = first
                .iter()
                .find(|r| r.kind == "weights")
                .and_then(|r| r.number("weights"))
                .unwrap_or(0);
            let digests = digests_of(&first);
            let mut runs = vec![cycles_of(&first, "retained_bytes")];
            for (_, records) in rest_runs.iter_mut().filter(|(rv, _)| rv == v) {
                let records = std::mem::replace(records, Ok(Vec::new()))?;
                runs.push(cycles_of(&records, "retained_bytes"));
            }
            println!(
                "{} on {} ({} of weights, expected {}): {runs:?}",
                cell.name(),
                v.name,
                mib(weights),
                describe(cell.expect(expectations.verdict(v)))
            );
            on.push(ServerRuns {
                variant: *v,
                weights,
                runs,
                digests,
            });
        }
        server.push((*cell, on));
    }

    // 3. The install path the README gives.
    let user = user_path()?;

    // 4. Numerics: eager and compiled logits, the same bits on both variants.
    let mut numerics = Vec::new();
    for arch in ["phi3", "llama"] {
        let done = side_by_side(&envs, |(v, python)| {
            server_run(*v, python, &["--arch", arch, "--numerics"])
        });
        for ((v, _), records) in envs.iter().zip(done) {
            let records = records?;
            let r = records
                .iter()
                .find(|r| r.kind == "numerics")
                .with_context(|| format!("no numerics record from {}", v.name))?;
            let field = |k: &str| r.value(k).unwrap_or("").to_string();
            numerics.push(Logits {
                arch,
                variant: *v,
                max_abs_diff: r.value("max_abs_diff").unwrap_or("?").to_string(),
                eager: field("eager"),
                compiled: field("compiled"),
            });
        }
    }
    Ok(Evidence {
        suites,
        reruns,
        aborted,
        server,
        user,
        numerics,
    })
}

fn describe(e: ServerLeak) -> String {
    match e {
        ServerLeak::Never => "0 bytes in every cycle".into(),
        ServerLeak::AtMost { bytes } => format!("at most {bytes} bytes in every cycle"),
        ServerLeak::EveryCycle { min_percent } => {
            format!("at least {min_percent}% of the weights every cycle")
        }
        ServerLeak::Intermittent { processes, leaking } => {
            format!("a leak in at least {leaking} of {processes} processes")
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pinned_mlx_lm_is_read_with_its_hashes() {
        let (version, block) = super::mlx_lm_requirement().unwrap();
        assert!(
            version.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{version}"
        );
        assert!(block.starts_with("mlx-lm=="), "{block}");
        assert!(block.matches("--hash=sha256:").count() >= 2, "{block}");
        assert!(!block.contains("# via"), "{block}");
    }

    /// Every exclusion names a node exactly and gives a reason.
    #[test]
    fn every_excluded_test_has_a_reason() {
        let nodes = mlx_harness::peer_suite::read_exclusions(super::EXCLUDED, "tests/").unwrap();
        assert!(!nodes.is_empty());
    }
}
