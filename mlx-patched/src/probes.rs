//! The plain C++ probe programs (`crates/probes/cpp/<name>.cpp`), each built
//! against a prefix the way any C++ user links one ([`crate::compile_program`]).
//! The one list of them: the suite's build script builds all of them per
//! variant, the sanitizer runner those that run under sanitizers, the demo
//! and the checks the ones they name.

use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub name: &'static str,
    /// Run by `cargo xtask sanitize` (the benchmark's timed loops are not).
    pub under_sanitizers: bool,
}

pub const CPP_PROBES: &[Probe] = &[
    Probe {
        name: "leak_scenario",
        under_sanitizers: true,
    },
    Probe {
        name: "held_output",
        under_sanitizers: true,
    },
    Probe {
        name: "graph_bench",
        under_sanitizers: false,
    },
    Probe {
        name: "multi_output_ops",
        under_sanitizers: true,
    },
    Probe {
        name: "transformer",
        under_sanitizers: true,
    },
    Probe {
        name: "release_race",
        under_sanitizers: true,
    },
    Probe {
        name: "kernel_cache_race",
        under_sanitizers: false,
    },
];

/// The directory of the probes' sources and the headers they share.
pub fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(".."))
        .join("crates/probes/cpp")
}

/// The source of the probe called `name`.
pub fn source(name: &str) -> PathBuf {
    sources_dir().join(format!("{name}.cpp"))
}

/// Every file of the probes' sources (the programs and their headers), sorted.
pub fn source_files() -> Result<Vec<PathBuf>, crate::Error> {
    let dir = sources_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| crate::Error::new(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    Ok(files)
}
