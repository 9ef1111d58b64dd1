//! Test binaries run one test per process, with typed results: cargo's
//! JSON messages name the binaries, libtest lists their tests, and each
//! test's exit status is its result. A crash after a test's last line, or
//! at exit, is that test's failure; nothing is read from libtest's prose.

use mlx_harness::error::{anyhow, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A test binary cargo built.
#[derive(Clone, Debug)]
pub struct Binary {
    pub package: String,
    /// `lib`, `bin` or `test`: how `cargo test` selects it.
    pub kind: String,
    pub target: String,
    pub exe: PathBuf,
    pub manifest_dir: PathBuf,
}

impl Binary {
    /// How to run one of its tests alone.
    pub fn rerun(&self, test: &str) -> String {
        let select = match self.kind.as_str() {
            "lib" => "--lib".to_string(),
            kind => format!("--{kind} {}", self.target),
        };
        format!("cargo test -p {} {select} -- --exact {test}", self.package)
    }
}

/// The package name in a package id (`path+file:///dir#name@1.0`, or
/// `path+file:///name#1.0` when the name is the directory's).
fn package_name(id: &str) -> Option<String> {
    let (url, fragment) = id.rsplit_once('#')?;
    Some(match fragment.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => url.rsplit('/').next()?.to_string(),
    })
}

/// The test binaries in cargo's JSON messages (`--message-format json`).
pub fn binaries_in(messages: &str) -> Vec<Binary> {
    let mut found = Vec::new();
    for line in messages.lines() {
        let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if m["reason"] != "compiler-artifact" || m["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(package), Some(manifest)) = (
            m["executable"].as_str(),
            m["package_id"].as_str().and_then(package_name),
            m["manifest_path"].as_str(),
        ) else {
            continue;
        };
        found.push(Binary {
            package,
            kind: m["target"]["kind"][0].as_str().unwrap_or("lib").to_string(),
            target: m["target"]["name"].as_str().unwrap_or("").to_string(),
            exe: PathBuf::from(exe),
            manifest_dir: Path::new(manifest).parent().unwrap().to_path_buf(),
        });
    }
    found
}

