//! The fork under mlx-audio, the most used MLX audio package, which pins
//! `mlx==0.32.4` exactly (docs/mlx-audio.md; `cargo xtask mlx-audio-check`,
//! a slow check).
//!
//! On every base: what `pip install mlx-audio==<pinned>` would install over
//! the fork's wheels. On a base other than mlx-audio's, pip would replace
//! the fork's `mlx` with upstream's, which is the claim there. On the base
//! mlx-audio pins (a recorded run, docs/bases.md):
//! * the user's install carried out: the fork's wheels stay, `pip check`
//!   passes, the fork's libmlx is the one loaded;
//! * an environment per wheel set (the fork's, the official ones), each
//!   with the wheels first and then `requirements-mlx-audio.txt`;
//! * MossFormer2_SE, the report's model, in a server's load/compile/run/
//!   drop loop at its real size (`tests/python/speech_server.py`): 0 bytes
//!   retained per cycle, and bits that each libmlx reproduces on the other
//!   wheel's BLAS;
//! * mlx-audio's own tests, shipped in its wheel, offline, on both, with
//!   the exclusions of `tests/python/mlx_audio_excluded.txt`.

mod judge;
use mlx_harness::check::{outcome, Check};
use mlx_patched::Expectations;

use mlx_harness::peer_suite::{self, side_by_side, Site, RERUNS};
use mlx_harness::python_env::{python_root, venv_over, venv_with};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::Ran;
use mlx_harness::paths::workspace_root;
use mlx_harness::tally::Tally;
use judge::{
    Evidence, Installed, Served, SpeechRuns, SuiteOutcome, EXCLUDED, MLX_PIN, SPEECH_CELL,
};
use mlx_expectations::record::{parse_records, Record};
use mlx_expectations::report::Row;
use mlx_patched::{CommandVars, Variant};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// mlx-audio with every extra its tests import, and the test tools, pinned
/// by hash.
const REQUIREMENTS: &str = "mlx-patched/python/requirements-mlx-audio.txt";
const SCRIPT: &str = "tests/python/speech_server.py";
/// What mlx-audio imports beyond Python packages: PortAudio (its package
/// `__init__` imports sounddevice, which loads PortAudio at import) and
/// ffmpeg (its server encodes responses with it).
const SYSTEM_PACKAGES: &[&str] = &["libportaudio2", "ffmpeg"];
/// Server processes and cycles per library set: (processes, cycles).
const FORK_RUNS: (u32, u32) = (3, 3);
const OFFICIAL_RUNS: (u32, u32) = (2, 3);
const SWAPPED_RUNS: (u32, u32) = (1, 1);
/// A test that hangs is stopped by pytest-timeout's thread method, which
/// ends the run naming it: far above the slowest test seen (under a minute).
const TEST_TIMEOUT_SECONDS: &str = "900";

/// The pinned mlx-audio version, from [`REQUIREMENTS`].
fn mlx_audio_version() -> Result<String> {
    let path = workspace_root().join(REQUIREMENTS);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("mlx-audio=="))
        .map(|v| v.trim_end_matches(['\\', ' ']).to_string())
        .with_context(|| format!("{REQUIREMENTS} pins no mlx-audio"))
}

