//! The variants: builds of MLX from upstream's tree, each with the verdict
//! the suite must confirm on it.

use crate::Unknown;
use std::fmt;

/// The Cargo feature (of the suite, the bridge, the probes and the
/// fuzzer's worker) that links the control instead of the patched variant.
pub const CONTROL_FEATURE: &str = "pristine";

/// What of the series the pristine control takes: MLX's tests, never its library.
pub const PRISTINE_PATHS: &str = "tests/*";

/// MLX test cases that cannot pass in these builds (a doctest filter: `*`
/// matches any run of characters). None: GGUF, once the reason, is built in.
pub const MLX_TESTS_EXCLUDED: &[&str] = &[];

/// The verdict the suite must confirm on a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The control: upstream's library, which has the leak. Every leak check
    /// must see the leak here, or it proves nothing.
    Leaks,
    /// A fix: no leak anywhere, same bits as the control, nothing that
    /// passes on the control fails here.
    Fixed,
    /// A wrong fix: the suite passes only if it rejects it (the report's
    /// scenario still leaks, or a live group breaks, or MLX's suite fails).
    Wrong,
}

/// One build of MLX from upstream's tree. The suite runs its checks on
/// every variant in [`VARIANTS`] and expects the verdict in `expect`:
/// adding a variant is one line there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub name: &'static str,
    /// The variant whose tree this one extends with `extra_patches` (None:
    /// upstream's tree). When the extra patches change only source files
    /// of the library, the variant is built by recompiling just those in
    /// the base's build, so it costs a few compile units, not a build.
    pub base: Option<&'static str>,
    /// Patch files, relative to the workspace, applied after the base's
    /// (or before the series, without a base).
    pub extra_patches: &'static [&'static str],
    /// The part of the series applied (`None`: all of it). Unused with a base.
    pub series_paths: Option<&'static str>,
    /// Patches of the series left out, by the start of their file name
    /// (`"0008-"`): an ablation of one fix. Unused with a base.
    pub leaves_out: &'static [&'static str],
    pub expect: Expect,
}

impl Variant {
    /// Upstream's library untouched, with the series' tests: the control.
    pub const PRISTINE: Variant = Variant {
        name: "pristine",
        base: None,
        extra_patches: &[],
        series_paths: Some(PRISTINE_PATHS),
        leaves_out: &[],
        expect: Expect::Leaks,
    };
    /// Upstream with the whole series: what users link.
    pub const PATCHED: Variant = Variant {
        name: "patched",
        base: None,
        extra_patches: &[],
        series_paths: None,
        leaves_out: &[],
        expect: Expect::Fixed,
    };
    /// The fix the leak report suggests (clear the siblings of every
    /// non-deletable input in `~ArrayDesc`), on the control: the suite must
    /// reject it on every run.
    pub const SUGGESTED: Variant = Variant {
        name: "suggested",
        base: Some(Variant::PRISTINE.name),
        extra_patches: &["docs/rejected/suggested-clear-siblings.patch"],
        series_paths: None,
        leaves_out: &[],
        expect: Expect::Wrong,
    };
    /// The series without `0008` (sibling groups released under a lock):
    /// how far `0001` alone stops the real model's leak. Not one of
    /// [`VARIANTS`]: only `cargo xtask real-model` builds it, for one cell.
    pub const PATCHED_WITHOUT_0008: Variant = Variant {
        name: "patched-without-0008",
        base: None,
        extra_patches: &[],
        series_paths: None,
        leaves_out: &["0008-"],
        expect: Expect::Fixed,
    };

    /// The variants the Rust API can link: patched by default, the control
    /// with [`CONTROL_FEATURE`].
    pub const LINKABLE: [Variant; 2] = [Variant::PATCHED, Variant::PRISTINE];

    /// The Cargo feature that links this variant into the Rust API (the
    /// suite, the bridge, the probes, the fuzzer's worker); None: patched,
    /// the default.
    pub fn feature(&self) -> Option<&'static str> {
        (self.name == Variant::PRISTINE.name).then_some(CONTROL_FEATURE)
    }

    /// The variant a build with these Cargo features links.
    pub fn linked_with(control_feature: bool) -> Variant {
        if control_feature {
            Variant::PRISTINE
        } else {
            Variant::PATCHED
        }
    }

    pub fn parse(s: &str) -> Result<Self, Unknown> {
        VARIANTS
            .iter()
            .copied()
            .find(|v| v.name == s)
            .ok_or_else(|| {
                let names: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
                Unknown(format!(
                    "unknown variant `{s}`: expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// Every variant the suite builds and checks, control first, bases before
/// the variants built on them.
pub const VARIANTS: &[Variant] = &[Variant::PRISTINE, Variant::PATCHED, Variant::SUGGESTED];

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The doctest argument that leaves out [`MLX_TESTS_EXCLUDED`] (a harmless
/// `--no-skip=false` when nothing is excluded, so callers pass one argument).
pub fn mlx_tests_filter() -> String {
    mlx_tests_filter_also(&[])
}

/// The same filter, also excluding `also` (test case names; doctest's
/// filter separator, the comma, is escaped).
pub fn mlx_tests_filter_also(also: &[String]) -> String {
    let names: Vec<String> = MLX_TESTS_EXCLUDED
        .iter()
        .map(|n| n.to_string())
        .chain(also.iter().map(|n| n.replace(',', "\\,")))
        .collect();
    if names.is_empty() {
        "--no-skip=false".to_string()
    } else {
        format!("--test-case-exclude={}", names.join(","))
    }
}
