//! `cargo xtask provenance`: independent evidence that the pinned tree is
//! the upstream release. The official wheels of that release, fetched with
//! pip (by package name, checksums pinned), carry upstream's headers (the
//! CPU library package: `mlx/include/mlx/**.h`, which are `mlx/**.h` of the
//! tree) and its pure-Python files (the front end: `mlx/**.py`, which are
//! `python/mlx/**.py`). Each is compared byte for byte with the tree.
//! Without a reachable package index the check is skipped, saying so.

use mlx_harness::error::{Result, anyhow, Context};
use mlx_patched::pin::{self, Base};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A wheel of the release: its package name and pinned checksum, if known.
struct Wheel {
    package: &'static str,
    sha256: Option<String>,
}

/// What the comparison found.
pub struct Findings {
    pub version: String,
    /// (file name, sha256) of each wheel compared.
    pub wheels: Vec<(String, String)>,
    pub headers_same: usize,
    pub python_same: usize,
    /// Wheel files whose bytes differ from the tree's, or that the tree lacks.
    pub differing: Vec<String>,
    pub missing: Vec<String>,
}

impl Findings {
    pub fn identical(&self) -> bool {
        self.differing.is_empty() && self.missing.is_empty()
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "official MLX {} wheels: {} headers and {} Python files identical to the tree",
            self.version, self.headers_same, self.python_same
        );
        if !self.differing.is_empty() {
            write!(s, "; differing: {}", self.differing.join(", ")).unwrap();
        }
        if !self.missing.is_empty() {
            write!(s, "; not in the tree: {}", self.missing.join(", ")).unwrap();
        }
        for (name, sha) in &self.wheels {
            write!(s, "\n  {name} sha256 {sha}").unwrap();
        }
        s
    }
}

/// Either the findings, or why the check could not run.
pub enum Outcome {
    Checked(Findings),
    Skipped(String),
}

/// pip's words for "could not reach the index" (as opposed to a missing
/// version or a checksum mismatch, which are errors).
const UNREACHABLE: &[&str] = &[
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
    "No route to host",
];

/// Fetches the wheels of `version` into `dir` (reused when present and
/// matching their pinned checksums) and compares them with `tree`.
/// With the base the tree is pinned as, the wheels must have its checksums.
pub fn check(version: &str, tree: &Path, pinned: Option<&Base>, dir: &Path) -> Result<Outcome> {
    let wheels = [
        Wheel {
            package: "mlx",
            sha256: pinned.map(|b| b.wheel_sha256_frontend.to_string()),
        },
        Wheel {
            package: "mlx-cpu",
            sha256: pinned.map(|b| b.wheel_sha256_cpu.to_string()),
        },
    ];
    let python = mlx_patched::Env::process().python();
    if !Command::new(&python)
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        // Not a skip: without pip nothing can be compared, and every other
        // check of the suite needs pip too.
        return Err(anyhow!(
            "provenance: {} has no pip (Debian: apt-get install python3-pip)",
            python.to_string_lossy()
        ));
    }
    let files = match fetch(&python, version, &wheels, dir)? {
        Ok(files) => files,
        Err(reason) => return Ok(Outcome::Skipped(reason)),
    };
    let mut findings = Findings {
        version: version.to_string(),
        wheels: Vec::new(),
        headers_same: 0,
        python_same: 0,
        differing: Vec::new(),
        missing: Vec::new(),
    };
    for (wheel, file) in wheels.iter().zip(&files) {
        let digest = sha256_of(file)?;
        if let Some(want) = &wheel.sha256 {
            if &digest != want {
                return Err(anyhow!(
                    "{} has sha256 {digest}, the pin says {want}",
                    file.display()
                ));
            }
        }
        let unpacked = file.with_extension("unpacked");
        let _ = std::fs::remove_dir_all(&unpacked);
        let out = Command::new(&python)
            .args(["-m", "zipfile", "-e"])
            .arg(file)
            .arg(&unpacked)
            .output()?;
        if !out.status.success() {
            return Err(anyhow!(
                "cannot unpack {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        compare(&unpacked.join("mlx"), tree, &mut findings)?;
        findings.wheels.push((
            file.file_name().unwrap().to_string_lossy().into_owned(),
            digest,
        ));
    }
    if findings.headers_same + findings.python_same == 0 && findings.identical() {
        return Err(anyhow!(
            "the official wheels hold no header and no Python file to compare"
        ));
    }
    Ok(Outcome::Checked(findings))
}

/// A base's official wheels (`mlx`, then `mlx-cpu`), fetched into the
/// target directory and checked against their pinned checksums; `Err`
/// inside when the index is out of reach.
pub fn official_wheels(base: &Base) -> Result<std::result::Result<Vec<PathBuf>, String>> {
    let wheels = [
        Wheel {
            package: "mlx",
            sha256: Some(base.wheel_sha256_frontend.to_string()),
        },
        Wheel {
            package: "mlx-cpu",
            sha256: Some(base.wheel_sha256_cpu.to_string()),
        },
    ];
    let dir = mlx_harness::paths::target_dir()?
        .join("provenance")
        .join(base.version);
    let python = mlx_patched::Env::process().python();
    let files = match fetch(&python, base.version, &wheels, &dir)? {
        Ok(files) => files,
        Err(why) => return Ok(Err(why)),
    };
    for (w, f) in wheels.iter().zip(&files) {
        let digest = sha256_of(f)?;
        if Some(&digest) != w.sha256.as_ref() {
            return Err(anyhow!(
                "{} has sha256 {digest}, the pin says {:?}",
                f.display(),
                w.sha256
            ));
        }
    }
    Ok(Ok(files))
}

/// `pip download` of the wheels for the pinned platform. The outer `Err` is
/// a failure; the inner one a reason to skip (the index is out of reach).
fn fetch(
    python: &std::ffi::OsStr,
    version: &str,
    wheels: &[Wheel],
    dir: &Path,
) -> Result<std::result::Result<Vec<PathBuf>, String>> {
    let abi = format!("cp{}", pin::WHEEL_PYTHON.replace('.', ""));
    let expected: Vec<String> = wheels
        .iter()
        .map(|w| match w.package {
            "mlx" => format!("mlx-{version}-{abi}-{abi}-{}.whl", pin::WHEEL_PLATFORM),
            p => format!(
                "{}-{version}-py3-none-{}.whl",
                p.replace('-', "_"),
                pin::WHEEL_PLATFORM
            ),
        })
        .collect();
    let present = |dir: &Path| expected.iter().map(|n| dir.join(n)).collect::<Vec<_>>();
    let have_all = present(dir).iter().zip(wheels).all(|(p, w)| {
        p.is_file()
            && w.sha256
                .as_ref()
                .is_some_and(|s| sha256_of(p).ok().as_ref() == Some(s))
    });
    if have_all {
        return Ok(Ok(present(dir)));
    }
    std::fs::create_dir_all(dir)?;
    let mut reqs = String::new();
    for w in wheels {
        match &w.sha256 {
            Some(s) => writeln!(reqs, "{}=={version} --hash=sha256:{s}", w.package).unwrap(),
            None => writeln!(reqs, "{}=={version}", w.package).unwrap(),
        }
    }
    let reqs_file = dir.join("requirements.txt");
    std::fs::write(&reqs_file, reqs)?;
    let out = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--retries",
            "1",
            "--timeout",
            "20",
        ])
        .args([
            "--platform",
            pin::WHEEL_PLATFORM,
            "--python-version",
            pin::WHEEL_PYTHON,
            "--implementation",
            "cp",
            "--abi",
            &abi,
            "--abi",
            "none",
        ])
        .arg("--dest")
        .arg(dir)
        .arg("-r")
        .arg(&reqs_file)
        .output()
        .context("cannot run pip")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if UNREACHABLE.iter().any(|w| stderr.contains(w)) {
            return Ok(Err(
                "the package index is out of reach (pip could not connect)".into(),
            ));
        }
        return Err(anyhow!(
            "pip could not fetch the official MLX {version} wheels:\n{}",
            stderr.trim_end()
        ));
    }
    let files = present(dir);
    for f in &files {
        if !f.is_file() {
            return Err(anyhow!(
                "pip did not leave {} (wheels for {} may not exist for this release)",
                f.display(),
                pin::WHEEL_PLATFORM
            ));
        }
    }
    Ok(Ok(files))
}

