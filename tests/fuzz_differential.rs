//! The differential oracle over this run's fuzz slice: every program both
//! variants ran came out the same (a slow check, after `fuzz` ran on both).

use mlx_workflows::checks;

#[test]
fn patched_and_pristine_agree_on_every_program_of_the_fuzz_slice() {
    checks::run("fuzz_differential", |_| {
        Ok(mlx_workflows::fuzz::check_differential(
            &checks::run_report_dir()?,
        ))
    });
}
