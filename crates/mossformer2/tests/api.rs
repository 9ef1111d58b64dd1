//! The port's size and its errors: what a user meets first.

use std::collections::HashMap;

use mlx_rs::Array;
use mossformer2::{Error, MossFormer2SE, Split};

fn fresh() -> MossFormer2SE {
    MossFormer2SE::fresh(0, Split::Op).expect("a fresh model")
}

#[test]
fn the_model_has_mlx_audios_size_and_names() {
    let m = fresh();
    let named = m.named_parameters();
    // mlx-audio 0.6.2's TestNet: 905 tensors, 55,262,410 float32 values.
    assert_eq!(named.len(), 905);
    assert_eq!(m.parameter_bytes(), 55_262_410 * 4);
    assert_eq!(format!("{:.1}", m.parameter_bytes() as f64 / 1048576.0), "210.8");
    for name in [
        "mossformer.norm.weight",
        "mossformer.pos_enc.inv_freq",
        "mossformer.mdl.intra_mdl.mossformerM.layers.23.to_hidden.norm.g",
        "mossformer.mdl.intra_mdl.mossformerM.fsmn.0.gated_fsmn.fsmn.conv1.weight",
        "mossformer.mdl.intra_norm.bias",
        "mossformer.output_gate.bias",
    ] {
        assert!(named.contains_key(name), "no parameter {name}");
    }
}

#[test]
fn a_saved_model_loads_back_and_gives_the_same_bits() {
    let mut m = fresh();
    m.eval_parameters().unwrap();
    let dir = std::env::temp_dir().join(format!("mossformer2-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weights.safetensors");
    Array::save_safetensors(m.named_parameters(), None, &path).unwrap();
    let mut back = MossFormer2SE::load(&path, Split::Op).unwrap();
    let x = mlx_rs::random::normal::<f32>(&[1, 5, 180][..], None, None, &mlx_rs::random::key(3).unwrap()).unwrap();
    let (a, b) = (m.mask(&x).unwrap(), back.mask(&x).unwrap());
    assert_eq!(a.shape(), &[1, 5, 961]);
    let bits = |a: &Array| a.as_slice::<f32>().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
    // The ablation computes the same bits.
    let mut sliced = MossFormer2SE::load(&path, Split::Slices).unwrap();
    assert_eq!(bits(&a), bits(&sliced.mask(&x).unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tensors() -> HashMap<String, Array> {
    fresh().named_parameters()
}

#[test]
fn a_missing_tensor_is_named() {
    let mut t = tensors();
    t.remove("mossformer.conv1d_out.bias");
    let e = MossFormer2SE::from_tensors(t, Split::Op).unwrap_err();
    assert!(matches!(&e, Error::Missing { name, .. } if name == "mossformer.conv1d_out.bias"), "{e}");
}

#[test]
fn a_wrong_shape_is_named_with_both_shapes() {
    let mut t = tensors();
    t.insert("mossformer.prelu.weight".into(), Array::zeros::<f32>(&[2]).unwrap());
    let e = MossFormer2SE::from_tensors(t, Split::Op).unwrap_err();
    assert!(matches!(&e, Error::Shape { name, expected, found } if name == "mossformer.prelu.weight" && expected == &[1] && found == &[2]), "{e}");
}

#[test]
fn a_wrong_type_is_refused() {
    let mut t = tensors();
    t.insert("mossformer.prelu.weight".into(), Array::zeros::<i32>(&[1]).unwrap());
    let e = MossFormer2SE::from_tensors(t, Split::Op).unwrap_err();
    assert!(matches!(&e, Error::Dtype { .. }), "{e}");
}

#[test]
fn a_tensor_of_another_model_is_refused() {
    let mut t = tensors();
    t.insert("decoder.weight".into(), Array::zeros::<f32>(&[1]).unwrap());
    let e = MossFormer2SE::from_tensors(t, Split::Op).unwrap_err();
    assert!(matches!(&e, Error::Unexpected { names, .. } if names == &["decoder.weight"]), "{e}");
}

#[test]
fn a_file_that_is_not_safetensors_says_so() {
    let dir = std::env::temp_dir().join(format!("mossformer2-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weights.safetensors");
    std::fs::write(&path, b"PK\x03\x04 a zip archive, not tensors").unwrap();
    let e = MossFormer2SE::load(&path, Split::Op).unwrap_err();
    assert!(matches!(&e, Error::NotSafetensors { .. }), "{e}");
    let e = MossFormer2SE::load(dir.join("absent.safetensors"), Split::Op).unwrap_err();
    assert!(matches!(&e, Error::Read { .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inputs_of_the_wrong_shape_or_type_are_refused() {
    let mut m = fresh();
    for bad in [
        Array::zeros::<f32>(&[8, 180]).unwrap(),
        Array::zeros::<f32>(&[1, 8, 181]).unwrap(),
        Array::zeros::<f32>(&[1, 0, 180]).unwrap(),
        Array::zeros::<i32>(&[1, 8, 180]).unwrap(),
    ] {
        let e = m.mask(&bad).unwrap_err();
        assert!(matches!(&e, Error::Input { .. }), "{e}");
    }
}
