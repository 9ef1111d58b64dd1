//! The bases: the upstream releases this fork is built on, where each one's
//! tree comes from, and what independent evidence says it is that release.
//!
//! A base is one row of [`BASES`]. The first is the default, and the one
//! mlx-rs builds; `MLX_FORK_BASE` (or `--base`) picks another. Adding a base
//! is adding a row, a carrier manifest under `sources/mlx-<version>/` and,
//! where upstream rewrote the code a fix touches, a port of that fix under
//! `patches/v<version>/`; `cargo xtask rebase --to <carrier>` writes the row.
//!
//! What each id proves:
//! * [`Base::carrier_tree_id`]: the carrier's `vendor/mlx`, as downloaded,
//!   is the tree that was inspected when the row was written (independently
//!   of the registry checksum in the manifest's `Cargo.lock`, which covers
//!   the whole package).
//! * [`Base::upstream_tree_id`]: after reversing the carrier's own patches,
//!   the tree is exactly the one every variant, the control, `upstream-pr`
//!   and `rebase` start from. It is upstream's tree: none of the carrier's
//!   changes is left, and its headers and pure-Python files are byte for
//!   byte those of the official wheels (`cargo xtask provenance`).
//!
//! What is not known: the upstream commit. The carrier does not record it,
//! and `mlx/version.h` names a release cycle, not a commit.

use crate::Unknown;

/// One upstream release the fork is built on.
#[derive(Debug, PartialEq, Eq)]
pub struct Base {
    /// Upstream's release (`mlx/version.h`).
    pub version: &'static str,
    /// Exact version of the carrier ([`CARRIER_CRATE`]); must match the `=`
    /// requirement in `sources/mlx-<version>/Cargo.toml`, whose lock file
    /// pins the package's checksum.
    pub carrier_version: &'static str,
    /// `git write-tree` of the carrier's `vendor/mlx` as published.
    pub carrier_tree_id: &'static str,
    /// `git write-tree` of upstream's tree: the carrier's copy with the
    /// carrier's own patches reversed.
    pub upstream_tree_id: &'static str,
    /// SHA-256 of the official `mlx-<version>-cp311-cp311-<platform>.whl`.
    pub wheel_sha256_frontend: &'static str,
    /// SHA-256 of the official `mlx_cpu-<version>-py3-none-<platform>.whl`.
    pub wheel_sha256_cpu: &'static str,
    /// The mlx-c that compiles against this release and is carried by a
    /// published package (mlx-rs's drop-in needs one), if any.
    pub mlxc: Option<MlxC>,
    /// Fixes of the series that upstream made itself by this release, so
    /// the base's series leaves them out; each with what upstream did.
    pub fixed_upstream: &'static [FixedUpstream],
}

/// A fix of the series that a base's upstream already has.
#[derive(Debug, PartialEq, Eq)]
pub struct FixedUpstream {
    /// The patch's file stem in `patches/`.
    pub patch: &'static str,
    /// Upstream's own change, in a few words.
    pub how: &'static str,
}

/// mlx-c, the C API mlx-rs binds (through `crates/mlx-sys`): its release,
/// the version of the published package that carries it ([`MLXC_CRATE`],
/// the `mlx-sys` crate mlx-rs depends on; `sources/mlx-c/Cargo.lock` pins
/// its checksum), and `git write-tree` of its folder [`MLXC_SUBDIR`].
#[derive(Debug, PartialEq, Eq)]
pub struct MlxC {
    pub version: &'static str,
    pub crate_version: &'static str,
    pub tree_id: &'static str,
}

/// The fix of the report's leak: a base whose upstream has it has a
/// control that does not leak in the report's scenario.
pub const LEAK_FIX: &str = "0001-release-sibling-groups-on-every-path";
/// The fix of the release race between threads.
pub const RELEASE_RACE_FIX: &str = "0008-release-sibling-groups-under-a-lock";
/// The fix of the kernel-cache race between processes.
pub const KERNEL_CACHE_FIX: &str = "0009-cpu-kernels-built-under-their-own-name";

impl Base {
    /// MLX 0.32.2: the release mlx-rs 0.33 (through mlx-c 0.7.0) builds.
    pub const V0_32_2: Base = Base {
        version: "0.32.2",
        carrier_version: "0.2.17",
        carrier_tree_id: "d7166fafe5b164119dc0cd68d20068ab30503437",
        upstream_tree_id: "70648a0e39ecd8460c18e7d87ec28ebd140db9bb",
        wheel_sha256_frontend: "4bc6709cd92a46de44caade61ec7831647005e66113243f681168f67001155d9",
        wheel_sha256_cpu: "fc5d31b90fc4f457b2f9614ed45651a567d22a6a11a03d114a90a4e10bdd8878",
        mlxc: Some(MlxC {
            version: "0.7.0",
            crate_version: "0.7.0",
            tree_id: "63fb5986cad1389b361ee97c249b437c63dfd6ec",
        }),
        fixed_upstream: &[],
    };

