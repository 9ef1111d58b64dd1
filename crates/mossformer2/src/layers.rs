//! The layers of MossFormer2_SE's mask network, written op for op as
//! mlx-audio 0.6.2 writes them in Python (`mlx_audio/sts/models/mossformer2_se`),
//! so that the compiled graph, and with it every output bit, is the same.
//! Where mlx-rs has the layer (Linear, Conv1d, Conv2d, LayerNorm, GroupNorm,
//! silu, prelu, rope), it is used; the model's own layers (ScaleNorm,
//! GlobalLayerNorm, CLayerNorm, OffsetScale, ScaledSinuEmbedding, ConvModule,
//! UniDeepFsmn and the blocks built of them) are written here.
//!
//! Each `forward` mirrors the Python call by call, including the calls whose
//! results compile merges (a transpose taken twice) and the scalar operands'
//! types, since the graph decides what compile fuses.

use mlx_rs::error::Exception;
use mlx_rs::macros::ModuleParameters;
use mlx_rs::module::{Module, ModuleParamMut, ModuleParamRef, ModuleParameters, Param};
use mlx_rs::nn::{Conv1d, Conv2d, GroupNorm, LayerNorm, Linear};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops;
use mlx_rs::transforms::compile::compile;
use mlx_rs::Array;

use crate::weights::{join, Init, Source};
use crate::{Error, Split};

type R<T> = Result<T, Exception>;

fn f(v: f32) -> Array {
    Array::from_f32(v)
}

/// `mlx.nn.relu`: a shapeless compiled `maximum(x, 0)`, as mlx's Python
/// layer is (mlx-rs's `relu` is not compiled, which would change what the
/// outer compile fuses around it).
fn relu(x: &Array) -> R<Array> {
    let mut c = compile(|x: &Array| ops::maximum(x, f(0.0)), true);
    c(x)
}

/// `mx.split(x, 2, axis=-1)`, or the report's ablation: two slices of the
/// last axis of a 3-D array (same bits, no multi-output op).
fn halves(x: &Array, split: Split) -> R<(Array, Array)> {
    match split {
        Split::Op => {
            let mut parts = ops::split_equal(x, 2, -1)?;
            let b = parts.pop().expect("two parts");
            Ok((parts.pop().expect("two parts"), b))
        }
        Split::Slices => {
            let n = x.dim(-1) / 2;
            Ok((x.index((.., .., ..n)), x.index((.., .., n..2 * n))))
        }
    }
}

fn linear(src: &mut dyn Source, prefix: &str, input: i32, output: i32, bias: bool) -> Result<Linear, Error> {
    let bound = 1.0 / (input as f32).sqrt();
    let weight = src.take(&join(prefix, "weight"), &[output, input], Init::Uniform(bound))?;
    let bias = if bias { Some(src.take(&join(prefix, "bias"), &[output], Init::Uniform(bound))?) } else { None };
    Ok(Linear { weight: Param::new(weight), bias: Param::new(bias) })
}

/// A 1x1 `nn.Conv1d` (channels last), as the network's projections are.
fn pointwise(src: &mut dyn Source, prefix: &str, input: i32, output: i32, bias: bool) -> Result<Conv1d, Error> {
    let bound = (1.0 / input as f32).sqrt();
    let weight = src.take(&join(prefix, "weight"), &[output, 1, input], Init::Uniform(bound))?;
    let bias = if bias { Some(src.take(&join(prefix, "bias"), &[output], Init::Zeros)?) } else { None };
    Ok(Conv1d { weight: Param::new(weight), bias: Param::new(bias), stride: 1, padding: 0, dilation: 1, groups: 1 })
}

fn layer_norm(src: &mut dyn Source, prefix: &str, dim: i32, eps: f32) -> Result<LayerNorm, Error> {
    let weight = src.take(&join(prefix, "weight"), &[dim], Init::Ones)?;
    let bias = src.take(&join(prefix, "bias"), &[dim], Init::Zeros)?;
    Ok(LayerNorm { dimensions: dim, eps, weight: Param::new(Some(weight)), bias: Param::new(Some(bias)) })
}

