//! The tree keeps its own rules: every file git tracks is read, and each
//! rule is a pure function over a file's path and text, shown rejecting a
//! made-up file below so that none can pass by matching nothing.
//!
//! * every environment variable the code reads, sets or removes is
//!   declared: in `crates/facts/src/variables.rs`'s tables, or set by Cargo;
//! * no package registry's host name appears anywhere (the names are kept
//!   here as SHA-256 digests, so this file names none either);
//! * no upstream file is tracked: no file outside `patches/` carries a
//!   copyright notice (ours carry none; MLX's, mlx-c's, mlx-lm's, mlx-audio's
//!   and nanobind's all do), and no tracked file has the bytes of a file of
//!   the upstream MLX tree the build uses;
//! * every generated page is what its generator writes now;
//! * no module imports one that imports it back, in any crate.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// Every file git tracks, with its text (binary files are left out).
fn tracked() -> Vec<(String, String)> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(workspace())
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<(String, String)> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter_map(|p| {
            let bytes = std::fs::read(workspace().join(&p)).ok()?;
            let text = String::from_utf8(bytes).ok()?;
            Some((p, text))
        })
        .collect();
    assert!(
        files.len() > 100,
        "git tracks only {} text files here",
        files.len()
    );
    files
}

// ---- environment variables ----

/// The names of environment variables `text` reads, sets or removes, by
/// the calls the code uses for that in each language.
fn variables_used(path: &str, text: &str) -> BTreeSet<String> {
    variable_uses(path, text)
        .into_iter()
        .map(|(_, n)| n)
        .collect()
}

/// Each use as (the call, the name).
fn variable_uses(path: &str, text: &str) -> Vec<(&'static str, String)> {
    const CALLS: &[&str] = &[
        // Rust
        "env::var(\"",
        "env::var_os(\"",
        "var_os(\"",
        "set_var(\"",
        "remove_var(\"",
        ".env(\"",
        ".env_remove(\"",
        "read_untracked(\"",
        "read_name(\"",
        "read_cargo(\"",
        "env!(\"",
        "rerun-if-env-changed=",
        // Python
        "os.environ.get(\"",
        "os.environ[\"",
        "os.getenv(\"",
        "environ.setdefault(\"",
        // C
        "getenv(\"",
        "setenv(\"",
        // shell
        "export ",
    ];
    let mut names = Vec::new();
    for call in CALLS {
        for (at, _) in text.match_indices(call) {
            let name: String = text[at + call.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.len() > 1
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                names.push((*call, name));
            }
        }
    }
    // C: `getenv(NAME)` through `#define NAME "VARIABLE"`.
    if path.ends_with(".c") || path.ends_with(".cc") || path.ends_with(".cpp") {
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some("#define"), Some(macro_name), Some(value)) =
                (words.next(), words.next(), words.next())
            {
                if text.contains(&format!("getenv({macro_name})"))
                    || text.contains(&format!("setenv({macro_name},"))
                {
                    names.push(("getenv(", value.trim_matches('"').to_string()));
                }
            }
        }
    }
    names
}

/// Whether `name` is declared: a variable of ours or of another program in
/// `env.rs`'s tables, or one Cargo sets for build scripts and tests.
fn declared(name: &str) -> bool {
    const CARGO_PREFIXES: &[&str] = &[
        "OUT_DIR",
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "DEP_",
        "CARGO_PKG_",
        "CARGO_BIN_EXE_",
    ];
    const CARGO_NAMES: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_TARGET_TMPDIR",
        "CARGO_MAKEFLAGS",
        "TARGET",
        "HOST",
        "PROFILE",
    ];
    mlx_patched::VARIABLES
        .iter()
        .chain(mlx_patched::OTHER_VARIABLES)
        .any(|v| v.name == name)
        || CARGO_PREFIXES.iter().any(|p| name.starts_with(p))
        || CARGO_NAMES.contains(&name)
}

fn undeclared_variables(path: &str, text: &str) -> Vec<String> {
    variables_used(path, text)
        .into_iter()
        .filter(|n| !declared(n))
        .map(|n| format!("{path}: {n} is not declared in crates/facts/src/variables.rs"))
        .collect()
}

/// Rust that reads, sets or removes a declared variable by a bare name,
/// outside `env.rs`: the name must come from its declaration
/// (`mlx_patched::vars`, `other_vars`, `CommandVars`). `env!` and Cargo's
/// directives take only literals; Cargo's own names are not declared.
fn bare_names(path: &str, text: &str) -> Vec<String> {
    if !path.ends_with(".rs") || path == "crates/facts/src/variables.rs" {
        return vec![];
    }
    let declared: BTreeSet<&str> = mlx_patched::VARIABLES
        .iter()
        .chain(mlx_patched::OTHER_VARIABLES)
        .map(|v| v.name)
        .collect();
    variable_uses(path, text)
        .into_iter()
        .filter(|(call, n)| {
            !matches!(*call, "env!(\"" | "rerun-if-env-changed=") && declared.contains(n.as_str())
        })
        .map(|(call, n)| {
            format!("{path}: {call}{n}...: use its declaration (mlx_patched::vars or other_vars)")
        })
        .collect()
}

