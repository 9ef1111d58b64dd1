//! mlx-rs on this fork's MLX, through the drop-in `crates/mlx-sys`.
//!
//! * `cargo xtask mlx-rs`: the lines a user of mlx-rs adds, for this checkout.
//! * `cargo xtask mlx-rs-check`: the proof and mlx-rs's own tests, on the
//!   patched variant and on the pristine control:
//!   - `tests/mlx-rs`, the report's scenario written against mlx-rs 0.33's
//!     public API: 0 bytes per cycle on patched, the whole weight set on
//!     pristine, the same bits on both (and as the C++ probe), the
//!     split-versus-slices and not-evaluated cells, and the shims;
//!   - mlx-rs 0.33.0's own unit and integration tests, from the published
//!     package: nothing that passes on pristine may fail on patched.

mod dependent;
mod judge;
pub mod project;
use mlx_harness::check::{outcome, Check};
use mlx_patched::Expectations;

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::{Ran, cargo};
use mlx_harness::tally::Tally;
use mlx_harness::paths::{target_dir, workspace_root};
use judge::{count, Evidence, Proof, Run, SuiteOutcome, CELLS};
use project::{fetch_once, prefix_of, sys_env, without_network};
use mlx_expectations::record::parse_records;
use mlx_expectations::report::Row;
use mlx_patched::CommandVars;
use mlx_patched::{vars, Artifacts, Env, Variant};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn print_setup() -> Result<()> {
    // The drop-in needs an mlx-c for the base: refused here as in its build.
    mlx_patched::mlxc_source(&Env::process(), mlx_harness::config::options()?.base)?;
    let patched = prefix_of(Variant::PATCHED)?;
    let sys = workspace_root().join("crates/mlx-sys");
    let lib = patched.lib_dir().display();
    println!(
        "\
To build mlx-rs 0.33 against this checkout's patched MLX, add to your project's Cargo.toml:

    [patch.crates-io]
    mlx-sys = {{ path = \"{sys}\" }}

and depend on mlx-rs as usual:

    mlx-rs = {{ version = \"0.33\", default-features = false }}   # Linux: the CPU backend
    mlx-rs = \"0.33\"                                              # macOS: Metal + Accelerate (the defaults)

mlx-sys then builds the patched MLX into <your target>/mlx/patched on the first build and
links it statically: your binaries need no rpath and no LD_LIBRARY_PATH. To reuse the build
of this checkout instead of building MLX again, set in your project's .cargo/config.toml:

    [env]
    MLX_PATCHED_BUILD_DIR = \"{build_dir}\"

To link a shared MLX instead (your binaries then need {lib} at run time, by an rpath or
LD_LIBRARY_PATH): MLX_SYS_PREFIX={prefix}.
For the unpatched control: MLX_SYS_PREFIX=$(cargo xtask prefix pristine).",
        sys = sys.display(),
        prefix = patched.prefix().display(),
        build_dir = mlx_harness::config::options()?.root.display(),
    );
    Ok(())
}

fn run_proof(exe: &Path, args: &[&str], env: &[(mlx_patched::Variable, PathBuf)]) -> Result<Run> {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (k, v) in env {
        cmd.var(*k, v);
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(anyhow!(
            "{} {args:?} failed ({}):\n{stdout}{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut run = Run {
        retained: Vec::new(),
        digests: Vec::new(),
    };
    for r in parse_records(&stdout).iter().filter(|r| r.kind == "cycle") {
        run.retained.push(
            r.number("retained_bytes")
                .with_context(|| format!("no retained_bytes in {r:?}"))?,
        );
        run.digests.push(
            r.value("digest")
                .with_context(|| format!("no digest in {r:?}"))?
                .to_string(),
        );
    }
    Ok(run)
}

/// Builds `tests/mlx-rs` for one variant, in a target directory of its own.
fn build_proof(variant: Variant, mlx: &Artifacts) -> Result<PathBuf> {
    let target = target_dir()?.join("mlx-rs").join(variant.name);
    fetch_once(&workspace_root().join("tests/mlx-rs/Cargo.toml"))?;
    // The drop-in's nested `cargo metadata` reads mlx-c's carrier from
    // Cargo's cache: fetched here, so the check also runs on its own.
    fetch_once(&workspace_root().join("mlx-patched/sources/mlx-c/Cargo.toml"))?;
    let mut build = cargo();
    build
        .args([
            "build",
            "--quiet",
            "--manifest-path",
            "tests/mlx-rs/Cargo.toml",
        ])
        .var(mlx_patched::vars::CARGO_TARGET_DIR, &target);
    without_network(&mut build);
    for (k, v) in sys_env(variant, mlx)? {
        build.var(k, v);
    }
    eprintln!(
        "building tests/mlx-rs (mlx-rs 0.33 + the drop-in mlx-sys) against {}",
        variant.name
    );
    mlx_harness::process::run(&mut build)?;
    Ok(target.join("debug/mlx-rs-leak-scenario"))
}

/// Runs the proof program on each variant: every cell, the release race
/// over processes, and the shims.
fn proofs(variants: &[(Variant, Artifacts)]) -> Result<Vec<Proof>> {
    let mut proofs = Vec::new();
    for (variant, mlx) in variants {
        let exe = build_proof(*variant, mlx)?;
        let mut cells = Vec::new();
        for (c, cycles) in CELLS {
            let args: Vec<&str> = ["--cycles", cycles].into_iter().chain(c.flags()).collect();
            let run = run_proof(&exe, &args, &[])?;
            println!(
                "mlx-rs, {}: {}: {:?} bytes retained per cycle",
                variant.name,
                c.name(),
                run.retained
            );
            cells.push((*c, run));
        }
        // The release race in safe Rust, over processes.
        let trials = mlx_expectations::RACE.mlx_rs_trials.to_string();
        let mut race_leaked = Vec::new();
        for _ in 0..mlx_expectations::RACE.processes {
            let out = Command::new(&exe)
                .args(["--race", &trials])
                .output()
                .with_context(|| format!("cannot run {}", exe.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let k = parse_records(&stdout)
                .iter()
                .find(|r| r.kind == "race")
                .and_then(|r| r.number("leaked"));
            match k {
                Some(k) if out.status.success() => race_leaked.push(k),
                _ => {
                    return Err(anyhow!(
                        "mlx-rs {} --race failed ({}):\n{stdout}{}",
                        variant.name,
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ))
                }
            }
        }
        println!(
            "mlx-rs, {}: split dropped on two threads at once: leaked in {race_leaked:?} of {trials} trials per process",
            variant.name
        );
        let shims = Ran::from(
            &Command::new(&exe)
                .arg("--shims")
                .output()
                .with_context(|| format!("cannot run {}", exe.display()))?,
        );
        for l in shims.stdout.lines() {
            println!("mlx-rs, {}: {l}", variant.name);
        }
        proofs.push(Proof {
            variant: *variant,
            cells,
            race_leaked,
            shims,
        });
    }
    Ok(proofs)
}

/// Outcome of each test of mlx-rs's suite (`ok`, `FAILED`, `ignored`), by
/// name (module paths in the library's tests; the integration test's own).
fn suite_results(stdout: &str) -> BTreeMap<String, String> {
    let mut results = BTreeMap::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        let Some((name, outcome)) = rest.rsplit_once(" ... ") else {
            continue;
        };
        let outcome = outcome.split_whitespace().next().unwrap_or("").to_string();
        results.insert(name.to_string(), outcome);
    }
    results
}

fn run_suite(variant: Variant, mlx: &Artifacts) -> Result<SuiteOutcome> {
    run_suite_with(variant, mlx, None, &[])
}

/// `cargo test` of mlx-rs 0.33.0's own tests against `variant`, in a copy
/// of the published package, with a library preloaded into each test
/// binary when `preload` names one.
fn suite_command(variant: Variant, mlx: &Artifacts, preload: Option<&Path>) -> Result<Command> {
    let src = target_dir()?.join("mlx-rs/suite-src");
    // A fresh copy of the published package: cargo writes its lock file and
    // nothing may be written into the registry's copy. The copy names the
    // package it was taken from, and is taken again when that changes.
    let package = mlx_patched::published_package(
        &Env::process().cargo(),
        &workspace_root().join("tests/mlx-rs/Cargo.toml"),
        "mlx-rs",
        "0.33.0",
        false,
    )?;
    let origin = src.join(".copied-from");
    let from = package.display().to_string();
    if std::fs::read_to_string(&origin).ok().as_deref() != Some(from.as_str()) {
        let _ = std::fs::remove_dir_all(&src);
        mlx_patched::copy_tree(&package, &src)?;
        // A workspace of its own: the copy may sit inside this one (target/).
        let manifest = src.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)?;
        std::fs::write(&manifest, text + "\n[workspace]\n")?;
        std::fs::write(&origin, &from)?;
    }
    let sys = workspace_root().join("crates/mlx-sys");
    let mut test = cargo();
    test.args(["test", "--manifest-path"])
        .arg(src.join("Cargo.toml"))
        .args([
            "--no-default-features",
            "--features",
            "safetensors",
            "--lib",
            "--tests",
            "--no-fail-fast",
        ])
        .arg("--config")
        .arg(format!(
            "patch.crates-io.mlx-sys.path={:?}",
            sys.display().to_string()
        ))
        .var(
            mlx_patched::vars::CARGO_TARGET_DIR,
            target_dir()?
                .join("mlx-rs")
                .join(format!("suite-{}", variant.name)),
        )
        // The test binaries have no rpath of their own.
        .var(mlx_patched::other_vars::LIBRARY_PATH, mlx.lib_dir());
    for (k, v) in sys_env(variant, mlx)? {
        test.var(k, v);
    }
    if let Some(lib) = preload {
        test.arg("--config").arg(format!(
            "target.'cfg(all())'.runner=[\"env\", \"{}={}\"]",
            mlx_patched::probes::PRELOAD,
            lib.display()
        ));
    }
    Ok(test)
}

/// [`run_suite`] with a library preloaded into each test binary (through a
/// cargo runner, so that cargo and rustc run without it) and libtest
/// arguments after `--`.
fn run_suite_with(
    variant: Variant,
    mlx: &Artifacts,
    preload: Option<&Path>,
    filter: &[&str],
) -> Result<SuiteOutcome> {
    let mut test = suite_command(variant, mlx, preload)?;
    let log = match preload {
        Some(_) => format!("suite-{}-preloaded.log", variant.name),
        None => format!("suite-{}.log", variant.name),
    };
    if !filter.is_empty() {
        test.arg("--").args(filter);
    }
    eprintln!(
        "running mlx-rs 0.33.0's own tests against {} (drop-in mlx-sys){}",
        variant.name,
        if preload.is_some() {
            ", with a library preloaded"
        } else {
            ""
        }
    );
    let out = test.output().context("cannot run cargo test for mlx-rs")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::write(
        target_dir()?.join("mlx-rs").join(log),
        format!("{stdout}\n{stderr}"),
    )?;
    let results = suite_results(&stdout);
    if results.is_empty() {
        return Err(anyhow!(
            "mlx-rs's tests did not run on {} ({}):\n{}",
            variant.name,
            out.status,
            stderr
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    // `---- name stdout ----` blocks: the first panic line of each failure.
    let mut reasons = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in stdout.lines() {
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            current = Some(name.to_string());
        } else if let Some(name) = &current {
            if line.contains("panicked at")
                || line.starts_with("assertion")
                || line.starts_with("called `")
            {
                reasons
                    .entry(name.clone())
                    .or_insert_with(String::new)
                    .push_str(line.trim());
                reasons.get_mut(name).unwrap().push(' ');
            }
        }
    }
    Ok(SuiteOutcome {
        exit_problem: cargo_test_exit_problem(&stdout, &stderr, out.status.success()),
        results,
        reasons,
    })
}

/// Why a `cargo test --no-fail-fast` run's exit does not agree with what
/// its test binaries reported, if it does not. Each binary that ran must
/// print its `test result:` line; each that exited unsuccessfully must be
/// one that reported failures, and only those may. A binary that crashed
/// after its last test (a static destructor, the library unloading) reported
/// `ok` and still exited unsuccessfully.
fn cargo_test_exit_problem(stdout: &str, stderr: &str, success: bool) -> Option<String> {
    let ran = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("Running "))
        .count();
    let reported = stdout
        .lines()
        .filter(|l| l.starts_with("test result: "))
        .count();
    let failed = stdout
        .lines()
        .filter(|l| l.starts_with("test result: FAILED"))
        .count();
    let unsuccessful: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("didn't exit successfully"))
        .map(str::trim)
        .collect();
    if ran == 0 || reported != ran {
        Some(format!(
            "{ran} test binaries ran and {reported} reported a result: {unsuccessful:?}"
        ))
    } else if unsuccessful.len() != failed {
        Some(format!(
            "{} test binaries exited unsuccessfully and {failed} reported failures: {unsuccessful:?}",
            unsuccessful.len()
        ))
    } else if success != (failed == 0) {
        Some(format!(
            "cargo test {} with {failed} failing binaries",
            if success { "succeeded" } else { "failed" }
        ))
    } else {
        None
    }
}

/// `cargo xtask mlx-rs-check`: collects the evidence, then judges it
/// ([`judge::judge`]) and renders its rows ([`judge::render`]).
/// mlx-rs 0.33 over the drop-in mlx-sys, on both variants.
pub struct MlxRs;

impl Check for MlxRs {
    type Evidence = Evidence;
    fn collect(&self, _: &Expectations) -> Result<Evidence> {
        collect()
    }
    fn judge(&self, e: &Evidence, expectations: &Expectations) -> Tally {
        judge::judge(e, expectations)
    }
    fn render(&self, e: &Evidence) -> Vec<Row> {
        judge::render(e)
    }
    fn notes(&self, e: &Evidence) -> Vec<String> {
        judge::failing_on_both_lines(e).into_iter().map(|l| format!("fails on both: {l}")).collect()
    }
}

/// The check as the suite and `cargo xtask mlx-rs-check` run it: on a base
/// no mlx-c compiles against, the claim is that the drop-in refuses it.
pub fn check(rows: &mut Vec<Row>) -> Result<Tally> {
    let base = mlx_harness::config::options()?.base;
    if base.mlxc.is_none() {
        return refuses_the_base(base);
    }
    outcome(&MlxRs, rows)
}

/// On a base no mlx-c compiles against, the drop-in must refuse to build,
/// before building anything, and say why: one claim.
fn refuses_the_base(base: &mlx_patched::pin::Base) -> Result<Tally> {
    let mut build = cargo();
    build
        .args(["build", "--quiet", "--manifest-path"])
        .arg(workspace_root().join("crates/mlx-sys/Cargo.toml"))
        .var(vars::MLX_FORK_BASE, base.version);
    let ran = Ran::from(
        &build
            .output()
            .context("cannot run cargo build for mlx-sys")?,
    );
    let mut t = Tally::new();
    let said = format!("no mlx-c release compiles against MLX {}", base.version);
    println!(
        "mlx-sys on MLX {}: the build {} ({})",
        base.version,
        if ran.success { "succeeded" } else { "failed" },
        if ran.stderr.contains(&said) {
            "said why"
        } else {
            "did not say why"
        }
    );
    t.check(!ran.success && ran.stderr.contains(&said), || {
        format!(
            "the drop-in mlx-sys must refuse MLX {} with \"{said}\", but its build {}:\n{}",
            base.version,
            if ran.success {
                "succeeded"
            } else {
                "failed otherwise"
            },
            ran.stderr
        )
    });
    Ok(t)
}

fn collect() -> Result<Evidence> {
    let variants: Vec<(Variant, Artifacts)> = [Variant::PRISTINE, Variant::PATCHED]
        .into_iter()
        .map(|v| prefix_of(v).map(|a| (v, a)))
        .collect::<Result<_>>()?;
    let proofs = proofs(&variants)?;
    // The C++ probe on patched, for the same bits.
    let probe = mlx_harness::cpp_probe::cpp_probe(&variants[1].1, mlx_patched::probes::LEAK_SCENARIO)?;
    let cpp_digests = run_proof(&probe, &["--cycles", "1"], &[])
        .map(|r| r.digests)
        .unwrap_or_default();
    let dependent = dependent::dependent()?;

    // Patched first. Both variants run the same compiled tests, so the
    // control's run only serves to tell a patched failure that is upstream's
    // from one of the fork's: it runs when patched failed a test.
    let patched = run_suite(Variant::PATCHED, &variants[1].1)?;
    let pristine = if count(&patched.results, "FAILED") > 0 {
        Some(run_suite(Variant::PRISTINE, &variants[0].1)?)
    } else {
        None
    };
    for (name, suite) in [
        (Variant::PATCHED.name, Some(&patched)),
        (Variant::PRISTINE.name, pristine.as_ref()),
    ] {
        match suite {
            Some(suite) => println!(
                "mlx-rs 0.33.0's own tests on {name}: {} passed, {} failed, {} ignored",
                count(&suite.results, "ok"),
                count(&suite.results, "FAILED"),
                count(&suite.results, "ignored")
            ),
            None => println!(
                "mlx-rs 0.33.0's own tests on {name}: not run (no test failed on patched, so there is nothing for the control to excuse)"
            ),
        }
    }
    // The judge must see a crash after the last test: one passing test of
    // the suite again, each binary aborting as it unloads a preloaded
    // library.
    let one = patched
        .results
        .iter()
        .find(|(_, o)| *o == "ok")
        .map(|(n, _)| n.clone())
        .context("no mlx-rs test passed on patched")?;
    let lib = mlx_patched::probes::abort_at_exit_library(&target_dir()?.join("mlx-rs"))?;
    let aborted = run_suite_with(
        Variant::PATCHED,
        &variants[1].1,
        Some(&lib),
        &[one.as_str(), "--exact"],
    )?;
    Ok(Evidence {
        proofs,
        cpp_digests,
        dependent,
        patched,
        pristine,
        aborted: (one, aborted),
    })
}

#[cfg(test)]
mod tests;
