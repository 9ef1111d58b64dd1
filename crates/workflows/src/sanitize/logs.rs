//! Reading a sanitizer's log: its reports (ASan, LSan, UBSan, TSan), each
//! with its stacks, where in MLX's sources it was made, and a signature that
//! is the same for the same finding on another variant or in another run.

use mlx_harness::error::{Context, Result};
use std::path::Path;

/// What a sanitizer said once: its tool and kind, a one-line summary, the
/// first stack of the report (the access, or the allocation of a leak) and,
/// for a race or a use after free, the second (the other access, or the
/// free), as function names, and where in MLX's sources each was made.
#[derive(Clone, Debug)]
pub struct Report {
    pub tool: &'static str,
    pub kind: String,
    pub summary: String,
    pub frames: Vec<String>,
    pub other: Vec<String>,
    /// Per stack, its first frame in MLX's own sources: the MLX code that
    /// made the access or allocation, not a standard header it inlined, nor
    /// its callers.
    pub sites: Vec<Site>,
    pub bytes: u64,
}

/// Where in MLX's sources a stack made its access or allocation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    /// The file, as a path in MLX's tree (`mlx/array.cpp`), without the line.
    pub file: String,
    /// The function of that frame.
    pub function: String,
    /// Whether the access held a lock (a race's stacks only): of a race
    /// between a writer under a lock and a reader without one, the reader
    /// is the unsynchronized side.
    pub locked: bool,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = if self.locked { ", under a lock" } else { "" };
        write!(f, "{} in {}{held}", self.function, self.file)
    }
}

impl Report {
    /// Equal for the same finding on another variant or in another run:
    /// the tool, the kind and the top frames that name a function; for a
    /// race, the MLX file of each access, in either order (the judge then
    /// asks for each access's function too: [`Report::sites`]).
    pub fn signature(&self) -> String {
        let named = |s: &[String], n: usize| -> Vec<String> {
            s.iter()
                .filter(|f| !f.starts_with('(') && !is_runtime_frame(f))
                .take(n)
                .cloned()
                .collect()
        };
        if self.tool == "TSan" {
            // Which of two racing functions TSan pairs first varies from
            // run to run (a counter written under a lock in two places and
            // read without it); the source files of the two accesses don't.
            let mut files: Vec<&str> = self.sites.iter().map(|s| s.file.as_str()).collect();
            files.sort();
            return format!("TSan {}: {}", self.kind, files.join(" | "));
        }
        format!(
            "{} {}: {}",
            self.tool,
            self.kind,
            named(&self.frames, 4).join(" < ")
        )
    }

    /// Whether the MLX code of one of the report's stacks (its `sites`) is
    /// in one of `files` (paths in MLX's tree, e.g. `mlx/array.cpp`).
    pub fn touches(&self, files: &[&str]) -> bool {
        self.sites.iter().any(|site| {
            files
                .iter()
                .any(|f| site.file == *f || site.file.ends_with(&format!("/{f}")))
        })
    }

    /// Whether the report could be of the kind the fix is about: a leak or a
    /// memory error with a stack through `make_arrays` or an `ArrayDesc`.
    /// Such a report on a fixed variant is never excused as upstream's. A
    /// data race is judged by where its accesses are instead (the thread
    /// run's check of the files the fix changes): freeing an array's data
    /// from an `ArrayDesc` destructor reaches upstream's racy allocator
    /// counters without the fix having any part in the race.
    pub fn of_the_fix_s_kind(&self) -> bool {
        self.tool != "TSan"
            && self
                .frames
                .iter()
                .chain(&self.other)
                .any(|f| f.contains("make_arrays") || f.contains("ArrayDesc"))
    }
}

fn is_runtime_frame(f: &str) -> bool {
    [
        "operator new",
        "operator delete",
        "malloc",
        "calloc",
        "realloc",
        "free",
        "posix_memalign",
        "__interceptor_",
        "__asan",
        "__ubsan",
        "__sanitizer",
        "__tsan",
    ]
    .iter()
    .any(|p| f.starts_with(p))
}

