//! What one run of a program measured ([`Outcome`], written by the worker),
//! and what of it is a finding ([`judge`]). Engine-independent: the worker
//! measures, this module decides.

use serde::{Deserialize, Serialize};

/// One program, as the worker ran it: as written, then again after a
/// warm-up with the memory measured, then with every `compile` replaced by
/// the function it compiles (the eager reference).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// MLX's message, if running the program as written threw.
    pub error: Option<String>,
    /// The same for the eager reference.
    pub eager_error: Option<String>,
    /// Active memory after the measured run, everything dropped, compiled
    /// functions erased and the stream synchronized, minus before it.
    pub leaked_bytes: i64,
    /// The same for live array descriptors, on a census build.
    pub leaked_descriptors: Option<i64>,
    /// FNV-1a over the bits of every value the program evaluated, in order.
    pub digest: u64,
    /// Where the as-written values differ from the eager ones beyond
    /// [`TOLERANCE`], if they do.
    pub mismatch: Option<String>,
    /// The largest relative difference compiled against eager (for the
    /// tolerance's measurement).
    pub max_rel_diff: f64,
    /// The first evaluated value whose data (offset plus `data_size`
    /// elements) runs past its buffer, in either run.
    #[serde(default)]
    pub overrun: Option<String>,
    /// A fused value beyond [`TOLERANCE`] where compiling without fusion
    /// gave eager's bits exactly: the fused kernels' rounding (on 0.32.2
    /// they contract multiply-adds), amplified by an ill-conditioned op
    /// such as a remainder by a small divisor. Counted, not a finding.
    #[serde(default)]
    pub fused_rounding: Option<String>,
    /// The digest of the eager reference's values, if it ran: with
    /// `digest`, it tells a difference of arithmetic from one of fusion
    /// when two variants are compared ([`differ`]).
    #[serde(default)]
    pub eager_digest: Option<u64>,
}

/// Compiled against eager: `|a - b| <= ABS + REL * |b|`. Fusion reorders
/// float operations, so compiled results may differ in the last bits.
/// Compiled without fusion (`CompileMode::no_fuse`) must give eager's
/// bits exactly: only the graph is rewritten, not the arithmetic.
pub const TOLERANCE: (f64, f64) = (1e-5, 1e-4);

/// MLX's documented "not supported" answers: a transform that raises one of
/// these where eager evaluation succeeds is intended behaviour, not a
/// finding. Each entry: a fragment of MLX's message, and why it is allowed.
pub const NOT_IMPLEMENTED: &[(&str, &str)] = &[
    ("not implemented", "a primitive without this transform (vjp, jvp or vmap)"),
    ("Not implemented", "a primitive without this transform (vjp, jvp or vmap)"),
    ("cannot infer output shapes", "a shapeless compile of an op whose output shape depends on its input's"),
    ("cannot be shapeless", "a shapeless compile of an op that needs fixed shapes"),
    ("compile a function with uncaptured inputs", "a compiled function that also uses one of its arguments as a captured array: MLX refuses that by design"),
];

/// Why `error` is allowed, if it is a documented not-implemented case.
pub fn not_implemented(error: &str) -> Option<&'static str> {
    NOT_IMPLEMENTED
        .iter()
        .find(|(m, _)| error.contains(m))
        .map(|(_, why)| *why)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// Memory or descriptors left behind after everything was dropped.
    Leak,
    /// The worker died (a signal, a sanitizer report, an abort).
    Crash,
    /// A transform raised where the eager program did not.
    TransformError,
    /// Compiled values differ from eager beyond the tolerance.
    Mismatch,
    /// The same program computed other bits on another variant.
    VariantsDiffer,
    /// No answer within the time limit.
    Hang,
    /// An evaluated array claims more data than its buffer holds: ops
    /// read and write past it, which only a sanitizer build would report.
    Overrun,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Leak,
        Kind::Crash,
        Kind::TransformError,
        Kind::Mismatch,
        Kind::VariantsDiffer,
        Kind::Hang,
        Kind::Overrun,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Leak => "leak",
            Kind::Crash => "crash",
            Kind::TransformError => "transform-error",
            Kind::Mismatch => "mismatch",
            Kind::VariantsDiffer => "variants-differ",
            Kind::Hang => "hang",
            Kind::Overrun => "overrun",
        }
    }
}

/// A finding: its kind and what identifies it (the failure a shrink step
/// must keep: an error's message, a crash's signal or first report line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: Kind,
    pub detail: String,
}

/// The findings in one outcome. A program both versions reject (MLX's
/// rules the generator does not model) is not a finding; nor is a
/// documented not-implemented error.
pub fn judge(o: &Outcome) -> Vec<Finding> {
    let mut out = Vec::new();
    // Memory safety does not depend on whether the program was valid.
    if o.overrun.is_some() {
        out.push(Finding {
            kind: Kind::Overrun,
            detail: o.overrun.clone().unwrap_or_default(),
        });
    }
    match (&o.error, &o.eager_error) {
        (Some(e), None) if not_implemented(e).is_none() => out.push(Finding {
            kind: Kind::TransformError,
            detail: first_line(e),
        }),
        (None, _) => {
            if o.leaked_bytes != 0 || o.leaked_descriptors.unwrap_or(0) != 0 {
                let descs = o
                    .leaked_descriptors
                    .map(|d| format!(", {d} descriptors"))
                    .unwrap_or_default();
                out.push(Finding {
                    kind: Kind::Leak,
                    detail: format!("{} bytes{descs}", o.leaked_bytes),
                });
            }
            if let Some(m) = &o.mismatch {
                out.push(Finding {
                    kind: Kind::Mismatch,
                    detail: m.clone(),
                });
            }
        }
        _ => {}
    }
    out
}