/// ScaleNorm: `x * g / max(‖x‖ · dim^-½, eps)` over the last axis.
#[derive(Debug, Clone, ModuleParameters)]
pub struct ScaleNorm {
    #[param]
    pub g: Param<Array>,
    scale: f32,
    eps: f32,
}

impl ScaleNorm {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32) -> Result<Self, Error> {
        Ok(Self {
            g: Param::new(src.take(&join(prefix, "g"), &[1], Init::Ones)?),
            // Python computes dim ** -0.5 in double precision, then MLX
            // rounds the scalar to float32.
            scale: (dim as f64).powf(-0.5) as f32,
            eps: 1e-8,
        })
    }

    fn forward(&self, x: &Array) -> R<Array> {
        let norm = ops::sqrt(ops::sum_axes(x.multiply(x)?, &[-1], true)?)?.multiply(f(self.scale))?;
        let norm = ops::maximum(&norm, f(self.eps))?;
        x.multiply(self.g.as_ref().divide(&norm)?)
    }
}

/// FFConvM's normalization: ScaleNorm in the attention layers, LayerNorm in
/// the gated FSMN.
#[derive(Debug, Clone)]
pub enum Norm {
    Scale(ScaleNorm),
    Layer(LayerNorm),
}

impl Norm {
    fn forward(&mut self, x: &Array) -> R<Array> {
        match self {
            Norm::Scale(n) => n.forward(x),
            Norm::Layer(n) => n.forward(x),
        }
    }

    fn inner(&self) -> &dyn ModuleParameters {
        match self {
            Norm::Scale(n) => n,
            Norm::Layer(n) => n,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn ModuleParameters {
        match self {
            Norm::Scale(n) => n,
            Norm::Layer(n) => n,
        }
    }
}

impl ModuleParameters for Norm {
    fn num_parameters(&self) -> usize {
        self.inner().num_parameters()
    }
    fn parameters(&self) -> ModuleParamRef<'_> {
        self.inner().parameters()
    }
    fn parameters_mut(&mut self) -> ModuleParamMut<'_> {
        self.inner_mut().parameters_mut()
    }
    fn trainable_parameters(&self) -> ModuleParamRef<'_> {
        self.inner().trainable_parameters()
    }
    fn freeze_parameters(&mut self, recursive: bool) {
        self.inner_mut().freeze_parameters(recursive)
    }
    fn unfreeze_parameters(&mut self, recursive: bool) {
        self.inner_mut().unfreeze_parameters(recursive)
    }
    fn all_frozen(&self) -> Option<bool> {
        self.inner().all_frozen()
    }
    fn any_frozen(&self) -> Option<bool> {
        self.inner().any_frozen()
    }
}

/// ConvModule: `x + depthwise_conv1d(x)`, kernel 17, "same" padding.
#[derive(Debug, Clone, ModuleParameters)]
pub struct ConvModule {
    #[param]
    pub weight: Param<Array>,
    channels: i32,
}

impl ConvModule {
    const KERNEL: i32 = 17;

    fn new(src: &mut dyn Source, prefix: &str, channels: i32) -> Result<Self, Error> {
        // mlx-audio starts this kernel at zeros.
        let weight = src.take(&join(prefix, "weight"), &[channels, Self::KERNEL, 1], Init::Zeros)?;
        Ok(Self { weight: Param::new(weight), channels })
    }

    fn forward(&self, x: &Array) -> R<Array> {
        // On Metal mlx-audio calls a custom kernel here; off Metal (and in
        // this port everywhere) it is `mx.conv1d` with groups = channels.
        let conv = ops::conv1d(x, self.weight.as_ref(), 1, (Self::KERNEL - 1) / 2, 1, self.channels)?;
        x.add(conv)
    }
}

