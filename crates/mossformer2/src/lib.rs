//! MossFormer2_SE's mask network in Rust, over mlx-rs 0.33.
//!
//! This is mlx-audio 0.6.2's `TestNet`: the 55,262,410 float32 parameters
//! (210.8 MiB) that map 180 filter-bank channels per frame to a 961-bin
//! speech mask. Parameters load from safetensors under mlx-audio's names
//! (`mossformer.mdl.intra_mdl.mossformerM.layers.0.to_hidden.linear.weight`,
//! ...), as a converted checkpoint has them. The forward pass is compiled
//! with mlx-rs's `compile`, as mlx-audio compiles `_forward`, and calls
//! `split` where mlx-audio does; on the same MLX build its output equals
//! mlx-audio's bit for bit (docs/mossformer2.md).
//!
//! ```no_run
//! use mossformer2::{MossFormer2SE, Split};
//! let mut model = MossFormer2SE::load("mossformer2_se.safetensors", Split::Op)?;
//! let features = mlx_rs::Array::zeros::<f32>(&[1, 100, 180])?;
//! let mask = model.mask(&features)?; // [1, 100, 961]
//! # Ok::<(), mossformer2::Error>(())
//! ```
//!
//! Layers mlx-rs has (Linear, Conv1d, Conv2d, LayerNorm, GroupNorm, silu,
//! prelu, rope) are mlx-rs's; the model's own are in [`layers`]. On Metal,
//! mlx-audio replaces two operations with custom Metal kernels (the
//! depthwise convolution and relu²); this port uses the operations those
//! kernels stand for on every backend, which is what mlx-audio itself runs
//! off Metal.

pub mod layers;
mod weights;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::error::Exception;
use mlx_rs::macros::ModuleParameters;
use mlx_rs::module::ModuleParameters;
use mlx_rs::transforms::compile::compile;
use mlx_rs::{Array, Dtype};

use layers::MaskNet;
pub use layers::{CHANNELS, IN_CHANNELS, OUT_CHANNELS};
use weights::{Checkpoint, Fresh, Source};

/// How each halving of the last axis is written: with MLX's multi-output
/// `split`, as mlx-audio does, or as two slices, the report's ablation (the
/// same bits without a multi-output op).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    #[default]
    Op,
    Slices,
}

/// What can go wrong loading the model or running it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a safetensors file: {reason}")]
    NotSafetensors { path: PathBuf, reason: String },
    #[error("{origin} has no tensor `{name}`, which the model needs")]
    Missing { origin: String, name: String },
    #[error("tensor `{name}` has shape {found:?}; the model needs {expected:?}")]
    Shape { name: String, expected: Vec<i32>, found: Vec<i32> },
    #[error("tensor `{name}` is {found}; the model needs float32")]
    Dtype { name: String, found: String },
    #[error("{origin} holds {} tensor(s) the model does not have: {}", names.len(), names.iter().take(5).cloned().collect::<Vec<_>>().join(", "))]
    Unexpected { origin: String, names: Vec<String> },
    #[error("input of shape {found:?} and type {dtype}: the model takes float32 features of shape [batch, frames, 180], frames >= 1")]
    Input { found: Vec<i32>, dtype: String },
    #[error("MLX: {0}")]
    Mlx(#[from] Exception),
}

/// mlx-audio's `TestNet`: the parameters, under its names, and the forward
/// pass it compiles.
#[derive(Debug, Clone, ModuleParameters)]
pub struct TestNet {
    #[param]
    pub mossformer: MaskNet,
}

impl TestNet {
    fn new(src: &mut dyn Source, split: Split) -> Result<Self, Error> {
        Ok(Self { mossformer: MaskNet::new(src, "mossformer", split)? })
    }

    /// `TestNet._forward`: [B, L, 180] to [B, L, 961], not compiled.
    pub fn forward(&mut self, input: &Array) -> Result<Array, Exception> {
        let x = mlx_rs::ops::transpose_axes(input, &[0, 2, 1])?;
        let mask = self.mossformer.forward(&x)?;
        mlx_rs::stop_gradient(&mask)
    }
}

type CompiledForward = Box<dyn for<'a> FnMut(&'a Array) -> Result<Array, Exception>>;

/// The model with its compiled forward pass. The compiled function holds
/// the parameters as captured constants, as mlx-audio's does: dropping the
/// model drops both, and with them the compile cache's entry.
pub struct MossFormer2SE {
    net: TestNet,
    compiled: CompiledForward,
}

impl std::fmt::Debug for MossFormer2SE {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MossFormer2SE").field("parameters", &self.net.num_parameters()).finish_non_exhaustive()
    }
}

impl MossFormer2SE {
    /// Loads a checkpoint under mlx-audio's names. Every tensor must be
    /// there with its shape and float32 type, and nothing else may be.
    pub fn load(path: impl AsRef<Path>, split: Split) -> Result<Self, Error> {
        let mut src = Checkpoint::open(path.as_ref())?;
        let net = TestNet::new(&mut src, split)?;
        src.finish()?;
        Ok(Self::with(net))
    }

    /// From tensors already in memory, under mlx-audio's names.
    pub fn from_tensors(tensors: HashMap<String, Array>, split: Split) -> Result<Self, Error> {
        let mut src = Checkpoint::from_tensors("the given tensors".into(), tensors);
        let net = TestNet::new(&mut src, split)?;
        src.finish()?;
        Ok(Self::with(net))
    }

    /// Fresh parameters with mlx-audio's initializers, drawn from MLX's
    /// random state seeded with `seed`. Not evaluated: as in Python, they
    /// are computed when first used, unless [`Self::eval_parameters`] runs.
    pub fn fresh(seed: u64, split: Split) -> Result<Self, Error> {
        mlx_rs::random::seed(seed)?;
        Ok(Self::with(TestNet::new(&mut Fresh, split)?))
    }

    fn with(net: TestNet) -> Self {
        let mut captured = net.clone();
        let compiled = compile(move |x: &Array| captured.forward(x), None);
        Self { net, compiled: Box::new(compiled) }
    }

    /// The mask for `features` ([batch, frames, 180]): [batch, frames, 961],
    /// through the compiled forward pass.
    pub fn mask(&mut self, features: &Array) -> Result<Array, Error> {
        check_input(features)?;
        Ok((self.compiled)(features)?)
    }

    /// The same, not compiled.
    pub fn mask_uncompiled(&mut self, features: &Array) -> Result<Array, Error> {
        check_input(features)?;
        Ok(self.net.forward(features)?)
    }

    /// The network, for its parameters (`ModuleParameters`).
    pub fn network(&self) -> &TestNet {
        &self.net
    }

    /// Evaluates every parameter: the weights become materialized arrays
    /// outside the compiled function, as `mx.eval(model.parameters())` does.
    pub fn eval_parameters(&self) -> Result<(), Error> {
        mlx_rs::transforms::eval_params(self.net.parameters())?;
        Ok(())
    }

    /// The parameters' bytes.
    pub fn parameter_bytes(&self) -> usize {
        self.net.parameters().flatten().values().map(|a| a.nbytes()).sum()
    }

    /// The parameters under mlx-audio's names.
    pub fn named_parameters(&self) -> HashMap<String, Array> {
        self.net.parameters().flatten().into_iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }
}

fn check_input(x: &Array) -> Result<(), Error> {
    let s = x.shape();
    if s.len() != 3 || s[2] != IN_CHANNELS || s[1] < 1 || s[0] < 1 || x.dtype() != Dtype::Float32 {
        return Err(Error::Input { found: s.to_vec(), dtype: format!("{:?}", x.dtype()) });
    }
    Ok(())
}
