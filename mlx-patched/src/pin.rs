//! The pin: which upstream tree this fork is built from, where it comes
//! from, and what independent evidence says it is that release.
//!
//! Changing the upstream version means changing every constant here together
//! (and the carrier version in `Cargo.toml`); `cargo xtask rebase --apply`
//! does it.
//!
//! What each id proves:
//! * [`CARRIER_TREE_ID`]: the carrier's `vendor/mlx`, as downloaded, is the
//!   tree that was inspected when the pin was set (independently of the
//!   registry checksum in `Cargo.lock`, which covers the whole package).
//! * [`UPSTREAM_TREE_ID`]: after reversing the carrier's own patches, the
//!   tree is exactly the one every variant, the control, `upstream-pr` and
//!   `rebase` start from. It is upstream's tree: none of the carrier's
//!   changes is left, and its headers and pure-Python files are byte for byte
//!   those of the official wheels below (`cargo xtask provenance`).
//!
//! What is not known: the upstream commit. The carrier does not record it,
//! and `mlx/version.h` names a release cycle, not a commit.

/// Upstream release the patch series is written against.
pub const UPSTREAM_VERSION: &str = "0.32.2";
/// Upstream commit of that release, when known (for `git am` and the record).
pub const UPSTREAM_COMMIT: &str = "(not known: the carrier does not record it)";
/// `git write-tree` of upstream's tree: the carrier's copy with the
/// carrier's own patches reversed.
pub const UPSTREAM_TREE_ID: &str = "70648a0e39ecd8460c18e7d87ec28ebd140db9bb";
/// `git write-tree` of the carrier's `vendor/mlx` as published.
pub const CARRIER_TREE_ID: &str = "d7166fafe5b164119dc0cd68d20068ab30503437";
/// Published crate that carries the upstream tree (used as a source archive only).
pub const CARRIER_CRATE: &str = "rlx-mlx-sys";
/// Exact carrier version; must match the `=` requirement in
/// `sources/mlx/Cargo.toml`, whose lock file pins the package's checksum.
pub const CARRIER_VERSION: &str = "0.2.17";
/// Folder of the carrier package that holds the MLX tree.
pub const CARRIER_SUBDIR: &str = "vendor/mlx";
/// Folder of the carrier package that holds the carrier's own patches to
/// that tree (absent or empty: the tree is upstream's as shipped).
pub const CARRIER_PATCHES_SUBDIR: &str = "patches";

/// The official wheels compared with the tree (`cargo xtask provenance`):
/// the Python front end (its pure-Python files are `python/mlx/**` of the
/// tree) and the CPU library package (its headers are `mlx/**.h`). Fetched
/// for one fixed platform so that their checksums can be pinned.
pub const WHEEL_PLATFORM: &str = "manylinux_2_35_x86_64";
/// Python version of the front-end wheel (`--python-version`).
pub const WHEEL_PYTHON: &str = "3.11";
/// SHA-256 of `mlx-<version>-cp311-cp311-<platform>.whl`.
pub const WHEEL_SHA256_FRONTEND: &str =
    "4bc6709cd92a46de44caade61ec7831647005e66113243f681168f67001155d9";
/// SHA-256 of `mlx_cpu-<version>-py3-none-<platform>.whl`.
pub const WHEEL_SHA256_CPU: &str =
    "fc5d31b90fc4f457b2f9614ed45651a567d22a6a11a03d114a90a4e10bdd8878";

/// mlx-c, the C API mlx-rs binds (through `crates/mlx-sys`): its release,
/// the published package that carries it (the `mlx-sys` crate mlx-rs 0.33
/// depends on; `sources/mlx-c/Cargo.lock` pins its checksum), the folder
/// that holds it, and `git write-tree` of that folder.
pub const MLXC_VERSION: &str = "0.7.0";
pub const MLXC_CRATE: &str = "mlx-sys";
pub const MLXC_CRATE_VERSION: &str = "0.7.0";
pub const MLXC_SUBDIR: &str = "src/mlx-c";
pub const MLXC_TREE_ID: &str = "63fb5986cad1389b361ee97c249b437c63dfd6ec";

/// gguflib (antirez's gguf-tools), which MLX compiles in for GGUF support:
/// the commit MLX's `mlx/io/CMakeLists.txt` fetches (checked against the
/// tree), the published package that carries it (`sources/gguflib/Cargo.lock`
/// pins its checksum), the folder, and `git write-tree` of that folder. The
/// folder's files match that commit: its NAR hash equals the one packagers
/// pin for a download of the commit (docs/provenance.md).
pub const GGUFLIB_COMMIT: &str = "8fa6eb65236618e28fd7710a0fba565f7faa1848";
pub const GGUFLIB_CRATE: &str = "mlxrs-sys";
pub const GGUFLIB_CRATE_VERSION: &str = "0.2.0";
pub const GGUFLIB_SUBDIR: &str = "vendor/gguflib";
pub const GGUFLIB_TREE_ID: &str = "65a018c48619d693e6e9ed7ec3a913b06ec59105";
