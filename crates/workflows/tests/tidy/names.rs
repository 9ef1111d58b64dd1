//! Names with one home: environment variables declared in the facts
//! crate's tables, and variants, probes and slow checks named through
//! their constants or the claim registry, never as strings.

use crate::{report, tracked};
use std::collections::BTreeSet;

// ---- environment variables ----

/// The names of environment variables `text` reads, sets or removes, by
/// the calls the code uses for that in each language.
fn variables_used(path: &str, text: &str) -> BTreeSet<String> {
    variable_uses(path, text)
        .into_iter()
        .map(|(_, n)| n)
        .collect()
}

/// Each use as (the call, the name).
fn variable_uses(path: &str, text: &str) -> Vec<(&'static str, String)> {
    const CALLS: &[&str] = &[
        // Rust
        "env::var(\"",
        "env::var_os(\"",
        "var_os(\"",
        "set_var(\"",
        "remove_var(\"",
        ".env(\"",
        ".env_remove(\"",
        "read_untracked(\"",
        "read_name(\"",
        "read_cargo(\"",
        "env!(\"",
        "rerun-if-env-changed=",
        // Python
        "os.environ.get(\"",
        "os.environ[\"",
        "os.getenv(\"",
        "environ.setdefault(\"",
        // C
        "getenv(\"",
        "setenv(\"",
        // shell
        "export ",
    ];
    let mut names = Vec::new();
    for call in CALLS {
        for (at, _) in text.match_indices(call) {
            let name: String = text[at + call.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.len() > 1
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                names.push((*call, name));
            }
        }
    }
    // C: `getenv(NAME)` through `#define NAME "VARIABLE"`.
    if path.ends_with(".c") || path.ends_with(".cc") || path.ends_with(".cpp") {
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some("#define"), Some(macro_name), Some(value)) =
                (words.next(), words.next(), words.next())
            {
                if text.contains(&format!("getenv({macro_name})"))
                    || text.contains(&format!("setenv({macro_name},"))
                {
                    names.push(("getenv(", value.trim_matches('"').to_string()));
                }
            }
        }
    }
    names
}

/// Whether `name` is declared: a variable of ours or of another program in
/// `env.rs`'s tables, or one Cargo sets for build scripts and tests.
fn declared(name: &str) -> bool {
    const CARGO_PREFIXES: &[&str] = &[
        "OUT_DIR",
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "DEP_",
        "CARGO_PKG_",
        "CARGO_BIN_EXE_",
    ];
    const CARGO_NAMES: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_TARGET_TMPDIR",
        "CARGO_MAKEFLAGS",
        "TARGET",
        "HOST",
        "PROFILE",
    ];
    mlx_patched::VARIABLES
        .iter()
        .chain(mlx_patched::OTHER_VARIABLES)
        .any(|v| v.name == name)
        || CARGO_PREFIXES.iter().any(|p| name.starts_with(p))
        || CARGO_NAMES.contains(&name)
}

fn undeclared_variables(path: &str, text: &str) -> Vec<String> {
    variables_used(path, text)
        .into_iter()
        .filter(|n| !declared(n))
        .map(|n| format!("{path}: {n} is not declared in crates/facts/src/variables.rs"))
        .collect()
}

/// Rust that reads, sets or removes a declared variable by a bare name,
/// outside `env.rs`: the name must come from its declaration
/// (`mlx_patched::vars`, `other_vars`, `CommandVars`). `env!` and Cargo's
/// directives take only literals; Cargo's own names are not declared.
fn bare_names(path: &str, text: &str) -> Vec<String> {
    if !path.ends_with(".rs") || path == "crates/facts/src/variables.rs" {
        return vec![];
    }
    let declared: BTreeSet<&str> = mlx_patched::VARIABLES
        .iter()
        .chain(mlx_patched::OTHER_VARIABLES)
        .map(|v| v.name)
        .collect();
    variable_uses(path, text)
        .into_iter()
        .filter(|(call, n)| {
            !matches!(*call, "env!(\"" | "rerun-if-env-changed=") && declared.contains(n.as_str())
        })
        .map(|(call, n)| {
            format!("{path}: {call}{n}...: use its declaration (mlx_patched::vars or other_vars)")
        })
        .collect()
}

