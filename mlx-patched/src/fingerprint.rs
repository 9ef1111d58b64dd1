//! The one hashing scheme for whatever is keyed on its inputs: a variant's
//! build stamp, the bindings' stamp, a virtual environment, the tree and
//! series a table or a recorded report was measured for. Every input is
//! named and length-prefixed, so two inputs can never run together into
//! the bytes of a third.

use crate::Error;
use sha2::{Digest, Sha256};
use std::fmt::Display;
use std::path::Path;

#[derive(Clone)]
pub struct Fingerprint(Sha256);

impl Fingerprint {
    /// A fingerprint of one `scheme` (what it keys, and its version).
    pub fn new(scheme: &str) -> Self {
        let mut f = Fingerprint(Sha256::new());
        f.bytes("scheme", scheme.as_bytes());
        f
    }

    /// Adds a named input.
    pub fn bytes(&mut self, name: &str, value: &[u8]) -> &mut Self {
        self.0.update(format!("{name} {}\n", value.len()));
        self.0.update(value);
        self.0.update(b"\n");
        self
    }

    /// Adds a named input from its text.
    pub fn text(&mut self, name: &str, value: impl Display) -> &mut Self {
        self.bytes(name, value.to_string().as_bytes())
    }

    /// Adds a file: its name (not its directory, so a moved checkout keys
    /// the same) and its bytes. A file that cannot be read is an error.
    pub fn file(&mut self, path: &Path) -> Result<&mut Self, Error> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        Ok(self.text("file", name).bytes("bytes", &bytes))
    }

    /// The fingerprint, as lowercase hex.
    pub fn finish(&self) -> String {
        format!("{:x}", self.0.clone().finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_named_and_delimited() {
        let one = Fingerprint::new("s").text("a", "bc").finish();
        assert_ne!(one, Fingerprint::new("s").text("ab", "c").finish());
        assert_ne!(one, Fingerprint::new("t").text("a", "bc").finish());
        assert_ne!(
            Fingerprint::new("s").text("a", "b").text("a", "c").finish(),
            Fingerprint::new("s").text("a", "bc").finish()
        );
        assert_eq!(one, Fingerprint::new("s").text("a", "bc").finish());
        assert!(Fingerprint::new("s")
            .file(Path::new("/nonexistent/x"))
            .is_err());
    }
}
