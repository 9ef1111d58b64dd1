use super::*;
use mlx_harness::paths::workspace_root;

#[test]
fn every_bug_check_names_a_patch_of_the_series() {
    let names = patch::names(&patch::series(&patch::series_dir()).unwrap());
    for (stem, bug) in BUGS {
        let file = format!("{stem}.patch");
        assert!(names.contains(&file), "{stem} is not in patches/");
        assert_eq!(bug_of(&file), Some(*bug));
    }
    assert_eq!(bug_of("0003-divmod-vmap-one-axis-per-output.patch"), None);
}

#[test]
fn a_new_base_row_goes_into_the_table_inside_impl_base() {
    let pin_rs = std::fs::read_to_string(workspace_root().join("crates/facts/src/bases.rs")).unwrap();
    let t = NewBase {
        version: "0.33.0".into(),
        carrier: "0.3.0".into(),
        carrier_tree_id: "a".repeat(40),
        upstream_tree_id: "b".repeat(40),
        wheels: ("c".repeat(64), "d".repeat(64)),
        fixed_upstream: vec!["0003-divmod-vmap-one-axis-per-output".into()],
    };
    let text = with_base_row(&pin_rs, &t).unwrap();
    assert!(text.contains("pub const V0_33_0: Base = Base {"));
    assert!(text.contains(", Base::V0_33_0];"), "the table lists it last");
    assert!(text.contains("patch: \"0003-divmod-vmap-one-axis-per-output\","));
    // The row sits inside `impl Base`, before the accessors.
    let row = text.find("pub const V0_33_0").unwrap();
    assert!(row < text.find("pub fn default_base").unwrap());
    assert!(with_base_row("no table here", &t).is_err());
}

#[test]
fn any_retained_byte_in_any_cycle_is_a_leak() {
    assert!(!retains(&[0, 0, 0]));
    assert!(retains(&[12 << 20, 12 << 20, 12 << 20]));
    assert!(retains(&[0, 24 << 20, 0]));
    assert!(!retains(&[-4096, 0, 0]));
}

#[test]
fn every_port_replaces_a_patch_of_the_series() {
    let dir = patch::series_dir();
    let names: Vec<_> = patch::series(&dir)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let ports = entry.unwrap().path();
        if !ports.is_dir() {
            continue;
        }
        for port in patch::series(&ports).unwrap() {
            assert!(
                names.contains(&port.file_name().unwrap().to_owned()),
                "{} ports no patch of the series",
                port.display()
            );
        }
    }
}
