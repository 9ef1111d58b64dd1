//! The regression suite's support code: where the build script put both MLX
//! variants and the C++ probes built against each, and how to run them.
//! The tests themselves are in `tests/` (see `tests/README.md`).


use std::process::Command;

pub use mlx_bridge as mlx;

/// One installed MLX variant and what was built against it.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub name: &'static str,
    pub prefix: &'static str,
    /// MLX's own doctest binary built from this variant's tree.
    pub mlx_tests: &'static str,
    /// `crates/probes/cpp/leak_scenario.cpp` linked against this prefix.
    pub leak_scenario: &'static str,
    /// `crates/probes/cpp/held_output.cpp` linked against this prefix.
    pub held_output: &'static str,
    /// `crates/probes/cpp/graph_bench.cpp` linked against this prefix.
    pub graph_bench: &'static str,
}

pub const PRISTINE: Variant = Variant {
    name: "pristine",
    prefix: env!("MLX_FORK_PRISTINE_PREFIX"),
    mlx_tests: env!("MLX_FORK_PRISTINE_MLX_TESTS"),
    leak_scenario: env!("MLX_FORK_PRISTINE_LEAK_SCENARIO"),
    held_output: env!("MLX_FORK_PRISTINE_HELD_OUTPUT"),
    graph_bench: env!("MLX_FORK_PRISTINE_GRAPH_BENCH"),
};

pub const PATCHED: Variant = Variant {
    name: "patched",
    prefix: env!("MLX_FORK_PATCHED_PREFIX"),
    mlx_tests: env!("MLX_FORK_PATCHED_MLX_TESTS"),
    leak_scenario: env!("MLX_FORK_PATCHED_LEAK_SCENARIO"),
    held_output: env!("MLX_FORK_PATCHED_HELD_OUTPUT"),
    graph_bench: env!("MLX_FORK_PATCHED_GRAPH_BENCH"),
};

/// The variant this build's Rust API links against (`--features pristine`).
pub const LINKED: Variant = if cfg!(feature = "pristine") { PRISTINE } else { PATCHED };

pub const MIB: i64 = 1024 * 1024;

/// A leak-scenario run: bytes retained by each cycle and the output digest.
#[derive(Debug)]
pub struct ScenarioRun {
    pub retained: Vec<i64>,
    pub digest: String,
}

/// Parses the probes' output format (`cycle <i> retained_bytes <n> digest <d>`).
pub fn parse_scenario(stdout: &str) -> ScenarioRun {
    let mut retained = Vec::new();
    let mut digest = String::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let ["cycle", _, "retained_bytes", n, "digest", d] = f.as_slice() {
            retained.push(n.parse().expect("retained_bytes is an integer"));
            if digest.is_empty() {
                digest = d.to_string();
            }
        }
    }
    assert!(!retained.is_empty(), "the probe printed no cycle:\n{stdout}");
    ScenarioRun { retained, digest }
}

/// Runs a variant's C++ leak-scenario probe with `args`.
pub fn run_cpp_scenario(variant: &Variant, args: &[&str]) -> ScenarioRun {
    let out = Command::new(variant.leak_scenario).args(args).output().expect("run the C++ probe");
    assert!(out.status.success(), "{} probe {args:?} failed: {}", variant.name, String::from_utf8_lossy(&out.stderr));
    parse_scenario(&String::from_utf8_lossy(&out.stdout))
}