/// Runs `python` on `code` with the runners on the path; its stdout.
fn probe(python: &Path, code: &str) -> Result<String> {
    let out = Command::new(python)
        .args(["-c", code])
        .var(
            mlx_patched::other_vars::PYTHONPATH,
            workspace_root().join("tests/python"),
        )
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        return Err(anyhow!(
            "{}: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn pip(python: &Path, args: &[String]) -> Result<()> {
    mlx_harness::process::run(
        Command::new(python)
            .args(["-m", "pip", "--quiet", "--disable-pip-version-check"])
            .args(args),
    )
}

/// An environment after its install: versions, mlx-audio's own mlx
/// requirement, `pip check`, and whether the libmlx it loads is the one
/// `library` (a library wheel) holds.
fn installed(label: &str, python: &Path, want: &str, library: &Path) -> Result<Installed> {
    let out = probe(
        python,
        "import importlib.metadata as m, mlx.core, mlx_audio\n\
         from loaded_libmlx import loaded_libmlx\n\
         print(*[r for r in m.requires('mlx-audio') if r.replace(' ', '').startswith('mlx==')])\n\
         print(*loaded_libmlx())",
    )?;
    let mut lines = out.lines();
    let mlx_requirement = lines.next().unwrap_or("").replace(' ', "");
    let loaded: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect();
    let venv = python
        .parent()
        .and_then(Path::parent)
        .context("no venv")?
        .canonicalize()?;
    let sha = crate::pip_installs::libmlx_in_wheel(
        mlx_patched::Env::process().python().as_ref(),
        library,
    )?;
    let libmlx = peer_suite::check_loaded(label, &venv, &loaded, &sha);
    let pip_check = Ran::from(
        &Command::new(python)
            .args(["-m", "pip", "check", "--disable-pip-version-check"])
            .output()?,
    );
    Ok(Installed {
        label: label.to_string(),
        want: want.to_string(),
        installed: crate::pip_installs::installed(python)?,
        mlx_requirement,
        pip_check,
        libmlx,
    })
}

/// What pip would install for `mlx-audio==<version>` over the fork's
/// wheels, then (on mlx-audio's base) the install carried out, as a user
/// runs it: a clean environment, the fork's two wheels, then the package
/// from the index.
fn user_path(
    wheels: &mlx_harness::wheel::Wheels,
    serve: bool,
) -> Result<(BTreeMap<String, String>, Option<Installed>)> {
    let version = mlx_audio_version()?;
    let venv = python_root()?.join("mlx-audio-user-venv");
    let _ = std::fs::remove_dir_all(&venv);
    let python = venv_with(&venv, &[], &[])?;
    let mut args = vec!["install".to_string(), "--no-index".into()];
    args.extend(wheels.files().iter().map(|w| w.display().to_string()));
    pip(&python, &args)?;
    let report = venv.join("dry-run.json");
    let requirement = format!("mlx-audio=={version}");
    pip(
        &python,
        &[
            "install".into(),
            "--dry-run".into(),
            "--report".into(),
            report.display().to_string(),
            requirement.clone(),
        ],
    )
    .with_context(|| format!("pip install --dry-run {requirement}"))?;
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&report).with_context(|| format!("{}", report.display()))?,
    )
    .with_context(|| format!("{}", report.display()))?;
    let would_install = json["install"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            let m = &i["metadata"];
            Some((
                m["name"].as_str()?.to_lowercase().replace('_', "-"),
                m["version"].as_str()?.to_string(),
            ))
        })
        .collect();
    if !serve {
        return Ok((would_install, None));
    }
    println!("mlx-audio as a user installs it over the fork: pip install {requirement}");
    pip(&python, &["install".into(), requirement])?;
    let user = installed("user", &python, &wheels.version, &wheels.library)?;
    Ok((would_install, Some(user)))
}

/// One wheel set's environment for the suite and the server.
struct WheelSet {
    label: &'static str,
    dir: PathBuf,
    version: String,
    files: Vec<PathBuf>,
    library: PathBuf,
}

impl WheelSet {
    fn python(&self) -> Result<PathBuf> {
        venv_over(
            &self.dir.join("mlx-audio-venv"),
            &self.files,
            &[REQUIREMENTS],
        )
    }

