//! System packages: installed on Debian/Ubuntu (as root, or through sudo),
//! otherwise named with the exact command to run.

use crate::error::{Result, anyhow, Context};
use mlx_patched::CommandVars;
use std::process::Command;

/// Beyond what the build needs, the suite runs valgrind on the probes, and
/// builds MLX's Python bindings (headers and venv of Debian's Python).
const TEST_PACKAGES: &[&str] = &["valgrind", "python3-dev", "python3-venv"];

fn is_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn install() -> Result<()> {
    let wanted: Vec<&str> = mlx_patched::DEBIAN_PACKAGES
        .iter()
        .chain(TEST_PACKAGES)
        .copied()
        .collect();
    if !have("apt-get") || !have("dpkg-query") {
        if cfg!(target_os = "macos") {
            return Ok(mlx_patched::check_system(
                mlx_patched::Backend::Metal,
                true,
            )?);
        }
        // Not Debian: the build's own check names what is missing.
        mlx_patched::check_system(mlx_patched::Backend::Cpu, true)?;
        if !have("valgrind") {
            return Err(anyhow!(
                "the test suite needs valgrind; install it with your system's package manager"
            ));
        }
        return Ok(());
    }
    install_debian(&wanted)
}

/// Installs the Debian packages of `wanted` that are missing (as root, or
/// through sudo), or names the command that would. Off Debian it names them.
pub fn install_debian(wanted: &[&str]) -> Result<()> {
    if !have("apt-get") || !have("dpkg-query") {
        return Err(anyhow!(
            "this needs the Debian packages {}; install their equivalents with your system's package manager",
            wanted.join(" ")
        ));
    }
    let missing: Vec<&str> = wanted.iter().copied().filter(|p| !is_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let sudo: &[&str] = if is_root {
        &[]
    } else if have("sudo") {
        &["sudo"]
    } else {
        return Err(anyhow!(
            "missing system packages: {}. Install them as root with:\n    apt-get update && apt-get install -y {}",
            missing.join(" "),
            missing.join(" ")
        ));
    };
    // apt's own output (hundreds of lines from dpkg) goes to a log; the
    // terminal gets one line per package set up, overwritten in place.
    let log_path = crate::paths::target_dir()?.join("apt-get.log");
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    eprintln!(
        "installing system packages: {} (apt-get's output: {})",
        missing.join(" "),
        log_path.display()
    );
    let apt = |args: &[&str]| -> Result<()> {
        use std::io::{BufRead, Write};
        let mut cmd = Command::new(sudo.first().copied().unwrap_or("apt-get"));
        if !sudo.is_empty() {
            cmd.arg("apt-get");
        }
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let mut child = cmd
            .args(args)
            .var(mlx_patched::other_vars::DEBIAN_FRONTEND, "noninteractive")
            .stdout(std::process::Stdio::piped())
            .stderr(log.try_clone().context("cannot share the apt-get log")?)
            .spawn()
            .context("cannot run apt-get")?;
        let mut set_up = 0;
        if let Some(out) = child.stdout.take() {
            for line in std::io::BufReader::new(out).lines() {
                let line = line.context("cannot read apt-get's output")?;
                writeln!(log, "{line}").context("cannot write the apt-get log")?;
                if line.starts_with("Setting up ") {
                    set_up += 1;
                    eprint!("\rsystem packages: {set_up} set up");
                }
            }
        }
        let status = child.wait().context("cannot wait for apt-get")?;
        if set_up > 0 {
            eprintln!();
        }
        if status.success() {
            Ok(())
        } else {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
            Err(anyhow!(
                "apt-get {} failed ({status}); the end of its output ({}):\n{}\nrun it yourself:\n    sudo apt-get update && sudo apt-get install -y {}",
                args.join(" "),
                log_path.display(),
                tail.join("\n"),
                missing.join(" ")
            ))
        }
    };
    apt(&["update", "-qq"])?;
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend(&missing);
    apt(&install)?;
    eprintln!("system packages installed");
    Ok(())
}