/// FFConvM: norm, linear, SiLU, ConvModule.
#[derive(Debug, Clone, ModuleParameters)]
pub struct FFConvM {
    #[param]
    pub norm: Norm,
    #[param]
    pub linear: Linear,
    #[param]
    pub conv_module: ConvModule,
}

impl FFConvM {
    fn new(src: &mut dyn Source, prefix: &str, input: i32, output: i32, scale_norm: bool) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        let norm = if scale_norm {
            Norm::Scale(ScaleNorm::new(src, &p("norm"), input)?)
        } else {
            Norm::Layer(layer_norm(src, &p("norm"), input, 1e-5)?)
        };
        Ok(Self {
            norm,
            linear: linear(src, &p("linear"), input, output, true)?,
            conv_module: ConvModule::new(src, &p("conv_module"), output)?,
        })
    }

    fn forward(&mut self, x: &Array) -> R<Array> {
        let x = self.norm.forward(x)?;
        let x = self.linear.forward(&x)?;
        let x = mlx_rs::nn::silu(&x)?;
        self.conv_module.forward(&x)
    }
}

/// OffsetScale: per head, `x * gamma[h] + beta[h]`.
#[derive(Debug, Clone, ModuleParameters)]
pub struct OffsetScale {
    #[param]
    pub gamma: Param<Array>,
    #[param]
    pub beta: Param<Array>,
    heads: i32,
}

impl OffsetScale {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32, heads: i32) -> Result<Self, Error> {
        Ok(Self {
            gamma: Param::new(src.take(&join(prefix, "gamma"), &[heads, dim], Init::OnePlusNormal(0.02))?),
            beta: Param::new(src.take(&join(prefix, "beta"), &[heads, dim], Init::Zeros)?),
            heads,
        })
    }

    fn forward(&self, x: &Array) -> R<Vec<Array>> {
        let out = ops::expand_dims(x, -2)?.multiply(self.gamma.as_ref())?.add(self.beta.as_ref())?;
        // `out[..., h, :]` on a 4-D array: a slice, then the axis dropped.
        (0..self.heads).map(|h| ops::squeeze_axes(out.index((.., .., h..h + 1, ..)), &[2])).collect()
    }
}

/// The rotary embedding the attention layers share: `nn.RoPE(32)`.
fn rope(x: &Array) -> R<Array> {
    mlx_rs::fast::rope(x, 32, false, 10000.0, 1.0, 0, None)
}

/// FLASH_ShareA_FFConvM: token shift, gated quadratic + linear attention.
#[derive(Debug, Clone, ModuleParameters)]
pub struct Flash {
    #[param]
    pub to_hidden: FFConvM,
    #[param]
    pub to_qk: FFConvM,
    #[param]
    pub qk_offset_scale: OffsetScale,
    #[param]
    pub to_out: FFConvM,
    group_size: i32,
    split: Split,
}

