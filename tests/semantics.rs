//! What must still hold with the fix (and holds on pristine): an output of an
//! unevaluated multi-output op stays computable while its siblings and their
//! consumers go away; transforms through `split`; compiled == uncompiled.

use mlx_bridge::{self as mlx, linalg, Array, Dtype, Result};

/// Output bits: the dtype and the raw bytes, so integers (e.g. the packed
/// `u32` words of quantize) compare as integers, never through a float.
fn bits(a: &Array) -> (Dtype, Vec<u8>) {
    (a.dtype(), a.to_bytes().unwrap())
}

fn matrix(n: i32, seed: u64) -> Array {
    let a = mlx::random::normal(&[n, n], Dtype::F32, &mlx::random::key(seed)).unwrap();
    a.eval().unwrap();
    a
}

/// A symmetric positive definite matrix: a a^T + n I.
fn spd(n: i32) -> Array {
    let a = matrix(n, 7);
    let eye: Vec<f32> = (0..n * n)
        .map(|i| if i % (n + 1) == 0 { n as f32 } else { 0.0 })
        .collect();
    let s = mlx::add(
        &mlx::matmul(&a, &mlx::transpose(&a).unwrap()).unwrap(),
        &Array::from_f32(&eye, &[n, n]).unwrap(),
    )
    .unwrap();
    s.eval().unwrap();
    s
}

/// Builds the op's outputs fresh, keeps output `keep`, gives each other output
/// a consumer, drops consumers and siblings (in both orders), then evaluates
/// the kept output: it must equal the output of an undisturbed evaluation.
fn held_output_survives(what: &str, make: impl Fn() -> Result<Vec<Array>>, keep: usize) {
    let reference = {
        let outs = make().unwrap();
        mlx::eval(&outs).unwrap();
        bits(&outs[keep])
    };
    for consumers_first in [true, false] {
        let held = {
            let mut outs = make().unwrap();
            let held = outs[keep].clone();
            let consumers: Vec<Array> = outs
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != keep)
                .map(|(_, o)| mlx::add(o, o).unwrap())
                .collect();
            if consumers_first {
                drop(consumers);
                outs.clear();
            } else {
                outs.clear();
                drop(consumers);
            }
            held
        };
        assert_eq!(
            bits(&held),
            reference,
            "{what}: output {keep} (consumers dropped first: {consumers_first})"
        );
    }
}

fn v2(p: (Array, Array)) -> Vec<Array> {
    vec![p.0, p.1]
}

fn v3(p: (Array, Array, Array)) -> Vec<Array> {
    vec![p.0, p.1, p.2]
}

#[test]
fn held_output_of_split_survives() {
    let x = mlx::reshape(&mlx::arange(0.0, 24.0, 1.0, Dtype::F32).unwrap(), &[4, 6]).unwrap();
    x.eval().unwrap();
    for keep in 0..2 {
        held_output_survives("split in 2", || mlx::split(&x, 2, 1), keep);
    }
    for keep in 0..3 {
        held_output_survives("split in 3", || mlx::split(&x, 3, 1), keep);
        held_output_survives("split at indices", || mlx::split_at(&x, &[1, 4], 1), keep);
    }
    // And the values themselves, not only agreement with a reference.
    let held = {
        let parts = mlx::split(&x, 2, 1).unwrap();
        let _consumer = mlx::multiply(&parts[1], &Array::scalar_f32(2.0)).unwrap();
        parts[0].clone()
    };
    assert_eq!(
        held.to_vec_f32().unwrap(),
        vec![0., 1., 2., 6., 7., 8., 12., 13., 14., 18., 19., 20.]
    );
}

#[test]
fn held_output_of_divmod_survives() {
    // Non-negative operands: MLX's CPU kernel truncates, Metal floors.
    let a = Array::from_f32(&[7.0, 10.0, 9.5, 3.0], &[4]).unwrap();
    let b = Array::from_f32(&[2.0, 3.0, 4.0, 2.0], &[4]).unwrap();
    held_output_survives("divmod", || mlx::divmod(&a, &b).map(v2), 0);
    held_output_survives("divmod", || mlx::divmod(&a, &b).map(v2), 1);
    let (q, r) = mlx::divmod(&a, &b).unwrap();
    drop(q);
    assert_eq!(r.to_vec_f32().unwrap(), vec![1.0, 1.0, 1.5, 1.0]);
}

#[test]
fn held_output_of_linalg_factorizations_survives() {
    let a = matrix(6, 3);
    let s = spd(5);
    for keep in 0..2 {
        held_output_survives("qr", || linalg::qr(&a).map(v2), keep);
        held_output_survives("eigh", || linalg::eigh(&s, "L").map(v2), keep);
        held_output_survives("eig", || linalg::eig(&s).map(v2), keep);
        held_output_survives("lu_factor", || linalg::lu_factor(&a).map(v2), keep);
    }
    for keep in 0..3 {
        held_output_survives("svd", || linalg::svd(&a).map(v3), keep);
        held_output_survives("lu", || linalg::lu(&a).map(v3), keep);
    }
}

