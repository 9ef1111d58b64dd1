//! What one run of a program measured ([`Outcome`], written by the worker),
//! and what of it is a finding ([`judge`]). Engine-independent: the worker
//! measures, this module decides.

use crate::conditioning::Family;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// gave eager's bits exactly, within its family's bound
    /// ([`crate::conditioning`]): the fused kernels' rounding (on 0.32.2
    /// they contract multiply-adds), amplified by an ill-conditioned op
    /// such as a remainder by a small divisor. Counted, not a finding.
    #[serde(default)]
    pub fused_rounding: Option<String>,
    /// The largest ULP distance of a fused value from eager's, per
    /// [`Family`] of the values compared: over every value, and over the
    /// values beyond [`TOLERANCE`] (what [`Family::bound`] is measured on).
    #[serde(default)]
    pub fused_ulps: BTreeMap<Family, u64>,
    #[serde(default)]
    pub fused_ulps_beyond_tolerance: BTreeMap<Family, u64>,
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

/// Whether compiled value `x` is within [`TOLERANCE`] of eager value `y`.
/// Equal values (NaN against NaN included) are; an infinity or a NaN on one
/// side only is not (with eager at ±inf, `REL * |y|` would admit any
/// compiled value).
pub fn within_tolerance(x: f64, y: f64) -> bool {
    if x.is_nan() && y.is_nan() || x == y {
        return true;
    }
    if !x.is_finite() || !y.is_finite() {
        return false;
    }
    let (abs, rel) = TOLERANCE;
    (x - y).abs() <= abs + rel * y.abs()
}

/// MLX's own refusals: a transform that raises one of these where eager
/// evaluation succeeds is intended behaviour, not a finding. Each entry is
/// MLX's exact message (0.32.2's `mlx/primitives.cpp` and `mlx/compile.cpp`),
/// with `{}` where MLX writes the primitive's name, and why it is allowed.
pub const NOT_IMPLEMENTED: &[(&str, &str)] = &[
    ("[Primitive::vjp] Not implemented for {}.", "a primitive without a vjp"),
    ("[Primitive::jvp] Not implemented for {}.", "a primitive without a jvp"),
    ("[Primitive::vmap] Not implemented for {}.", "a primitive without a vmap"),
    (
        "[Primitive::output_shapes] {} cannot infer output shapes.",
        "a shapeless compile of an op whose output shape depends on its input's",
    ),
    (
        "[export_function] Unable to serialize primitive {}",
        "an export of a primitive MLX has no file form for",
    ),
    (
        "[compile] Attempting to compile a function with uncaptured inputs is not allowed.",
        "a compiled function that also uses one of its arguments as a captured array: MLX refuses that by design",
    ),
];

/// Whether `message` is `template` with `{}` standing for a primitive's
/// name (letters, digits and `_`), or is `template` itself.
fn matches_template(template: &str, message: &str) -> bool {
    match template.split_once("{}") {
        None => message == template,
        Some((head, tail)) => message
            .strip_prefix(head)
            .and_then(|rest| rest.strip_suffix(tail))
            .is_some_and(|name| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }),
    }
}