/// Rust that writes one of `names` as a string, outside `home`, the file
/// that declares them; `use` says what to write instead. `tests/mlx-rs`
/// and `tests/mlx-sys-dependent` are a user's projects, built without the
/// workspace.
fn names_written_out(path: &str, text: &str, home: &str, names: &[&str], what: &str, use_: &str) -> Vec<String> {
    if !path.ends_with(".rs")
        || path == home
        || path.starts_with("tests/mlx-rs/")
        || path.starts_with("tests/mlx-sys-dependent/")
    {
        return vec![];
    }
    let mut out = Vec::new();
    for name in names {
        let quoted = format!("\"{name}\"");
        for (i, line) in text.lines().enumerate() {
            if line.contains(&quoted) {
                out.push(format!("{path}:{}: the {what} name {quoted}: use {use_}", i + 1));
            }
        }
    }
    out
}

/// A variant's name written as a string, outside `crates/facts/src/variants.rs`:
/// use `Variant::PATCHED` and the others.
fn variant_names(path: &str, text: &str) -> Vec<String> {
    let names: Vec<&str> = mlx_patched::VARIANTS.iter().map(|v| v.name).collect();
    names_written_out(path, text, "crates/facts/src/variants.rs", &names, "variant", "mlx_patched::Variant's constant")
}

// ---- the summary table's format ----

/// Pieces of the summary table's format (`mlx_expectations::report`), in
/// Rust outside that module: every row is written and read through `Row`.
fn report_formats(path: &str, text: &str) -> Vec<String> {
    const PIECES: &[&str] = &["bit-identical=", "\"note\\t", "rows.tsv", "fuzz-slice-"];
    if !path.ends_with(".rs")
        || path == "crates/expectations/src/report.rs"
        || path.ends_with("/tidy.rs")
    {
        return vec![];
    }
    lines_with(
        path,
        text,
        PIECES,
        "is the summary table's format: use mlx_expectations::report",
    )
}

// ---- errors keep their cause ----

/// Places in the harness (workflows, checks, plumbing, xtask) where an error is flattened to text,
/// losing its cause chain: they return `anyhow` errors with context.
fn flattened_errors(path: &str, text: &str) -> Vec<String> {
    const PIECES: &[&str] = &[
        "map_err(|e| e.to_string())",
        "Result<T, String>",
        "map_err(|e| format!(",
    ];
    const HARNESS: &[&str] = &["crates/workflows/src/", "crates/checks/src/", "crates/harness/src/", "crates/xtask/src/"];
    if !HARNESS.iter().any(|h| path.starts_with(h)) {
        return vec![];
    }
    lines_with(
        path,
        text,
        PIECES,
        "drops the error's cause: use `?` with `.context(..)`",
    )
}

/// Each line of `text` holding one of `pieces`, as `path:line: piece why`.
fn lines_with(path: &str, text: &str, pieces: &[&str], why: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for piece in pieces {
            if line.contains(piece) {
                out.push(format!("{path}:{}: `{piece}` {why}", i + 1));
            }
        }
    }
    out
}

// ---- registry hosts ----

/// SHA-256 of the host names of the package registries (crates, PyPI and
/// its file host, npm, conda, RubyGems, the Go proxy).
const REGISTRY_HOST_DIGESTS: &[&str] = &[
    "789e46d79514e28093cabe2bb4a0798266f584b0e508ef269ebabb6e57859290",
    "3d01f3609be82d98eeedcd977fae947ee6da479acbfd5d19619bda2184977921",
    "eb7e11c7f9ecbcf48099060ec1c8c593134ff031f587e07be17293b2a3a0ee36",
    "a4aa2ac280bb8d1a0ce7a1be5a7bfb10292b49fe9435ad5cff19f421f3c70e41",
    "c899567ee906851741bf7f3bde17a33777859ff9f53ff54d6f0ea54cf31ad636",
    "d6d7019ca9fcbf07c769e445342515ef0c92e4f18a96adbb3bf6460f5b0ba17f",
    "9495278a74715c7e246a36404b3589f0f2f0b564defdec00b228aa07ecb515e0",
    "9ab2ad663f3d2a5e0a38190483536f53c576599778c6e6d1adb9f357122f355c",
    "0dc11026ac75c015aaa1deafff4a7a54ef6d0cf6b3c7f9b1d2c8f3502929aa9e",
    "4db460c55b85212e50a70cadcb10c5fc3c32382ed9896a3730423469d2e05619",
    "15bdb44dafa6843b1e260ba626cb18b8d49581827a759b8102812b61cc522c83",
    "51c6b9f69c48a75b146d2785c3d70d336d5fdce24868f2e22db377d736f2ef24",
    "71741fe2460a615058687c4585f665af5e825968e51a512ffb14c6f2684a397d",
    "00a7dc5a0cc388586b8665846e7d8ae94a6dd096f2aa1aa3b4aab4ac484f998a",
];