#[test]
fn held_output_of_quantize_survives() {
    let w = mlx::random::normal(&[8, 64], Dtype::F32, &mlx::random::key(11)).unwrap();
    for keep in 0..3 {
        held_output_survives("quantize", || mlx::quantize(&w, 32, 4).map(v3), keep);
    }
}

#[test]
fn held_output_of_a_multi_output_vjp_survives() {
    // The VJP of fast::rms_norm is one multi-output primitive (dx, dweight).
    let x = mlx::random::normal(&[4, 16], Dtype::F32, &mlx::random::key(5)).unwrap();
    let w = mlx::random::normal(&[16], Dtype::F32, &mlx::random::key(6)).unwrap();
    let ct = mlx::ones(&[4, 16], Dtype::F32).unwrap();
    let make = || {
        mlx::vjp(
            |p: &[Array]| Ok(vec![mlx::fast::rms_norm(&p[0], Some(&p[1]), 1e-5)?]),
            &[x.clone(), w.clone()],
            std::slice::from_ref(&ct),
        )
        .map(|(_, g)| g)
    };
    held_output_survives("rms_norm vjp", make, 0);
    held_output_survives("rms_norm vjp", make, 1);
}

#[test]
fn vjp_through_split() {
    // f(x) = sum(3 a + 5 b) with (a, b) = split(x): df/dx is 3 then 5.
    let x = mlx::arange(0.0, 8.0, 1.0, Dtype::F32).unwrap();
    let f = |p: &[Array]| {
        let parts = mlx::split(&p[0], 2, 0)?;
        let y = mlx::add(
            &mlx::multiply(&parts[0], &Array::scalar_f32(3.0))?,
            &mlx::multiply(&parts[1], &Array::scalar_f32(5.0))?,
        )?;
        Ok(vec![mlx::sum(&y)?])
    };
    let (outs, grads) = mlx::vjp(f, &[x], &[Array::scalar_f32(1.0)]).unwrap();
    assert_eq!(outs[0].to_vec_f32().unwrap(), vec![3.0 * 6.0 + 5.0 * 22.0]);
    assert_eq!(
        grads[0].to_vec_f32().unwrap(),
        vec![3., 3., 3., 3., 5., 5., 5., 5.]
    );
}

#[test]
fn vmap_through_split() {
    let x = mlx::reshape(&mlx::arange(0.0, 12.0, 1.0, Dtype::F32).unwrap(), &[3, 4]).unwrap();
    let swap = |p: &[Array]| {
        let parts = mlx::split(&p[0], 2, 0)?;
        Ok(vec![mlx::concatenate(
            &[parts[1].clone(), parts[0].clone()],
            0,
        )?])
    };
    let mapped = mlx::vmap(swap, &[0], &[0]).unwrap().call(&[x]).unwrap();
    assert_eq!(mapped[0].shape(), vec![3, 4]);
    assert_eq!(
        mapped[0].to_vec_f32().unwrap(),
        vec![2., 3., 0., 1., 6., 7., 4., 5., 10., 11., 8., 9.]
    );
}

#[test]
fn compiled_is_bit_identical_to_uncompiled_over_many_calls_and_shapes() {
    let weights: Vec<Array> = (0..4)
        .map(|i| mlx::random::normal(&[32, 32], Dtype::F32, &mlx::random::key(100 + i)).unwrap())
        .collect();
    mlx::eval(&weights).unwrap();
    let forward = {
        let weights = weights.clone();
        move |p: &[Array]| -> Result<Vec<Array>> {
            let mut x = p[0].clone();
            for w in &weights {
                let parts = mlx::split(&mlx::matmul(&x, w)?, 2, -1)?;
                x = mlx::add(
                    &mlx::concatenate(&[parts[1].clone(), parts[0].clone()], -1)?,
                    &Array::scalar_f32(0.5),
                )?;
            }
            Ok(vec![x])
        }
    };
    let compiled = mlx::compile(forward.clone());
    for (call, batch) in [1, 1, 1, 4, 4, 2, 1, 4, 3, 3].into_iter().enumerate() {
        let x =
            mlx::random::normal(&[batch, 32], Dtype::F32, &mlx::random::key(call as u64)).unwrap();
        let expected = bits(&forward(std::slice::from_ref(&x)).unwrap()[0]);
        let got = bits(&compiled.call(&[x]).unwrap()[0]);
        assert_eq!(got, expected, "call {call} with batch {batch}");
    }
}
