//! Where the benches find the shared data sets: the integration tests' rule
//! (`tests/it/data.rs`: `$FORMWORK_DATA`, else `../shared/data` beside the checkout, else
//! `/work/shared/data`), kept in one place.

#[path = "../../tests/it/data.rs"]
mod shared;

pub use shared::data_dir;