    /// MLX 0.32.4: what `pip install mlx` gives, and what packages such as
    /// mlx-audio pin. No mlx-c release compiles against it.
    pub const V0_32_4: Base = Base {
        version: "0.32.4",
        carrier_version: "0.2.19",
        carrier_tree_id: "892f258d1d950ec5aa888c0032b8e10374f097e5",
        upstream_tree_id: "0b3dbfacac35a0b64a7c3d9a778ef20db788f565",
        wheel_sha256_frontend: "6267be0db81a9d850b3ecd9bf0cf7dd0f439408db9fbc59237e37fda3f7676b0",
        wheel_sha256_cpu: "0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee",
        mlxc: None,
        fixed_upstream: &[
            FixedUpstream {
                patch: LEAK_FIX,
                how: "0.32.3 releases a sibling group with a release function of its own",
            },
            FixedUpstream {
                patch: KERNEL_CACHE_FIX,
                how: "0.32.4 builds a CPU kernel under a unique name and renames it into place",
            },
        ],
    };

    /// The default base: the first of [`BASES`].
    pub fn default_base() -> &'static Base {
        &BASES[0]
    }

    /// The base of release `name` (`0.32.4` or `v0.32.4`).
    pub fn parse(name: &str) -> Result<&'static Base, Unknown> {
        let v = name.trim().trim_start_matches('v');
        BASES.iter().find(|b| b.version == v).ok_or_else(|| {
            let known: Vec<&str> = BASES.iter().map(|b| b.version).collect();
            Unknown(format!(
                "unknown base `{name}`: the fork is built on MLX {} (crates/facts/src/bases.rs; `cargo xtask rebase --to <carrier>` adds one)",
                known.join(" or ")
            ))
        })
    }

    /// Whether this is the default base.
    pub fn is_default(&self) -> bool {
        self == Base::default_base()
    }

    /// The name of the folder of this base's builds (`v0.32.4`).
    pub fn dir_name(&self) -> String {
        format!("v{}", self.version)
    }


    /// Whether the untouched control shows the report's leak.
    pub fn control_leaks(&self) -> bool {
        !self.fixes_upstream(LEAK_FIX)
    }

    /// Whether upstream made the fix `patch` (a file stem or name) itself.
    pub fn fixes_upstream(&self, patch: &str) -> bool {
        let stem = patch.trim_end_matches(".patch");
        self.fixed_upstream.iter().any(|f| f.patch == stem)
    }
}


/// Every base, the default first.
pub const BASES: &[Base] = &[Base::V0_32_2, Base::V0_32_4];

/// Upstream commit of a release, when known (for `git am` and the record).
pub const UPSTREAM_COMMIT: &str = "(not known: the carrier does not record it)";
/// Published crate that carries the upstream tree (used as a source archive only).
pub const CARRIER_CRATE: &str = "rlx-mlx-sys";
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

/// The package that carries mlx-c, and its folder there.
pub const MLXC_CRATE: &str = "mlx-sys";
pub const MLXC_SUBDIR: &str = "src/mlx-c";

/// gguflib (antirez's gguf-tools), which MLX compiles in for GGUF support:
/// the commit MLX's `mlx/io/CMakeLists.txt` fetches (checked against the
/// tree; every base fetches this one), the published package that carries
/// it (`sources/gguflib/Cargo.lock` pins its checksum), the folder, and
/// `git write-tree` of that folder. The folder's files match that commit:
/// its NAR hash equals the one packagers pin for a download of the commit
/// (docs/provenance.md).
pub const GGUFLIB_COMMIT: &str = "8fa6eb65236618e28fd7710a0fba565f7faa1848";
pub const GGUFLIB_CRATE: &str = "mlxrs-sys";
pub const GGUFLIB_CRATE_VERSION: &str = "0.2.0";
pub const GGUFLIB_SUBDIR: &str = "vendor/gguflib";
pub const GGUFLIB_TREE_ID: &str = "65a018c48619d693e6e9ed7ec3a913b06ec59105";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_are_named_by_release_with_or_without_v() {
        assert_eq!(Base::parse("0.32.4").unwrap(), &Base::V0_32_4);
        assert_eq!(Base::parse("v0.32.2").unwrap(), &Base::V0_32_2);
        let e = Base::parse("0.31.0").unwrap_err().to_string();
        assert!(e.contains("0.32.2 or 0.32.4"), "{e}");
        assert!(Base::default_base().is_default() && !Base::V0_32_4.is_default());
    }
}