impl Flash {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32, split: Split) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        let (hidden, query_key) = (dim * 4, 128);
        Ok(Self {
            to_hidden: FFConvM::new(src, &p("to_hidden"), dim, hidden, true)?,
            to_qk: FFConvM::new(src, &p("to_qk"), dim, query_key, true)?,
            qk_offset_scale: OffsetScale::new(src, &p("qk_offset_scale"), query_key, 4)?,
            to_out: FFConvM::new(src, &p("to_out"), dim * 2, dim, true)?,
            group_size: 256,
            split,
        })
    }

    fn forward(&mut self, x: &Array) -> R<Array> {
        let (x_shift, x_pass) = halves(x, self.split)?;
        let shape = x_shift.shape().to_vec();
        let seq_len = shape[1];
        let x_shift = if seq_len > 1 {
            let padding = Array::zeros::<f32>(&[shape[0], 1, shape[2]])?;
            ops::concatenate(&[padding, x_shift.index((.., ..seq_len - 1, ..))], 1)?
        } else {
            ops::zeros_like(&x_shift)?
        };
        let normed_x = ops::concatenate(&[x_shift, x_pass], -1)?;
        let hidden = self.to_hidden.forward(&normed_x)?;
        let (v, u) = halves(&hidden, self.split)?;
        let qk = self.to_qk.forward(&normed_x)?;
        let heads = self.qk_offset_scale.forward(&qk)?;
        let [quad_q, lin_q, quad_k, lin_k] = <[Array; 4]>::try_from(heads).map_err(|_| Exception::custom("four heads"))?;
        let (att_v, att_u) = self.attention(x, quad_q, lin_q, quad_k, lin_k, v.clone(), u.clone())?;
        let att_u_v = att_u.multiply(&v)?;
        let att_v_u = att_v.multiply(&u)?;
        let gate = ops::sigmoid(&att_v_u)?;
        let out = att_u_v.multiply(&gate)?;
        let final_out = self.to_out.forward(&out)?;
        x.add(final_out)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(&self, x: &Array, quad_q: Array, lin_q: Array, quad_k: Array, lin_k: Array, v: Array, u: Array) -> R<(Array, Array)> {
        let (b, n, g) = (x.dim(0), x.dim(1), self.group_size);
        let (quad_q, lin_q, quad_k, lin_k) = (rope(&quad_q)?, rope(&lin_q)?, rope(&quad_k)?, rope(&lin_k)?);
        let padding = match n % g {
            0 => 0,
            r => g - r,
        };
        let pad = |t: Array| -> R<Array> {
            if padding == 0 {
                return Ok(t);
            }
            let widths: &[(i32, i32)] = &[(0, 0), (0, padding), (0, 0)];
            ops::pad(&t, widths, f(0.0), None)
        };
        let (quad_q, quad_k, lin_q, lin_k, v, u) = (pad(quad_q)?, pad(quad_k)?, pad(lin_q)?, pad(lin_k)?, pad(v)?, pad(u)?);
        let groups = quad_q.dim(1) / g;
        let grouped = |t: &Array| t.reshape(&[b, groups, g, t.dim(-1)]);
        let (quad_q, quad_k, lin_q, lin_k, v, u) =
            (grouped(&quad_q)?, grouped(&quad_k)?, grouped(&lin_q)?, grouped(&lin_k)?, grouped(&v)?, grouped(&u)?);

        let quad_out_v = quadratic(&quad_q, &quad_k, &v, g)?;
        let quad_out_u = quadratic(&quad_q, &quad_k, &u, g)?;

        let (total, query_key, value) = (lin_k.dim(1) * lin_k.dim(2), lin_k.dim(3), v.dim(3));
        let lin_k_flat = lin_k.reshape(&[b, total, query_key])?;
        let v_flat = v.reshape(&[b, total, value])?;
        let lin_kv = ops::transpose_axes(&lin_k_flat, &[0, 2, 1])?.matmul(&v_flat)?.divide(f(n as f32))?;
        let lin_q_flat = lin_q.reshape(&[b, groups * g, query_key])?;
        let lin_out_v = lin_q_flat.matmul(&lin_kv)?.reshape(&[b, groups, g, value])?;
        let u_flat = u.reshape(&[b, total, value])?;
        let lin_ku = ops::transpose_axes(&lin_k_flat, &[0, 2, 1])?.matmul(&u_flat)?.divide(f(n as f32))?;
        let lin_out_u = lin_q_flat.matmul(&lin_ku)?.reshape(&[b, groups, g, value])?;

        let ungroup = |t: Array| -> R<Array> {
            let s = t.shape().to_vec();
            Ok(t.reshape(&[s[0], s[1] * s[2], s[3]])?.index((.., ..n)))
        };
        Ok((ungroup(quad_out_v.add(&lin_out_v)?)?, ungroup(quad_out_u.add(&lin_out_u)?)?))
    }
}

/// mlx-audio's attention off Metal (`FlashAttentionImplementations.standard`):
/// relu(q kᵀ / g)² v.
fn quadratic(q: &Array, k: &Array, v: &Array, g: i32) -> R<Array> {
    let sim = q.matmul(ops::transpose_axes(k, &[0, 1, 3, 2])?)?.multiply(f(1.0 / g as f32))?;
    let attn = ops::maximum(&sim, f(0.0))?;
    let attn = attn.multiply(&attn)?;
    attn.matmul(v)
}

