//! The lock files of the projects outside the workspace list what the
//! build crate depends on by path (their checks fetch with `--locked`).

use crate::{report, tracked};

fn path_dependencies(manifest: &str, workspace_manifest: &str) -> Vec<String> {
    let section = |text: &str, name: &str| -> Vec<String> {
        let mut lines = Vec::new();
        let mut inside = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                inside = line == name;
            } else if inside && !line.is_empty() && !line.starts_with('#') {
                lines.push(line.to_string());
            }
        }
        lines
    };
    let workspace_paths: Vec<String> = section(workspace_manifest, "[workspace.dependencies]")
        .into_iter()
        .filter(|l| l.contains("path ="))
        .filter_map(|l| l.split_once(' ').map(|(n, _)| n.trim_end_matches('=').to_string()))
        .collect();
    section(manifest, "[dependencies]")
        .into_iter()
        .filter_map(|l| {
            let name = l.split(['=', '.', ' ']).next()?.to_string();
            let by_path = l.contains("path =")
                || (l.contains(".workspace = true") && workspace_paths.contains(&name));
            by_path.then_some(name)
        })
        .collect()
}

/// Each lock file of a project outside the workspace that reaches
/// `mlx-patched` (through the drop-in `mlx-sys`) lists what `mlx-patched`
/// depends on by path: its checks fetch with `--locked`, and a package the
/// lock lacks fails them only on a fresh clone.
fn stale_outside_locks(files: &[(String, String)]) -> Vec<String> {
    let text = |path: &str| {
        files
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    let needed = path_dependencies(&text("mlx-patched/Cargo.toml"), &text("Cargo.toml"));
    let mut out = Vec::new();
    for (path, lock) in files {
        if !path.ends_with("/Cargo.lock") || !lock.contains("name = \"mlx-patched\"") {
            continue;
        }
        for name in &needed {
            if !lock.contains(&format!("name = \"{name}\"")) {
                out.push(format!(
                    "{path} lacks {name}, which mlx-patched depends on: run `cargo metadata --offline --manifest-path {}`",
                    path.replace("Cargo.lock", "Cargo.toml")
                ));
            }
        }
    }
    out
}

#[test]
fn the_lock_files_outside_the_workspace_list_what_the_build_crate_needs() {
    let files = tracked();
    let needed = path_dependencies(
        &files.iter().find(|(p, _)| p == "mlx-patched/Cargo.toml").unwrap().1,
        &files.iter().find(|(p, _)| p == "Cargo.toml").unwrap().1,
    );
    assert!(needed.iter().any(|n| n == "mlx-facts"), "{needed:?}");
    report("stale lock files", stale_outside_locks(&files));
    // A lock that reaches mlx-patched without mlx-facts is stale.
    let planted = [
        ("mlx-patched/Cargo.toml".to_string(), "[dependencies]\nmlx-facts.workspace = true\nsha2 = \"0.10\"\n".to_string()),
        ("Cargo.toml".to_string(), "[workspace.dependencies]\nmlx-facts = { path = \"crates/facts\" }\n".to_string()),
        ("tests/x/Cargo.lock".to_string(), "[[package]]\nname = \"mlx-patched\"\n".to_string()),
    ];
    assert_eq!(stale_outside_locks(&planted).len(), 1);
}