/// Rust that writes one of `names` as a string, outside `home`, the file
/// that declares them; `use` says what to write instead. `tests/mlx-rs`
/// and `tests/mlx-sys-dependent` are a user's projects, built without the
/// workspace.
fn names_written_out(path: &str, text: &str, home: &str, names: &[&str], what: &str, use_: &str) -> Vec<String> {
    if !path.ends_with(".rs")
        || path == home
        || path.starts_with("tests/mlx-rs/")
        || path.starts_with("tests/mlx-sys-dependent/")
    {
        return vec![];
    }
    let mut out = Vec::new();
    for name in names {
        let quoted = format!("\"{name}\"");
        for (i, line) in text.lines().enumerate() {
            if line.contains(&quoted) {
                out.push(format!("{path}:{}: the {what} name {quoted}: use {use_}", i + 1));
            }
        }
    }
    out
}

/// A variant's name written as a string, outside `crates/facts/src/variants.rs`:
/// use `Variant::PATCHED` and the others.
fn variant_names(path: &str, text: &str) -> Vec<String> {
    let names: Vec<&str> = mlx_patched::VARIANTS.iter().map(|v| v.name).collect();
    names_written_out(path, text, "crates/facts/src/variants.rs", &names, "variant", "mlx_patched::Variant's constant")
}

#[test]
fn every_environment_variable_is_declared() {
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for (path, text) in tracked() {
        seen.extend(variables_used(&path, &text));
        bad.extend(undeclared_variables(&path, &text));
    }
    report("environment variables used but not declared", bad);
    // The scan sees what it should: names in Rust's `env!`, and read in
    // Python and in C.
    for name in [
        "MLX_BRIDGE_UPSTREAM_VERSION",
        "MLX_DISABLE_COMPILE",
        "MLX_FORK_RESULTS",
        "MLX_FORK_ABORT_AT_EXIT_PID",
    ] {
        assert!(
            seen.contains(name),
            "the scan found no use of {name}: {seen:?}"
        );
    }
}

#[test]
fn rust_names_every_variable_through_its_declaration() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| bare_names(p, t))
        .collect();
    report("variables named by a bare string", bad);
}

/// A C++ probe's name written as a string, outside

/// `crates/facts/src/probes.rs`: use `probes::LEAK_SCENARIO` and the others.
fn probe_names(path: &str, text: &str) -> Vec<String> {
    let names: Vec<&str> = mlx_patched::probes::CPP_PROBES.iter().map(|p| p.name).collect();
    names_written_out(path, text, "crates/facts/src/probes.rs", &names, "probe", "its constant in mlx_patched::probes")
}

/// A slow check's name or command written as a string outside the claim
/// registry (`crates/workflows/src/claims.rs`), which is their one home.
/// A name that is a plain word (`provenance`) is also a folder's name
/// elsewhere, so only compound names are held to it.
fn slow_check_names(path: &str, text: &str) -> Vec<String> {
    let names: Vec<&str> = mlx_workflows::claims::SLOW_CHECKS
        .iter()
        .flat_map(|c| std::iter::once(c.name).chain(c.command))
        .filter(|n| n.contains(['_', '-']))
        .collect();
    names_written_out(path, text, "crates/workflows/src/claims.rs", &names, "slow check", "the claim registry, mlx_workflows::claims")
}

/// The workspace's own packages a package depends on by path: its
/// `[dependencies]` entries with `path =` or `.workspace = true` whose
/// workspace entry is a path (read from the manifests' text).

#[test]
fn rust_names_every_probe_through_its_constant() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| probe_names(p, t))
        .collect();
    report("probes named by a string", bad);
}

#[test]
fn slow_checks_are_named_in_the_claim_registry_alone() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| slow_check_names(p, t))
        .collect();
    report("slow checks named outside the registry", bad);
}

#[test]
fn the_slow_check_rule_rejects_a_name_written_out() {
    let text = "checks::run(\"python_package\", check); cmd(\"mlx-lm-check\")";
    assert_eq!(slow_check_names("tests/python_package.rs", text).len(), 2);
    assert!(slow_check_names("crates/workflows/src/claims.rs", text).is_empty());
}

#[test]
fn rust_names_every_variant_through_its_constant() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| variant_names(p, t))
        .collect();
    report("variants named by a string", bad);
}