fn sha256_of(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(format!("{:x}", Sha256::digest(&bytes)))
}

/// Compares the unpacked `mlx/` folder of a wheel with the tree: headers
/// under `include/mlx/` against `mlx/`, Python files against `python/mlx/`.
fn compare(unpacked: &Path, tree: &Path, findings: &mut Findings) -> Result<()> {
    let mut stack = vec![unpacked.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(unpacked).unwrap();
            let (in_tree, is_header) = if let Ok(h) = rel.strip_prefix("include/mlx") {
                if path.extension().is_none_or(|e| e != "h") {
                    continue;
                }
                (tree.join("mlx").join(h), true)
            } else if path.extension().is_some_and(|e| e == "py") && !rel.starts_with("include") {
                (tree.join("python/mlx").join(rel), false)
            } else {
                continue;
            };
            let shown = format!("mlx/{}", rel.display());
            match std::fs::read(&in_tree) {
                Err(_) => findings.missing.push(shown),
                Ok(bytes) if bytes != std::fs::read(&path)? => findings.differing.push(shown),
                Ok(_) if is_header => findings.headers_same += 1,
                Ok(_) => findings.python_same += 1,
            }
        }
    }
    findings.differing.sort();
    findings.missing.sort();
    Ok(())
}


/// The check of the tree the build uses against the official wheels of
/// the release it declares (the `provenance` slow check): one claim, or none
/// when pip cannot reach the index (said).
pub fn check_tree() -> Result<mlx_harness::tally::Tally> {
    let opts = mlx_harness::config::options()?;
    let upstream = mlx_patched::upstream(&opts)?;
    let pinned = match upstream.origin {
        mlx_patched::Origin::Pinned(base) => Some(base),
        _ => None,
    };
    let version = mlx_patched::version_of(&upstream.dir)?;
    let dir = mlx_harness::paths::target_dir()?
        .join("provenance")
        .join(&version);
    let mut t = mlx_harness::tally::Tally::new();
    match check(&version, &upstream.dir, pinned, &dir)? {
        Outcome::Skipped(why) => println!("provenance: skipped: {why}"),
        Outcome::Checked(f) => {
            println!("provenance: {}", f.summary());
            t.check(f.identical(), || {
                format!(
                    "the tree {} is not the official MLX {version} release in the files above",
                    upstream.tree_id
                )
            });
        }
    }
    Ok(t)
}
