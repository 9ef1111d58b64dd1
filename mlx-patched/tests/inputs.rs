//! Bad inputs get clear errors and change nothing: a tree that is not MLX, a
//! carrier whose tree id is not the pin, a patch that does not apply.

use mlx_patched::{from_override, patch, tree_id, verify_pinned};
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
    fs::write(dir.join("mlx/array.h"), "int a = 1;\nint b = 2;\nint c = 3;\n").unwrap();
}

#[test]
fn tree_id_is_what_git_write_tree_prints() {
    let dir = scratch("tree-id");
    fake_mlx(&dir);
    let git = |args: &[&str]| Command::new("git").current_dir(&dir).args(args).output().unwrap();
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
    assert!(err.contains("is not an MLX source tree") && err.contains(&dir.display().to_string()), "{err}");
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
fn carrier_with_another_tree_id_is_refused() {
    let dir = scratch("carrier");
    fake_mlx(&dir);
    let pinned = mlx_patched::pin::UPSTREAM_TREE_ID;
    let err = verify_pinned(dir.clone(), pinned).unwrap_err().to_string();
    assert_ne!(tree_id(&dir).unwrap(), pinned);
    assert!(err.contains("refusing") && err.contains(pinned) && err.contains(&tree_id(&dir).unwrap()), "{err}");
    assert!(verify_pinned(dir.clone(), &tree_id(&dir).unwrap()).is_ok());
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
    let err = patch::apply_series(&tree, &[good.clone(), bad], "MLX v0.31.2 (tree x)", None).unwrap_err().to_string();
    assert!(err.contains("0002-bad.patch") && err.contains("MLX v0.31.2 (tree x)") && err.contains("mlx/array.h:1"), "{err}");
    // The good patch applied before it, in order; nothing was skipped silently.
    assert!(fs::read_to_string(tree.join("mlx/array.h")).unwrap().contains("int b = 20;"));
}

#[test]
fn series_is_applied_in_file_name_order() {
    let dir = scratch("order");
    fs::write(dir.join("0002-b.patch"), "").unwrap();
    fs::write(dir.join("0001-a.patch"), "").unwrap();
    fs::write(dir.join("notes.txt"), "").unwrap();
    let names: Vec<String> = patch::series(&dir).unwrap().iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["0001-a.patch", "0002-b.patch"]);
}
