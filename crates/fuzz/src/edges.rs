//! The driver's side of the coverage build's feedback: a file of one-byte
//! edge counters that the worker's libmlx maps shared
//! (`mlx-patched/coverage/edges.cpp`, through `MLX_FORK_COVERAGE_MAP`), read
//! and cleared here after each program.
//!
//! A feature is an edge with its hit count in one of AFL's eight buckets
//! (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+), so a loop that runs more
//! often counts as new, and a counter's exact value does not.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// Counters in the map (`mlx_facts::coverage`): the build gives the same
/// size to `edges.cpp`, and the worker reports its own at its start
/// (`coverage <size>`).
pub use mlx_facts::coverage::MAP_SIZE;

/// An edge's index in the map, shifted left by 3, with its bucket.
pub type Feature = u32;

/// The bucket of a hit count (1 to 255), as a bit number 0 to 7.
pub fn bucket(count: u8) -> u32 {
    match count {
        0 => unreachable!("an edge not taken has no bucket"),
        1 => 0,
        2 => 1,
        3 => 2,
        4..=7 => 3,
        8..=15 => 4,
        16..=31 => 5,
        32..=127 => 6,
        _ => 7,
    }
}

pub fn feature(edge: usize, count: u8) -> Feature {
    ((edge as u32) << 3) | bucket(count)
}

pub fn edge_of(f: Feature) -> usize {
    (f >> 3) as usize
}

/// The map, in a file the worker maps too; removed when dropped.
pub struct SharedMap {
    path: PathBuf,
    ptr: *mut u8,
}

// The map is only touched between programs, while the worker waits.
unsafe impl Send for SharedMap {}

impl SharedMap {
    /// A new map of zeros in `dir` (a tmpfs such as /dev/shm keeps it in
    /// memory).
    pub fn create(dir: &Path, name: &str) -> Result<SharedMap, String> {
        let path = dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("cannot create the coverage map {}: {e}", path.display()))?;
        file.set_len(MAP_SIZE as u64)
            .map_err(|e| format!("cannot size the coverage map {}: {e}", path.display()))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file we own, of its length.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAP_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "cannot map the coverage map {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(SharedMap {
            path,
            ptr: ptr as *mut u8,
        })
    }

    /// The file the worker is told to map.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn counters(&mut self) -> &mut [u8] {
        // SAFETY: the mapping lives as long as self, of MAP_SIZE bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, MAP_SIZE) }
    }

    /// The features the last program reached, into `out`; the map is then
    /// zero for the next one.
    pub fn take(&mut self, out: &mut Vec<Feature>) {
        out.clear();
        let counters = self.counters();
        // Eight counters at a time: most of the map is zero.
        for (w, chunk) in counters.chunks_exact_mut(8).enumerate() {
            let word = u64::from_ne_bytes(chunk.try_into().unwrap());
            if word == 0 {
                continue;
            }
            for (k, c) in chunk.iter_mut().enumerate() {
                if *c != 0 {
                    out.push(feature(w * 8 + k, *c));
                    *c = 0;
                }
            }
        }
    }

    /// Zeroes every counter (what a worker did between programs, or at its
    /// start, is nobody's feature).
    pub fn clear(&mut self) {
        self.counters().fill(0);
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: unmapping what create mapped, once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, MAP_SIZE);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_afls() {
        let got: Vec<u32> = [1u8, 2, 3, 4, 7, 8, 15, 16, 31, 32, 127, 128, 255]
            .iter()
            .map(|&c| bucket(c))
            .collect();
        assert_eq!(got, [0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]);
        assert_eq!(edge_of(feature(12345, 9)), 12345);
    }

    /// What another process writes into the file is what `take` reads, and
    /// the map is zero afterwards.
    #[test]
    fn a_write_through_the_file_is_read_and_cleared() {
        use std::io::{Seek, SeekFrom, Write};
        let dir = std::env::temp_dir();
        let mut map =
            SharedMap::create(&dir, &format!("edges-test-{}", std::process::id())).unwrap();
        let mut f = OpenOptions::new().write(true).open(map.path()).unwrap();
        f.seek(SeekFrom::Start(77)).unwrap();
        f.write_all(&[3]).unwrap();
        f.seek(SeekFrom::Start(MAP_SIZE as u64 - 1)).unwrap();
        f.write_all(&[200]).unwrap();
        drop(f);
        let mut out = Vec::new();
        map.take(&mut out);
        assert_eq!(out, vec![feature(77, 3), feature(MAP_SIZE - 1, 200)]);
        map.take(&mut out);
        assert!(out.is_empty());
    }
}
