//! Where the tests find the shared data sets (read in place, never copied): `$FORMWORK_DATA`,
//! else `../shared/data` beside the checkout (as CI has it), else `/work/shared/data`.

use std::path::PathBuf;

/// The shared data directory (which may not exist: callers that need it fail with its path).
pub fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FORMWORK_DATA") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    if local.exists() {
        return local;
    }
    PathBuf::from("/work/shared/data")
}
