//! Upstream's own bug fixes between the default base and the newest one
//! (everything 0.32.3 and 0.32.4 fixed), and whether the default base
//! carries each. Read from the difference of the two upstream trees (no
//! upstream commit range is recorded: see `pin`), each bug reproduced on
//! the official 0.32.2 wheel where it could be. `cargo xtask docs` renders
//! [`PAGE`]; the tests below hold the table to the series.

/// The page rendered from [`FIXES`].
pub const PAGE: &str = "docs/upstream-fixes.md";

/// Where the fix lives in MLX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    /// The graph, ops, transforms, compile, io (`mlx/*.cpp`).
    Core,
    /// The CPU backend (`mlx/backend/cpu`, `mlx/backend/common`).
    Cpu,
    /// The Python bindings (`python/src`).
    Python,
    /// The Metal backend alone.
    Metal,
    /// The CUDA backend alone.
    Cuda,
}

/// What the bug did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    WrongResult,
    Crash,
    Hang,
    Leak,
    Race,
    /// An error raised where none is due, or none where one is.
    WrongError,
}

/// Whether the default base carries the fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// By the fork's own change for it: the patch's stem, whose message
    /// has an `Upstream-since:` line.
    Backport(&'static str),
    /// By the series' fix of the same bug, which the newer base's row
    /// leaves out (`pin::Base::fixed_upstream`): the patch's stem.
    SeriesFix(&'static str),
    /// Not carried, and why.
    No(&'static str),
}

/// One fix of upstream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamFix {
    /// The survey's id: C core and CPU, P Python, G GPU-only.
    pub id: &'static str,
    /// Upstream's pull request, where it could be tied to one.
    pub pr: Option<u32>,
    pub area: Area,
    pub kind: Kind,
    /// What was wrong, in a sentence.
    pub bug: &'static str,
    pub carried: Carried,
}

use Area::*;
use Carried::*;
use Kind::*;

const fn fix(
    id: &'static str,
    pr: Option<u32>,
    area: Area,
    kind: Kind,
    bug: &'static str,
    carried: Carried,
) -> UpstreamFix {
    UpstreamFix {
        id,
        pr,
        area,
        kind,
        bug,
        carried,
    }
}

/// Why the GPU-only rows are not carried.
const GPU_ONLY: &str = "Metal or CUDA code only; the fork builds and tests neither here";

#[rustfmt::skip]
pub const FIXES: &[UpstreamFix] = &[
    fix("C1", Some(4453), Core, Leak, "assigning over, or overwriting, the last handle of a multi-output group skipped the sibling-cycle check and leaked the group", SeriesFix("0001-release-sibling-groups-on-every-path")),
    fix("C2", None, Cpu, Race, "a CPU kernel was compiled under its final cache name, so another process could load a half-written library", SeriesFix("0009-cpu-kernels-built-under-their-own-name")),
    fix("C3", Some(4446), Core, WrongResult, "a strided slice of exactly one element kept a wide stop, so its vjp spread the cotangent and its vmap returned extra elements", Backport("0015-slice-of-one-strided-element-keeps-its-stop")),
    fix("C4", Some(4322), Core, WrongResult, "Scatter::vmap put the batch axis of the updates in the wrong place for vmap axes past 0", Backport("0016-scatter-vmap-puts-the-batch-axis-in-place")),
    fix("C5", None, Core, WrongResult, "vmap of a view that changes the item size reinterpreted the mapped axis, and the CPU view kept the input's last stride and flags", Backport("0017-view-to-another-item-size-keeps-its-last-axis")),
    fix("C6", None, Core, WrongResult, "vmap of irfftn with an explicit odd length lost the odd length", Backport("0020-irfft-vmap-keeps-an-odd-length")),
    fix("C7", Some(4364), Core, Crash, "pad with a subset of axes indexed the pad sizes by axis, reading past them and padding the wrong axes", Backport("0034-pad-pairs-sizes-with-axes-by-position")),
    fix("C8", Some(4441), Core, WrongResult, "Pad::vjp paired pad sizes with axes by value, not position (wrong-shape second-order conv gradients)", Backport("0018-pad-vjp-pairs-sizes-with-axes-by-position")),
    fix("C9", None, Core, WrongResult, "the convolution input gradient used the high padding where the low one was due and passed negative padding on", Backport("0019-conv-input-gradient-uses-the-low-padding")),
    fix("C10", Some(3781), Core, WrongResult, "complex vjps of cos, sqrt, rsqrt and the inverse trigonometric and hyperbolic functions lacked the conjugation", Backport("0021-complex-vjps-conjugate-the-derivative")),
    fix("C11", None, Core, WrongResult, "floor_divide of signed integers truncated toward zero (-1 // 2 == 0)", Backport("0035-floor-divide-of-signed-integers-rounds-down")),
    fix("C12", Some(4442), Cpu, Crash, "integer division and remainder by zero trapped with SIGFPE on x86", Backport("0032-integer-division-by-zero-does-not-trap")),
    fix("C13", Some(4340), Cpu, Crash, "scans and sorts over a zero-length axis divided by zero (SIGFPE)", Backport("0033-empty-sorts-and-scans-return-early")),
    fix("C14", Some(4291), Cpu, WrongResult, "argmin and argmax ignored NaN", Backport("0024-argmin-argmax-pick-the-first-nan")),
    fix("C15", None, Cpu, WrongResult, "complex to bool, any, all and logical_not looked at the real part only", Backport("0025-complex-is-true-when-either-part-is-nonzero")),
    fix("C16", None, Cpu, WrongResult, "sort did not put complex NaNs last, and minimum and maximum did not propagate them", Backport("0029-complex-nan-sorts-last-and-wins-min-max")),
    fix("C17", None, Core, WrongResult, "logcumsumexp of integers kept the integer dtype", Backport("0028-logcumsumexp-of-integers-is-floating-point")),
    fix("C18", Some(4511), Core, WrongResult, "fused compiled kernels printed float constants with too few digits (compiled differed from eager by 1 ulp)", No("a rounding change, not a wrong result: the fork keeps the 0.32.2 base's outputs bit for bit those of upstream's 0.32.2, which the suite checks across variants (the demo, the ablations, the fuzz differential, mlx-lm's cells), and this fix moves the last bit of compiled outputs wherever a fused kernel holds a float constant")),
    fix("C19", None, Core, WrongError, "compile merged scalar constants that are outputs, raising _Map_base::at", Backport("0040-compile-keeps-returned-scalars-apart")),
    fix("C20", None, Cpu, WrongResult, "as_strided and slice marked views with gaps, or of a non-contiguous source, contiguous", Backport("0022-as-strided-and-slice-contiguous-only-without-holes")),
    fix("C21", None, Cpu, WrongResult, "a copy-free reshape kept the input's contiguity flags", Backport("0023-reshape-recomputes-contiguity")),
    fix("C22", None, Cpu, WrongResult, "split outputs' data size and flags ignored holes and negative strides", Backport("0031-split-outputs-get-their-real-span")),
    fix("C23", None, Cpu, Crash, "the CPU direct convolution computed border indices past the output when the padding is taller than it, corrupting the heap", No("no test can show it without the unfixed tree writing past the output's buffer: every input that shows the bug corrupts the heap of the process running MLX's suite")),
    fix("C24", None, Cpu, Crash, "CPU reductions used 32-bit offsets, past 2^31 elements crashing or reading wrong rows", No("its test needs an array of more than 2^31 elements (2 GiB at least), past what the suite may allocate")),
    fix("C25", None, Cpu, WrongResult, "CPU sum and prod of bfloat16 (and float16 without SIMD) accumulated in the input type", Backport("0030-bfloat16-sum-and-prod-accumulate-in-float32")),
    fix("C26", None, Cpu, WrongResult, "CPU binary kernels took a 32-bit size, computing nothing past 2^31 elements", No("its test needs an output of more than 2^31 elements (2 GiB at least), past what the suite may allocate")),
    fix("C27", None, Cpu, WrongResult, "from_fp8 decoded the E4M3 NaN codes as +-480", Backport("0026-from-fp8-decodes-the-nan-codes")),
    fix("C28", None, Cpu, WrongResult, "a dynamic slice read non-contiguous start indices as contiguous", Backport("0027-dynamic-slice-reads-strided-start-indices")),
    fix("C29", None, Core, WrongResult, "saving to the file a lazily loaded input reads truncated it before evaluating", Backport("0038-save-evaluates-before-opening-the-file")),
    fix("C30", None, Core, Hang, "a .npy header with a negative dimension was accepted (0.32.2 hung)", Backport("0036-npy-rejects-negative-dimensions")),
    fix("C31", None, Core, Crash, "GGUF dimensions were narrowed to 32 bits and their product unchecked, corrupting the heap", Backport("0037-gguf-rejects-dimensions-that-do-not-fit")),
    fix("C32", None, Core, WrongResult, "a short pread in the parallel file reader did not advance the offset, and EINTR failed the read", Backport("0039-file-reader-advances-after-a-short-read")),
    fix("C33", None, Core, Leak, "eval, async_eval and compile created a default stream on every thread that evaluated", Backport("0041-eval-makes-a-default-stream-only-when-needed")),
    fix("C34", None, Cpu, Crash, "the main thread's CPU encoders were destroyed, and synchronised, during process exit", No("a hardening at exit with no reproduction here, on upstream's side or ours")),
    fix("C35", None, Core, WrongError, "a failed non-strict distributed init registered an empty group that a later strict init returned", Backport("0042-failed-distributed-backend-not-registered")),
    fix("P1", None, Python, Crash, "reading an array through the buffer protocol after a failed async_eval aborted the process", Backport("0043-buffer-protocol-raises-evaluation-errors")),
    fix("P2", Some(4413), Python, Hang, "synchronize and clear_streams held the GIL while waiting on a callback that needs it", No("reachable only with Metal's zero-copy buffers")),
    fix("P3", None, Python, Crash, "indexing with out-of-range slice bounds beside an array index, or more indices than dimensions, segfaulted", Backport("0044-indexing-clamps-slice-bounds-past-the-axis")),
    fix("P4", None, Python, WrongResult, "re-entering a stream context, or leaving it on another thread, restored the wrong default stream", No("the fix changes core's StreamContext, whose destructor then throws where it did not: an API change, which a fork of a release does not make")),
    fix("P5", None, Python, WrongResult, "a Python float cast to an integer dtype went through float32", Backport("0045-python-numbers-convert-from-exact-values")),
    fix("P6", None, Python, WrongError, "iter() of a 0-d array raised IndexError, not TypeError", Backport("0046-iter-of-a-scalar-is-a-type-error")),
    fix("G1", None, Metal, Crash, "the strided scan grid wrote out of bounds", No(GPU_ONLY)),
    fix("G2", None, Metal, WrongResult, "gather and scatter with scalar or no indices bound the wrong metadata", No(GPU_ONLY)),
    fix("G3", None, Metal, WrongResult, "column reductions over negative-stride views", No(GPU_ONLY)),
    fix("G4", None, Metal, Crash, "empty sum or prod to 32- and 64-bit unsigned types had no init kernel", No(GPU_ONLY)),
    fix("G5", None, Metal, Race, "fence update and wait did not carry the array's own update value", No(GPU_ONLY)),
    fix("G6", None, Metal, Hang, "an error after a cross-stream wait left GPU streams uncommitted", No(GPU_ONLY)),
    fix("G7", None, Metal, WrongResult, "fused sigmoid used the fast exp", No(GPU_ONLY)),
    fix("G8", None, Metal, WrongResult, "complex division overflowed or underflowed for extreme values", No(GPU_ONLY)),
    fix("G9", None, Metal, WrongError, "a custom kernel with a negative template integer got an invalid name", No(GPU_ONLY)),
    fix("G10", Some(4366), Metal, WrongResult, "the contiguous sort kernel was chosen for transposed inputs", No(GPU_ONLY)),
    fix("G11", Some(3912), Metal, WrongResult, "fp-quantized matmul with K not a multiple of 32", No(GPU_ONLY)),
    fix("G12", Some(3922), Metal, WrongResult, "sorted gather_qmm overflowed above 32K rows", No(GPU_ONLY)),
    fix("G13", Some(4009), Metal, WrongResult, "sorted gather_qmm with K not a multiple of the block", No(GPU_ONLY)),
    fix("G14", None, Metal, WrongResult, "qmv_fast with unaligned N, and split-k precision", No(GPU_ONLY)),
    fix("G15", None, Cuda, WrongResult, "sorted gather_qmm on the right-hand side", No(GPU_ONLY)),
    fix("G16", None, Metal, WrongResult, "scaled dot-product attention: vector two-pass limits, reversed masks, a mask on the wrong stream", No(GPU_ONLY)),
    fix("G17", None, Metal, WrongResult, "grouped and depthwise convolutions with 8 channels a group, and over 32K output channels", No(GPU_ONLY)),
    fix("G18", None, Metal, WrongResult, "a copy-free view whose offset is not a multiple of the new item size", No(GPU_ONLY)),
    fix("G19", None, Metal, WrongResult, "adopted zero-copy buffers were donated, so ops wrote into the caller's memory", No(GPU_ONLY)),
    fix("G20", Some(4480), Cuda, Crash, "global CUDA encoders synchronised at process exit", No(GPU_ONLY)),
    fix("G21", None, Cuda, WrongError, "a CUDA error resurfaced in later evals, and clear_cache did not trim the pool", No(GPU_ONLY)),
];

impl Area {
    fn word(self) -> &'static str {
        match self {
            Core => "core",
            Cpu => "CPU",
            Python => "Python",
            Metal => "Metal",
            Cuda => "CUDA",
        }
    }
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            WrongResult => "wrong result",
            Crash => "crash",
            Hang => "hang",
            Leak => "leak",
            Race => "race",
            WrongError => "wrong error",
        }
    }
}

