//! The summary table of a `cargo xtask test` run. The tests append rows
//! while they run (to `MLX_FORK_REPORT_FILE`), xtask prints the table, and
//! `upstream-pr` quotes it: all three through [`Row`], so the format is
//! written and read by the same code.

use std::fmt;
use std::io::Write;
use std::path::Path;

/// One line of the table.
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    /// A scenario: bytes retained per cycle on each variant, by name, and
    /// whether all variants computed the same bits.
    Retained {
        scenario: String,
        per_variant: Vec<(String, f64)>,
        bit_identical: bool,
    },
    /// A measurement that is not a leak figure.
    Note(String),
}

const NOTE: &str = "note";
const IDENTICAL: &str = "bit-identical";

impl Row {
    pub fn note(text: impl Into<String>) -> Row {
        Row::Note(text.into())
    }

    pub fn retained(
        scenario: impl Into<String>,
        per_variant: Vec<(String, f64)>,
        bit_identical: bool,
    ) -> Row {
        Row::Retained {
            scenario: scenario.into(),
            per_variant,
            bit_identical,
        }
    }

    /// A line of the file, as [`fmt::Display`] writes it.
    pub fn parse(line: &str) -> Result<Row, String> {
        let bad = |why: &str| format!("not a row of the summary table ({why}): {line:?}");
        let cols: Vec<&str> = line.split('\t').collect();
        if cols[0] == NOTE {
            return Ok(Row::Note(cols[1..].join("\t")));
        }
        let mut per_variant = Vec::new();
        let mut bit_identical = None;
        for cell in &cols[1..] {
            let (key, value) = cell
                .split_once('=')
                .ok_or_else(|| bad("a cell without `=`"))?;
            if key == IDENTICAL {
                bit_identical = Some(match value {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(bad("bit-identical is yes or no")),
                });
            } else {
                let bytes = value.parse().map_err(|_| bad("bytes are a number"))?;
                per_variant.push((key.to_string(), bytes));
            }
        }
        Ok(Row::Retained {
            scenario: cols[0].to_string(),
            per_variant,
            bit_identical: bit_identical.ok_or_else(|| bad("no bit-identical cell"))?,
        })
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line each: a tab or newline inside a field would split it.
        let clean = |s: &str| s.replace(['\t', '\n'], " ");
        match self {
            Row::Note(text) => write!(f, "{NOTE}\t{}", clean(text)),
            Row::Retained {
                scenario,
                per_variant,
                bit_identical,
            } => {
                write!(f, "{}", clean(scenario))?;
                for (variant, bytes) in per_variant {
                    write!(f, "\t{variant}={bytes}")?;
                }
                let same = if *bit_identical { "yes" } else { "no" };
                write!(f, "\t{IDENTICAL}={same}")
            }
        }
    }
}

/// The table's file in a run's report directory.
pub const ROWS: &str = "rows.tsv";

/// Where a run records what each program of the fuzz slice came to on a
/// variant, beside its table (`dir`), for the differential to compare.
pub fn fuzz_slice(dir: &Path, variant: &str) -> std::path::PathBuf {
    dir.join(format!("fuzz-slice-{variant}.json"))
}

/// Where a slow check leaves its tally in a run's report directory.
pub fn tally(dir: &Path, check: &str) -> std::path::PathBuf {
    dir.join("checks").join(format!("{check}.json"))
}

/// Appends rows to the table at `path`.
pub fn append(path: &Path, rows: &[Row]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut text = String::new();
    for row in rows {
        text += &format!("{row}\n");
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The table at `path`; a line that is not a row is an error.
pub fn read(path: &Path) -> Result<Vec<Row>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines().map(Row::parse).collect()
}

/// Bytes as the table shows them.
pub fn bytes(b: f64) -> String {
    match b {
        0.0 => "0".to_string(),
        b if b.abs() < 10240.0 => format!("{b:.0} B"),
        b => format!("{:.2} MiB", b / 1048576.0),
    }
}

/// The table as text: per scenario, the bytes each variant retained per
/// cycle and whether all variants computed the same bits; then the notes.
pub fn render(rows: &[Row]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for row in rows {
        if let Row::Retained { per_variant, .. } = row {
            for (n, _) in per_variant {
                if !names.contains(&n.as_str()) {
                    names.push(n);
                }
            }
        }
    }
    let width = rows
        .iter()
        .filter_map(|r| match r {
            Row::Retained { scenario, .. } => Some(scenario.len()),
            Row::Note(_) => None,
        })
        .max()
        .unwrap_or(8)
        .max(8);
    let mut out =
        String::from("Retained per cycle (active memory after synchronize), by variant:\n\n");
    let mut header = format!("{:width$}", "scenario");
    for n in &names {
        header += &format!(" | {n:>12}");
    }
    out += &format!(
        "{header} | bit-identical\n{}\n",
        "-".repeat(header.len() + 16)
    );
    for row in rows {
        if let Row::Retained {
            scenario,
            per_variant,
            bit_identical,
        } = row
        {
            let mut line = format!("{scenario:width$}");
            for n in &names {
                let v = per_variant
                    .iter()
                    .find(|(k, _)| k == n)
                    .map_or("-".to_string(), |(_, b)| bytes(*b));
                line += &format!(" | {v:>12}");
            }
            out += &format!("{line} | {}\n", if *bit_identical { "yes" } else { "no" });
        }
    }
    for row in rows {
        if let Row::Note(text) = row {
            out += &format!("{text}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_written_and_a_malformed_line_is_an_error() {
        let rows = [
            Row::retained(
                "split, compiled",
                vec![("control".into(), 25165824.0), ("fix".into(), 0.0)],
                true,
            ),
            Row::note("a note\twith a tab"),
        ];
        for row in &rows {
            let back = Row::parse(&row.to_string()).unwrap();
            match row {
                Row::Note(_) => assert_eq!(back, Row::note("a note with a tab")),
                _ => assert_eq!(&back, row),
            }
        }
        for bad in [
            "scenario\tpatched",
            "s\tpatched=x\tbit-identical=yes",
            "s\tpatched=0",
        ] {
            assert!(Row::parse(bad).is_err(), "{bad}");
        }
        let table = render(&rows);
        assert!(table.contains("24.00 MiB"), "{table}");
        assert!(table.contains("a note"), "{table}");
    }
}