    fn kernels(&self) -> Result<PathBuf> {
        let dir = self.dir.join("mlx-tmp");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// The folder of the interpreter's packages, from the libmlx it loads
/// (`<site-packages>/mlx/lib/libmlx.so`).
fn site_packages(loaded: &str) -> Result<PathBuf> {
    Path::new(loaded)
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .with_context(|| format!("{loaded} is not <site-packages>/mlx/lib/libmlx"))
}

/// The libraries in `<site-packages>/mlx_cpu.libs/` whose names start with
/// one of `prefixes`, joined for the loader's preload variable.
fn vendored(site: &Path, prefixes: &[&str]) -> Result<String> {
    let dir = site.join("mlx_cpu.libs");
    let mut found = Vec::new();
    for p in prefixes {
        let hit = std::fs::read_dir(&dir)
            .with_context(|| format!("{}", dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|f| {
                f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(p))
            })
            .with_context(|| format!("no {p}* in {}", dir.display()))?;
        found.push(hit.display().to_string());
    }
    Ok(found.join(":"))
}

/// `processes` runs of the server loop of `cycles` cycles each, one at a
/// time (each uses both cores), with `preload` given to the loader. The
/// libmlx each loads must lie in the environment.
fn speech(
    label: &str,
    set: &WheelSet,
    python: &Path,
    (processes, cycles): (u32, u32),
    preload: Option<&str>,
) -> Result<(SpeechRuns, String)> {
    let venv = python
        .parent()
        .and_then(Path::parent)
        .context("no venv")?
        .canonicalize()?;
    let mut runs = Vec::new();
    let mut digests = Vec::new();
    let mut weights = 0;
    let mut loaded_at = String::new();
    for _ in 0..processes {
        let mut cmd = Command::new(python);
        cmd.arg(workspace_root().join(SCRIPT))
            .args(["--cycles", &cycles.to_string()])
            .current_dir(&set.dir)
            .var(mlx_patched::other_vars::TMPDIR, set.kernels()?)
            .var(
                mlx_patched::other_vars::PYTHONPATH,
                workspace_root().join("tests/python"),
            );
        if let Some(p) = preload {
            cmd.env(mlx_patched::probes::PRELOAD, p);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(anyhow!(
                "{SCRIPT} on {label} failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let records: Vec<Record> = parse_records(&String::from_utf8_lossy(&out.stdout));
        let loaded: Vec<&str> = records
            .iter()
            .filter(|r| r.kind == "libmlx")
            .filter_map(|r| r.value("libmlx"))
            .collect();
        match loaded.as_slice() {
            [one] if Path::new(one).starts_with(&venv) => loaded_at = one.to_string(),
            other => {
                return Err(anyhow!(
                    "{SCRIPT} on {label} loaded {other:?}, not one libmlx in {}",
                    venv.display()
                ))
            }
        }
        weights = records
            .iter()
            .find(|r| r.kind == "weights")
            .and_then(|r| r.number("weights"))
            .unwrap_or(0);
        let cycles: Vec<&Record> = records.iter().filter(|r| r.kind == "cycle").collect();
        runs.push(
            cycles
                .iter()
                .filter_map(|r| r.number("retained_bytes"))
                .collect(),
        );
        digests.extend(
            cycles
                .iter()
                .filter_map(|r| r.value("digest").map(String::from)),
        );
    }
    println!(
        "{SPEECH_CELL} on {label} ({:.1} MiB of weights): retained {runs:?}, digest {}",
        weights as f64 / 1048576.0,
        digests.first().map_or("none", String::as_str)
    );
    Ok((
        SpeechRuns {
            label: label.to_string(),
            weights,
            runs,
            digests,
        },
        loaded_at,
    ))
}

fn suite_site(set: &WheelSet, python: &Path, site: &Path) -> Result<Site> {
    let scratch = set.dir.join("mlx-audio-cwd");
    std::fs::create_dir_all(&scratch)?;
    Ok(Site {
        label: set.label.to_string(),
        python: python.to_path_buf(),
        dir: set.dir.clone(),
        kernels: set.kernels()?,
        client: "mlx_audio",
        cwd: scratch,
        rootdir: Some(site.to_path_buf()),
        args: vec![
            "--timeout".into(),
            TEST_TIMEOUT_SECONDS.into(),
            "--timeout-method".into(),
            "thread".into(),
        ],
        tests: vec![site.join("mlx_audio").display().to_string()],
    })
}

/// `cargo xtask mlx-audio-check`: collects the evidence, then judges it
/// ([`judge::judge`]) and renders its rows ([`judge::render`]).
/// mlx-audio over the fork: its install on every base; on 0.32.4 its suite
/// and MossFormer2_SE's server loop.
pub struct MlxAudio;

impl Check for MlxAudio {
    type Evidence = Evidence;
    fn collect(&self, _: &Expectations) -> Result<Evidence> {
        collect()
    }
    fn judge(&self, e: &Evidence, _: &Expectations) -> Tally {
        judge::judge(e)
    }
    fn render(&self, e: &Evidence) -> Vec<Row> {
        judge::render(e)
    }
    fn notes(&self, e: &Evidence) -> Vec<String> {
        e.served.iter().flat_map(judge::failing_on_both_lines).map(|l| format!("fails on both: {l}")).collect()
    }
}

/// The check as the suite and `cargo xtask mlx-audio-check` run it.
pub fn check(rows: &mut Vec<Row>) -> Result<Tally> {
    outcome(&MlxAudio, rows)
}

fn collect() -> Result<Evidence> {
    let base = mlx_patched::Env::process().base()?;
    let serve = base.version == MLX_PIN;
    let wheels = mlx_harness::python_env::build_wheel(Variant::PATCHED)?;
    let (would_install, user) = user_path(&wheels, serve)?;
    let mut evidence = Evidence {
        base: base.version.to_string(),
        fork_version: wheels.version.clone(),
        would_install,
        served: None,
    };
    let Some(user) = user else {
        println!(
            "mlx-audio pins mlx=={MLX_PIN}; on the {} base, pip would install {:?} over the fork",
            base.version, evidence.would_install
        );
        return Ok(evidence);
    };
    mlx_patched::system::cpu_compile_works()?;
    mlx_harness::deps::install_debian(SYSTEM_PACKAGES)?;
    let official = match crate::provenance::official_wheels(base)? {
        Ok(files) => files,
        Err(why) => return Err(anyhow!("the official {MLX_PIN} wheels: {why}")),
    };
    let root = python_root()?;
    let sets = [
        WheelSet {
            label: judge::OFFICIAL,
            dir: root.join("official"),
            version: base.version.to_string(),
            library: official[1].clone(),
            files: official,
        },
        WheelSet {
            label: judge::FORK,
            dir: root.join(Variant::PATCHED.name),
            version: wheels.version.clone(),
            library: wheels.library.clone(),
            files: wheels.files(),
        },
    ];
    eprintln!("mlx-audio: the official and the fork's environments, side by side (the wheels, then {REQUIREMENTS})");
    let mut pythons = Vec::new();
    for made in side_by_side(&sets, |s| s.python()) {
        pythons.push(made?);
    }
    let mut envs = Vec::new();
    for (set, python) in sets.iter().zip(&pythons) {
        envs.push(installed(set.label, python, &set.version, &set.library)?);
    }

    // The server loop on each wheel set, then each libmlx on the other's
    // BLAS and LAPACK (preloaded from the other wheel's vendored copies).
    let (official_runs, official_lib) =
        speech(judge::OFFICIAL, &sets[0], &pythons[0], OFFICIAL_RUNS, None)?;
    let (fork_runs, fork_lib) = speech(judge::FORK, &sets[1], &pythons[1], FORK_RUNS, None)?;
    let official_site = site_packages(&official_lib)?;
    let fork_site = site_packages(&fork_lib)?;
    let reference_blas = vendored(&official_site, &["libblas", "liblapack"])?;
    let openblas = vendored(&fork_site, &["libopenblas"])?;
    let (swapped_fork, _) = speech(
        judge::FORK_ON_OFFICIAL_BLAS,
        &sets[1],
        &pythons[1],
        SWAPPED_RUNS,
        Some(&reference_blas),
    )?;
    let (swapped_official, _) = speech(
        judge::OFFICIAL_ON_FORK_BLAS,
        &sets[0],
        &pythons[0],
        SWAPPED_RUNS,
        Some(&openblas),
    )?;

    // mlx-audio's own suite, on both side by side.
    let sites = [
        suite_site(&sets[0], &pythons[0], &official_site)?,
        suite_site(&sets[1], &pythons[1], &fork_site)?,
    ];
    eprintln!(
        "running mlx-audio's test suite on the official wheel and the fork side by side (offline)"
    );
    let mut suites = Vec::new();
    for (site, run) in sites
        .iter()
        .zip(side_by_side(&sites, |s| s.run_suite("mlx-audio", EXCLUDED)))
    {
        let run = run?;
        let outcome = SuiteOutcome {
            results: run.results,
            deselected: run.deselected,
            status: run.status,
        };
        println!("{}", judge::suite_line(&site.label, &outcome));
        suites.push((site.label.clone(), outcome));
    }
    let mut reruns = Vec::new();
    for id in peer_suite::candidates(&suites[0].1.results, &suites[1].1.results) {
        let on_fork = sites[1].failures_alone("mlx-audio", &id, RERUNS)?;
        let on_official = sites[0].failures_alone("mlx-audio", &id, RERUNS)?;
        println!("mlx-audio's {id}: alone, failed {on_fork} of {RERUNS} runs on the fork and {on_official} of {RERUNS} on the official wheel");
        reruns.push((id, on_fork, on_official));
    }
    evidence.served = Some(Served {
        user,
        envs,
        speech: vec![fork_runs, official_runs, swapped_fork, swapped_official],
        suites,
        reruns,
    });
    Ok(evidence)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pinned_mlx_audio_is_read() {
        let v = super::mlx_audio_version().unwrap();
        assert!(v.chars().next().is_some_and(|c| c.is_ascii_digit()), "{v}");
    }

    /// Every exclusion names a node of the installed package exactly and
    /// gives a reason.
    #[test]
    fn every_excluded_test_has_a_reason() {
        let nodes = mlx_harness::peer_suite::read_exclusions(super::EXCLUDED, "mlx_audio/").unwrap();
        assert!(!nodes.is_empty());
    }
}