/// One frame line, as its function and its source location. ASan writes
/// `#3 0x7f.. in fn(args) /path/file.cpp:12` (or `(/lib/x.so+0x1234)` for
/// the location), TSan `#3 fn(args) const /path/file.cpp:12 (x.so+0x1234)`;
/// a frame without a symbol is named by its module.
fn frame(line: &str) -> Option<(String, Option<String>)> {
    let t = line.trim_start();
    if !t.starts_with('#') {
        return None;
    }
    let mut rest = t
        .split_once(char::is_whitespace)
        .map(|(_, r)| r.trim())
        .unwrap_or("");
    if rest.starts_with("0x") {
        match rest.find(" in ") {
            Some(at) => rest = &rest[at + 4..],
            // `#3 0x7f.. (/lib/x.so+0x1234)`: no symbol.
            None => {
                return Some((
                    rest.split_whitespace()
                        .nth(1)
                        .unwrap_or("(unknown)")
                        .to_string(),
                    None,
                ))
            }
        }
    }
    // The module, then the source location, off the end.
    if let Some((f, module)) = rest.rsplit_once(' ') {
        if module.starts_with('(') && module.ends_with(')') && module.contains("+0x") {
            rest = f.trim_end();
        }
    }
    let mut location = None;
    if let Some((f, loc)) = rest.rsplit_once(' ') {
        if loc.starts_with('/') || loc.starts_with("../") || loc == "<null>" {
            location = (loc != "<null>").then(|| loc.to_string());
            rest = f.trim_end();
        }
    }
    let function = if rest == "<null>" || rest.is_empty() {
        "(unknown)"
    } else {
        rest
    };
    Some((function.to_string(), location))
}

/// Reads the reports out of a sanitizer log (`log_path` files hold one
/// process's reports each).
pub fn parse_reports(text: &str) -> Vec<Report> {
    let mut reports = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    // The frames of the stack starting at line i.
    let stack_at = |i: usize| -> Vec<(String, Option<String>)> {
        lines[i..]
            .iter()
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| frame(l))
            .collect()
    };
    // The next stack from line i, and the line after it; a stack belongs to
    // this report only if no other report starts before it.
    // With whether the access it shows held a lock: TSan writes
    // `(mutexes: ...)` on the line that introduces the stack.
    let next_stack = |i: usize| -> Option<(Vec<(String, Option<String>)>, bool, usize)> {
        let j = (i..lines.len())
            .take_while(|&j| j == i || !starts_report(lines[j]))
            .find(|&j| lines[j].trim_start().starts_with("#0"))?;
        let stack = stack_at(j);
        let locked = j > 0 && lines[j - 1].contains("(mutexes:");
        Some((stack.clone(), locked, j + stack.len()))
    };
    let report = |tool: &'static str,
                  kind: String,
                  summary: String,
                  bytes: u64,
                  i: usize,
                  stacks: usize|
     -> Report {
        let mut found = Vec::new();
        let mut at = i;
        let mut locked = Vec::new();
        while found.len() < stacks {
            let Some((stack, held, next)) = next_stack(at) else {
                break;
            };
            found.push(stack);
            locked.push(held);
            at = next;
        }
        let functions = |k: usize| {
            found
                .get(k)
                .map(|s| s.iter().map(|(f, _)| f.clone()).collect())
                .unwrap_or_default()
        };
        // The file as a path in MLX's tree (`mlx/array.cpp`), whether the
        // compiler saw it relative to the build (as with ccache) or absolute.
        let file = |l: &str| {
            let path = l.split(':').next().unwrap_or(l);
            ["src/mlx/", "include/mlx/"]
                .iter()
                .find_map(|m| {
                    path.rfind(m)
                        .map(|at| path[at + m.len() - "mlx/".len()..].to_string())
                })
                .unwrap_or_else(|| path.trim_start_matches("../").to_string())
        };
        // MLX compiled from its tree (`../src/mlx/..`) or inlined from its
        // installed headers (`<prefix>/include/mlx/..`).
        let in_mlx = |l: &&str| {
            (l.contains("src/mlx/") || l.contains("include/mlx/")) && !l.starts_with("/usr/")
        };
        let sites = found
            .iter()
            .zip(&locked)
            .map(|(s, &locked)| {
                let located: Vec<(&String, &str)> = s
                    .iter()
                    .filter_map(|(f, l)| l.as_deref().map(|l| (f, l)))
                    .collect();
                located
                    .iter()
                    .find(|(_, l)| in_mlx(l))
                    .or(located.first())
                    .map(|(f, l)| Site {
                        file: file(l),
                        function: f.to_string(),
                        locked,
                    })
                    .unwrap_or_else(|| Site {
                        file: "(unknown)".into(),
                        function: "(unknown)".into(),
                        locked,
                    })
            })
            .collect();
        Report {
            tool,
            kind,
            summary,
            frames: functions(0),
            other: functions(1),
            sites,
            bytes,
        }
    };
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.split_once("ERROR: AddressSanitizer: ").map(|(_, r)| r) {
            let kind = rest
                .split_whitespace()
                .next()
                .unwrap_or("error")
                .to_string();
            reports.push(report("ASan", kind, rest.trim().to_string(), 0, i + 1, 2));
        } else if let Some(rest) = line
            .trim_start()
            .strip_prefix("Direct leak of ")
            .or_else(|| line.trim_start().strip_prefix("Indirect leak of "))
        {
            let kind = if line.trim_start().starts_with("Direct") {
                "direct leak"
            } else {
                "indirect leak"
            };
            let bytes = rest
                .split_whitespace()
                .next()
                .and_then(|b| b.parse().ok())
                .unwrap_or(0);
            reports.push(report(
                "LSan",
                kind.into(),
                line.trim().to_string(),
                bytes,
                i + 1,
                1,
            ));
        } else if let Some((_, msg)) = line.split_once(": runtime error: ") {
            // `file:line:col: runtime error: <what>`; with print_stacktrace
            // the stack follows. The kind without its values: `signed
            // integer overflow`, `load of misaligned address`, ...
            let head = msg.split(':').next().unwrap_or(msg);
            let kind = head
                .split_whitespace()
                .take_while(|w| {
                    !w.starts_with("0x")
                        && !w.starts_with('\'')
                        && !w.starts_with(|c: char| c.is_ascii_digit())
                })
                .collect::<Vec<_>>()
                .join(" ");
            let at = line
                .split(": runtime error")
                .next()
                .unwrap_or("")
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string();
            let mut r = if lines
                .get(i + 1)
                .is_some_and(|l| l.trim_start().starts_with("#0"))
            {
                report("UBSan", kind.clone(), String::new(), 0, i + 1, 1)
            } else {
                report("UBSan", kind.clone(), String::new(), 0, lines.len(), 0)
            };
            r.summary = format!("{at}: {}", msg.trim());
            reports.push(r);
        } else if let Some(rest) = line
            .split_once("WARNING: ThreadSanitizer: ")
            .map(|(_, r)| r)
        {
            let kind = rest.split(" (").next().unwrap_or(rest).trim().to_string();
            reports.push(report("TSan", kind, rest.trim().to_string(), 0, i + 1, 2));
        }
    }
    reports
}