/// Builds the test binaries `cargo` (a `cargo test …` command) selects,
/// without running them. Compiler output goes to the terminal.
pub fn build(cargo: &mut Command) -> Result<Vec<Binary>> {
    let out = cargo
        .args(["--no-run", "--message-format", "json-render-diagnostics"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {cargo:?}"))?;
    if !out.status.success() {
        return Err(anyhow!("{cargo:?} failed to build ({})", out.status));
    }
    Ok(binaries_in(&String::from_utf8_lossy(&out.stdout)))
}

/// The tests of a binary that run by default (ignored ones left out), in
/// libtest's order.
pub fn tests_of(bin: &Binary) -> Result<Vec<String>> {
    let list = |ignored: bool| -> Result<Vec<String>> {
        let mut cmd = Command::new(&bin.exe);
        cmd.current_dir(&bin.manifest_dir)
            .args(["--list", "--format", "terse"]);
        if ignored {
            cmd.arg("--ignored");
        }
        let out = cmd
            .output()
            .with_context(|| format!("cannot list {}", bin.exe.display()))?;
        if !out.status.success() {
            return Err(anyhow!(
                "{} --list failed ({}): {}",
                bin.exe.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_suffix(": test"))
            .map(String::from)
            .collect())
    };
    let ignored = list(true)?;
    Ok(list(false)?
        .into_iter()
        .filter(|t| !ignored.contains(t))
        .collect())
}

/// How one test ended.
#[derive(Debug)]
pub struct Outcome {
    pub passed: bool,
    /// What it printed (empty when it streamed to the terminal).
    pub output: String,
    pub status: String,
    pub took: Duration,
}

/// Runs one test in its own process, as cargo would (in its package's
/// directory). `stream`: its output goes to the terminal as it comes (the
/// slow checks show their progress); else it is kept for a failure.
pub fn run_test(bin: &Binary, test: &str, stream: bool) -> Result<Outcome> {
    let started = Instant::now();
    let mut cmd = Command::new(&bin.exe);
    cmd.current_dir(&bin.manifest_dir)
        .env("CARGO_MANIFEST_DIR", &bin.manifest_dir)
        .args([test, "--exact", "--test-threads", "1"]);
    let (status, output) = if stream {
        let status = cmd
            .arg("--nocapture")
            .status()
            .with_context(|| format!("cannot run {}", bin.exe.display()))?;
        (status, String::new())
    } else {
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", bin.exe.display()))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status, text)
    };
    Ok(Outcome {
        passed: status.success(),
        output,
        status: status.to_string(),
        took: started.elapsed(),
    })
}

/// Runs each `(binary, test)` of `jobs` in its own process, `workers` at
/// a time, and hands each outcome to `done` as it ends (so in the order
/// they end, not the order given). Output is kept, never streamed: two
/// tests' lines would interleave.
pub fn run_side_by_side(
    jobs: &[(Binary, String)],
    workers: usize,
    mut done: impl FnMut(&Binary, &str, Result<Outcome>),
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..workers.max(1).min(jobs.len()) {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((bin, test)) = jobs.get(i) else {
                    break;
                };
                if tx.send((i, run_test(bin, test, false))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, outcome) in rx {
            done(&jobs[i].0, &jobs[i].1, outcome);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_binaries_are_read_from_cargo_s_messages() {
        let messages = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/fuzz#mlx-fuzz@0.1.0","manifest_path":"/w/crates/fuzz/Cargo.toml","target":{"kind":["lib"],"name":"mlx_fuzz"},"profile":{"test":true},"executable":"/w/target/debug/deps/mlx_fuzz-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/mlx-patched#0.1.0","manifest_path":"/w/mlx-patched/Cargo.toml","target":{"kind":["test"],"name":"inputs"},"profile":{"test":true},"executable":"/w/target/debug/deps/inputs-2"}
{"reason":"compiler-artifact","package_id":"path+file:///w/mlx-patched#0.1.0","manifest_path":"/w/mlx-patched/Cargo.toml","target":{"kind":["lib"],"name":"mlx_patched"},"profile":{"test":false},"executable":null}
{"reason":"build-finished","success":true}
not json"#;
        let found = binaries_in(messages);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].package, "mlx-fuzz");
        assert_eq!(found[1].package, "mlx-patched");
        assert_eq!(
            found[1].rerun("bad_inputs"),
            "cargo test -p mlx-patched --test inputs -- --exact bad_inputs"
        );
        assert_eq!(
            found[0].rerun("t"),
            "cargo test -p mlx-fuzz --lib -- --exact t"
        );
    }

    /// A made-up test binary (a shell script speaking libtest's flags): a
    /// test that passes, one that fails, one that crashes after passing,
    /// and an ignored one, which is never listed to run.
    #[test]
    fn each_test_runs_alone_and_its_exit_status_is_its_result() {
        let dir = std::env::temp_dir().join(format!("runner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("fake-tests");
        std::fs::write(
            &exe,
            "#!/bin/sh\n\
             if [ \"$1\" = --list ]; then\n\
               if [ \"$4\" = --ignored ]; then echo 'slow: test'; exit 0; fi\n\
               printf 'pass: test\\nfail: test\\ncrash_at_exit: test\\nslow: test\\n'; exit 0\n\
             fi\n\
             case \"$1\" in\n\
               pass) echo 'test pass ... ok'; exit 0;;\n\
               fail) echo 'assertion failed'; exit 101;;\n\
               crash_at_exit) echo 'test crash_at_exit ... ok'; kill -SEGV $$;;\n\
             esac\n\
             exit 2\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = Binary {
            package: "fake".into(),
            kind: "test".into(),
            target: "fake".into(),
            exe,
            manifest_dir: dir.clone(),
        };
        assert_eq!(tests_of(&bin).unwrap(), ["pass", "fail", "crash_at_exit"]);
        let outcome = |t: &str| run_test(&bin, t, false).unwrap();
        assert!(outcome("pass").passed);
        let fail = outcome("fail");
        assert!(
            !fail.passed && fail.output.contains("assertion failed"),
            "{fail:?}"
        );
        let crash = outcome("crash_at_exit");
        assert!(
            !crash.passed,
            "a crash after the test's last line is a failure: {crash:?}"
        );
        // Side by side, every test runs once, with the same result.
        let jobs: Vec<(Binary, String)> = ["pass", "fail", "crash_at_exit", "pass"]
            .iter()
            .map(|t| (bin.clone(), t.to_string()))
            .collect();
        let mut seen = Vec::new();
        run_side_by_side(&jobs, 2, |_, t, o| {
            seen.push((t.to_string(), o.unwrap().passed))
        });
        seen.sort();
        assert_eq!(
            seen,
            [
                ("crash_at_exit".to_string(), false),
                ("fail".to_string(), false),
                ("pass".to_string(), true),
                ("pass".to_string(), true)
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
