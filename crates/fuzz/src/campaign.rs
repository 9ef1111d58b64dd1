//! Runs programs in a worker process and survives it: a crash or a hang is
//! a finding about the program that was running, and the campaign goes on
//! in a new worker from the next program.
//!
//! The worker's protocol, one line each on stdout: `start <index>` before a
//! program runs, `outcome <index> <json>` after ([`Outcome`]). Commands:
//! `seeds <seed> <first> <count> [two-threads]` (programs from
//! [`crate::program_of_seed_with`], with [`Releases::TwoThreads`] if asked)
//! and `program <file>` (one program, as JSON, with index 0).

use crate::conditioning::Family;
use crate::oracle::{differ, first_line, judge, Finding, Kind, Outcome};
use crate::{Program, Releases};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A worker executable for one variant, and the environment it runs in.
#[derive(Clone, Debug)]
pub struct Worker {
    pub exe: PathBuf,
    /// Arguments before the worker's own, when `exe` starts the worker
    /// (the dynamic loader preloading a sanitizer's runtime).
    pub launch: Vec<String>,
    pub env: Vec<(String, String)>,
    /// A program that gives no answer in this long is a hang.
    pub timeout: Duration,
    /// Where the seeded programs let go of their arrays.
    pub releases: Releases,
}

/// What happened to one program.
#[derive(Clone, Debug)]
pub enum Event {
    Ran(u64, Outcome),
    /// The worker died while running it: signal or exit code, and the first
    /// line that says why (a sanitizer's `ERROR:` line, glibc's message).
    Crashed(u64, String),
    Hung(u64),
}

impl Event {
    pub fn index(&self) -> u64 {
        match self {
            Event::Ran(i, _) | Event::Crashed(i, _) | Event::Hung(i) => *i,
        }
    }

    /// The findings this event is.
    pub fn findings(&self) -> Vec<Finding> {
        match self {
            Event::Ran(_, o) => judge(o),
            Event::Crashed(_, why) => vec![Finding {
                kind: Kind::Crash,
                detail: why.clone(),
            }],
            Event::Hung(_) => vec![Finding {
                kind: Kind::Hang,
                detail: String::new(),
            }],
        }
    }
}

/// Why a worker died, from its exit status and what it wrote on stderr.
fn crash_reason(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.signal(), status.code()) {
        (Some(s), _) => format!("signal {s}"),
        (_, Some(c)) => format!("exit {c}"),
        _ => "unknown".into(),
    };
    let markers = [
        "ERROR: AddressSanitizer",
        "ERROR: LeakSanitizer",
        "runtime error:",
        "WARNING: ThreadSanitizer",
        "double free",
        "free(): ",
        "malloc(): ",
        "corrupted",
        "terminate called",
        "panicked at",
    ];
    let why = stderr
        .lines()
        .find(|l| markers.iter().any(|m| l.contains(m)))
        .map(first_line);
    match why {
        Some(w) => format!("{how}: {w}"),
        None => how,
    }
}

/// A worker's stdout, line by line through a channel (so that a read can
/// time out), and all of its stderr once it ends.
fn read_child(
    child: &mut std::process::Child,
) -> (
    mpsc::Receiver<std::io::Result<String>>,
    std::thread::JoinHandle<String>,
) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    (rx, err)
}

impl Worker {
    fn spawn(&self, args: &[String]) -> Result<std::process::Child, String> {
        Command::new(&self.exe)
            .args(&self.launch)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run the worker {}: {e}", self.exe.display()))
    }

    /// Runs programs `first..first + count` of `seed`, calling `each` per
    /// program in order, restarting the worker after a crash or hang.
    pub fn run_seeds(
        &self,
        seed: u64,
        first: u64,
        count: u64,
        mut each: impl FnMut(Event),
    ) -> Result<(), String> {
        let end = first + count;
        let mut next = first;
        while next < end {
            let mut args = vec![
                "seeds".to_string(),
                seed.to_string(),
                next.to_string(),
                (end - next).to_string(),
            ];
            if self.releases == Releases::TwoThreads {
                args.push("two-threads".to_string());
            }
            next = self.session(&args, next, &mut each)?;
        }
        Ok(())
    }

