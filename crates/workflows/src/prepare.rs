//! `cargo xtask prepare`: builds what the slow checks use (wheels, Python
//! environments, the mlx-rs projects), each check's `prepare` in the
//! registry's order, so that the checks then only measure.
//!
//! `cargo xtask test` runs it in the background while the workspace's
//! tests run, as a process of its own at the lowest CPU priority: it takes
//! the CPU time they leave idle, and a test that needs both cores (the
//! release races, the kernel-cache race) still gets them. The slow checks
//! wait for it. Everything it builds is keyed and built once, so a step it
//! failed is built again by the check that needs it, which then reports
//! the failure as its own.

use crate::claims::SLOW_CHECKS;
use mlx_harness::error::{anyhow, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Every check's preparation, in the registry's order.
pub fn run() -> Result<()> {
    mlx_harness::deps::install()?;
    let started = Instant::now();
    for check in SLOW_CHECKS {
        if let Some(prepare) = check.prepare {
            let one = Instant::now();
            eprintln!("preparing {} ...", check.name);
            prepare().with_context(|| format!("preparing {}", check.name))?;
            eprintln!(
                "prepared {} in {}",
                check.name,
                mlx_patched::progress::elapsed(one.elapsed())
            );
        }
    }
    eprintln!(
        "prepared every slow check in {}",
        mlx_patched::progress::elapsed(started.elapsed())
    );
    Ok(())
}

/// The preparation running beside the suite.
pub struct Background {
    child: Option<Child>,
    log: PathBuf,
    started: Instant,
}

/// Starts `cargo xtask prepare` for `base` (this xtask, its output to
/// `log`) under `nice -n 19`.
pub fn start(base: &str, log: PathBuf) -> Result<Background> {
    let exe = std::env::current_exe().context("cannot find the running xtask")?;
    let out = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
    let child = Command::new("nice")
        .args(["-n", "19"])
        .arg(exe)
        .args(["--base", base, "prepare"])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start nice (coreutils)")?;
    Ok(Background {
        child: Some(child),
        log,
        started: Instant::now(),
    })
}

impl Background {
    /// Waits for it; a preparation that failed is not an error (the check
    /// that needs the step builds it again, and says why it fails), but
    /// its log is named.
    pub fn finish(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        eprintln!(
            "waiting for the slow checks' preparation (log: {})",
            self.log.display()
        );
        let status = child.wait()?;
        let took = mlx_patched::progress::elapsed(self.started.elapsed());
        if status.success() {
            println!("the slow checks' preparation finished in {took} beside the tests");
            Ok(())
        } else {
            println!(
                "the slow checks' preparation failed ({status}) after {took}; the checks build what they need themselves: see {}",
                self.log.display()
            );
            Err(anyhow!("preparation failed ({status})"))
        }
    }
}

impl Drop for Background {
    /// A suite that stops early stops its preparation too.
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
