//! Checks counted as they are made.

/// Checks counted as they are made: each failure is printed when it happens.
pub struct Tally {
    pub passed: u32,
    pub failures: Vec<String>,
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

impl Tally {
    pub fn new() -> Self {
        Tally {
            passed: 0,
            failures: Vec::new(),
        }
    }

    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.claim(ok, || {
            let what = what();
            println!("FAILED: {what}");
            what
        });
    }

    /// As [`Tally::check`], printing nothing: for a pure judge.
    pub fn claim(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
        } else {
            self.failures.push(what());
        }
    }
}
