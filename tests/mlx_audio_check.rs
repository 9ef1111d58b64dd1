//! The fork under mlx-audio 0.6.2, which pins mlx==0.32.4: its install on
//! every base, and on 0.32.4 its suite and the report's model in a server
//! loop (docs/mlx-audio.md; a slow check).

use mlx_workflows::checks;

#[test]
fn mlx_audio_over_the_fork() {
    checks::run("mlx_audio_check", mlx_workflows::mlx_audio::check);
}
