//! Showing how far an MLX build is: ninja's `[done/total]` count, on one
//! updating line in a terminal or as plain lines in a log. Everything the
//! build prints still goes to the variant's `build.log`.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a build shows its progress. It is written to stderr, so that what a
/// command prints on stdout (`cargo xtask prefix`) stays a clean interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing but the log file (build scripts: Cargo captures their output).
    Quiet,
    /// One line that updates in place (stderr is a terminal).
    Line,
    /// A plain line at the start, at every tenth of the build, and at the end.
    Log,
}

impl Progress {
    /// `Line` when stderr is a terminal, else `Log`.
    pub fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            Progress::Line
        } else {
            Progress::Log
        }
    }

    /// A message of its own line (not in `Quiet` mode).
    pub fn say(&self, msg: &str) {
        if *self != Progress::Quiet {
            eprintln!("{msg}");
        }
    }
}

/// `4m05s`, `38s`.
pub fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// `[12/106] Building CXX object ...` -> (12, 106, "Building CXX object ...").
fn ninja_count(line: &str) -> Option<(usize, usize, &str)> {
    let rest = line.strip_prefix('[')?;
    let (count, desc) = rest.split_once(']')?;
    let (done, total) = count.split_once('/')?;
    Some((
        done.trim().parse().ok()?,
        total.trim().parse().ok()?,
        desc.trim(),
    ))
}

/// Runs one CMake step with its output appended to `log`, reporting ninja's
/// count under `label` ("MLX patched: building the library").
pub fn run_step(
    cmd: &mut Command,
    log: &File,
    label: &str,
    progress: Progress,
) -> std::io::Result<ExitStatus> {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(log.try_clone()?)
        .spawn()?;
    let mut out = log.try_clone()?;
    let mut last_tenth = None;
    let mut shown = false;
    if progress == Progress::Log {
        eprintln!("{label} ...");
    }
    for line in BufReader::new(child.stdout.take().expect("piped stdout")).lines() {
        let line = line?;
        writeln!(out, "{line}")?;
        let Some((done, total, desc)) = ninja_count(&line) else {
            continue;
        };
        match progress {
            Progress::Quiet => {}
            Progress::Line => {
                let desc: String = desc
                    .rsplit('/')
                    .next()
                    .unwrap_or(desc)
                    .chars()
                    .take(48)
                    .collect();
                eprint!(
                    "\r\x1b[2K{label}: [{done}/{total}] {desc}  ({})",
                    elapsed(started.elapsed())
                );
                shown = true;
            }
            Progress::Log => {
                let tenth = done * 10 / total.max(1);
                if last_tenth != Some(tenth) {
                    last_tenth = Some(tenth);
                    eprintln!(
                        "{label}: {done}/{total} ({}%) after {}",
                        done * 100 / total.max(1),
                        elapsed(started.elapsed())
                    );
                }
            }
        }
    }
    let status = child.wait()?;
    match progress {
        Progress::Quiet => {}
        Progress::Line => {
            if shown {
                eprint!("\r\x1b[2K");
            }
            eprintln!(
                "{label}: {} in {}",
                if status.success() { "done" } else { "FAILED" },
                elapsed(started.elapsed())
            );
        }
        Progress::Log => eprintln!(
            "{label}: {} in {}",
            if status.success() { "done" } else { "FAILED" },
            elapsed(started.elapsed())
        ),
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ninja_counts() {
        assert_eq!(
            ninja_count("[12/106] Building CXX object a.o"),
            Some((12, 106, "Building CXX object a.o"))
        );
        assert_eq!(ninja_count("[ 3/ 9] Linking"), Some((3, 9, "Linking")));
        assert_eq!(ninja_count("-- Configuring done"), None);
        assert_eq!(ninja_count("[x/9] nope"), None);
    }

    #[test]
    fn formats_elapsed_time() {
        assert_eq!(elapsed(Duration::from_secs(38)), "38s");
        assert_eq!(elapsed(Duration::from_secs(245)), "4m05s");
    }
}
