//! Where a model's parameters come from: a checkpoint under mlx-audio's
//! names, or fresh random values. The layers ask for each parameter by name,
//! shape and initializer, so the names and shapes are written once, in the
//! layers' constructors, and both sources obey them.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use mlx_rs::error::Exception;
use mlx_rs::{random, Array, Dtype};

use crate::Error;

/// How mlx-audio initializes a parameter, for the random source.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Init {
    Ones,
    Zeros,
    /// Uniform on (-bound, bound), as mlx's Linear and Conv layers draw.
    Uniform(f32),
    /// 1 + N(0, std²), OffsetScale's gamma.
    OnePlusNormal(f32),
    /// A constant, PReLU's slope.
    Fill(f32),
    /// ScaledSinuEmbedding's inverse frequencies for `dim`.
    InverseFrequencies(i32),
}

/// A supplier of named parameters.
pub(crate) trait Source {
    fn take(&mut self, name: &str, shape: &[i32], init: Init) -> Result<Array, Error>;
}

/// Joins a module path and a field name as mlx-audio's flattened names do.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The tensors of a checkpoint, taken one by one; whatever is left at the
/// end was not the model's.
pub(crate) struct Checkpoint {
    origin: String,
    tensors: HashMap<String, Array>,
}

impl Checkpoint {
    pub(crate) fn open(path: &Path) -> Result<Self, Error> {
        let bad = |reason: String| Error::NotSafetensors { path: path.to_path_buf(), reason };
        let bytes = std::fs::metadata(path).map_err(|e| Error::Read { path: path.to_path_buf(), source: e })?;
        if !bytes.is_file() {
            return Err(bad("not a regular file".into()));
        }
        check_header(path).map_err(bad)?;
        // mlx-rs decides the format by the extension; a checkpoint named
        // otherwise is read through a link that has the right one.
        let tensors = if path.extension().and_then(|e| e.to_str()) == Some("safetensors") {
            Array::load_safetensors(path)
        } else {
            let dir = std::env::temp_dir().join(format!("mossformer2-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| Error::Read { path: dir.clone(), source: e })?;
            let link = dir.join("checkpoint.safetensors");
            let _ = std::fs::remove_file(&link);
            let absolute = std::fs::canonicalize(path).map_err(|e| Error::Read { path: path.to_path_buf(), source: e })?;
            std::os::unix::fs::symlink(&absolute, &link).map_err(|e| Error::Read { path: link.clone(), source: e })?;
            let loaded = Array::load_safetensors(&link);
            let _ = std::fs::remove_dir_all(&dir);
            loaded
        }
        .map_err(|e| bad(e.to_string()))?;
        Ok(Self::from_tensors(path.display().to_string(), tensors))
    }

    pub(crate) fn from_tensors(origin: String, tensors: HashMap<String, Array>) -> Self {
        Self { origin, tensors }
    }

    /// Fails naming every tensor the model did not use.
    pub(crate) fn finish(self) -> Result<(), Error> {
        if self.tensors.is_empty() {
            return Ok(());
        }
        let names: BTreeSet<String> = self.tensors.into_keys().collect();
        Err(Error::Unexpected { origin: self.origin, names: names.into_iter().collect() })
    }
}

impl Source for Checkpoint {
    fn take(&mut self, name: &str, shape: &[i32], _init: Init) -> Result<Array, Error> {
        let a = self
            .tensors
            .remove(name)
            .ok_or_else(|| Error::Missing { origin: self.origin.clone(), name: name.to_string() })?;
        if a.shape() != shape {
            return Err(Error::Shape { name: name.to_string(), expected: shape.to_vec(), found: a.shape().to_vec() });
        }
        if a.dtype() != Dtype::Float32 {
            return Err(Error::Dtype { name: name.to_string(), found: format!("{:?}", a.dtype()) });
        }
        Ok(a)
    }
}

/// A safetensors file starts with the length of its JSON header, then the
/// header itself: checked before MLX reads it, so that a file of another
/// kind gets an error that says so.
fn check_header(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let total = f.metadata().map_err(|e| e.to_string())?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|_| format!("{total} bytes: too short for a safetensors header"))?;
    let n = u64::from_le_bytes(len);
    if n == 0 || n > total - 8 || n > 100 << 20 {
        return Err(format!("header length {n} does not fit a file of {total} bytes"));
    }
    let mut first = [0u8; 1];
    f.read_exact(&mut first).map_err(|e| e.to_string())?;
    if first[0] != b'{' {
        return Err("the header is not a JSON object".into());
    }
    Ok(())
}

/// Fresh parameters drawn from MLX's global random state, with mlx-audio's
/// initializers: what building `TestNet()` does in Python.
pub(crate) struct Fresh;

impl Source for Fresh {
    fn take(&mut self, _name: &str, shape: &[i32], init: Init) -> Result<Array, Error> {
        Ok(fresh(shape, init)?)
    }
}

fn fresh(shape: &[i32], init: Init) -> Result<Array, Exception> {
    Ok(match init {
        Init::Ones => Array::ones::<f32>(shape)?,
        Init::Zeros => Array::zeros::<f32>(shape)?,
        Init::Uniform(bound) => random::uniform::<_, f32>(-bound, bound, shape, None)?,
        Init::OnePlusNormal(std) => random::normal::<f32>(shape, None, std, None)?.add(Array::from_f32(1.0))?,
        Init::Fill(v) => mlx_rs::ops::full::<f32>(shape, Array::from_f32(v))?,
        Init::InverseFrequencies(dim) => {
            let positions = Array::arange::<_, f32>(0, dim, 2)?;
            let exponent = positions.divide(Array::from_f32(dim as f32))?;
            Array::from_f32(1.0).divide(Array::from_f32(10000.0).power(&exponent)?)?
        }
    })
}