fn sha256(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The host names in `text` whose digest is listed: every dotted name, and
/// every name it ends with (a subdomain of a registry counts).
fn hosts_in(text: &str, digests: &[&str]) -> Vec<String> {
    let mut found = BTreeSet::new();
    let lower = text.to_ascii_lowercase();
    for word in lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-')) {
        let labels: Vec<&str> = word.split('.').filter(|l| !l.is_empty()).collect();
        for start in 0..labels.len().saturating_sub(1) {
            let host = labels[start..].join(".");
            if digests.contains(&sha256(&host).as_str()) {
                found.insert(host);
            }
        }
    }
    found.into_iter().collect()
}

fn registry_hosts(path: &str, text: &str) -> Vec<String> {
    hosts_in(text, REGISTRY_HOST_DIGESTS)
        .into_iter()
        .map(|h| format!("{path}: names a package registry's host ({} characters); use the client (cargo, pip, apt-get) by package name", h.len()))
        .collect()
}

// ---- upstream files ----

/// A copyright notice outside `patches/` (whose context lines are
/// upstream's by nature): every upstream file carries one, ours none.
fn copyright_notices(path: &str, text: &str) -> Vec<String> {
    if path.starts_with("patches/") {
        return vec![];
    }
    // A notice: the word with a ©, a "(c)" or a year after it.
    let is_notice = |line: &str| {
        let lower = line.to_ascii_lowercase();
        lower.find(concat!("copy", "right")).is_some_and(|at| {
            let rest = &lower[at..];
            rest.contains('©')
                || rest.contains("(c)")
                || rest
                    .as_bytes()
                    .windows(4)
                    .any(|w| w.iter().all(u8::is_ascii_digit) && (w[0] == b'1' || w[0] == b'2'))
        })
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| is_notice(l))
        .map(|(i, _)| {
            format!(
                "{path}:{}: a copyright notice: is this an upstream file?",
                i + 1
            )
        })
        .collect()
}