    /// One program in a fresh worker: its event.
    pub fn run_program(&self, p: &Program) -> Result<Event, String> {
        let dir = std::env::temp_dir().join(format!("mlx-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let file = dir.join("program.json");
        std::fs::write(&file, p.to_json()).map_err(|e| e.to_string())?;
        let mut got = None;
        let ran = self.session(
            &["program".to_string(), file.display().to_string()],
            0,
            &mut |e| got = Some(e),
        );
        let _ = std::fs::remove_dir_all(&dir);
        ran?;
        got.ok_or_else(|| "the worker reported nothing for the program".to_string())
    }

    /// One worker process; returns the index to resume from.
    fn session(
        &self,
        args: &[String],
        first: u64,
        each: &mut dyn FnMut(Event),
    ) -> Result<u64, String> {
        let mut child = self.spawn(args)?;
        let (rx, err) = read_child(&mut child);
        let mut running: Option<u64> = None;
        let mut next = first;
        let mut deadline = Instant::now() + self.timeout;
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Ok(line)) => {
                    let mut words = line.splitn(3, ' ');
                    match (
                        words.next(),
                        words.next().and_then(|i| i.parse::<u64>().ok()),
                        words.next(),
                    ) {
                        (Some("start"), Some(i), _) => {
                            running = Some(i);
                            deadline = Instant::now() + self.timeout;
                        }
                        (Some("outcome"), Some(i), Some(json)) => {
                            let o: Outcome = serde_json::from_str(json).map_err(|e| {
                                format!("the worker's outcome line is not an outcome ({e}): {line}")
                            })?;
                            running = None;
                            next = i + 1;
                            each(Event::Ran(i, o));
                        }
                        _ => {} // the worker's own prose
                    }
                }
                Ok(Err(e)) => return Err(format!("reading the worker: {e}")),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().map_err(|e| e.to_string())?;
                    let stderr = err.join().unwrap_or_default();
                    return match running {
                        Some(i) => {
                            each(Event::Crashed(i, crash_reason(status, &stderr)));
                            Ok(i + 1)
                        }
                        None if status.success() => Ok(next),
                        // Corrupted memory may only be noticed later, at a
                        // free after the program's outcome: the program that
                        // ran last is the suspect (a shrink re-runs it alone).
                        None if next > first => {
                            each(Event::Crashed(
                                next - 1,
                                format!("after its outcome: {}", crash_reason(status, &stderr)),
                            ));
                            Ok(next)
                        }
                        None => Err(format!(
                            "the worker failed before its first program ({status}): {}",
                            stderr
                                .lines()
                                .rev()
                                .take(20)
                                .collect::<Vec<_>>()
                                .into_iter()
                                .rev()
                                .collect::<Vec<_>>()
                                .join("\n")
                        )),
                    };
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let i = running.unwrap_or(next);
                    each(Event::Hung(i));
                    return Ok(i + 1);
                }
            }
        }
    }
}

/// Two workers, one per variant, on the same programs at once (a core
/// each): `each` gets every program's events on `a` and on `b`, in order.
/// A program has more than one event where a crash came after its outcome.
pub fn run_pair(
    a: &Worker,
    b: &Worker,
    seed: u64,
    first: u64,
    count: u64,
    mut each: impl FnMut(u64, &[Event], &[Event]),
) -> Result<(), String> {
    type ByIndex = std::collections::BTreeMap<u64, Vec<Event>>;
    let collect = |w: &Worker| -> Result<ByIndex, String> {
        let mut m = ByIndex::new();
        w.run_seeds(seed, first, count, |e| {
            m.entry(e.index()).or_default().push(e)
        })?;
        Ok(m)
    };
    let (ea, eb) = std::thread::scope(|s| {
        let ha = s.spawn(|| collect(a));
        let eb = collect(b);
        (ha.join().expect("the worker thread panicked"), eb)
    });
    let (ea, eb) = (ea?, eb?);
    for i in first..first + count {
        let none = Vec::new();
        each(i, ea.get(&i).unwrap_or(&none), eb.get(&i).unwrap_or(&none));
    }
    Ok(())
}

/// The differential finding of one program's events on two variants.
pub fn differ_events(a: &[Event], b: &[Event]) -> Option<Finding> {
    match (a, b) {
        ([Event::Ran(_, x)], [Event::Ran(_, y)]) => differ(x, y),
        _ => None,
    }
}