/// UniDeepFsmn: a memory block, a depthwise convolution over time.
#[derive(Debug, Clone, ModuleParameters)]
pub struct UniDeepFsmn {
    #[param]
    pub linear: Linear,
    #[param]
    pub project: Linear,
    #[param]
    pub conv1: Conv2d,
    lorder: i32,
}

impl UniDeepFsmn {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32, lorder: i32) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        let kernel = 2 * lorder - 1;
        let bound = (1.0 / kernel as f32).sqrt();
        let weight = src.take(&p("conv1.weight"), &[dim, kernel, 1, 1], Init::Uniform(bound))?;
        Ok(Self {
            linear: linear(src, &p("linear"), dim, dim, true)?,
            project: linear(src, &p("project"), dim, dim, false)?,
            conv1: Conv2d {
                weight: Param::new(weight),
                bias: Param::new(None),
                stride: (1, 1),
                padding: (0, 0),
                dilation: (1, 1),
                groups: dim,
            },
            lorder,
        })
    }

    fn forward(&mut self, input: &Array) -> R<Array> {
        let f1 = ops::maximum(self.linear.forward(input)?, f(0.0))?;
        let p1 = self.project.forward(&f1)?;
        let x = ops::expand_dims(&p1, 2)?;
        let side = self.lorder - 1;
        let widths: &[(i32, i32)] = &[(0, 0), (side, side), (0, 0), (0, 0)];
        let y = ops::pad(&x, widths, f(0.0), None)?;
        let out = self.conv1.forward(&y)?;
        let out = x.add(out)?;
        let enhanced = ops::squeeze_axes(&out, &[2])?;
        input.add(enhanced)
    }
}

/// CLayerNorm: layer norm over channels, written out (mean, var).
#[derive(Debug, Clone, ModuleParameters)]
pub struct CLayerNorm {
    #[param]
    pub weight: Param<Array>,
    #[param]
    pub bias: Param<Array>,
}

impl CLayerNorm {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32) -> Result<Self, Error> {
        Ok(Self {
            weight: Param::new(src.take(&join(prefix, "weight"), &[dim], Init::Ones)?),
            bias: Param::new(src.take(&join(prefix, "bias"), &[dim], Init::Zeros)?),
        })
    }

    fn forward(&self, x: &Array) -> R<Array> {
        let mean = ops::mean_axes(x, &[-1], true)?;
        let var = ops::var_axes(x, &[-1], true, 0)?;
        let x = x.subtract(&mean)?.divide(ops::sqrt(var.add(f(1e-8))?)?)?;
        x.multiply(self.weight.as_ref())?.add(self.bias.as_ref())
    }
}

/// Gated_FSMN: `to_v(x) * fsmn(to_u(x)) + x`.
#[derive(Debug, Clone, ModuleParameters)]
pub struct GatedFsmn {
    #[param]
    pub to_u: FFConvM,
    #[param]
    pub to_v: FFConvM,
    #[param]
    pub fsmn: UniDeepFsmn,
}

impl GatedFsmn {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        Ok(Self {
            to_u: FFConvM::new(src, &p("to_u"), dim, dim, false)?,
            to_v: FFConvM::new(src, &p("to_v"), dim, dim, false)?,
            fsmn: UniDeepFsmn::new(src, &p("fsmn"), dim, 20)?,
        })
    }

    fn forward(&mut self, x: &Array) -> R<Array> {
        let x_u = self.to_u.forward(x)?;
        let x_v = self.to_v.forward(x)?;
        let x_u = self.fsmn.forward(&x_u)?;
        x_v.multiply(&x_u)?.add(x)
    }
}