/// Git's blob id of each file (`git hash-object`), by path.
fn blob_ids(dir: &Path, files: &[PathBuf]) -> BTreeMap<String, PathBuf> {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(["hash-object", "--stdin-paths"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("git runs");
    let mut stdin = child.stdin.take().unwrap();
    let list: String = files
        .iter()
        .map(|f| format!("{}\n", dir.join(f).display()))
        .collect();
    let writer = std::thread::spawn(move || stdin.write_all(list.as_bytes()));
    let out = child.wait_with_output().expect("git hash-object");
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "git hash-object failed in {}",
        dir.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .zip(files)
        .map(|(id, f)| (id.to_string(), f.clone()))
        .collect()
}

/// Files under `dir` of at least `min` bytes (smaller ones, such as an
/// empty `__init__.py`, say nothing about where a file came from).
fn files_under(dir: &Path, min: u64) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                if e.file_name() != ".git" {
                    stack.push(p);
                }
            } else if meta.is_file() && meta.len() >= min {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// Our files that have the bytes of one of upstream's.
fn shared_blobs(
    ours: &BTreeMap<String, PathBuf>,
    upstream: &BTreeMap<String, PathBuf>,
) -> Vec<String> {
    ours.iter()
        .filter_map(|(id, p)| {
            upstream.get(id).map(|u| {
                format!(
                    "{} has the bytes of upstream's {}",
                    p.display(),
                    u.display()
                )
            })
        })
        .collect()
}

// ---- the tests ----

// ---- module cycles ----

/// A crate's modules at every depth (`src/a.rs` and `src/a/mod.rs` are
/// `a`, `src/a/b.rs` is `a::b`) and the ones each refers to: through
/// `crate::`, `super::` and `self::` paths, and, in the file that declares
/// a child (`mod b;`), through paths that start with the child's name. A
/// path counts for the deepest module it names; a name a module re-exports
/// (`pub use b::{…}`) counts for the module it comes from. The crate root
/// is not a node: it declares and re-exports. A file's test module (from
/// `#[cfg(test)]` on) is left out: it may reach anything it tests.
fn module_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let module_of = |path: &str| -> Option<String> {
        let (_, rest) = path.split_once("src/")?;
        let rest = rest.strip_suffix(".rs")?;
        let mut parts: Vec<&str> = rest.split('/').collect();
        if parts.first() == Some(&"bin") {
            return None;
        }
        if parts.last() == Some(&"mod") {
            parts.pop();
        }
        let m = parts.join("::");
        (!m.is_empty() && m != "lib" && m != "main").then_some(m)
    };
    let without_tests = |text: &str| -> String {
        let cut = text
            .match_indices("#[cfg(test)]")
            .map(|(i, m)| i + m.len())
            .find(|&i| text[i..].trim_start().starts_with("mod "))
            .map_or(text.len(), |i| i - "#[cfg(test)]".len());
        text[..cut].to_string()
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|(p, _)| module_of(p)).collect();
    let parent = |m: &str| {
        m.rsplit_once("::")
            .map_or(String::new(), |(p, _)| p.to_string())
    };
    let join = |base: &str, rest: &str| {
        if base.is_empty() {
            rest.to_string()
        } else {
            format!("{base}::{rest}")
        }
    };
    // Names each module (`""`: the root) re-exports, to the module they come
    // from, relative paths resolved against the exporting module.
    let mut reexported: BTreeMap<(String, String), String> = BTreeMap::new();
    for (p, text) in files {
        let here = module_of(p).unwrap_or_default();
        for line in without_tests(text).lines() {
            let line = line.trim();
            let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|k| line.strip_prefix(k))
            else {
                continue;
            };
            let Some((m, names)) = rest.rsplit_once("::") else {
                continue;
            };
            let m = m.trim_start_matches("self::");
            let from = if let Some(abs) = m.strip_prefix("crate::") {
                abs.to_string()
            } else {
                join(&here, m)
            };
            for n in names.split([',', '{', '}', ';', ' ']) {
                let n = n.split(" as ").next().unwrap_or("").trim();
                if !n.is_empty() && n != "*" {
                    reexported.insert((here.clone(), n.to_string()), from.clone());
                }
            }
        }
    }
    // The deepest module `segments` (from the root) names.
    let resolve = |segments: &[String]| -> Option<String> {
        let mut at = String::new();
        for s in segments {
            let next = join(&at, s);
            if modules.contains(&next) {
                at = next;
            } else if let Some(to) = reexported.get(&(at.clone(), s.clone())) {
                return Some(to.clone());
            } else {
                break;
            }
        }
        (!at.is_empty()).then_some(at)
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (p, text) in files {
        let Some(from) = module_of(p) else { continue };
        let text = without_tests(text);
        let children: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub ")
                    .or(l.strip_prefix("pub(crate) "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?
                    .strip_suffix(';')
                    .map(str::to_string)
            })
            .collect();
        let edges = graph.entry(from.clone()).or_default();
        let mut refer = |segments: Vec<String>| {
            if let Some(to) = resolve(&segments).filter(|t| *t != from) {
                edges.insert(to);
            }
        };
        let bytes = text.as_bytes();
        let starts_word = |i: usize| {
            i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':')
        };
        for (i, _) in text.match_indices("crate::") {
            if starts_word(i) {
                path_after(&text[i + "crate::".len()..])
                    .into_iter()
                    .for_each(&mut refer);
            }
        }
        for (i, _) in text.match_indices("self::") {
            if starts_word(i) {
                for tail in path_after(&text[i + "self::".len()..]) {
                    let mut segs: Vec<String> = from.split("::").map(str::to_string).collect();
                    segs.extend(tail);
                    refer(segs);
                }
            }
        }
        for (i, _) in text.match_indices("super::") {
            if !starts_word(i) {
                continue;
            }
            let mut base = parent(&from);
            let mut rest = &text[i + "super::".len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base = parent(&base);
                rest = r;
            }
            for tail in path_after(rest) {
                // `super::Evidence` names the parent itself: an item of it.
                let mut segs: Vec<String> = base
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                segs.extend(tail);
                refer(segs);
            }
        }
        for child in &children {
            let pat = format!("{child}::");
            for (i, _) in text.match_indices(&pat) {
                if starts_word(i) {
                    for tail in path_after(&text[i..]) {
                        let mut segs: Vec<String> = from.split("::").map(str::to_string).collect();
                        segs.extend(tail);
                        refer(segs);
                    }
                }
            }
        }
    }
    graph
}

