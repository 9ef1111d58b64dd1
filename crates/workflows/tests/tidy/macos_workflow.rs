//! The macOS workflow (`.github/workflows/macos.yml`) runs nowhere here,
//! so what it calls is held to what runs here: each `cargo xtask <command>`
//! must be a command of xtask (its `Command` enum, as clap names it), the
//! packages it installs must be the ones the build's own check asks for on
//! macOS, and any other line must be one Linux CI runs (`.ci/run`). It must
//! run the README's quick-start commands, Linux CI's, and the drop-in's
//! check, on an Apple-silicon runner.

use crate::workspace;
use mlx_patched::system::BREW_PACKAGES;

fn read(rel: &str) -> String {
    let path = workspace().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every command of a workflow's `run:` steps, one a line (`run: x` and
/// the lines of a `run: |` block), without comments.
fn run_lines(workflow: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<usize> = None;
    for line in workflow.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(at) = block {
            if line.trim().is_empty() {
                continue;
            }
            if indent > at {
                out.push(line.trim().to_string());
                continue;
            }
            block = None;
        }
        let item = line.trim_start().trim_start_matches("- ");
        if let Some(cmd) = item.strip_prefix("run:") {
            let cmd = cmd.trim();
            if cmd == "|" || cmd == ">" {
                block = Some(indent);
            } else {
                out.push(cmd.to_string());
            }
        }
    }
    out.into_iter()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// xtask's commands as clap names them: the variants of `enum Command`
/// in kebab case (`MlxTests` is `mlx-tests`).
fn xtask_commands(main_rs: &str) -> Vec<String> {
    let body = main_rs
        .split_once("enum Command {")
        .map(|(_, rest)| rest.split("\n}\n").next().unwrap_or(""))
        .unwrap_or("");
    body.lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .filter_map(|l| {
            let ident: String = l
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            ident
                .starts_with(|c: char| c.is_ascii_uppercase())
                .then_some(ident)
        })
        .map(|ident| {
            let mut kebab = String::new();
            for (i, c) in ident.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    kebab.push('-');
                }
                kebab.push(c.to_ascii_lowercase());
            }
            kebab
        })
        .collect()
}

/// The slow checks' commands, which xtask adds from their registry:
/// each `command: Some("<name>")` of it.
fn registry_commands(registry: &str) -> Vec<String> {
    registry
        .split("command: Some(\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name.to_string()))
        .collect()
}

/// The registry's command for the check that runs `function` (the
/// drop-in's: `mlx_checks::mlx_rs::check`), found by its code, not by its
/// name, whose one home is the registry.
fn registry_command_running(registry: &str, function: &str) -> Option<String> {
    registry
        .split("command: Some(\"")
        .skip(1)
        .find(|entry| entry.contains(&format!("run: {function},")))
        .and_then(|entry| entry.split_once('"').map(|(name, _)| name.to_string()))
}

/// Every command of `cargo xtask`: its own enum's and the registry's.
fn all_xtask_commands() -> Vec<String> {
    let mut all = xtask_commands(&read("crates/xtask/src/main.rs"));
    all.extend(registry_commands(&read(REGISTRY)));
    all
}

/// Where the slow checks, and the xtask commands that run them alone, are
/// listed.
const REGISTRY: &str = "crates/workflows/src/claims.rs";

/// The commands of a script, without comments and blank lines.
fn script_lines(script: &str) -> Vec<String> {
    run_lines(&format!(
        "run: |\n{}",
        script
            .lines()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

/// What the workflow's lines call that is not held to anything here.
fn unknown_commands(lines: &[String], xtask: &[String], linux_ci: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            if let Some(rest) = l.strip_prefix("cargo xtask ") {
                let cmd = rest.split_whitespace().next().unwrap_or("");
                return !xtask.iter().any(|c| c == cmd);
            }
            if let Some(pkgs) = l.strip_prefix("brew install ") {
                return pkgs.split_whitespace().collect::<Vec<_>>() != BREW_PACKAGES;
            }
            !linux_ci.contains(l)
        })
        .cloned()
        .collect()
}

/// The README's quick-start commands: the `cargo xtask` lines of its
/// first `sh` block.
fn readme_commands(readme: &str) -> Vec<String> {
    let block = readme
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map_or("", |(b, _)| b);
    script_lines(block)
        .into_iter()
        .filter(|l| l.starts_with("cargo xtask "))
        .collect()
}

#[test]
fn the_macos_workflow_calls_only_commands_that_exist_here() {
    let workflow = read(".github/workflows/macos.yml");
    let lines = run_lines(&workflow);
    let xtask = all_xtask_commands();
    let drop_in = registry_command_running(&read(REGISTRY), "mlx_checks::mlx_rs::check")
        .unwrap_or_else(|| panic!("{REGISTRY} has no command for the drop-in's check"));
    assert!(
        ["demo", "test", drop_in.as_str()]
            .iter()
            .all(|c| xtask.iter().any(|x| x == c)),
        "xtask's commands as parsed: {xtask:?}"
    );
    let linux_ci = script_lines(&read(".ci/run"));
    let unknown = unknown_commands(&lines, &xtask, &linux_ci);
    assert!(
        unknown.is_empty(),
        "the macOS workflow calls what runs nowhere here: {unknown:?}"
    );
    let readme = readme_commands(&read("README.md"));
    assert_eq!(readme, ["cargo xtask demo", "cargo xtask test"]);
    let wanted = readme
        .iter()
        .chain(linux_ci.iter().filter(|l| l.starts_with("cargo xtask ")))
        .cloned()
        .chain([format!("cargo xtask {drop_in}")]);
    for w in wanted {
        assert!(
            lines.contains(&w),
            "the macOS workflow does not run `{w}`: {lines:?}"
        );
    }
    assert!(
        workflow.lines().any(|l| l.trim() == "runs-on: macos-14"),
        "the workflow must run on an Apple-silicon runner (macos-14)"
    );
}

#[test]
fn the_rules_reject_a_made_up_command_and_find_every_run_line() {
    let workflow = "jobs:\n  a:\n    steps:\n      - uses: actions/checkout@v4\n      - run: cargo xtask demo # the demo\n      - name: x\n        run: |\n          brew install cmake ninja\n          cargo xtask nonsense --flag\n\n          curl -o x y\n      - run: brew install wget\n";
    let lines = run_lines(workflow);
    assert_eq!(
        lines,
        [
            "cargo xtask demo",
            "brew install cmake ninja",
            "cargo xtask nonsense --flag",
            "curl -o x y",
            "brew install wget"
        ]
    );
    let xtask = xtask_commands("enum Command {\n    /// doc\n    Demo(A),\n    FooBarCheck,\n    Prefix {\n        variant: V,\n    },\n}\n");
    assert_eq!(xtask, ["demo", "foo-bar-check", "prefix"]);
    let registry =
        "a { command: None, run: x::a, }\nb { command: Some(\"b-check\"), run: x::b, }\n";
    assert_eq!(registry_commands(registry), ["b-check"]);
    assert_eq!(
        registry_command_running(registry, "x::b").as_deref(),
        Some("b-check")
    );
    assert_eq!(registry_command_running(registry, "x::a"), None);
    let ci = script_lines("#!/bin/sh\n# comment\nset -e\ncargo xtask test\n");
    assert_eq!(ci, ["set -e", "cargo xtask test"]);
    assert_eq!(
        unknown_commands(&lines, &xtask, &ci),
        [
            "cargo xtask nonsense --flag",
            "curl -o x y",
            "brew install wget"
        ]
    );
}
