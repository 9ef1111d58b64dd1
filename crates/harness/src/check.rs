//! One shape for every check of the fork: `collect` runs what the check
//! needs and returns plain data, then `judge` turns that data into claims
//! and `render` into the summary table's rows. Only `collect` does I/O, so
//! a judge's rules are unit-tested on made-up evidence.

use crate::config::expectations;
use crate::error::Result;
use crate::tally::Tally;
use mlx_expectations::report::Row;
use mlx_patched::Expectations;

/// A check of the fork against one client or record.
pub trait Check {
    /// What `collect` found, as plain data.
    type Evidence;
    /// Runs the client on the variants (the only step with I/O).
    fn collect(&self, expectations: &Expectations) -> Result<Self::Evidence>;
    /// The claims the evidence supports, each passed or failed.
    fn judge(&self, evidence: &Self::Evidence, expectations: &Expectations) -> Tally;
    /// The summary table's rows.
    fn render(&self, evidence: &Self::Evidence) -> Vec<Row>;
    /// Lines worth reading before the verdict (a failure on every variant,
    /// which no claim counts).
    fn notes(&self, _evidence: &Self::Evidence) -> Vec<String> {
        Vec::new()
    }
}

/// The outcome of a check: its claims, with the rows kept even when the
/// claims fail (they are evidence too).
pub fn outcome<C: Check>(check: &C, rows: &mut Vec<Row>) -> Result<Tally> {
    let expectations = expectations();
    let evidence = check.collect(&expectations)?;
    for line in check.notes(&evidence) {
        println!("  {line}");
    }
    rows.extend(check.render(&evidence));
    Ok(check.judge(&evidence, &expectations))
}

/// [`outcome`] for a check that needs mlx-c (mlx-sys, and mlx-rs over it):
/// on a base no mlx-c compiles against, it does not run and says so (the
/// mlx-rs check claims that the drop-in refuses such a base).
pub fn outcome_with_mlxc<C: Check>(check: &C, what: &str, rows: &mut Vec<Row>) -> Result<Tally> {
    let base = crate::config::options()?.base;
    if base.mlxc.is_none() {
        println!(
            "{what}: no mlx-c compiles against MLX {}; checked on the bases that have one",
            base.version
        );
        return Ok(Tally::new());
    }
    outcome(check, rows)
}