/// The path at the start of `text` as segments, or each path of a `{…}`
/// group (at the start or after a prefix: `a::{b, c::d}`).
fn path_after(text: &str) -> Vec<Vec<String>> {
    if let Some(group) = text.strip_prefix('{') {
        let group = &group[..group.find('}').unwrap_or(group.len())];
        return group
            .split(',')
            .map(|item| item.split("::").map(ident).collect())
            .collect();
    }
    let mut segs = Vec::new();
    let mut rest = text;
    loop {
        let id = ident(rest);
        if id.is_empty() {
            break;
        }
        rest = &rest.trim_start()[id.len()..];
        segs.push(id);
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with('{') => {
                return path_after(r)
                    .into_iter()
                    .map(|tail| segs.iter().cloned().chain(tail).collect())
                    .collect();
            }
            Some(r) => rest = r,
            None => break,
        }
    }
    vec![segs]
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Each pair of modules that import each other, directly or through others.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if n == to {
                    return true;
                }
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        false
    };
    let mut found = Vec::new();
    for (m, edges) in graph {
        for n in edges {
            if m < n && reaches(n, m) {
                found.push(format!("{m} imports {n}, and {n} imports {m} back"));
            }
        }
    }
    found
}

/// Each crate's files, by the directory holding its `src/`.
fn crates(files: &[(String, String)]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut by_crate: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (p, text) in files {
        if !p.ends_with(".rs") {
            continue;
        }
        let Some(i) = p.find("src/").filter(|&i| i == 0 || p[..i].ends_with('/')) else {
            continue;
        };
        by_crate
            .entry(p[..i].to_string())
            .or_default()
            .push((p[i..].to_string(), text.clone()));
    }
    by_crate
}

fn report(what: &str, violations: Vec<String>) {
    assert!(violations.is_empty(), "{what}:\n{}", violations.join("\n"));
}

#[test]
fn every_environment_variable_is_declared() {
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for (path, text) in tracked() {
        seen.extend(variables_used(&path, &text));
        bad.extend(undeclared_variables(&path, &text));
    }
    report("environment variables used but not declared", bad);
    // The scan sees what it should: names in Rust's `env!`, and read in
    // Python and in C.
    for name in [
        "MLX_BRIDGE_UPSTREAM_VERSION",
        "MLX_DISABLE_COMPILE",
        "MLX_FORK_RESULTS",
        "MLX_FORK_ABORT_AT_EXIT_PID",
    ] {
        assert!(
            seen.contains(name),
            "the scan found no use of {name}: {seen:?}"
        );
    }
}

#[test]
fn rust_names_every_variable_through_its_declaration() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| bare_names(p, t))
        .collect();
    report("variables named by a bare string", bad);
}

/// A C++ probe's name written as a string, outside
/// `crates/facts/src/probes.rs`: use `probes::LEAK_SCENARIO` and the others.
fn probe_names(path: &str, text: &str) -> Vec<String> {
    let names: Vec<&str> = mlx_patched::probes::CPP_PROBES.iter().map(|p| p.name).collect();
    names_written_out(path, text, "crates/facts/src/probes.rs", &names, "probe", "its constant in mlx_patched::probes")
}

/// A slow check's name or command written as a string outside the claim
/// registry (`crates/workflows/src/claims.rs`), which is their one home.
/// A name that is a plain word (`provenance`) is also a folder's name
/// elsewhere, so only compound names are held to it.
fn slow_check_names(path: &str, text: &str) -> Vec<String> {
    let names: Vec<&str> = mlx_workflows::claims::SLOW_CHECKS
        .iter()
        .flat_map(|c| std::iter::once(c.name).chain(c.command))
        .filter(|n| n.contains(['_', '-']))
        .collect();
    names_written_out(path, text, "crates/workflows/src/claims.rs", &names, "slow check", "the claim registry, mlx_workflows::claims")
}

/// The workspace's own packages a package depends on by path: its
/// `[dependencies]` entries with `path =` or `.workspace = true` whose
/// workspace entry is a path (read from the manifests' text).
fn path_dependencies(manifest: &str, workspace_manifest: &str) -> Vec<String> {
    let section = |text: &str, name: &str| -> Vec<String> {
        let mut lines = Vec::new();
        let mut inside = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                inside = line == name;
            } else if inside && !line.is_empty() && !line.starts_with('#') {
                lines.push(line.to_string());
            }
        }
        lines
    };
    let workspace_paths: Vec<String> = section(workspace_manifest, "[workspace.dependencies]")
        .into_iter()
        .filter(|l| l.contains("path ="))
        .filter_map(|l| l.split_once(' ').map(|(n, _)| n.trim_end_matches('=').to_string()))
        .collect();
    section(manifest, "[dependencies]")
        .into_iter()
        .filter_map(|l| {
            let name = l.split(['=', '.', ' ']).next()?.to_string();
            let by_path = l.contains("path =")
                || (l.contains(".workspace = true") && workspace_paths.contains(&name));
            by_path.then_some(name)
        })
        .collect()
}

