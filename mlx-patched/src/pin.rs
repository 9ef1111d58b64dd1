//! The pin: which upstream tree this fork is built from, and where it comes from.
//!
//! Changing the upstream version means changing every constant here together
//! (and the carrier version in `Cargo.toml`); `cargo xtask rebase` does it.

/// Upstream release the patch series is written against.
pub const UPSTREAM_VERSION: &str = "0.31.2";
/// Upstream commit of that release (for `git am` and for the record).
pub const UPSTREAM_COMMIT: &str = "68cf2fddd8de5edd8ab3d926391772b2e2cedad8";
/// `git write-tree` of the upstream tree. The carrier's copy must hash to this.
pub const UPSTREAM_TREE_ID: &str = "daeca1f087e8437eb1a00ed96876728a47e5923a";
/// Published crate that carries the verbatim upstream tree (source archive only).
pub const CARRIER_CRATE: &str = "rlx-mlx-sys";
/// Exact carrier version; must match the `=` requirement in `Cargo.toml`.
pub const CARRIER_VERSION: &str = "0.2.0";
/// Folder of the carrier package that holds the upstream tree.
pub const CARRIER_SUBDIR: &str = "vendor/mlx";