/// The differential oracle: the same program, run by two variants (in two
/// processes, since their libraries' symbols clash), must evaluate the same
/// bits where both ran it. Where one of them raised, its own verdict
/// ([`judge`]) says whether that is a finding; a leak changes no value.
pub fn differ(a: &Outcome, b: &Outcome) -> Option<Finding> {
    let ran = |o: &Outcome| o.error.is_none() && o.eager_error.is_none();
    if !ran(a) || !ran(b) || a.digest == b.digest {
        return None;
    }
    let eager = match (a.eager_digest, b.eager_digest) {
        (Some(x), Some(y)) if x == y => ", eager values equal",
        (Some(_), Some(_)) => ", eager values differ too",
        _ => "",
    };
    Some(Finding {
        kind: Kind::VariantsDiffer,
        detail: format!("digest {:016x} against {:016x}{eager}", a.digest, b.digest),
    })
}

/// [`differ`] over whole runs kept as digests (program index to digest, of
/// the programs each variant ran without an error): how many programs both
/// ran, and those whose bits differ.
pub fn differ_digests(
    a: &std::collections::BTreeMap<u64, u64>,
    b: &std::collections::BTreeMap<u64, u64>,
) -> (usize, Vec<u64>) {
    let both: Vec<(u64, bool)> = a
        .iter()
        .filter_map(|(i, x)| b.get(i).map(|y| (*i, x == y)))
        .collect();
    let differ = both
        .iter()
        .filter(|(_, same)| !same)
        .map(|(i, _)| *i)
        .collect();
    (both.len(), differ)
}

/// Whether `f` is the same failure as `want`, for the shrinker: a leak is a
/// leak whatever its size, a crash whatever its symptom; an error keeps its
/// message.
pub fn same_failure(want: &Finding, f: &Finding) -> bool {
    // A memory error shows as a double free, an invalid pointer or a
    // segfault depending on the heap's layout: a crash is a crash.
    want.kind == f.kind
        && (matches!(
            want.kind,
            Kind::Leak
                | Kind::Mismatch
                | Kind::Hang
                | Kind::Crash
                | Kind::Overrun
                | Kind::VariantsDiffer
        ) || want.detail == f.detail)
}

pub fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// FNV-1a, the digest of evaluated bits.
pub fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

pub const FNV_START: u64 = 0xcbf29ce484222325;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_documented_not_implemented_error_is_not_a_finding_and_another_is() {
        let mut o = Outcome {
            error: Some("[Eig::vjp] not implemented".into()),
            ..Default::default()
        };
        assert!(judge(&o).is_empty());
        o.error = Some("[compile] Internal error: some output is not in the tape".into());
        assert_eq!(
            judge(&o),
            vec![Finding {
                kind: Kind::TransformError,
                detail: "[compile] Internal error: some output is not in the tape".into()
            }]
        );
        // Both forms rejecting it: the program broke MLX's rules, not a bug.
        o.eager_error = Some("shapes".into());
        assert!(judge(&o).is_empty());
    }

    #[test]
    fn an_overrun_is_a_finding_even_where_both_runs_failed() {
        let o = Outcome {
            error: Some("x".into()),
            eager_error: Some("x".into()),
            overrun: Some("value 0: ...".into()),
            ..Default::default()
        };
        assert_eq!(
            judge(&o).iter().map(|f| f.kind).collect::<Vec<_>>(),
            vec![Kind::Overrun]
        );
    }

    #[test]
    fn variants_differ_only_where_both_ran_and_their_bits_differ() {
        let a = Outcome {
            digest: 1,
            eager_digest: Some(7),
            ..Default::default()
        };
        let mut b = Outcome {
            digest: 1,
            eager_digest: Some(7),
            ..Default::default()
        };
        assert_eq!(differ(&a, &b), None);
        b.digest = 2;
        let f = differ(&a, &b).expect("other bits are a finding");
        assert_eq!(f.kind, Kind::VariantsDiffer);
        assert!(f.detail.ends_with("eager values equal"), "{}", f.detail);
        // A variant that raised has no values to compare.
        b.error = Some("[compile] Internal error".into());
        assert_eq!(differ(&a, &b), None);

        let x = [(0, 10), (1, 11), (3, 13)].into_iter().collect();
        let y = [(0, 10), (1, 99), (2, 12)].into_iter().collect();
        assert_eq!(differ_digests(&x, &y), (2, vec![1]));
    }

    #[test]
    fn any_retained_byte_or_descriptor_is_a_leak() {
        let o = Outcome {
            leaked_bytes: 64,
            ..Default::default()
        };
        assert_eq!(judge(&o)[0].kind, Kind::Leak);
        let o = Outcome {
            leaked_descriptors: Some(3),
            ..Default::default()
        };
        assert_eq!(judge(&o)[0].kind, Kind::Leak);
        assert!(judge(&Outcome {
            leaked_descriptors: Some(0),
            ..Default::default()
        })
        .is_empty());
    }
}
