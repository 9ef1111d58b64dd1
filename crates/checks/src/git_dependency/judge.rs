//! The pure half of the git-dependency check: what `collect` found, the
//! claims it supports and the table's rows.

use mlx_expectations::report::Row;
use mlx_expectations::Cell;
use mlx_harness::process::Ran;
use mlx_harness::tally::Tally;
use mlx_patched::{Expectations, Variant};
use std::path::PathBuf;

/// The git source a dependent names: a URL and a full commit id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitSource {
    pub url: String,
    pub rev: String,
}

/// A file's bytes and modification time, or None: whether a build
/// rewrote it.
pub type FileState = Option<(Vec<u8>, std::time::SystemTime)>;

/// Everything the check ran.
pub struct Evidence {
    pub source: GitSource,
    /// The commit is a snapshot of uncommitted work, not `HEAD`.
    pub snapshot: bool,
    /// The first build, offline.
    pub build: Ran,
    /// The scenario's bytes retained per cycle and digests (none if the
    /// build or the run failed).
    pub retained: Vec<i64>,
    pub digests: Vec<String>,
    pub scenario: Ran,
    /// The second crate's binary: `dependent variant <v> version <r> twice <x>`.
    pub dependent: Ran,
    /// The base's release, which the dependent must have been told.
    pub release: String,
    /// Cargo's checkout of the fork, and its `git status`.
    pub checkout: PathBuf,
    pub checkout_status: Ran,
    /// The second build: units reported, and those it compiled.
    pub again: Ran,
    pub again_units: (usize, Vec<String>),
    /// The patched variant's stamp and build log, before and after.
    pub mlx_before: Vec<FileState>,
    pub mlx_after: Vec<FileState>,
}

pub fn judge(e: &Evidence, expectations: &Expectations) -> Tally {
    let mut t = Tally::new();
    let what = format!("mlx-sys from {} at {}", e.source.url, e.source.rev);
    t.claim(e.build.success, || {
        format!("{what}: the offline build failed:\n{}", e.build.stderr)
    });
    t.claim(e.mlx_before.iter().all(Option::is_some) && e.mlx_before == e.mlx_after, || {
        format!("{what}: the build touched the patched variant's build (its stamp or build.log changed, or it was not built before)")
    });
    let bound = Cell::REPORT.bound(expectations.verdict(&Variant::PATCHED));
    t.claim(
        e.scenario.success && !e.retained.is_empty() && bound.admits_all(&e.retained),
        || {
            format!(
                "{what}: the report's scenario through mlx-rs retained {:?} per cycle, expected {bound} ({}{})",
                e.retained, e.scenario.status, e.scenario.stderr
            )
        },
    );
    t.claim(e.digests.windows(2).all(|w| w[0] == w[1]), || {
        format!(
            "{what}: the scenario's outputs differ across cycles: {:?}",
            e.digests
        )
    });
    let want = format!(
        "dependent variant {} version {} twice 3",
        Variant::PATCHED.name,
        e.release
    );
    t.claim(e.dependent.success && e.dependent.stdout.trim() == want, || {
        format!(
            "{what}: the crate that depends on the published mlx-sys printed {:?}, expected {want:?} ({}{})",
            e.dependent.stdout.trim(),
            e.dependent.status,
            e.dependent.stderr
        )
    });
    let written = written_into_checkout(&e.checkout_status.stdout);
    t.claim(e.checkout_status.success && written.is_empty(), || {
        format!(
            "{what}: the build wrote into Cargo's checkout {}: {written:?} {}",
            e.checkout.display(),
            e.checkout_status.stderr
        )
    });
    let (seen, compiled) = &e.again_units;
    t.claim(e.again.success && *seen > 0 && compiled.is_empty(), || {
        format!(
            "{what}: a second build compiled {compiled:?} ({seen} units reported; {})",
            e.again.stderr
        )
    });
    t
}

pub fn render(e: &Evidence) -> Vec<Row> {
    let mean = e.retained.iter().sum::<i64>() / e.retained.len().max(1) as i64;
    vec![
        Row::retained(
            "mlx-rs 0.33 with mlx-sys from a git URL",
            vec![(Variant::PATCHED.name.to_string(), mean as f64)],
            e.digests.windows(2).all(|w| w[0] == w[1]),
        ),
        Row::note(format!(
            "git dependency: {} at {}{}; {}",
            e.source.url,
            &e.source.rev[..e.source.rev.len().min(12)],
            if e.snapshot {
                " (a snapshot of uncommitted work)"
            } else {
                ""
            },
            e.dependent.stdout.trim()
        )),
    ]
}

pub const CARGO_MARK: &str = ".cargo-ok";

pub fn written_into_checkout(status: &str) -> Vec<String> {
    status
        .lines()
        .filter(|l| !l.trim().is_empty() && l.trim() != format!("?? {CARGO_MARK}"))
        .map(String::from)
        .collect()
}
