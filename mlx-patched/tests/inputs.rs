//! Bad inputs get clear errors and change nothing: a tree that is not MLX, a
//! carrier whose tree id is not the pin, a carrier patch that does not
//! reverse, a recovered tree that is not the pinned one, a patch that does
//! not apply, a bad variable.

use mlx_patched::{
    from_override, patch, recover_upstream, tree_id, verify_tree, Env, Host, Options, Progress,
    VARIANTS,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mlx-patched-test-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tiny tree shaped like MLX's top level.
fn fake_mlx(dir: &Path) {
    fs::create_dir_all(dir.join("mlx")).unwrap();
    fs::write(dir.join("CMakeLists.txt"), "project(mlx)\n").unwrap();
    fs::write(
        dir.join("mlx/array.h"),
        "int a = 1;\nint b = 2;\nint c = 3;\n",
    )
    .unwrap();
}

#[test]
fn tree_id_is_what_git_write_tree_prints() {
    let dir = scratch("tree-id");
    fake_mlx(&dir);
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(git(&["init", "-q"]).status.success());
    assert!(git(&["add", "-A"]).status.success());
    let expected = String::from_utf8(git(&["write-tree"]).stdout).unwrap();
    // The checkout's own .git is not part of the tree.
    assert_eq!(tree_id(&dir).unwrap(), expected.trim());
}

#[test]
fn source_dir_that_is_not_mlx_is_refused() {
    let dir = scratch("not-mlx");
    let err = from_override(dir.clone()).unwrap_err().to_string();
    assert!(
        err.contains("is not an MLX source tree") && err.contains(&dir.display().to_string()),
        "{err}"
    );
    let err = from_override(dir.join("missing")).unwrap_err().to_string();
    assert!(err.contains("MLX_SOURCE_DIR="), "{err}");
}

#[test]
fn source_dir_override_reports_its_tree_id() {
    let dir = scratch("override");
    fake_mlx(&dir);
    let up = from_override(dir.clone()).unwrap();
    assert_eq!(up.tree_id, tree_id(&dir).unwrap());
    assert_eq!(up.tree_id.len(), 40);
}

#[test]
fn tree_with_another_tree_id_is_refused() {
    let dir = scratch("carrier");
    fake_mlx(&dir);
    let pinned = mlx_patched::pin::Base::default_base().upstream_tree_id;
    let err = verify_tree(&dir, pinned, "the tree")
        .unwrap_err()
        .to_string();
    assert_ne!(tree_id(&dir).unwrap(), pinned);
    assert!(
        err.contains("refusing") && err.contains(pinned) && err.contains(&tree_id(&dir).unwrap()),
        "{err}"
    );
    assert!(verify_tree(&dir, &tree_id(&dir).unwrap(), "the tree").is_ok());
}

/// A carrier package: `vendor/mlx` is upstream's fake tree with the
/// carrier's two patches applied, and `patches/` holds them.
fn fake_carrier(dir: &Path) -> (String, String) {
    let vendored = dir.join("vendor/mlx");
    fake_mlx(&vendored);
    let upstream = tree_id(&vendored).unwrap();
    fs::create_dir_all(dir.join("patches")).unwrap();
    fs::write(dir.join("patches/0001-b.patch"), "--- a/mlx/array.h\n+++ b/mlx/array.h\n@@ -1,3 +1,3 @@\n int a = 1;\n-int b = 2;\n+int b = 20;\n int c = 3;\n").unwrap();
    // The second patch edits the first one's line: they only reverse newest first.
    fs::write(dir.join("patches/0002-b-again.patch"), "--- a/mlx/array.h\n+++ b/mlx/array.h\n@@ -1,3 +1,3 @@\n int a = 1;\n-int b = 20;\n+int b = 200;\n int c = 3;\n").unwrap();
    fs::write(dir.join("patches/README.md"), "not a patch\n").unwrap();
    let series = patch::series(&dir.join("patches")).unwrap();
    patch::apply_series(&vendored, &series, "the fake upstream", None).unwrap();
    (tree_id(&vendored).unwrap(), upstream)
}

#[test]
fn upstream_is_recovered_by_reversing_the_carrier_patches_newest_first() {
    let dir = scratch("recover");
    let carrier = dir.join("carrier");
    let (carrier_id, upstream_id) = fake_carrier(&carrier);
    assert_ne!(carrier_id, upstream_id);
    let up = recover_upstream(
        &carrier,
        "9.9.9",
        &dir.join("upstream"),
        Some((&carrier_id, &upstream_id)),
    )
    .unwrap();
    assert_eq!(up.tree_id, upstream_id);
    assert_eq!(tree_id(&up.dir).unwrap(), upstream_id);
    assert!(fs::read_to_string(up.dir.join("mlx/array.h"))
        .unwrap()
        .contains("int b = 2;\n"));
    // The carrier itself is untouched.
    assert_eq!(tree_id(&carrier.join("vendor/mlx")).unwrap(), carrier_id);
    // Without a pin (a rebase target) the ids are reported, not checked.
    let free = recover_upstream(&carrier, "9.9.9", &dir.join("free"), None).unwrap();
    assert_eq!(
        (
            free.tree_id.as_str(),
            free.carrier.unwrap().tree_id.as_str()
        ),
        (upstream_id.as_str(), carrier_id.as_str())
    );
}

#[test]
fn carrier_without_patches_is_upstream_as_shipped() {
    let dir = scratch("no-patches");
    let carrier = dir.join("carrier");
    fake_mlx(&carrier.join("vendor/mlx"));
    let id = tree_id(&carrier.join("vendor/mlx")).unwrap();
    let up = recover_upstream(&carrier, "1.0.0", &dir.join("upstream"), Some((&id, &id))).unwrap();
    assert_eq!(up.tree_id, id);
}

#[test]
fn carrier_patch_that_does_not_reverse_is_named() {
    let dir = scratch("no-reverse");
    let carrier = dir.join("carrier");
    let (carrier_id, upstream_id) = fake_carrier(&carrier);
    // The shipped tree no longer matches what the patch left behind.
    fs::write(
        carrier.join("vendor/mlx/mlx/array.h"),
        "int a = 1;\nint b = 7;\nint c = 3;\n",
    )
    .unwrap();
    let err = recover_upstream(&carrier, "9.9.9", &dir.join("upstream"), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("0002-b-again.patch")
            && err.contains("does not reverse")
            && err.contains("mlx/array.h"),
        "{err}"
    );
    // With the pin, the changed carrier tree is refused before anything is reversed.
    let err = recover_upstream(
        &carrier,
        "9.9.9",
        &dir.join("upstream"),
        Some((&carrier_id, &upstream_id)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("refusing") && err.contains(&carrier_id),
        "{err}"
    );
}

#[test]
fn recovered_tree_that_is_not_the_pinned_one_is_refused() {
    let dir = scratch("wrong-upstream");
    let carrier = dir.join("carrier");
    let (carrier_id, _) = fake_carrier(&carrier);
    let wrong = "0123456789012345678901234567890123456789";
    let err = recover_upstream(
        &carrier,
        "9.9.9",
        &dir.join("upstream"),
        Some((&carrier_id, wrong)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(wrong)
            && err.contains("0001-b.patch, 0002-b-again.patch")
            && err.contains("nothing was built"),
        "{err}"
    );
    assert!(!dir.join("upstream").join(wrong).exists());
}

#[test]
fn bad_jobs_value_is_an_error() {
    // Each test binary is its own process; this one sets the variable only here.
    std::env::set_var(mlx_patched::vars::MLX_PATCHED_JOBS.name, "many");
    let err = Options::from_env(Env::process(), Path::new("/tmp"), false)
        .unwrap_err()
        .to_string();
    std::env::remove_var(mlx_patched::vars::MLX_PATCHED_JOBS.name);
    assert!(
        err.contains("MLX_PATCHED_JOBS") && err.contains("many"),
        "{err}"
    );
}

#[test]
fn a_relative_mlx_sys_prefix_is_an_error_naming_the_path_it_would_mean() {
    // Only this test reads MLX_SYS_PREFIX.
    std::env::set_var(mlx_patched::vars::MLX_SYS_PREFIX.name, "some/prefix");
    let got = Env::process().mlx_sys_prefix();
    std::env::set_var(mlx_patched::vars::MLX_SYS_PREFIX.name, "/abs/prefix");
    let absolute = Env::process().mlx_sys_prefix();
    std::env::remove_var(mlx_patched::vars::MLX_SYS_PREFIX.name);
    let err = got.unwrap_err().to_string();
    let meant = std::env::current_dir().unwrap().join("some/prefix");
    assert!(
        err.contains("MLX_SYS_PREFIX=some/prefix") && err.contains(&meant.display().to_string()),
        "{err}"
    );
    assert_eq!(absolute.unwrap(), Some(PathBuf::from("/abs/prefix")));
}

#[test]
fn env_rs_reads_every_variable_through_its_constant() {
    // Every variable the code reads is declared once, in `variables!`, and
    // read through its constant (a build script's read is then a rerun
    // trigger): no name is read as a bare string. The tidy test
    // (`crates/workflows/tests/tidy.rs`) holds the rest of the tree to the
    // declarations, and the page to the table.
    let code =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/env.rs")).unwrap();
    for call in [
        "self.read(\"",
        "self.read_string(\"",
        "var_os(\"",
        "env::var(\"",
    ] {
        assert!(
            !code.contains(call),
            "env.rs reads a variable by a bare name ({call}...): declare it in `variables!`"
        );
    }
}

#[test]
fn patch_that_does_not_apply_names_patch_tree_and_hunk() {
    let dir = scratch("patch");
    let tree = dir.join("tree");
    fake_mlx(&tree);
    let good = dir.join("0001-good.patch");
    fs::write(&good, "--- a/mlx/array.h\n+++ b/mlx/array.h\n@@ -1,3 +1,3 @@\n int a = 1;\n-int b = 2;\n+int b = 20;\n int c = 3;\n").unwrap();
    let bad = dir.join("0002-bad.patch");
    fs::write(&bad, "--- a/mlx/array.h\n+++ b/mlx/array.h\n@@ -1,3 +1,3 @@\n int a = 1;\n-int b = 999;\n+int b = 3;\n int c = 3;\n").unwrap();
    let err = patch::apply_series(&tree, &[good.clone(), bad], "MLX v0.31.2 (tree x)", None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("0002-bad.patch")
            && err.contains("MLX v0.31.2 (tree x)")
            && err.contains("mlx/array.h:1"),
        "{err}"
    );
    // The good patch applied before it, in order; nothing was skipped silently.
    assert!(fs::read_to_string(tree.join("mlx/array.h"))
        .unwrap()
        .contains("int b = 20;"));
}

#[test]
fn series_is_applied_in_file_name_order() {
    let dir = scratch("order");
    fs::write(dir.join("0002-b.patch"), "").unwrap();
    fs::write(dir.join("0001-a.patch"), "").unwrap();
    fs::write(dir.join("notes.txt"), "").unwrap();
    let names: Vec<String> = patch::series(&dir)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["0001-a.patch", "0002-b.patch"]);
}

#[test]
fn a_build_tells_cargo_about_every_file_it_reads() {
    let dir = scratch("tracked");
    let tree = dir.join("tree");
    fake_mlx(&tree);
    let series = dir.join("series");
    fs::create_dir_all(&series).unwrap();
    let fix = series.join("0001-fix.patch");
    fs::write(&fix, "--- a/mlx/array.h\n+++ b/mlx/array.h\n@@ -1,3 +1,3 @@\n int a = 1;\n-int b = 2;\n+int b = 20;\n int c = 3;\n").unwrap();
    let upstream = from_override(tree).unwrap();
    let opts = Options {
        base: mlx_patched::pin::Base::default_base(),
        root: dir.join("build"),
        host: Host::here(false),
        jobs: 1,
        extra_cmake_args: Vec::new(),
        patches_dir: series.clone(),
        env: Env::build_script(),
        tests: false,
        progress: Progress::Quiet,
        sanitizer: None,
    };
    // The fake tree is no MLX CMake project: each build stops before CMake,
    // after it has read its inputs.
    for v in VARIANTS {
        assert!(mlx_patched::build_from(*v, &upstream, &opts).is_err());
    }
    let tracked = Env::tracked_files();
    assert!(
        tracked.contains(&series),
        "the series directory (a patch added or removed): {tracked:?}"
    );
    assert!(
        tracked.contains(&fix),
        "each patch of the series: {tracked:?}"
    );
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for v in VARIANTS {
        for p in v.extra_patches {
            assert!(
                tracked.contains(&workspace.join(p)),
                "{v}'s own patch {p}: {tracked:?}"
            );
        }
    }
}

#[test]
fn upstream_fixed_is_1_or_0_and_nothing_else() {
    // Only this test reads MLX_FORK_UPSTREAM_FIXED.
    let read = |v: &str| {
        std::env::set_var(mlx_patched::vars::MLX_FORK_UPSTREAM_FIXED.name, v);
        std::panic::catch_unwind(|| Env::process().upstream_fixed())
    };
    let (one, zero, empty, yes) = (read("1"), read("0"), read(""), read("yes"));
    std::env::remove_var(mlx_patched::vars::MLX_FORK_UPSTREAM_FIXED.name);
    assert!(one.unwrap());
    assert!(!zero.unwrap(), "0 must not count as set");
    assert!(!empty.unwrap());
    let err = yes.unwrap_err();
    let message = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("MLX_FORK_UPSTREAM_FIXED=\"yes\""),
        "{message}"
    );
}

/// Cargo reruns a build script on every build while a watched path is
/// missing: a missing input is watched through the nearest folder above it
/// that exists, and an input that exists is watched as itself.
#[test]
fn a_missing_input_is_watched_through_the_folder_above_it() {
    let dir = std::env::temp_dir().join(format!("watched-{}", std::process::id()));
    fs::create_dir_all(dir.join("patches")).unwrap();
    let missing = dir.join("patches/v9.9.9/0001-x.patch");
    assert_eq!(mlx_patched::watched(&missing), dir.join("patches"));
    fs::create_dir_all(dir.join("patches/v9.9.9")).unwrap();
    assert_eq!(mlx_patched::watched(&missing), dir.join("patches/v9.9.9"));
    fs::write(&missing, "").unwrap();
    assert_eq!(mlx_patched::watched(&missing), missing);
    fs::remove_dir_all(&dir).unwrap();
}