/// Each lock file of a project outside the workspace that reaches
/// `mlx-patched` (through the drop-in `mlx-sys`) lists what `mlx-patched`
/// depends on by path: its checks fetch with `--locked`, and a package the
/// lock lacks fails them only on a fresh clone.
fn stale_outside_locks(files: &[(String, String)]) -> Vec<String> {
    let text = |path: &str| {
        files
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    let needed = path_dependencies(&text("mlx-patched/Cargo.toml"), &text("Cargo.toml"));
    let mut out = Vec::new();
    for (path, lock) in files {
        if !path.ends_with("/Cargo.lock") || !lock.contains("name = \"mlx-patched\"") {
            continue;
        }
        for name in &needed {
            if !lock.contains(&format!("name = \"{name}\"")) {
                out.push(format!(
                    "{path} lacks {name}, which mlx-patched depends on: run `cargo metadata --offline --manifest-path {}`",
                    path.replace("Cargo.lock", "Cargo.toml")
                ));
            }
        }
    }
    out
}

#[test]
fn the_lock_files_outside_the_workspace_list_what_the_build_crate_needs() {
    let files = tracked();
    let needed = path_dependencies(
        &files.iter().find(|(p, _)| p == "mlx-patched/Cargo.toml").unwrap().1,
        &files.iter().find(|(p, _)| p == "Cargo.toml").unwrap().1,
    );
    assert!(needed.iter().any(|n| n == "mlx-facts"), "{needed:?}");
    report("stale lock files", stale_outside_locks(&files));
    // A lock that reaches mlx-patched without mlx-facts is stale.
    let planted = [
        ("mlx-patched/Cargo.toml".to_string(), "[dependencies]\nmlx-facts.workspace = true\nsha2 = \"0.10\"\n".to_string()),
        ("Cargo.toml".to_string(), "[workspace.dependencies]\nmlx-facts = { path = \"crates/facts\" }\n".to_string()),
        ("tests/x/Cargo.lock".to_string(), "[[package]]\nname = \"mlx-patched\"\n".to_string()),
    ];
    assert_eq!(stale_outside_locks(&planted).len(), 1);
}

#[test]
fn rust_names_every_probe_through_its_constant() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| probe_names(p, t))
        .collect();
    report("probes named by a string", bad);
}

#[test]
fn slow_checks_are_named_in_the_claim_registry_alone() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| slow_check_names(p, t))
        .collect();
    report("slow checks named outside the registry", bad);
}

#[test]
fn the_slow_check_rule_rejects_a_name_written_out() {
    let text = "checks::run(\"python_package\", check); cmd(\"mlx-lm-check\")";
    assert_eq!(slow_check_names("tests/python_package.rs", text).len(), 2);
    assert!(slow_check_names("crates/workflows/src/claims.rs", text).is_empty());
}

#[test]
fn rust_names_every_variant_through_its_constant() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| variant_names(p, t))
        .collect();
    report("variants named by a string", bad);
}

#[test]
fn only_the_report_module_writes_the_table_s_format() {
    let violations = tracked()
        .iter()
        .flat_map(|(p, t)| report_formats(p, t))
        .collect();
    report("the summary table's format outside its module", violations);
}

#[test]
fn the_report_rule_rejects_a_row_written_by_hand() {
    let text = "rows.push(format!(\"{s}\\tbit-identical=yes\"));\nlet f = dir.join(\"rows.tsv\");";
    assert_eq!(report_formats("crates/workflows/src/a.rs", text).len(), 2);
    assert!(report_formats("crates/expectations/src/report.rs", text).is_empty());
}

#[test]
fn workflow_errors_keep_their_cause() {
    let violations = tracked()
        .iter()
        .flat_map(|(p, t)| flattened_errors(p, t))
        .collect();
    report("errors flattened to text", violations);
}

#[test]
fn the_error_rule_rejects_a_flattened_error() {
    let text = "let t = std::fs::read(p).map_err(|e| e.to_string())?;\nlet u = f().map_err(|e| format!(\"{p}: {e}\"))?;";
    assert_eq!(flattened_errors("crates/workflows/src/a.rs", text).len(), 2);
    assert!(flattened_errors("crates/fuzz/src/a.rs", text).is_empty());
}

#[test]
fn no_file_names_a_package_registry() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| registry_hosts(p, t))
        .collect();
    report("registry host names", bad);
}

