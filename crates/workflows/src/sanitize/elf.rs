//! The one thing read from an ELF file: which dynamic loader it names.

use mlx_harness::error::{anyhow, Context, Error, Result};
use std::path::{Path, PathBuf};

/// The dynamic loader an ELF executable names (its `PT_INTERP`).
pub fn interpreter(exe: &Path) -> Result<PathBuf> {
    let bytes = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    let bad = || -> Error {
        anyhow!(
            "{} is not a 64-bit little-endian ELF executable with an interpreter",
            exe.display()
        )
    };
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    if !bytes.starts_with(b"\x7fELF\x02\x01") {
        return Err(bad());
    }
    let (phoff, phentsize, phnum) = (
        u64_at(0x20).ok_or_else(bad)?,
        u16_at(0x36).ok_or_else(bad)?,
        u16_at(0x38).ok_or_else(bad)?,
    );
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        const PT_INTERP: u32 = 3;
        if bytes
            .get(ph..ph + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            == Some(PT_INTERP)
        {
            let (offset, size) = (
                u64_at(ph + 8).ok_or_else(bad)?,
                u64_at(ph + 32).ok_or_else(bad)?,
            );
            let name = bytes.get(offset..offset + size).ok_or_else(bad)?;
            let name = name.split(|&b| b == 0).next().unwrap_or_default();
            return Ok(PathBuf::from(String::from_utf8_lossy(name).into_owned()));
        }
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_of_an_executable_is_read_from_its_program_headers() {
        let me = std::env::current_exe().unwrap();
        let ld = interpreter(&me).unwrap();
        assert!(ld.is_absolute() && ld.exists(), "{}", ld.display());
        assert!(
            ld.file_name().unwrap().to_string_lossy().starts_with("ld-"),
            "{}",
            ld.display()
        );
        let not_elf = std::env::temp_dir().join("sanitize-not-elf");
        std::fs::write(&not_elf, b"#!/bin/sh\n").unwrap();
        assert!(interpreter(&not_elf)
            .unwrap_err()
            .to_string()
            .contains("not a 64-bit"));
    }
}