/// Gated_FSMN_Block: 1x1 conv down to 256 channels, PReLU, norm, gated
/// FSMN, norm, 1x1 conv back, residual.
#[derive(Debug, Clone, ModuleParameters)]
pub struct GatedFsmnBlock {
    #[param]
    pub conv1: Conv1d,
    #[param]
    pub prelu: Prelu,
    #[param]
    pub norm1: CLayerNorm,
    #[param]
    pub gated_fsmn: GatedFsmn,
    #[param]
    pub norm2: CLayerNorm,
    #[param]
    pub conv2: Conv1d,
}

impl GatedFsmnBlock {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32, inner: i32) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        Ok(Self {
            conv1: pointwise(src, &p("conv1"), dim, inner, true)?,
            prelu: Prelu::new(src, &p("prelu"))?,
            norm1: CLayerNorm::new(src, &p("norm1"), inner)?,
            gated_fsmn: GatedFsmn::new(src, &p("gated_fsmn"), inner)?,
            norm2: CLayerNorm::new(src, &p("norm2"), inner)?,
            conv2: pointwise(src, &p("conv2"), inner, dim, true)?,
        })
    }

    fn forward(&mut self, x: &Array) -> R<Array> {
        let y = self.conv1.forward(x)?;
        let y = self.prelu.forward(&y)?;
        let y = self.norm1.forward(&y)?;
        let y = self.gated_fsmn.forward(&y)?;
        let y = self.norm2.forward(&y)?;
        let y = self.conv2.forward(&y)?;
        y.add(x)
    }
}

/// `nn.PReLU()` with one slope, through mlx-rs's compiled prelu (mlx's own
/// is compiled the same way).
#[derive(Debug, Clone, ModuleParameters)]
pub struct Prelu {
    #[param]
    pub weight: Param<Array>,
}

impl Prelu {
    fn new(src: &mut dyn Source, prefix: &str) -> Result<Self, Error> {
        Ok(Self { weight: Param::new(src.take(&join(prefix, "weight"), &[1], Init::Fill(0.25))?) })
    }

    fn forward(&self, x: &Array) -> R<Array> {
        mlx_rs::nn::prelu(x, self.weight.as_ref())
    }
}

/// MossFormerBlock_GFSMN: 24 pairs of an attention layer and a gated FSMN
/// block. (`fsmn` before `layers`, as mlx-audio declares them.)
#[derive(Debug, Clone, ModuleParameters)]
pub struct MossFormerBlock {
    #[param]
    pub fsmn: Vec<GatedFsmnBlock>,
    #[param]
    pub layers: Vec<Flash>,
}

/// MossFormerM: the blocks and a final LayerNorm. (The field keeps
/// mlx-audio's name, which is the parameters' name.)
#[derive(Debug, Clone, ModuleParameters)]
#[allow(non_snake_case)]
pub struct MossFormerM {
    #[param]
    pub mossformerM: MossFormerBlock,
    #[param]
    pub norm: LayerNorm,
}

/// Computation_Block: MossFormerM in channels-last form, a group norm, a skip.
#[derive(Debug, Clone, ModuleParameters)]
pub struct ComputationBlock {
    #[param]
    pub intra_mdl: MossFormerM,
    #[param]
    pub intra_norm: GroupNorm,
}

impl ComputationBlock {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32, blocks: usize, split: Split) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        let inner = p("intra_mdl.mossformerM");
        let mut fsmn = Vec::with_capacity(blocks);
        let mut layers = Vec::with_capacity(blocks);
        for i in 0..blocks {
            fsmn.push(GatedFsmnBlock::new(src, &join(&inner, &format!("fsmn.{i}")), dim, 256)?);
        }
        for i in 0..blocks {
            layers.push(Flash::new(src, &join(&inner, &format!("layers.{i}")), dim, split)?);
        }
        let norm = layer_norm(src, &p("intra_mdl.norm"), dim, 1e-8)?;
        let weight = src.take(&p("intra_norm.weight"), &[dim], Init::Ones)?;
        let bias = src.take(&p("intra_norm.bias"), &[dim], Init::Zeros)?;
        Ok(Self {
            intra_mdl: MossFormerM { mossformerM: MossFormerBlock { fsmn, layers }, norm },
            intra_norm: GroupNorm {
                group_count: 1,
                dimensions: dim,
                eps: f(1e-8),
                pytorch_compatible: true,
                weight: Param::new(Some(weight)),
                bias: Param::new(Some(bias)),
            },
        })
    }

    fn forward(&mut self, x: &Array) -> R<Array> {
        let intra = ops::transpose_axes(x, &[0, 2, 1])?;
        let mut intra = intra;
        let blocks = &mut self.intra_mdl.mossformerM;
        for (layer, fsmn) in blocks.layers.iter_mut().zip(blocks.fsmn.iter_mut()) {
            intra = layer.forward(&intra)?;
            intra = fsmn.forward(&intra)?;
        }
        let intra = self.intra_mdl.norm.forward(&intra)?;
        let intra = self.intra_norm.forward(&intra)?;
        let intra = ops::transpose_axes(&intra, &[0, 2, 1])?;
        intra.add(x)
    }
}