#[test]
fn no_upstream_file_is_tracked() {
    let files = tracked();
    report(
        "copyright notices",
        files
            .iter()
            .flat_map(|(p, t)| copyright_notices(p, t))
            .collect(),
    );
    // Byte for byte against the upstream tree the build uses: present
    // wherever MLX has been built, and required under `cargo xtask test`.
    let env = mlx_patched::Env::process();
    let target = env
        .cargo_target_dir()
        .map(|t| workspace().join(t))
        .unwrap_or_else(|| workspace().join("target"));
    let opts = mlx_patched::Options::from_env(env, &target, false).expect("options");
    let upstream = match mlx_patched::upstream(&opts) {
        Ok(u) => u,
        Err(e) if env.report_file().is_none() => {
            eprintln!("the upstream tree is not here ({e}): compared by copyright notice only");
            return;
        }
        Err(e) => panic!("the upstream tree is needed to compare bytes: {e}"),
    };
    let ours: Vec<PathBuf> = files
        .iter()
        .map(|(p, _)| PathBuf::from(p))
        .filter(|p| std::fs::metadata(workspace().join(p)).is_ok_and(|m| m.len() >= 100))
        .collect();
    let theirs = files_under(&upstream.dir, 100);
    assert!(
        theirs.len() > 500,
        "{} holds only {} files",
        upstream.dir.display(),
        theirs.len()
    );
    report(
        "files with the bytes of upstream's",
        shared_blobs(
            &blob_ids(&workspace(), &ours),
            &blob_ids(&upstream.dir, &theirs),
        ),
    );
}

#[test]
fn every_generated_page_is_current() {
    let pages = [
        (
            mlx_patched::VARIABLES_PAGE,
            mlx_patched::variables_markdown(),
        ),
        (mlx_fuzz::primitives::PAGE, mlx_fuzz::primitives::markdown()),
        (
            mlx_patched::upstream_fixes::PAGE,
            mlx_patched::upstream_fixes::markdown(),
        ),
    ];
    for (page, rendered) in pages {
        let path = workspace().join(page);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text == rendered,
            "{} is not what the code's table declares: run `cargo xtask docs`",
            path.display()
        );
    }
    // The figures and phrases of hand-written pages that a table decides.
    for page in mlx_workflows::docs::FRAGMENT_PAGES {
        let path = workspace().join(page);
        let text = std::fs::read_to_string(&path).unwrap();
        let filled = mlx_workflows::docs::fill(&text).unwrap();
        assert!(
            text == filled,
            "{}: a fragment (`<!-- facts:… -->`) is not what the code's tables say now: run `cargo xtask docs`",
            path.display()
        );
        assert!(text.contains("<!-- facts:"), "{page} holds no fragment");
    }
}

// ---- each rule rejects what it is for ----

#[test]
fn the_variable_rule_rejects_an_undeclared_name_in_each_language() {
    for (path, text) in [
        ("a.rs", "let x = std::env::var(\"MLX_SOMETHING_NEW\");"),
        ("a.rs", "cmd.env(\"MLX_SOMETHING_NEW\", \"1\");"),
        ("a.py", "os.environ.get(\"MLX_SOMETHING_NEW\")"),
        (
            "a.c",
            "#define V \"MLX_SOMETHING_NEW\"\nint f() { return getenv(V) != 0; }",
        ),
        // Split so that this file does not export it itself.
        ("run", concat!("ex", "port MLX_SOMETHING_NEW=1")),
    ] {
        let bad = undeclared_variables(path, text);
        assert_eq!(bad.len(), 1, "{path}: {text}: {bad:?}");
        assert!(bad[0].contains("MLX_SOMETHING_NEW"));
    }
    assert!(undeclared_variables(
        "a.rs",
        "std::env::var(\"MLX_SOURCE_DIR\"); cmd.env(\"TMPDIR\", d);"
    )
    .is_empty());
}

#[test]
fn the_declaration_rule_rejects_a_bare_name_in_rust_only() {
    let text = "cmd.env(\"TMPDIR\", d).env_remove(\"MLX_SYS_PREFIX\");";
    assert_eq!(bare_names("src/a.rs", text).len(), 2);
    assert!(bare_names("crates/facts/src/variables.rs", text).is_empty());
    assert!(bare_names("tests/python/a.py", "os.environ.get(\"TMPDIR\")").is_empty());
    assert!(bare_names(
        "src/a.rs",
        "env!(\"MLX_BRIDGE_UPSTREAM_VERSION\"); cmd.var(vars::TMPDIR, d);"
    )
    .is_empty());
}

#[test]
fn the_variant_rule_rejects_a_name_written_out() {
    let text = format!(
        "if v.name == {:?} {{}}",
        mlx_patched::Variant::PRISTINE.name
    );
    assert_eq!(variant_names("crates/workflows/src/a.rs", &text).len(), 1);
    assert!(variant_names("crates/facts/src/variants.rs", &text).is_empty());
    assert!(variant_names("crates/workflows/src/a.rs", "if v == Variant::PRISTINE {}").is_empty());
}

