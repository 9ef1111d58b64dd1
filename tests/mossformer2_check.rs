//! MossFormer2_SE's Rust port (`crates/mossformer2`) against mlx-audio's
//! Python model, bit for bit on the same MLX build, on patched and pristine
//! (docs/mossformer2.md; a slow check).

use mlx_workflows::checks;

#[test]
fn the_rust_port_equals_mlx_audio_bit_for_bit() {
    checks::run("mossformer2_check", mlx_workflows::mossformer2::check);
}
