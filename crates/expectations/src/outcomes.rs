//! Upstream's suites (MLX's C++ and Python suites, mlx-rs's, mlx-lm's) run
//! on the control and on a fix: what counts as the fix doing worse. One
//! rule for all four checks.

use std::collections::{BTreeMap, BTreeSet};

/// How one test of a suite ended on one variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed (a test that passed when run again counts here; flakiness is
    /// judged apart, from repeated runs).
    Passed,
    /// Failed, or errored.
    Failed,
    /// Skipped or ignored.
    Skipped,
}

impl Outcome {
    /// From the words the suites' runners report: pytest's and unittest's
    /// (`passed`, `failed`, `error`, `skipped`, and `flaky` for a test that
    /// passed when run again; `xfail`, an expected failure, is neither),
    /// libtest's (`ok`, `FAILED`, `ignored`).
    /// Anything else (a test that did not finish) is a failure.
    pub fn from_word(word: &str) -> Outcome {
        match word {
            "passed" | "flaky" | "ok" => Outcome::Passed,
            "skipped" | "ignored" | "xfail" => Outcome::Skipped,
            _ => Outcome::Failed,
        }
    }
}

/// A suite's results by test name, from its runner's words.
pub fn by_word<'a>(
    results: impl IntoIterator<Item = (&'a String, &'a str)>,
) -> BTreeMap<String, Outcome> {
    results
        .into_iter()
        .map(|(name, word)| (name.clone(), Outcome::from_word(word)))
        .collect()
}

/// Why a test counts against the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Regression {
    /// Passed on the control, and did not pass on the fix (it failed, was
    /// skipped, or did not run).
    LostPass(String),
    /// Failed on the fix, and not on the control (where it passed, was
    /// skipped, or does not exist): an error on the fix alone.
    FailsOnlyOnFix(String),
}

impl Regression {
    pub fn test(&self) -> &str {
        match self {
            Regression::LostPass(t) | Regression::FailsOnlyOnFix(t) => t,
        }
    }
}

/// The tests that came out worse on `fixed` than on `control`, in name order.
pub fn regressions(
    control: &BTreeMap<String, Outcome>,
    fixed: &BTreeMap<String, Outcome>,
) -> Vec<Regression> {
    let names: BTreeSet<&String> = control.keys().chain(fixed.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let (before, after) = (control.get(name), fixed.get(name));
            if before == Some(&Outcome::Passed) && after != Some(&Outcome::Passed) {
                Some(Regression::LostPass(name.clone()))
            } else if after == Some(&Outcome::Failed) && before != Some(&Outcome::Failed) {
                Some(Regression::FailsOnlyOnFix(name.clone()))
            } else {
                None
            }
        })
        .collect()
}

/// The tests that failed on both.
pub fn failing_on_both(
    control: &BTreeMap<String, Outcome>,
    fixed: &BTreeMap<String, Outcome>,
) -> Vec<String> {
    fixed
        .iter()
        .filter(|(n, o)| **o == Outcome::Failed && control.get(*n) == Some(&Outcome::Failed))
        .map(|(n, _)| n.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;

    #[test]
    fn a_fix_regresses_where_it_loses_a_pass_or_fails_alone() {
        let suite = |cases: &[(&str, Outcome)]| -> BTreeMap<String, Outcome> {
            cases.iter().map(|(n, o)| (n.to_string(), *o)).collect()
        };
        let control = suite(&[
            ("same", Passed),
            ("lost", Passed),
            ("lost_to_skip", Passed),
            ("gone", Passed),
            ("both", Failed),
            ("skipped", Skipped),
            ("fixed_by_it", Failed),
        ]);
        let fixed = suite(&[
            ("same", Passed),
            ("lost", Failed),
            ("lost_to_skip", Skipped),
            ("both", Failed),
            ("skipped", Failed),
            ("fixed_by_it", Passed),
            ("new_and_failing", Failed),
            ("new_and_passing", Passed),
        ]);
        let found: Vec<String> = regressions(&control, &fixed)
            .iter()
            .map(|r| format!("{r:?}"))
            .collect();
        assert_eq!(
            found,
            [
                "LostPass(\"gone\")",
                "LostPass(\"lost\")",
                "LostPass(\"lost_to_skip\")",
                "FailsOnlyOnFix(\"new_and_failing\")",
                "FailsOnlyOnFix(\"skipped\")",
            ]
        );
        assert_eq!(failing_on_both(&control, &fixed), ["both"]);
        assert!(regressions(&control, &control).is_empty());
        let words = [
            ("a".to_string(), "flaky"),
            ("b".to_string(), "FAILED"),
            ("c".to_string(), "ignored"),
        ];
        let read = by_word(words.iter().map(|(n, w)| (n, *w)));
        assert_eq!(
            read.values().copied().collect::<Vec<_>>(),
            [Passed, Failed, Skipped]
        );
    }
}
