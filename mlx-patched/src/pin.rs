//! The pin: which upstream tree this fork is built from, and where it comes from.
//!
//! Changing the upstream version means changing every constant here together
//! (and the carrier version in `Cargo.toml`); `cargo xtask rebase` does it.

/// Upstream release the patch series is written against.
pub const UPSTREAM_VERSION: &str = "0.32.2";
/// Upstream commit of that release (for `git am` and for the record).
pub const UPSTREAM_COMMIT: &str = "(not recorded by rlx-mlx-sys =0.2.17; see the rebase report)";
/// `git write-tree` of the upstream tree. The carrier's copy must hash to this.
pub const UPSTREAM_TREE_ID: &str = "d7166fafe5b164119dc0cd68d20068ab30503437";
/// Published crate that carries the verbatim upstream tree (source archive only).
pub const CARRIER_CRATE: &str = "rlx-mlx-sys";
/// Exact carrier version; must match the `=` requirement in `Cargo.toml`.
pub const CARRIER_VERSION: &str = "0.2.17";
/// Folder of the carrier package that holds the upstream tree.
pub const CARRIER_SUBDIR: &str = "vendor/mlx";