/// Whether a log line starts a new report (a stack after it is not the
/// previous report's).
fn starts_report(line: &str) -> bool {
    let t = line.trim_start();
    line.contains("ERROR: AddressSanitizer: ")
        || t.starts_with("Direct leak of ")
        || t.starts_with("Indirect leak of ")
        || line.contains(": runtime error: ")
        || line.contains("WARNING: ThreadSanitizer: ")
}

/// The reports in one log file. The bytes are read as they are (a log need
/// not be UTF-8: a symbol or a path may not be), and a log that cannot be
/// read at all is an error, never an empty list: UBSan and TSan leave the
/// exit status alone, so the log is the only witness.
pub fn read_log(path: &Path) -> Result<Vec<Report>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the sanitizer log {}", path.display()))?;
    Ok(parse_reports(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_leaks_errors_and_runtime_errors_with_their_stacks() {
        let log = "\
=================================================================
==12==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 96 byte(s) in 1 object(s) allocated from:
    #0 0x7f1 in operator new(unsigned long) ../../src/libsanitizer/asan/asan_new_delete.cpp:95
    #1 0x7f2 in mlx::core::array::make_arrays(std::vector<int>) /x/src/mlx/array.cpp:60
    #2 0x7f3 in main /x/leak.cpp:10

Indirect leak of 32 byte(s) in 2 object(s) allocated from:
    #0 0x7f1 in malloc (/usr/lib/x86_64-linux-gnu/libasan.so.8+0xbc)
    #1 0x7f4 (/usr/lib/libopenblas.so.0+0x10)

SUMMARY: AddressSanitizer: 128 byte(s) leaked in 3 allocation(s).
==13==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020 at pc 0x1 bp 0x2 sp 0x3
READ of size 8 at 0x6020 thread T0
    #0 0x7f5 in mlx::core::array::eval() /x/src/mlx/array.cpp:99

/x/src/mlx/ops.cpp:12:5: runtime error: signed integer overflow: 1 + 2147483647 cannot be represented in type 'int'
    #0 0x7f6 in mlx::core::add() /x/src/mlx/ops.cpp:12
";
        let r = parse_reports(log);
        assert_eq!(r.len(), 4, "{r:?}");
        assert_eq!(
            (r[0].tool, r[0].kind.as_str(), r[0].bytes),
            ("LSan", "direct leak", 96)
        );
        assert_eq!(
            r[0].frames[1],
            "mlx::core::array::make_arrays(std::vector<int>)"
        );
        assert_eq!(r[1].kind, "indirect leak");
        assert_eq!(
            r[1].frames,
            vec![
                "malloc".to_string(),
                "(/usr/lib/libopenblas.so.0+0x10)".to_string()
            ]
        );
        assert_eq!(
            (r[2].tool, r[2].kind.as_str()),
            ("ASan", "heap-use-after-free")
        );
        assert_eq!(r[2].frames, vec!["mlx::core::array::eval()".to_string()]);
        assert_eq!(
            (r[3].tool, r[3].kind.as_str()),
            ("UBSan", "signed integer overflow")
        );
        assert!(r[3]
            .summary
            .starts_with("ops.cpp:12:5: signed integer overflow"));
        // The runtime's own frames do not tell findings apart.
        assert_eq!(
            r[0].signature(),
            "LSan direct leak: mlx::core::array::make_arrays(std::vector<int>) < main"
        );
    }

    #[test]
    fn reads_a_race_with_both_accesses_and_where_mlx_made_them() {
        let log = "\
==================
WARNING: ThreadSanitizer: data race (pid=11247)
  Write of size 4 at 0x7b3400000000 by thread T4 (mutexes: write M158):
    #0 mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&) ../src/mlx/scheduler.h:39 (libmlx.so+0xdd935b)
    #1 std::function<void ()>::operator()() const /usr/include/c++/12/bits/std_function.h:591 (libmlx.so+0x1)
    #2 <null> <null> (libstdc++.so.6+0xd44a2)

  Previous read of size 4 at 0x7b3400000000 by thread T3:
    #0 mlx::core::scheduler::Scheduler::n_active_tasks() const ../src/mlx/scheduler.h:53 (libmlx.so+0x279119)
    #1 mlx::core::array::eval() ../src/mlx/array.cpp:120 (libmlx.so+0x2)

  Location is heap block of size 208 at 0x7b3400000000 allocated by main thread:
    #0 operator new(unsigned long) ../../../../src/libsanitizer/tsan/tsan_new_delete.cpp:64 (libtsan.so.2+0x87323)

SUMMARY: ThreadSanitizer: data race ../src/mlx/scheduler.h:39 in mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&)
";
        let r = parse_reports(log);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].tool, r[0].kind.as_str()), ("TSan", "data race"));
        assert_eq!(
            r[0].frames,
            vec![
                "mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&)",
                "std::function<void ()>::operator()() const",
                "(unknown)"
            ]
        );
        assert_eq!(
            r[0].other,
            vec![
                "mlx::core::scheduler::Scheduler::n_active_tasks() const",
                "mlx::core::array::eval()"
            ]
        );
        // Each access where MLX's code made it: the function and its file.
        assert_eq!(
            r[0].sites.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            vec![
                "mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&) in mlx/scheduler.h, under a lock",
                "mlx::core::scheduler::Scheduler::n_active_tasks() const in mlx/scheduler.h"
            ]
        );
        // A race is where MLX's code made the access, not where its callers
        // are: array.cpp only calls into the scheduler here.
        assert!(r[0].touches(&["mlx/scheduler.h"]));
        assert!(!r[0].touches(&["mlx/array.cpp"]));
        // Through a standard header inlined into array.cpp, it is array.cpp's.
        let inlined = log.replace(
            "    #0 mlx::core::scheduler::Scheduler::n_active_tasks() const ../src/mlx/scheduler.h:53 (libmlx.so+0x279119)\n",
            "    #0 std::__shared_ptr<int>::get() const /usr/include/c++/12/bits/shared_ptr_base.h:1666 (libmlx.so+0x1)\n",
        );
        let inlined = parse_reports(&inlined);
        assert!(inlined[0].touches(&["mlx/array.cpp"]));
        assert_eq!(inlined[0].sites[1].function, "mlx::core::array::eval()");
        // The same race seen from the other thread first is the same finding.
        let mut swapped = r[0].clone();
        std::mem::swap(&mut swapped.frames, &mut swapped.other);
        swapped.sites.reverse();
        assert_eq!(swapped.signature(), r[0].signature());
        assert_eq!(
            r[0].signature(),
            "TSan data race: mlx/scheduler.h | mlx/scheduler.h"
        );
        // Built without ccache the paths are absolute, in the variant's
        // directory: the same finding on every variant.
        let absolute =
            parse_reports(&log.replace("../src/mlx/", "/w/target/mlx/patched-tsan/src/mlx/"));
        assert_eq!(absolute[0].signature(), r[0].signature());
        assert!(absolute[0].touches(&["mlx/scheduler.h"]));
    }

    #[test]
    fn a_log_without_reports_has_none() {
        assert!(parse_reports("all good\n==1== some note\n").is_empty());
    }
    #[test]
    fn a_log_that_is_not_utf8_keeps_its_reports_and_an_unreadable_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("xtask-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("x.log");
        let mut bytes = b"==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x1\n    #0 0x7f5 in f\xff\xfe() /x/src/mlx/array.cpp:9\n".to_vec();
        bytes.extend(
            b"\nDirect leak of 8 byte(s) in 1 object(s) allocated from:\n    #0 0x1 in malloc\n",
        );
        std::fs::write(&log, &bytes).unwrap();
        let reports = read_log(&log).unwrap();
        assert_eq!(reports.len(), 2, "{reports:?}");
        assert_eq!(reports[0].kind, "heap-use-after-free");
        assert!(read_log(&dir.join("missing.log"))
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }
}
