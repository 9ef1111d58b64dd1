use mlx_bridge::{self as mx, linalg, Array};
fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let z = Array::from_f32(&[0.0; 4], &[2, 2]).unwrap();
    let r = match which.as_str() {
        "lu" => linalg::lu_factor(&z).and_then(|(a, _)| a.eval()),
        "inv" => linalg::inv(&z).and_then(|a| a.eval()),
        "invint" => linalg::inv(&Array::from_i32(&[1, 0, 0, 1], &[2, 2]).unwrap()).and_then(|a| a.eval()),
        _ => Ok(()),
    };
    println!("result: {r:?}");
    let _ = mx::synchronize();
}