#[test]
fn the_probe_rule_rejects_a_name_written_out() {
    let text = "Command::new(v.probe(\"leak_scenario\"))";
    assert_eq!(probe_names("tests/a.rs", text).len(), 1);
    assert!(probe_names("crates/facts/src/probes.rs", text).is_empty());
    assert!(probe_names("tests/a.rs", "v.probe(probes::LEAK_SCENARIO)").is_empty());
}

#[test]
fn the_registry_rule_finds_a_listed_host_and_its_subdomains() {
    let digest = sha256("example.org");
    let listed = [digest.as_str()];
    assert_eq!(
        hosts_in("see https://example.org/x", &listed),
        ["example.org"]
    );
    assert_eq!(
        hosts_in("files.Example.org/a.whl", &listed),
        ["example.org"]
    );
    assert!(hosts_in("example.com and org.example", &listed).is_empty());
}

#[test]
fn the_upstream_rules_reject_a_notice_and_shared_bytes() {
    // Split so that this file carries no notice itself.
    let notice = concat!("// Copy", "right © 2023 Someone");
    assert_eq!(
        copyright_notices("src/x.rs", &format!("{notice}\nfn f() {{}}")).len(),
        1
    );
    assert!(copyright_notices("patches/0001-x.patch", notice).is_empty());
    assert!(copyright_notices("src/x.rs", "// says why a notice is looked for").is_empty());
    let ours = BTreeMap::from([("b1".to_string(), PathBuf::from("src/copied.h"))]);
    let theirs = BTreeMap::from([("b1".to_string(), PathBuf::from("mlx/array.h"))]);
    assert_eq!(
        shared_blobs(&ours, &theirs),
        ["src/copied.h has the bytes of upstream's mlx/array.h"]
    );
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let files = tracked();
    let mut violations = Vec::new();
    for (krate, files) in crates(&files) {
        for c in cycles(&module_graph(&files)) {
            violations.push(format!(
                "{}: {c}",
                if krate.is_empty() { "." } else { &krate }
            ));
        }
    }
    report("import cycles", violations);
}

#[test]
fn the_cycle_rule_finds_a_cycle_through_a_third_module_and_a_reexport() {
    let file = |p: &str, t: &str| (p.to_string(), t.to_string());
    let three = [
        file("src/a.rs", "use crate::b::f;"),
        file("src/b.rs", "fn g() { crate::c::h() }"),
        file("src/c/mod.rs", "use crate::{a::x, Error};"),
        file("src/lib.rs", "mod a; mod b; mod c;"),
    ];
    assert_eq!(
        cycles(&module_graph(&three)).len(),
        2,
        "a-b and a-c, both through c"
    );
    let reexport = [
        file("src/a.rs", "pub struct Error; fn f() { crate::b::g() }"),
        file("src/b.rs", "fn g() -> crate::Error { todo!() }"),
        file("src/lib.rs", "mod a; mod b;\npub use a::{Error};"),
    ];
    assert_eq!(cycles(&module_graph(&reexport)).len(), 1);
    let layered = [
        file("src/a.rs", "use crate::b::f;"),
        file("src/b.rs", "use crate::Error;"),
        file("src/lib.rs", "pub struct Error;"),
    ];
    assert!(cycles(&module_graph(&layered)).is_empty());
    // Nested modules: two siblings through `super::`, and a child that
    // reaches for its parent's item while the parent calls into it.
    let nested = [
        file(
            "src/s/mod.rs",
            "mod judge;\nmod record;\npub struct Args;\nfn f() { judge::run() }",
        ),
        file(
            "src/s/judge.rs",
            "use super::record::Check;\nuse super::Args;",
        ),
        file("src/s/record.rs", "fn g() { super::judge::ids() }"),
        file("src/lib.rs", "mod s;"),
    ];
    let found = cycles(&module_graph(&nested));
    assert_eq!(
        found,
        [
            "s imports s::judge, and s::judge imports s back",
            "s::judge imports s::record, and s::record imports s::judge back",
        ],
    );
    // The same, layered: the judge owns its types, the record reads them,
    // and a test module may reach anywhere.
    let layered = [
        file(
            "src/s/mod.rs",
            "mod judge;\nmod record;\nfn f() { judge::run() }",
        ),
        file(
            "src/s/judge.rs",
            "pub struct Args;\n#[cfg(test)]\nmod tests { use super::super::record::x; }",
        ),
        file("src/s/record.rs", "use super::judge::{Args, ids};"),
        file("src/lib.rs", "mod s;"),
    ];
    assert!(cycles(&module_graph(&layered)).is_empty());
}