/// Whether `p`, run alone on each worker, still computes other bits.
pub fn still_differs(a: &Worker, b: &Worker, p: &Program) -> bool {
    match (a.run_program(p), b.run_program(p)) {
        (Ok(x), Ok(y)) => differ_events(&[x], &[y]).is_some(),
        _ => false,
    }
}

/// Counts per finding kind, and the first programs of each distinct finding.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub programs: u64,
    pub by_kind: std::collections::BTreeMap<Kind, u64>,
    /// Distinct (kind, detail), with the first program index that showed it.
    pub distinct: Vec<(Finding, u64)>,
    /// The largest relative difference of compiled against eager values
    /// seen (what the tolerance must admit), and programs MLX rejected in
    /// both forms (rules the generator does not model).
    pub max_rel_diff: f64,
    pub rejected: u64,
    /// Programs that ran to the end without an error in either form: the
    /// throughput that measures search, which rejected and crashed ones
    /// do not.
    pub executed: u64,
    /// Programs whose fused values went beyond the tolerance while the
    /// unfused compile gave eager's bits (`Outcome::fused_rounding`).
    pub fused_rounding: u64,
    /// The largest ULP distance of a fused value from eager per family,
    /// over every value and over those beyond the tolerance
    /// (`Outcome::fused_ulps`): what `Family::bound` is measured on. Each
    /// with the first program that reached it.
    pub fused_ulps: BTreeMap<Family, (u64, u64)>,
    pub fused_ulps_beyond_tolerance: BTreeMap<Family, (u64, u64)>,
    last: Option<u64>,
}

impl Tally {
    pub fn add(&mut self, e: &Event) {
        // A crash noticed after a program's outcome is a second event for it.
        if self.last != Some(e.index()) {
            self.programs += 1;
        }
        self.last = Some(e.index());
        if let Event::Ran(_, o) = e {
            self.max_rel_diff = self.max_rel_diff.max(o.max_rel_diff);
            self.rejected += (o.error.is_some() && o.eager_error.is_some()) as u64;
            self.executed += (o.error.is_none() && o.eager_error.is_none()) as u64;
            self.fused_rounding += o.fused_rounding.is_some() as u64;
            for (mine, theirs) in [
                (&mut self.fused_ulps, &o.fused_ulps),
                (
                    &mut self.fused_ulps_beyond_tolerance,
                    &o.fused_ulps_beyond_tolerance,
                ),
            ] {
                for (f, u) in theirs {
                    let at = mine.entry(*f).or_insert((*u, e.index()));
                    if *u > at.0 {
                        *at = (*u, e.index());
                    }
                }
            }
        }
        for f in e.findings() {
            *self.by_kind.entry(f.kind).or_default() += 1;
            let key = Finding {
                kind: f.kind,
                detail: if f.kind == Kind::Leak {
                    String::new()
                } else {
                    f.detail.clone()
                },
            };
            if !self.distinct.iter().any(|(d, _)| *d == key) {
                self.distinct.push((key, e.index()));
            }
        }
    }

    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect();
        format!(
            "{} programs, {} executed to the end ({} rejected by MLX compiled and eager alike; compiled within {:.1e} of eager, {} beyond it only where fused); findings: {}",
            self.programs,
            self.executed,
            self.rejected,
            self.max_rel_diff,
            self.fused_rounding,
            if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") }
        ) + &self.ulps_summary()
    }

    /// Per family, the largest fused distance from eager in ULPs, over all
    /// values and (in brackets) beyond the tolerance, against its bound.
    fn ulps_summary(&self) -> String {
        let rows: Vec<String> = Family::ALL
            .iter()
            .filter_map(|f| {
                let (all, at) = self.fused_ulps.get(f)?;
                let beyond = self
                    .fused_ulps_beyond_tolerance
                    .get(f)
                    .map_or(String::new(), |(b, at)| {
                        format!(", {b} beyond the tolerance (program {at})")
                    });
                let bound = f
                    .bound()
                    .map_or("no bound".to_string(), |b| format!("bound {b}"));
                Some(format!(
                    "{} {all} (program {at}){beyond}, {bound}",
                    f.name()
                ))
            })
            .collect();
        if rows.is_empty() {
            String::new()
        } else {
            format!(
                "\nfused against eager, largest ULPs per family: {}",
                rows.join("; ")
            )
        }
    }
}

