//! Runs MossFormer2_SE on features from a safetensors file and writes the
//! mask, or compares it bit for bit with an expected one.
//!
//!   mossformer2-mask --weights W.safetensors --input X.safetensors
//!                    [--output M.safetensors] [--expect M.safetensors]
//!                    [--slices] [--uncompiled]
//!
//! The input file holds one float32 tensor `features` of shape
//! [batch, frames, 180]; the output holds `mask`, [batch, frames, 961].
//! With `--expect`, prints `equal <n> values` or the first differing index
//! and the largest difference, and exits non-zero when they differ.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use mlx_rs::Array;
use mossformer2::{MossFormer2SE, Split};

struct Args {
    weights: PathBuf,
    input: PathBuf,
    output: Option<PathBuf>,
    expect: Option<PathBuf>,
    split: Split,
    compiled: bool,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut weights, mut input, mut output, mut expect) = (None, None, None, None);
    let (mut split, mut compiled) = (Split::Op, true);
    while let Some(a) = it.next() {
        let mut path = || it.next().map(PathBuf::from).ok_or(format!("{a} needs a path"));
        match a.as_str() {
            "--weights" => weights = Some(path()?),
            "--input" => input = Some(path()?),
            "--output" => output = Some(path()?),
            "--expect" => expect = Some(path()?),
            "--slices" => split = Split::Slices,
            "--uncompiled" => compiled = false,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(Args {
        weights: weights.ok_or("--weights is required")?,
        input: input.ok_or("--input is required")?,
        output,
        expect,
        split,
        compiled,
    })
}

fn tensor(path: &PathBuf, name: &str) -> Result<Array, String> {
    let mut all = Array::load_safetensors(path).map_err(|e| format!("{}: {e}", path.display()))?;
    all.remove(name).ok_or(format!("{} has no tensor `{name}`", path.display()))
}

fn run(a: &Args) -> Result<bool, String> {
    let mut model = MossFormer2SE::load(&a.weights, a.split).map_err(|e| e.to_string())?;
    let features = tensor(&a.input, "features")?;
    let mask = if a.compiled { model.mask(&features) } else { model.mask_uncompiled(&features) }.map_err(|e| e.to_string())?;
    mask.eval().map_err(|e| e.to_string())?;
    if let Some(out) = &a.output {
        let map: HashMap<String, Array> = [("mask".to_string(), mask.clone())].into();
        Array::save_safetensors(map, None, out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    let Some(expect) = &a.expect else { return Ok(true) };
    let want = tensor(expect, "mask")?;
    if want.shape() != mask.shape() {
        println!("shape {:?} expected {:?}", mask.shape(), want.shape());
        return Ok(false);
    }
    let (got, want) = (mask.as_slice::<f32>(), want.as_slice::<f32>());
    let first = got.iter().zip(want).position(|(g, w)| g.to_bits() != w.to_bits());
    match first {
        None => {
            println!("equal {} values", got.len());
            Ok(true)
        }
        Some(i) => {
            let (count, largest) = got.iter().zip(want).filter(|(g, w)| g.to_bits() != w.to_bits()).fold((0usize, 0f32), |(n, m), (g, w)| (n + 1, m.max((g - w).abs())));
            println!("differ {count} of {} values, first at {i} ({} vs {}), largest difference {largest:e}", got.len(), got[i], want[i]);
            Ok(false)
        }
    }
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
