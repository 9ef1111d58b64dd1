//! The Rust port of MossFormer2_SE (`crates/mossformer2`) on this fork's
//! MLX, through the drop-in mlx-sys (docs/mossformer2.md).
//!
//! `cargo xtask mossformer2-check` (and the slow check of the same name):
//! on each of pristine and patched, the port and mlx-audio's Python model
//! run on the same weights and input against the same MLX build, and their
//! masks must be equal bit for bit; the port's own tests (its size, its
//! errors on bad checkpoints and inputs) pass. The leak experiment through
//! the port is `cargo xtask real-model --cells rust-pristine,rust-patched`:
//! the real model leaks too seldom for a few cycles here to show it.

pub mod judge;

use crate::mlx_rs::project::{fetch_once, prefix_of, sys_env, without_network};
use judge::{Comparison, Evidence, SecondShape};
use mlx_expectations::report::Row;
use mlx_harness::check::Check;
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::{target_dir, workspace_root};
use mlx_harness::peer_suite::side_by_side;
use mlx_harness::process::cargo;
use mlx_harness::python_env::kernel_tmp;
use mlx_harness::tally::Tally;
use mlx_patched::Expectations;
use mlx_patched::{CommandVars, Variant};
use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST: &str = "crates/mossformer2/Cargo.toml";
const EXPORT: &str = "tests/python/mossformer_export.py";

/// The port's target directory for a variant: the mlx-rs check's, where
/// mlx-rs and the drop-in are compiled against that variant already.
fn target_of(variant: Variant) -> Result<PathBuf> {
    Ok(target_dir()?.join("mlx-rs").join(variant.name))
}

/// A cargo command on the port, linked to `variant` (its MLX built once,
/// shared with every other user of this checkout's build), offline.
fn port_cargo(variant: Variant, args: &[&str]) -> Result<Command> {
    let mlx = prefix_of(variant)?;
    let manifest = workspace_root().join(MANIFEST);
    fetch_once(&manifest)?;
    fetch_once(&workspace_root().join("mlx-patched/sources/mlx-c/Cargo.toml"))?;
    let mut c = cargo();
    c.args(args)
        .arg("--manifest-path")
        .arg(&manifest)
        .var(mlx_patched::vars::CARGO_TARGET_DIR, target_of(variant)?);
    without_network(&mut c);
    for (k, v) in sys_env(variant, &mlx)? {
        c.var(k, v);
    }
    Ok(c)
}

/// How the port's binaries are compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Cargo's dev profile: compiled fastest, for the check's comparisons
    /// (MLX itself is optimized either way).
    Dev,
    /// Optimized, as a user ships it: for timings and the experiment.
    Release,
}

/// Builds the port's binaries against `variant`; returns the folder that
/// holds them.
pub fn build(variant: Variant, profile: Profile) -> Result<PathBuf> {
    eprintln!(
        "building crates/mossformer2 (mlx-rs 0.33 + the drop-in mlx-sys) against {} ({profile:?})",
        variant.name
    );
    let mut args = vec!["build", "--quiet", "--bins"];
    if profile == Profile::Release {
        args.push("--release");
    }
    mlx_harness::process::run(&mut port_cargo(variant, &args)?)?;
    Ok(target_of(variant)?.join(if profile == Profile::Release {
        "release"
    } else {
        "debug"
    }))
}

/// The port's own tests against `variant`: its size and its errors.
fn port_tests(variant: Variant) -> Result<mlx_harness::process::Ran> {
    let out = port_cargo(variant, &["test", "--quiet"])?
        .output()
        .context("cannot run cargo test on crates/mossformer2")?;
    Ok(mlx_harness::process::Ran::from(&out))
}

/// mlx-audio's model (the fork's wheel of `variant`) writes its weights, an
/// input and its mask; the port, linked to the same MLX, runs the same
/// weights on the same input and compares its mask bit for bit.
pub fn compare(variant: Variant, bins: &Path, frames: u32, slices: bool) -> Result<Comparison> {
    let python = mlx_harness::python_env::mlx_audio_env(variant)?;
    let dir = target_dir()?
        .join("mossformer2")
        .join("compare")
        .join(format!(
            "{}-{frames}{}",
            variant.name,
            if slices { "-slices" } else { "" }
        ));
    let mut export = Command::new(&python);
    export
        .arg(workspace_root().join(EXPORT))
        .arg(&dir)
        .args(["--frames", &frames.to_string()])
        .var(
            mlx_patched::other_vars::PYTHONPATH,
            workspace_root().join("tests/python"),
        )
        .var(mlx_patched::other_vars::TMPDIR, kernel_tmp(variant)?);
    if slices {
        export.arg("--slices");
    }
    mlx_harness::process::run(&mut export)?;
    let mut port = Command::new(bins.join("mossformer2-mask"));
    port.arg("--weights")
        .arg(dir.join("weights.safetensors"))
        .arg("--input")
        .arg(dir.join("features.safetensors"))
        .arg("--expect")
        .arg(dir.join("mask.safetensors"))
        .var(mlx_patched::other_vars::TMPDIR, kernel_tmp(variant)?);
    if slices {
        port.arg("--slices");
    }
    let out = port
        .output()
        .with_context(|| format!("cannot run {}", bins.display()))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    // Exit 0: equal; 1: compared and different; anything else: no comparison.
    let equal = match out.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => {
            return Err(anyhow!(
                "mossformer2-mask on {} failed ({}): {said}",
                variant.name,
                out.status
            ))
        }
    };
    Ok(Comparison {
        variant,
        frames,
        slices,
        equal,
        said,
    })
}