/// How sure a shrink step must be that a candidate still fails: a leak can
/// depend on hash-map order, which changes from process to process.
#[derive(Clone, Copy, Debug)]
pub enum Confirm {
    /// It fails in at least one of this many fresh workers (finds the
    /// intermittent leaks too).
    AnyOf(usize),
    /// It fails in every one of this many fresh workers (a reproducer that
    /// shows its failure every time).
    AllOf(usize),
}

/// Whether `p` still shows `want` in fresh workers. Crashes and errors are
/// deterministic here, so one run decides them.
pub fn still_fails(worker: &Worker, p: &Program, want: &Finding, confirm: Confirm) -> bool {
    let shows = || {
        worker.run_program(p).is_ok_and(|e| {
            e.findings()
                .iter()
                .any(|f| crate::oracle::same_failure(want, f))
        })
    };
    match (want.kind, confirm) {
        (Kind::Leak, Confirm::AnyOf(n)) => (0..n.max(1)).any(|_| shows()),
        (Kind::Leak, Confirm::AllOf(n)) => (0..n.max(1)).all(|_| shows()),
        _ => shows(),
    }
}

/// `p` shrunk on the IR while it still shows `want`; the number of
/// candidates tried.
pub fn shrink_finding(
    worker: &Worker,
    p: &Program,
    want: &Finding,
    confirm: Confirm,
) -> (Program, usize) {
    crate::shrink::shrink(p, |c| still_fails(worker, c, want, confirm))
}

/// A worker that takes programs one at a time on its stdin (`serve`), for an
/// engine that chooses each program from the last one's result. On a
/// coverage build, it shares its edge map with this process; each run's
/// features are read from it. A crash or a hang is the program's event, and
/// the next run starts a new worker.
pub struct Served {
    worker: Worker,
    map: Option<crate::edges::SharedMap>,
    /// The variable that names the map's file to the worker's libmlx.
    map_var: String,
    live: Option<Live>,
    /// Workers started so far.
    pub starts: u64,
    /// Each hang's run and the worker's threads' stacks at the time, from
    /// gdb where it is installed, before the worker was killed.
    pub hangs: Vec<(u64, String)>,
}

/// Every thread's stack of process `pid`, by gdb (batch mode), or why not.
fn stacks_of(pid: u32) -> String {
    match Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("no stacks: cannot run gdb ({e})"),
    }
}

struct Live {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<std::io::Result<String>>,
    stderr: std::thread::JoinHandle<String>,
}

