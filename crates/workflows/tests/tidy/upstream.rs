//! No upstream file is tracked: no copyright notice outside `patches/`,
//! no bytes shared with the upstream tree the build uses.

use crate::{report, tracked, workspace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
