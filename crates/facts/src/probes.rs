//! The plain C++ probe programs (`crates/probes/cpp/<name>.cpp`), by name:
//! the one list of them. A probe is named in code through its constant, never
//! as a string (the tidy test holds the tree to it).

/// `crates/probes/cpp/leak_scenario.cpp`.
pub const LEAK_SCENARIO: &str = "leak_scenario";
/// `crates/probes/cpp/held_output.cpp`.
pub const HELD_OUTPUT: &str = "held_output";
/// `crates/probes/cpp/graph_bench.cpp`.
pub const GRAPH_BENCH: &str = "graph_bench";
/// `crates/probes/cpp/multi_output_ops.cpp`.
pub const MULTI_OUTPUT_OPS: &str = "multi_output_ops";
/// `crates/probes/cpp/transformer.cpp`.
pub const TRANSFORMER: &str = "transformer";
/// `crates/probes/cpp/release_race.cpp`.
pub const RELEASE_RACE: &str = "release_race";
/// `crates/probes/cpp/kernel_cache_race.cpp`.
pub const KERNEL_CACHE_RACE: &str = "kernel_cache_race";
/// `crates/probes/cpp/fixed_layout_leak.cpp`.
pub const FIXED_LAYOUT_LEAK: &str = "fixed_layout_leak";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub name: &'static str,
    /// Run by `cargo xtask sanitize` (the benchmark's timed loops are not).
    pub under_sanitizers: bool,
}

pub const CPP_PROBES: &[Probe] = &[
    Probe {
        name: LEAK_SCENARIO,
        under_sanitizers: true,
    },
    Probe {
        name: HELD_OUTPUT,
        under_sanitizers: true,
    },
    Probe {
        name: GRAPH_BENCH,
        under_sanitizers: false,
    },
    Probe {
        name: MULTI_OUTPUT_OPS,
        under_sanitizers: true,
    },
    Probe {
        name: TRANSFORMER,
        under_sanitizers: true,
    },
    Probe {
        name: RELEASE_RACE,
        under_sanitizers: true,
    },
    Probe {
        name: KERNEL_CACHE_RACE,
        under_sanitizers: false,
    },
    // Replaces operator new and delete, which the sanitizers intercept.
    Probe {
        name: FIXED_LAYOUT_LEAK,
        under_sanitizers: false,
    },
];
