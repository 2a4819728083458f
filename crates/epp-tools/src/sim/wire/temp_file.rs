//! A file in the temporary directory with a name unique to this process and call, removed on
//! drop: the endpoints file and EndpointPickerConfig that wire mode hands to epp.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary file, removed on drop.
#[derive(Debug)]
pub struct TempFile(PathBuf);

impl TempFile {
    /// Writes `text` to `{tmp}/{prefix}-{pid}-{n}.{ext}`.
    pub fn write(prefix: &str, ext: &str, text: &str) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("{prefix}-{}-{n}.{ext}", std::process::id()));
        std::fs::write(&path, text)?;
        Ok(Self(path))
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_distinct_and_removed_on_drop() {
        let a = TempFile::write("epp-temp-test", "txt", "a").unwrap();
        let b = TempFile::write("epp-temp-test", "txt", "b").unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(std::fs::read_to_string(b.path()).unwrap(), "b");
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
    }
}
