//! What each variant must show: the one home of the verdicts, which the
//! suite's build script needs (it builds the variants a run checks). The
//! bounds that go with them live in `crates/expectations`, which no build
//! script depends on, so that editing a bound rebuilds no C++. A rebase onto
//! an upstream that fixed the leak, or a base whose upstream did
//! (`MLX_FORK_BASE`), changes what every check expects at once
//! ([`Expectations::from_env`]).

use crate::pin::Base;
use crate::{Env, Expect, Variant, VARIANTS};

/// The expectations of one run: the variants' own verdicts, or, on an
/// upstream that fixed the leak itself (`MLX_FORK_UPSTREAM_FIXED`, or a
/// base with upstream's own fix of it), the
/// control expected leak-free too and no rejected fix built (the rejected
/// fixes are written against the leaking upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expectations {
    /// `MLX_FORK_UPSTREAM_FIXED` itself: a rebase's target, whose fixes
    /// upstream made are not in a base's row.
    said_fixed: bool,
    base: &'static Base,
}

impl Expectations {
    /// The expectations this process runs under.
    pub fn from_env(env: &Env) -> Self {
        // A base that is not one is refused where the build reads it.
        let base = env.base().unwrap_or(Base::default_base());
        let said_fixed = env.upstream_fixed();
        Expectations { said_fixed, base }
    }

    /// The default base as pinned (`false`), or an upstream that fixed the
    /// leak as `MLX_FORK_UPSTREAM_FIXED` says.
    pub fn new(upstream_fixed: bool) -> Self {
        Expectations {
            said_fixed: upstream_fixed,
            base: Base::default_base(),
        }
    }

    /// The base these expectations are for.
    pub fn base(&self) -> &'static Base {
        self.base
    }

    /// The expectations on `base`, as `MLX_FORK_BASE` gives them.
    pub fn on_base(base: &'static Base) -> Self {
        Expectations {
            said_fixed: false,
            base,
        }
    }

    /// Whether upstream itself has the fix `patch` (a stem of `patches/`),
    /// so that its bug does not show on the control: the base's row says
    /// so, or `MLX_FORK_UPSTREAM_FIXED` does for a rebase's target.
    pub fn fixed_upstream(&self, patch: &str) -> bool {
        self.said_fixed || self.base.fixes_upstream(patch)
    }

    pub fn upstream_fixed(&self) -> bool {
        self.said_fixed || !self.base.control_leaks()
    }

    /// The variants to build and check, in [`VARIANTS`] order.
    pub fn variants(&self) -> Vec<Variant> {
        VARIANTS
            .iter()
            .copied()
            .filter(|v| !(self.upstream_fixed() && v.expect == Expect::Wrong))
            .collect()
    }

    /// The verdict to confirm on `variant`.
    pub fn verdict(&self, variant: &Variant) -> Expect {
        match variant.expect {
            Expect::Leaks if self.upstream_fixed() => Expect::Fixed,
            e => e,
        }
    }

    /// The verdict of the variant called `name`; None for a name that is
    /// not a variant of this run.
    pub fn verdict_of(&self, name: &str) -> Option<Expect> {
        self.variants()
            .iter()
            .find(|v| v.name == name)
            .map(|v| self.verdict(v))
    }
}
