//! Calls the C code compiled by build.rs, which calls mlx-c, which calls
//! MLX: prints `twice(1.5) = 3`, then the MLX version the library reports
//! beside the one DEP_MLX_VERSION gave, and exits non-zero if they differ.

// Linked for its native libraries: the C code calls into them.
extern crate mlx_sys;

use std::ffi::CStr;
use std::os::raw::{c_char, c_float, c_int};

extern "C" {
    fn dependent_twice(x: c_float) -> c_float;
    fn dependent_version(buf: *mut c_char, size: usize) -> c_int;
}

fn twice(x: f32) -> f32 {
    unsafe { dependent_twice(x) }
}

fn version() -> String {
    let mut buf = [0 as c_char; 64];
    let status = unsafe { dependent_version(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(status, 0, "mlx_version failed");
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn main() {
    let seen = env!("DEP_MLX_VERSION_SEEN");
    println!("twice(1.5) = {}", twice(1.5));
    let reported = version();
    println!(
        "MLX reports {reported}; DEP_MLX_VERSION {seen}; DEP_MLX_DEFINES {:?}",
        env!("DEP_MLX_DEFINES_SEEN")
    );
    if reported != seen || twice(1.5) != 3.0 {
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mlx_c_adds_through_the_metadata_s_headers() {
        assert_eq!(super::twice(1.5), 3.0);
        assert_eq!(super::version(), env!("DEP_MLX_VERSION_SEEN"));
    }
}