/// The page: one row a fix.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Upstream's fixes from 0.32.3 and 0.32.4, and the 0.32.2 base\n\n\
         Generated by `cargo xtask docs` from `crates/facts/src/upstream_fixes.rs`.\n\n\
         Every bug fix upstream made between 0.32.2 and 0.32.4, read from the\n\
         difference of the two trees (no commit range of upstream's is recorded),\n\
         each reproduced on the official 0.32.2 wheel where it could be. All are\n\
         in 0.32.4, so the 0.32.4 base needs none of them. A fix carried on the\n\
         0.32.2 base is the fork's own change (upstream's code is read, not\n\
         copied), with a test of its own in MLX's suite that fails without it;\n\
         its patch's `Upstream-since:` line keeps it out of the 0.32.4 series and\n\
         out of the pull requests staged upstream.\n\n\
         | id | upstream's fix | area | kind | in 0.32.4 | carried on 0.32.2 |\n\
         |---|---|---|---|---|---|\n",
    );
    let summary = |f: &UpstreamFix| match f.carried {
        Backport(stem) => format!("yes: `{}`", &stem[..4]),
        SeriesFix(stem) => format!("yes: `{}`, the series' fix of the same bug", &stem[..4]),
        No(why) => format!("no: {why}"),
    };
    for f in FIXES {
        let pr = f.pr.map(|n| format!(" (#{n})")).unwrap_or_default();
        out.push_str(&format!(
            "| {} | {}{pr} | {} | {} | yes | {} |\n",
            f.id,
            f.bug,
            f.area.word(),
            f.kind.word(),
            summary(f)
        ));
    }
    out
}
