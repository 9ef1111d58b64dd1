//! The recorded sanitizer runs belong to this tree (docs/sanitizers.md; a
//! slow check).

use mlx_workflows::checks;

#[test]
fn the_recorded_sanitizer_runs_are_current() {
    checks::run("sanitizer_records", |_| {
        mlx_workflows::sanitize::check_records()
    });
}
