//! The pure half of the install paths' check: what `collect` found, the
//! claims it supports and the table's rows. No I/O here, so the rules are
//! unit-tested on made-up evidence.

use mlx_expectations::report::Row;
use mlx_expectations::Cell;
use mlx_harness::error::Result;
use mlx_harness::process::Ran;
use mlx_harness::tally::Tally;
use mlx_patched::Expect;

/// What one installed state must be: the versions pip records, the
/// library the interpreter loads, and the report's verdict.
#[derive(Clone)]
pub struct Expected {
    pub what: String,
    pub version: String,
    /// The sha256 of the libmlx that must be loaded.
    pub libmlx: String,
    pub verdict: Expect,
}

/// One installed state as found.
pub struct State {
    pub want: Expected,
    /// `mlx` and `mlx-cpu`'s recorded versions.
    pub versions: Vec<Option<String>>,
    /// The libmlx loaded (path, sha256), or why none was.
    pub loaded: Result<(String, String)>,
    /// The report's script: whole MiB retained per cycle.
    pub mib: Vec<i64>,
}

/// Everything the install paths ran: plain data for [`judge`] and
/// [`render`].
#[derive(Default)]
pub struct Evidence {
    /// Each installed state, in the order the paths reached them.
    pub states: Vec<State>,
    /// Each `pip uninstall -y mlx mlx-cpu`: what had been installed, and
    /// the files and (empty) folders left.
    pub uninstalls: Vec<(String, Vec<String>, Vec<String>)>,
    /// Why the paths with upstream's wheels did not run, if they did not.
    pub skipped: Option<String>,
    /// mypy against the stubs: on the report's script, and on a `str`
    /// assigned from `mx.sum`.
    pub mypy: Option<Mypy>,
    /// The wheels packed twice: (file, sha256 first, sha256 second).
    pub packed_twice: Vec<(String, String, String)>,
    /// auditwheel's reading of each repaired wheel (Linux).
    pub tags: Vec<Tags>,
}

pub struct Mypy {
    pub version: String,
    pub report: (bool, String),
    pub ill_typed: (bool, String),
}

pub struct Tags {
    pub name: String,
    /// The front end (which needs libmlx from the library wheel).
    pub frontend: bool,
    pub ran: Ran,
    /// The tag auditwheel finds: the symbol versions' for the front end,
    /// the overall one for the library.
    pub found: String,
    pub outside: Vec<String>,
    pub size: u64,
}

/// The claims: each state is the build it must be and leaks as its
/// verdict says; an uninstall leaves no file; mypy reads the stubs; the
/// wheels pack to the same bytes; each wheel's name carries the tag
/// auditwheel finds. For the library wheel that is its overall tag. The
/// front end's binaries need libmlx, which only the library wheel
/// provides, so its overall tag stays `linux_*` (upstream's front end
/// reads the same): its symbol versions' tag must be the name's, and
/// libmlx its only outside library.
pub fn judge(e: &Evidence, t: &mut Tally) {
    for s in &e.states {
        let want = &s.want;
        t.claim(
            s.versions
                .iter()
                .all(|v| v.as_deref() == Some(want.version.as_str())),
            || {
                format!(
                    "{}: mlx and mlx-cpu are {:?}, expected {} for both",
                    want.what, s.versions, want.version
                )
            },
        );
        t.claim(
            s.loaded.as_ref().is_ok_and(|(_, sha)| *sha == want.libmlx),
            || {
                let have = match &s.loaded {
                    Ok((path, sha)) => format!("{path} ({})", &sha[..16.min(sha.len())]),
                    Err(why) => format!("none ({why:#})"),
                };
                format!(
                    "{}: the loaded libmlx is {have}, expected the bytes {}",
                    want.what,
                    &want.libmlx[..16.min(want.libmlx.len())]
                )
            },
        );
        let bound = Cell::REPORT.bound(want.verdict);
        t.claim(
            s.mib.len() == 10 && s.mib.iter().all(|&m| bound.admits_mib(m)),
            || format!("{}, expected {bound} every cycle", state_line(s)),
        );
    }
    for (what, files, _) in &e.uninstalls {
        t.claim(files.is_empty(), || {
            format!("{what}, then `pip uninstall -y mlx mlx-cpu`: left {files:?}")
        });
    }
    match &e.mypy {
        Some(m) => {
            t.claim(m.report.0, || format!("{}\n{}", mypy_line(m), m.report.1));
            let (ok, said) = &m.ill_typed;
            t.claim(
                !ok && said.contains("Incompatible types in assignment")
                    && said.contains("\"array\""),
                || format!("mypy did not see mx.sum's type through the stubs:\n{said}"),
            );
        }
        None => t.claim(false, || "mypy did not run against the stubs".into()),
    }
    for (name, a, b) in &e.packed_twice {
        t.claim(a == b, || packed_line(name, a, b));
    }
    for w in &e.tags {
        let allowed: &[&str] = if w.frontend { &["libmlx.so"] } else { &[] };
        t.claim(
            w.ran.success
                && w.found.starts_with("manylinux")
                && w.name.ends_with(&format!("-{}.whl", w.found))
                && w.outside.iter().all(|l| allowed.contains(&l.as_str())),
            || format!("{} ({}): {}", tags_line(w), w.ran.status, w.ran.stderr),
        );
    }
}

/// The rows, in the order the paths ran.
pub fn render(e: &Evidence) -> Vec<Row> {
    let mut rows: Vec<Row> = e
        .states
        .iter()
        .map(|s| Row::note(format!("Python install paths: {}", state_line(s))))
        .collect();
    if let Some(why) = &e.skipped {
        rows.push(Row::note(format!(
            "the paths between upstream's wheels and the fork's: skipped: {why}"
        )));
    }
    if let Some(m) = &e.mypy {
        rows.push(Row::note(mypy_line(m)));
    }
    for (name, a, b) in &e.packed_twice {
        rows.push(Row::note(packed_line(name, a, b)));
    }
    for w in &e.tags {
        rows.push(Row::note(tags_line(w)));
    }
    rows
}

fn state_line(s: &State) -> String {
    format!("{}: report.py prints {:?} MiB retained", s.want.what, s.mib)
}

fn mypy_line(m: &Mypy) -> String {
    format!(
        "mypy on report.py against mlx {}: {}",
        m.version,
        m.report.1.lines().last().unwrap_or("")
    )
}

fn packed_line(name: &str, a: &str, b: &str) -> String {
    format!(
        "{name} packed twice: sha256 {} then {}",
        &a[..16.min(a.len())],
        &b[..16.min(b.len())]
    )
}

fn tags_line(w: &Tags) -> String {
    format!(
        "{}: {:.1} MiB; auditwheel show: {} tag {:?}, outside libraries {:?}",
        w.name,
        w.size as f64 / 1048576.0,
        if w.frontend {
            "symbol versions"
        } else {
            "overall"
        },
        w.found,
        w.outside
    )
}
