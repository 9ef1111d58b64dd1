//! The recorded runs of the bases CI does not run belong to this tree
//! (docs/bases/; a slow check).

use mlx_workflows::checks;

#[test]
fn the_recorded_base_runs_are_current() {
    checks::run("base_records", |_| {
        mlx_workflows::base_record::check_records()
    });
}