/// Maps made by this process, to name each apart.
static MAPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Served {
    /// `map`: the folder the edge map's file goes in (a tmpfs is best), and
    /// the variable that tells the worker's libmlx that file
    /// (`MLX_FORK_COVERAGE_MAP`); `None` runs without feedback, on any build.
    pub fn new(worker: Worker, map: Option<(&std::path::Path, &str)>) -> Result<Served, String> {
        let map_var = map.map(|(_, v)| v.to_string()).unwrap_or_default();
        let map = match map.map(|(d, _)| d) {
            Some(dir) => Some(crate::edges::SharedMap::create(
                dir,
                &format!(
                    "mlx-fuzz-edges-{}-{}",
                    std::process::id(),
                    MAPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                ),
            )?),
            None => None,
        };
        Ok(Served {
            worker,
            map,
            map_var,
            live: None,
            starts: 0,
            hangs: Vec::new(),
        })
    }

    fn start(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.worker.exe);
        cmd.args(&self.worker.launch)
            .arg("serve")
            .envs(
                self.worker
                    .env
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(m) = &self.map {
            cmd.env(&self.map_var, m.path());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run the worker {}: {e}", self.worker.exe.display()))?;
        let stdin = child.stdin.take().unwrap();
        let (lines, stderr) = read_child(&mut child);
        self.starts += 1;
        let first = lines.recv_timeout(self.worker.timeout);
        let mut live = Live {
            child,
            stdin,
            lines,
            stderr,
        };
        let said = match first {
            Ok(Ok(l)) => l,
            _ => {
                let _ = live.child.kill();
                let status = live.child.wait().map_err(|e| e.to_string())?;
                let text = live.stderr.join().unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                return Err(format!(
                    "the worker failed before its first program ({status}): {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
        };
        match (said.strip_prefix("coverage "), &self.map) {
            (Some(n), Some(_)) if n == crate::edges::MAP_SIZE.to_string() => {}
            (Some("none"), Some(_)) => {
                return Err(format!(
                    "{} links an MLX without coverage: build it with --sanitizer coverage",
                    self.worker.exe.display()
                ))
            }
            (Some(n), Some(_)) => return Err(format!(
                "the worker's edge map has {n} counters, the driver's {}: they were built apart",
                crate::edges::MAP_SIZE
            )),
            (Some(_), None) => {}
            (None, _) => {
                return Err(format!(
                    "the worker's first line is not its coverage: {said}"
                ))
            }
        }
        self.live = Some(live);
        Ok(())
    }

    /// Runs `p` as program `index`: its event, and the features it reached
    /// (none without a map).
    pub fn run(
        &mut self,
        index: u64,
        p: &Program,
    ) -> Result<(Event, Vec<crate::edges::Feature>), String> {
        use std::io::Write;
        if self.live.is_none() {
            self.start()?;
        }
        let mut features = Vec::new();
        if let Some(m) = &mut self.map {
            m.clear();
        }
        let live = self.live.as_mut().unwrap();
        let sent = writeln!(live.stdin, "{}", p.to_json()).and_then(|_| live.stdin.flush());
        let mut deadline = Instant::now() + self.worker.timeout;
        let mut started = false;
        let event = loop {
            if sent.is_err() {
                break None;
            }
            match live
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(Ok(line)) => {
                    let mut words = line.splitn(3, ' ');
                    match (words.next(), words.next(), words.next()) {
                        (Some("start"), _, _) => {
                            started = true;
                            deadline = Instant::now() + self.worker.timeout;
                        }
                        (Some("outcome"), _, Some(json)) => {
                            let o: Outcome = serde_json::from_str(json).map_err(|e| {
                                format!("the worker's outcome line is not an outcome ({e}): {line}")
                            })?;
                            break Some(Event::Ran(index, o));
                        }
                        _ => {}
                    }
                }
                Ok(Err(e)) => return Err(format!("reading the worker: {e}")),
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let mut live = self.live.take().unwrap();
                    self.hangs.push((index, stacks_of(live.child.id())));
                    let _ = live.child.kill();
                    let _ = live.child.wait();
                    if let Some(m) = &mut self.map {
                        m.take(&mut features);
                    }
                    return Ok((Event::Hung(index), features));
                }
            }
        };
        if let Some(m) = &mut self.map {
            m.take(&mut features);
        }
        match event {
            Some(e) => Ok((e, features)),
            None => {
                let mut live = self.live.take().unwrap();
                drop(live.stdin);
                let status = live.child.wait().map_err(|e| e.to_string())?;
                let stderr = live.stderr.join().unwrap_or_default();
                // A worker that died before this program started was hurt
                // by the one before (corruption seen at a later free).
                let why = crash_reason(status, &stderr);
                let why = if started {
                    why
                } else {
                    format!("before it started, after the previous program's outcome: {why}")
                };
                Ok((Event::Crashed(index, why), features))
            }
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            // stdin closes: the worker ends, writing what it counted.
            drop(live.stdin);
            let mut child = live.child;
            let _ = child.wait();
        }
    }
}

/// Whether a leak of a two-thread program is the release race's: the
/// program lets go of two arrays at once, and its one-thread form
/// ([`crate::shrink::one_thread`]) leaks in none of `runs` fresh workers.
pub fn is_release_race(worker: &Worker, p: &Program, leak: &Finding, runs: usize) -> bool {
    leak.kind == Kind::Leak
        && p.stmts
            .iter()
            .any(|s| matches!(s, crate::ir::Stmt::ReleaseTogether { .. }))
        && !still_fails(
            worker,
            &crate::shrink::one_thread(p),
            leak,
            Confirm::AnyOf(runs),
        )
}