/// One cycle of the port with a checkpoint, calling it at 8 frames and
/// then at 300; `lazy`: the weights are not evaluated before the first call.
fn second_shape(variant: Variant, bins: &Path, weights: &Path, lazy: bool) -> Result<SecondShape> {
    let mut c = Command::new(bins.join("mossformer2-cycles"));
    c.args(["--cycles", "1", "--second-shape", "300", "--weights"])
        .arg(weights)
        .var(mlx_patched::other_vars::TMPDIR, kernel_tmp(variant)?);
    if lazy {
        c.arg("--no-eval");
    }
    let out = c.output().context("cannot run mossformer2-cycles")?;
    if !out.status.success() {
        return Err(anyhow!(
            "mossformer2-cycles failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .next()
        .ok_or_else(|| anyhow!("mossformer2-cycles printed nothing"))?;
    let v: serde_json::Value = serde_json::from_str(line)
        .with_context(|| format!("a record of mossformer2-cycles: {line}"))?;
    let field = |k: &str| v[k].as_i64().ok_or_else(|| anyhow!("no {k} in {line}"));
    Ok(SecondShape {
        variant,
        lazy,
        one: field("live_one")?,
        two: field("live_two")?,
        weights: field("weights")?,
    })
}

/// Cycles of the port's experiment binary in one process.
fn cycles(variant: Variant, bins: &Path, n: u32) -> Result<Vec<i64>> {
    let out = Command::new(bins.join("mossformer2-cycles"))
        .args(["--cycles", &n.to_string()])
        .var(mlx_patched::other_vars::TMPDIR, kernel_tmp(variant)?)
        .output()
        .context("cannot run mossformer2-cycles")?;
    if !out.status.success() {
        return Err(anyhow!(
            "mossformer2-cycles failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .with_context(|| format!("a record of mossformer2-cycles: {l}"))?;
            v["retained_bytes"]
                .as_i64()
                .ok_or_else(|| anyhow!("no retained_bytes in {l}"))
        })
        .collect()
}

/// The port against mlx-audio on both variants.
pub struct Mossformer2;

impl Check for Mossformer2 {
    type Evidence = Evidence;

    fn collect(&self, _: &Expectations) -> Result<Evidence> {
        mlx_patched::system::cpu_compile_works()?;
        mlx_harness::deps::install_debian(&["libportaudio2"])?;
        // Each variant's binaries, built once for every step below.
        let built: Vec<(Variant, PathBuf)> = [Variant::PRISTINE, Variant::PATCHED]
            .into_iter()
            .map(|v| build(v, Profile::Dev).map(|bins| (v, bins)))
            .collect::<Result<_>>()?;
        // The two variants side by side, each on binaries and a kernel
        // cache of its own; within a variant, one step at a time.
        let mut e = Evidence::default();
        let compared = side_by_side(&built, |(variant, bins)| {
            [(8, false), (300, false), (300, true)]
                .into_iter()
                .map(|(frames, slices)| compare(*variant, bins, frames, slices))
                .collect::<Result<Vec<_>>>()
        });
        for c in compared {
            for c in c? {
                println!(
                    "mossformer2 {} {} frames{}: {}",
                    c.variant.name,
                    c.frames,
                    if c.slices { ", slices" } else { "" },
                    c.said
                );
                e.compared.push(c);
            }
        }
        // The second compiled shape, over the weights the comparison wrote.
        let weights = target_dir()?
            .join("mossformer2/compare")
            .join(format!("{}-8", Variant::PATCHED.name))
            .join("weights.safetensors");
        let shapes = side_by_side(&built, |(variant, bins)| {
            [false, true]
                .into_iter()
                .map(|lazy| second_shape(*variant, bins, &weights, lazy))
                .collect::<Result<Vec<_>>>()
        });
        for s in shapes {
            for s in s? {
                println!(
                    "mossformer2 {} second shape, weights {}: one {} B, two {} B",
                    s.variant.name,
                    if s.lazy {
                        "loaded lazily"
                    } else {
                        "evaluated first"
                    },
                    s.one,
                    s.two
                );
                e.shapes.push(s);
            }
        }
        e.tests = port_tests(Variant::PATCHED)?;
        let kept = side_by_side(&built, |(variant, bins)| cycles(*variant, bins, 3));
        for (&(variant, _), kept) in built.iter().zip(kept) {
            let kept = kept?;
            println!(
                "mossformer2 {} cycles: retained {kept:?} bytes",
                variant.name
            );
            e.cycles.push((variant, kept));
        }
        Ok(e)
    }

    fn judge(&self, e: &Evidence, _: &Expectations) -> Tally {
        judge::judge(e)
    }

    fn render(&self, e: &Evidence) -> Vec<Row> {
        judge::render(e)
    }
}

/// The check as the suite and `cargo xtask mossformer2-check` run it: on a
/// base no mlx-c compiles against, the port does not run (the mlx-rs check
/// claims that the drop-in refuses it).
pub fn check(rows: &mut Vec<Row>) -> Result<Tally> {
    mlx_harness::check::outcome_with_mlxc(&Mossformer2, "mossformer2", rows)
}