/// Why `error` is allowed, if its first line is one of MLX's refusals.
pub fn not_implemented(error: &str) -> Option<&'static str> {
    let line = first_line(error);
    NOT_IMPLEMENTED
        .iter()
        .find(|(m, _)| matches_template(m, &line))
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
    // Nor does a leak: the measured run is judged on the error path too.
    if o.leaked_bytes != 0 || o.leaked_descriptors.unwrap_or(0) != 0 {
        let descs = o
            .leaked_descriptors
            .map(|d| format!(", {d} descriptors"))
            .unwrap_or_default();
        let raised = if o.error.is_some() {
            ", after an error"
        } else {
            ""
        };
        out.push(Finding {
            kind: Kind::Leak,
            detail: format!("{} bytes{descs}{raised}", o.leaked_bytes),
        });
    }
    match (&o.error, &o.eager_error) {
        (Some(e), None) if not_implemented(e).is_none() => out.push(Finding {
            kind: Kind::TransformError,
            detail: first_line(e),
        }),
        (None, _) => {
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

/// What one run of a program amounts to for the differential: the bits it
/// evaluated, or the class of the error it raised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunResult {
    Ran(u64),
    Raised(String),
}

/// The class of an error message: its first line with every number
/// replaced by `#`, so that the same rule broken by other sizes is one
/// class.
pub fn error_class(message: &str) -> String {
    let mut class = String::new();
    for c in first_line(message).chars() {
        if c.is_ascii_digit() {
            if !class.ends_with('#') {
                class.push('#');
            }
        } else {
            class.push(c);
        }
    }
    class
}

impl Outcome {
    /// The run as the differential compares it. An error in either form
    /// (as written, or the eager reference) is the result.
    pub fn result(&self) -> RunResult {
        match (&self.error, &self.eager_error) {
            (Some(e), _) => RunResult::Raised(error_class(e)),
            (None, Some(e)) => RunResult::Raised(format!("eagerly: {}", error_class(e))),
            (None, None) => RunResult::Ran(self.digest),
        }
    }
}

/// Errors the series raises on purpose where the control computes on: a fix
/// that refuses an input the control mishandles. Each: a fragment of the
/// fix's message, and the patch with its reason.
pub const RAISED_BY_THE_FIX: &[(&str, &str)] = &[(
    "[Eig::eval_cpu] The matrix has infinite or NaN entries.",
    "0006-eig-rejects-non-finite-matrix: LAPACK's geev writes outside its buffers on such a matrix",
)];

/// Whether an error (or its class) is one the series raises on purpose.
pub fn raised_by_the_fix(class: &str) -> bool {
    RAISED_BY_THE_FIX.iter().any(|(m, _)| class.contains(m))
}

/// Errors the control raises where a fix of the series runs on: upstream's
/// bugs whose symptom varies from process to process, so a program may
/// reach a later, other error on the fix. Each: a fragment of the
/// control's message, and the patch with its reason.
pub const RAISED_BY_THE_CONTROL_ALONE: &[(&str, &str)] = &[
    (
        "There is no Stream(cpu, ",
        "0011-import-runs-on-the-importing-threads-stream: the control binds an imported function to the first stream of its device in the process-wide list, which another thread may have made (finding 011)",
    ),
    (
        "[gpu::synchronize] GPU backend is not available",
        "0011-import-runs-on-the-importing-threads-stream: the same lookup can hand the control a stream of a device this build has no backend for (finding 011)",
    ),
];

/// Whether an error (or its class) is one the control alone raises.
pub fn raised_by_the_control_alone(class: &str) -> bool {
    RAISED_BY_THE_CONTROL_ALONE
        .iter()
        .any(|(m, _)| class.contains(m))
}

/// The differential oracle over one program's results on a fix and on the
/// control (run in two processes, since their libraries' symbols clash):
/// the same bits where both ran it, the same class of error where both
/// raised, and no error on the fix that the control does not raise. An
/// error on the control alone is the control's bug, which its own verdict
/// ([`judge`]) names.
pub fn differ_results(fix: &RunResult, control: &RunResult) -> Option<String> {
    match (fix, control) {
        (RunResult::Ran(x), RunResult::Ran(y)) if x != y => {
            Some(format!("digest {x:016x} against {y:016x}"))
        }
        (RunResult::Raised(e), RunResult::Ran(_)) if !raised_by_the_fix(e) => {
            Some(format!("raises only on the fix: {e}"))
        }
        // The control stopped at its own bug: nothing after it compares.
        (RunResult::Raised(e), RunResult::Raised(f))
            if e != f && !raised_by_the_control_alone(f) =>
        {
            Some(format!("raises otherwise on the fix: {e} against {f}"))
        }
        _ => None,
    }
}

/// [`differ_results`] on two outcomes, as a finding.
pub fn differ(fix: &Outcome, control: &Outcome) -> Option<Finding> {
    let detail = differ_results(&fix.result(), &control.result())?;
    let eager = match (fix.eager_digest, control.eager_digest) {
        _ if !detail.starts_with("digest") => "",
        (Some(x), Some(y)) if x == y => ", eager values equal",
        (Some(_), Some(_)) => ", eager values differ too",
        _ => "",
    };
    Some(Finding {
        kind: Kind::VariantsDiffer,
        detail: format!("{detail}{eager}"),
    })
}

/// [`differ_results`] over whole runs (program index to result): how many
/// programs both ran to a result, and those that differ, with how.
pub fn differ_runs(
    fix: &std::collections::BTreeMap<u64, RunResult>,
    control: &std::collections::BTreeMap<u64, RunResult>,
) -> (usize, Vec<(u64, String)>) {
    let mut both = 0;
    let mut differ = Vec::new();
    for (i, x) in fix {
        if let Some(y) = control.get(i) {
            both += 1;
            if let Some(d) = differ_results(x, y) {
                differ.push((*i, d));
            }
        }
    }
    (both, differ)
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
            error: Some("[Primitive::vjp] Not implemented for Eig.".into()),
            ..Default::default()
        };
        assert!(judge(&o).is_empty());
        // The words alone, in another message, excuse nothing.
        for other in [
            "[Eig::vjp] not implemented",
            "[Primitive::vjp] Not implemented for Eig. (and more)",
            "[compile] Internal error: Not implemented for Split.",
        ] {
            o.error = Some(other.into());
            assert_eq!(judge(&o).len(), 1, "{other}");
        }
        o.error = Some("[Primitive::output_shapes] RandomBits cannot infer output shapes.".into());
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
    fn variants_differ_where_their_bits_or_errors_differ_or_the_fix_alone_raises() {
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
        // The control alone raising is the control's bug, named by judge.
        b.error = Some("[compile] Internal error".into());
        assert_eq!(differ(&a, &b), None);
        // The fix alone raising is a finding, even where judge calls it
        // MLX's rule (the eager form raising too).
        let mut fix = Outcome {
            error: Some("[vmap] Split of 3 into 2".into()),
            eager_error: Some("[vmap] Split of 3 into 2".into()),
            ..Default::default()
        };
        assert!(judge(&fix).is_empty());
        let control = Outcome::default();
        let f = differ(&fix, &control).expect("an error on the fix alone");
        assert_eq!(f.detail, "raises only on the fix: [vmap] Split of # into #");
        // Both raising: the same class is no difference, another class is.
        let mut control = fix.clone();
        control.error = Some("[vmap] Split of 5 into 4".into());
        assert_eq!(differ(&fix, &control), None);
        fix.error = Some("[compile] unordered_map::at".into());
        assert!(differ(&fix, &control).is_some());
        // Unless the control's error is one of its own bugs the series fixes.
        control.error = Some("There is no Stream(cpu, 3) in current thread.".into());
        assert_eq!(differ(&fix, &control), None);
        // An error a patch raises on purpose is not a difference.
        let fix = Outcome {
            error: Some("[Eig::eval_cpu] The matrix has infinite or NaN entries.".into()),
            ..Default::default()
        };
        assert_eq!(differ(&fix, &Outcome::default()), None);

        let r = |d| RunResult::Ran(d);
        let x = [
            (0, r(10)),
            (1, r(11)),
            (3, r(13)),
            (4, RunResult::Raised("e".into())),
        ]
        .into_iter()
        .collect();
        let y = [(0, r(10)), (1, r(99)), (2, r(12)), (4, r(14))]
            .into_iter()
            .collect();
        let (both, differ) = differ_runs(&x, &y);
        assert_eq!(both, 3);
        assert_eq!(
            differ.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![1, 4]
        );
    }

    #[test]
    fn a_leak_after_an_error_is_a_leak() {
        let o = Outcome {
            error: Some("[reshape] Cannot reshape".into()),
            eager_error: Some("[reshape] Cannot reshape".into()),
            leaked_bytes: 4096,
            ..Default::default()
        };
        let f = judge(&o);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, Kind::Leak);
        assert_eq!(f[0].detail, "4096 bytes, after an error");
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