#[test]
fn the_variable_rule_rejects_an_undeclared_name_in_each_language() {
    for (path, text) in [
        ("a.rs", "let x = std::env::var(\"MLX_SOMETHING_NEW\");"),
        ("a.rs", "cmd.env(\"MLX_SOMETHING_NEW\", \"1\");"),
        ("a.py", "os.environ.get(\"MLX_SOMETHING_NEW\")"),
        (
            "a.c",
            "#define V \"MLX_SOMETHING_NEW\"\nint f() { return getenv(V) != 0; }",
        ),
        // Split so that this file does not export it itself.
        ("run", concat!("ex", "port MLX_SOMETHING_NEW=1")),
    ] {
        let bad = undeclared_variables(path, text);
        assert_eq!(bad.len(), 1, "{path}: {text}: {bad:?}");
        assert!(bad[0].contains("MLX_SOMETHING_NEW"));
    }
    assert!(undeclared_variables(
        "a.rs",
        "std::env::var(\"MLX_SOURCE_DIR\"); cmd.env(\"TMPDIR\", d);"
    )
    .is_empty());
}

#[test]
fn the_declaration_rule_rejects_a_bare_name_in_rust_only() {
    let text = "cmd.env(\"TMPDIR\", d).env_remove(\"MLX_SYS_PREFIX\");";
    assert_eq!(bare_names("src/a.rs", text).len(), 2);
    assert!(bare_names("crates/facts/src/variables.rs", text).is_empty());
    assert!(bare_names("tests/python/a.py", "os.environ.get(\"TMPDIR\")").is_empty());
    assert!(bare_names(
        "src/a.rs",
        "env!(\"MLX_BRIDGE_UPSTREAM_VERSION\"); cmd.var(vars::TMPDIR, d);"
    )
    .is_empty());
}

#[test]
fn the_variant_rule_rejects_a_name_written_out() {
    let text = format!(
        "if v.name == {:?} {{}}",
        mlx_patched::Variant::PRISTINE.name
    );
    assert_eq!(variant_names("crates/workflows/src/a.rs", &text).len(), 1);
    assert!(variant_names("crates/facts/src/variants.rs", &text).is_empty());
    assert!(variant_names("crates/workflows/src/a.rs", "if v == Variant::PRISTINE {}").is_empty());
}

#[test]
fn the_probe_rule_rejects_a_name_written_out() {
    let text = "Command::new(v.probe(\"leak_scenario\"))";
    assert_eq!(probe_names("tests/a.rs", text).len(), 1);
    assert!(probe_names("crates/facts/src/probes.rs", text).is_empty());
    assert!(probe_names("tests/a.rs", "v.probe(probes::LEAK_SCENARIO)").is_empty());
}

/// The coverage map's size defined outside `crates/facts/src/coverage.rs`:
/// the counter in C++ gets it from the build, the fuzzer re-exports it.
fn coverage_sizes(path: &str, text: &str) -> Vec<String> {
    const DEFINITIONS: &[&str] = &["#define MLX_FORK_COVERAGE_MAP_SIZE", "const MAP_SIZE:"];
    if path == "crates/facts/src/coverage.rs" || path.starts_with("crates/workflows/tests/tidy/") {
        return vec![];
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| DEFINITIONS.iter().any(|d| l.contains(d)))
        .map(|(i, _)| format!("{path}:{}: the coverage map's size: its home is mlx_facts::coverage::MAP_SIZE", i + 1))
        .collect()
}

#[test]
fn the_coverage_map_s_size_has_one_home() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| coverage_sizes(p, t))
        .collect();
    report("the coverage map's size defined twice", bad);
}

#[test]
fn the_coverage_size_rule_rejects_a_second_definition() {
    assert_eq!(coverage_sizes("mlx-patched/coverage/edges.cpp", "#define MLX_FORK_COVERAGE_MAP_SIZE (1u << 20)").len(), 1);
    assert_eq!(coverage_sizes("crates/fuzz/src/edges.rs", "pub const MAP_SIZE: usize = 1 << 20;").len(), 1);
    assert!(coverage_sizes("crates/facts/src/coverage.rs", "pub const MAP_SIZE: usize = 1 << 20;").is_empty());
}
