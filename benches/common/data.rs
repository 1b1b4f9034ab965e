//! Where the benches find the shared data sets: `$FORMWORK_DATA`, else `../shared/data` beside
//! the crate, else `/work/shared/data`.

pub fn data_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("FORMWORK_DATA") {
        return d.into();
    }
    let local = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    if local.exists() {
        return local;
    }
    "/work/shared/data".into()
}