/// GlobalLayerNorm over channels and time of a [B, C, L] array.
#[derive(Debug, Clone, ModuleParameters)]
pub struct GlobalLayerNorm {
    #[param]
    pub weight: Param<Array>,
    #[param]
    pub bias: Param<Array>,
}

impl GlobalLayerNorm {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32) -> Result<Self, Error> {
        Ok(Self {
            weight: Param::new(src.take(&join(prefix, "weight"), &[dim, 1], Init::Ones)?),
            bias: Param::new(src.take(&join(prefix, "bias"), &[dim, 1], Init::Zeros)?),
        })
    }

    fn forward(&self, x: &Array) -> R<Array> {
        let mean = ops::mean_axes(x, &[1, 2], true)?;
        let var = ops::mean_axes(x.subtract(&mean)?.power(f(2.0))?, &[1, 2], true)?;
        let w = ops::squeeze(self.weight.as_ref())?.reshape(&[1, -1, 1])?;
        let b = ops::squeeze(self.bias.as_ref())?.reshape(&[1, -1, 1])?;
        w.multiply(x.subtract(&mean)?)?.divide(ops::sqrt(var.add(f(1e-8))?)?)?.add(&b)
    }
}

/// ScaledSinuEmbedding: sin/cos positions times a learned scale.
#[derive(Debug, Clone, ModuleParameters)]
pub struct ScaledSinuEmbedding {
    #[param]
    pub scale: Param<Array>,
    #[param]
    pub inv_freq: Param<Array>,
}

impl ScaledSinuEmbedding {
    fn new(src: &mut dyn Source, prefix: &str, dim: i32) -> Result<Self, Error> {
        Ok(Self {
            scale: Param::new(src.take(&join(prefix, "scale"), &[1], Init::Ones)?),
            inv_freq: Param::new(src.take(&join(prefix, "inv_freq"), &[dim / 2], Init::InverseFrequencies(dim))?),
        })
    }

    /// [L, dim] for an input of [B, L, _].
    fn forward(&self, x: &Array) -> R<Array> {
        let positions = Array::arange::<_, f32>(None, x.dim(1), None)?;
        let sinusoids = ops::expand_dims(&positions, 1)?.multiply(self.inv_freq.as_ref())?;
        let embeddings = ops::concatenate(&[ops::sin(&sinusoids)?, ops::cos(&sinusoids)?], -1)?;
        embeddings.multiply(self.scale.as_ref())
    }
}

/// MossFormer_MaskNet: from 180 filter-bank channels to a 961-bin mask.
#[derive(Debug, Clone, ModuleParameters)]
pub struct MaskNet {
    #[param]
    pub norm: GlobalLayerNorm,
    #[param]
    pub conv1d_encoder: Conv1d,
    #[param]
    pub pos_enc: ScaledSinuEmbedding,
    #[param]
    pub mdl: ComputationBlock,
    #[param]
    pub conv1d_out: Conv1d,
    #[param]
    pub conv1_decoder: Conv1d,
    #[param]
    pub prelu: Prelu,
    #[param]
    pub output: Conv1d,
    #[param]
    pub output_gate: Conv1d,
}

