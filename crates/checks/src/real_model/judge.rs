//! The real-model experiment's figures, from its records alone: what each
//! cell leaked, and Fisher's exact test between cells. No I/O, so the rules
//! are unit-tested on made-up records.

use serde::{Deserialize, Serialize};

/// A cycle that kept more than this leaked: the leak keeps most of the
/// model's weights (over 150 MiB), while a clean cycle keeps 0 bytes (the
/// first cycle of a process may keep a few bytes of caches that fill once).
pub const LEAK_BYTES: i64 = 1 << 20;

/// One cycle as the script prints it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cycle {
    pub cycle: u32,
    pub retained_bytes: i64,
    pub seconds: f64,
    /// Orphaned groups, where the library counts them (the census build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned_groups: Option<i64>,
}

/// One process's record: the seed of its first cycle, its cycles, and how it
/// ended (a process that failed keeps the cycles it finished).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Process {
    pub seed: u64,
    pub cycles: Vec<Cycle>,
    pub exit: String,
    #[serde(default)]
    pub ok: bool,
}

/// What one cell's processes add up to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub processes: u32,
    pub failed_processes: u32,
    pub cycles: u32,
    /// The bytes each leaking cycle kept, in the order they ran.
    pub leaks: Vec<i64>,
    pub median_seconds: f64,
}

impl Tally {
    pub fn of(processes: &[Process]) -> Tally {
        let mut t = Tally::default();
        let mut seconds = Vec::new();
        for p in processes {
            t.processes += 1;
            t.failed_processes += (!p.ok) as u32;
            for c in &p.cycles {
                t.cycles += 1;
                seconds.push(c.seconds);
                if c.retained_bytes > LEAK_BYTES {
                    t.leaks.push(c.retained_bytes);
                }
            }
        }
        seconds.sort_by(f64::total_cmp);
        t.median_seconds = seconds.get(seconds.len() / 2).copied().unwrap_or(0.0);
        t
    }

    pub fn leaked(&self) -> u32 {
        self.leaks.len() as u32
    }
}

/// Fisher's exact test on leaked/clean counts of two cells: the one-sided p
/// that `a` leaks more often than `b` by chance, and the two-sided p.
pub fn fisher(a: &Tally, b: &Tally) -> Option<(f64, f64)> {
    let table = [
        a.leaked(),
        a.cycles - a.leaked(),
        b.leaked(),
        b.cycles - b.leaked(),
    ];
    let p = fishers_exact::fishers_exact(&table).ok()?;
    Some((p.greater_pvalue, p.two_tail_pvalue))
}

/// The exact (Clopper-Pearson) 95% upper bound on a rate with `k` = 0
/// events in `n` trials: 1 - 0.025^(1/n).
pub fn upper_bound_none(n: u32) -> f64 {
    if n == 0 {
        1.0
    } else {
        1.0 - 0.025f64.powf(1.0 / n as f64)
    }
}

fn mib(b: i64) -> String {
    format!("{:.1}", b as f64 / 1048576.0)
}

/// The table: one row per cell, with Fisher's p against `control`.
pub fn render(cells: &[(String, Tally)], control: &str) -> String {
    let base = cells.iter().find(|(n, _)| n == control).map(|(_, t)| t);
    let mut s = String::from(
        "| cell | processes | cycles | leaked | rate | MiB kept per leak | median cycle | Fisher p vs control (one-sided, two-sided) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (name, t) in cells {
        let rate = if t.cycles == 0 {
            "–".to_string()
        } else if t.leaked() == 0 {
            format!("0 (95% bound {:.2}%)", 100.0 * upper_bound_none(t.cycles))
        } else {
            format!("{:.2}%", 100.0 * t.leaked() as f64 / t.cycles as f64)
        };
        let kept = if t.leaks.is_empty() {
            "–".to_string()
        } else {
            let mut v: Vec<String> = t.leaks.iter().map(|b| mib(*b)).collect();
            if v.len() > 12 {
                let (lo, hi) = (
                    t.leaks.iter().min().copied().unwrap_or(0),
                    t.leaks.iter().max().copied().unwrap_or(0),
                );
                v = vec![format!("{} to {}", mib(lo), mib(hi))];
            }
            v.join(", ")
        };
        let p = match base {
            Some(b) if name != control => fisher(b, t)
                .map(|(one, two)| format!("{one:.2e}, {two:.2e}"))
                .unwrap_or_else(|| "–".into()),
            _ => "(control)".into(),
        };
        let failed = if t.failed_processes > 0 {
            format!(" ({} failed)", t.failed_processes)
        } else {
            String::new()
        };
        s.push_str(&format!(
            "| {name} | {}{failed} | {} | {} | {rate} | {kept} | {:.2} s | {p} |\n",
            t.processes,
            t.cycles,
            t.leaked(),
            t.median_seconds
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(leaks: u32, clean: u32) -> Tally {
        let mut t = Tally {
            cycles: leaks + clean,
            ..Default::default()
        };
        t.leaks = vec![200 << 20; leaks as usize];
        t
    }

    #[test]
    fn fisher_matches_the_known_figures() {
        // 5 of 1,000 against 0 of 1,000: one-sided p = 0.031.
        let (one, two) = fisher(&cells(5, 995), &cells(0, 1000)).unwrap();
        assert!((one - 0.0310).abs() < 0.0005, "{one}");
        assert!((two - 0.0620).abs() < 0.001, "{two}");
        // Equal cells: nothing to see.
        let (one, _) = fisher(&cells(3, 97), &cells(3, 97)).unwrap();
        assert!(one > 0.5);
    }

    #[test]
    fn a_cycle_leaks_only_above_the_threshold() {
        let p = Process {
            seed: 0,
            ok: true,
            exit: "0".into(),
            cycles: vec![
                Cycle {
                    cycle: 0,
                    retained_bytes: 16,
                    seconds: 2.0,
                    orphaned_groups: None,
                },
                Cycle {
                    cycle: 1,
                    retained_bytes: 190 << 20,
                    seconds: 3.0,
                    orphaned_groups: None,
                },
                Cycle {
                    cycle: 2,
                    retained_bytes: 0,
                    seconds: 4.0,
                    orphaned_groups: None,
                },
            ],
        };
        let t = Tally::of(&[p]);
        assert_eq!((t.cycles, t.leaked()), (3, 1));
        assert_eq!(t.median_seconds, 3.0);
    }

    #[test]
    fn the_bound_on_no_leak_is_clopper_pearson() {
        // 0 of 1,000: 0.37%, as the figure says.
        assert!((upper_bound_none(1000) - 0.00368).abs() < 0.0001);
    }

    #[test]
    fn the_table_names_the_control_and_the_failed_processes() {
        let mut bad = cells(0, 10);
        bad.processes = 2;
        bad.failed_processes = 1;
        let table = render(
            &[("control".into(), cells(5, 995)), ("fix".into(), bad)],
            "control",
        );
        assert!(table.contains("| control | 0 | 1000 | 5 | 0.50% |"), "{table}");
        assert!(table.contains("(control)"));
        assert!(table.contains("2 (1 failed)"), "{table}");
    }
}
