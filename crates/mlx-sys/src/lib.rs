//! Raw bindings to mlx-c 0.7.0, generated with bindgen from mlx-c's public
//! headers, linked against this fork's patched MLX (or the MLX installed in
//! `MLX_SYS_PREFIX`). The items are those of the published `mlx-sys` 0.7.0,
//! which mlx-rs 0.33 is written against, so that a `[patch]` entry swaps
//! this crate in with no change to mlx-rs or to its users.
//!
//! Beyond the bindings, for targets the published crate does not build for:
//! * off ARM, the float16/bfloat16 accessors mlx-c declares only on ARM,
//!   with the types bindgen gives them there (`shims/half_accessors.cpp`);
//! * off Apple, `mach_approximate_time`, which mlx-rs seeds its default
//!   random state with.

#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

#[cfg(not(target_arch = "aarch64"))]
mod half_off_arm {
    use super::mlx_array;
    use std::os::raw::c_int;

    /// `__fp16` as bindgen 0.72 renders it on ARM (same derives): its
    /// 16-bit pattern.
    #[derive(PartialEq, Copy, Clone, Hash, Debug, Default)]
    #[repr(transparent)]
    pub struct __BindgenFloat16(pub u16);

    /// mlx-c's `float16_t` (IEEE half precision), as on ARM.
    pub type float16_t = __BindgenFloat16;
    /// mlx-c's `bfloat16_t` (brain float), as on ARM: its 16-bit pattern.
    pub type bfloat16_t = u16;

    unsafe extern "C" {
        /// The single element of a float16 array (evaluates it). 0 on success.
        pub fn mlx_array_item_float16(res: *mut float16_t, arr: mlx_array) -> c_int;
        /// The single element of a bfloat16 array (evaluates it). 0 on success.
        pub fn mlx_array_item_bfloat16(res: *mut bfloat16_t, arr: mlx_array) -> c_int;
        /// The data of an evaluated float16 array, or null on error.
        pub fn mlx_array_data_float16(arr: mlx_array) -> *const float16_t;
        /// The data of an evaluated bfloat16 array, or null on error.
        pub fn mlx_array_data_bfloat16(arr: mlx_array) -> *const bfloat16_t;
    }
}

#[cfg(not(target_arch = "aarch64"))]
pub use half_off_arm::*;

/// Apple's `mach_approximate_time`, for targets without it: mlx-rs seeds its
/// default random state with it (through `mach-sys`, which only declares
/// it). A monotonic clock in nanoseconds, offset by the wall clock at first
/// use so that two processes start from different seeds.
#[cfg(not(target_vendor = "apple"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    use std::sync::OnceLock;
    use std::time::{Instant, SystemTime, UNIX_EPOCH};
    static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
    let (start, offset) = ORIGIN.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (Instant::now(), wall)
    });
    offset.wrapping_add(start.elapsed().as_nanos() as u64)
}