/// The network's fixed sizes (mlx-audio's `MossFormer_MaskNet(180, 512, 961)`
/// with 24 blocks and two speakers).
pub const IN_CHANNELS: i32 = 180;
pub const CHANNELS: i32 = 512;
pub const OUT_CHANNELS: i32 = 961;
pub const BLOCKS: usize = 24;
const SPEAKERS: i32 = 2;

impl MaskNet {
    pub(crate) fn new(src: &mut dyn Source, prefix: &str, split: Split) -> Result<Self, Error> {
        let p = |n| join(prefix, n);
        let norm = GlobalLayerNorm::new(src, &p("norm"), IN_CHANNELS)?;
        let conv1d_encoder = pointwise(src, &p("conv1d_encoder"), IN_CHANNELS, CHANNELS, false)?;
        let pos_enc = ScaledSinuEmbedding::new(src, &p("pos_enc"), CHANNELS)?;
        let mdl = ComputationBlock::new(src, &p("mdl"), CHANNELS, BLOCKS, split)?;
        let conv1d_out = pointwise(src, &p("conv1d_out"), CHANNELS, CHANNELS * SPEAKERS, true)?;
        let conv1_decoder = pointwise(src, &p("conv1_decoder"), CHANNELS, OUT_CHANNELS, false)?;
        let prelu = Prelu::new(src, &p("prelu"))?;
        let output = pointwise(src, &p("output"), CHANNELS, CHANNELS, true)?;
        let output_gate = pointwise(src, &p("output_gate"), CHANNELS, CHANNELS, true)?;
        Ok(Self { norm, conv1d_encoder, pos_enc, mdl, conv1d_out, conv1_decoder, prelu, output, output_gate })
    }

    /// [B, 180, L] to [B, L, 961].
    pub(crate) fn forward(&mut self, x: &Array) -> R<Array> {
        let x = self.norm.forward(x)?;
        let x = ops::transpose_axes(&x, &[0, 2, 1])?;
        let x = self.conv1d_encoder.forward(&x)?;
        let x = ops::transpose_axes(&x, &[0, 2, 1])?;

        let base = x;
        let xt = ops::transpose_axes(&base, &[0, 2, 1])?;
        let emb = self.pos_enc.forward(&xt)?;
        let (batch, length, dim) = (xt.dim(0), emb.dim(0), emb.dim(1));
        let emb = ops::broadcast_to(ops::expand_dims(&emb, 0)?, &[batch, length, dim])?;
        let emb = ops::transpose_axes(&emb, &[0, 2, 1])?;
        let x = base.add(&emb)?;

        let x = self.mdl.forward(&x)?;
        let x = self.prelu.forward(&x)?;

        let x = ops::transpose_axes(&x, &[0, 2, 1])?;
        let x = self.conv1d_out.forward(&x)?;
        let x = ops::transpose_axes(&x, &[0, 2, 1])?;
        let (b, s) = (x.dim(0), x.dim(2));
        let x = x.reshape(&[b * SPEAKERS, -1, s])?;

        let x = ops::transpose_axes(&x, &[0, 2, 1])?;
        let output_val = ops::tanh(self.output.forward(&x)?)?;
        let gate_val = ops::sigmoid(self.output_gate.forward(&x)?)?;
        let x = output_val.multiply(&gate_val)?;

        let x = self.conv1_decoder.forward(&x)?;
        let x = ops::transpose_axes(&x, &[0, 2, 1])?;
        let (n, l) = (x.dim(1), x.dim(2));
        let x = x.reshape(&[b, SPEAKERS, n, l])?;
        let x = relu(&x)?;
        let x = ops::transpose_axes(&x, &[1, 0, 2, 3])?;
        // `x[0]`: the first speaker, a slice with its axis dropped.
        let first = ops::squeeze_axes(x.index(0..1), &[0])?;
        ops::transpose_axes(&first, &[0, 2, 1])
    }
}

