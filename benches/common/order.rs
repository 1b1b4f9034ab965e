//! The property order a bench compiles with: `FORMWORK_BENCH_ORDER` (`schema`, `any` or
//! `window:N`), else the bench's own default — one parser for the benches that take it.

use formwork::schema::PropertyOrder;

/// `FORMWORK_BENCH_ORDER`'s property order, or `default` when it is unset.
///
/// # Panics
/// On any other value (a bench run with a typo should stop, not measure the default).
pub fn from_env(default: PropertyOrder) -> PropertyOrder {
    match std::env::var("FORMWORK_BENCH_ORDER").as_deref() {
        Ok("any") => PropertyOrder::Any,
        Ok("schema") => PropertyOrder::Schema,
        Ok(w) if w.starts_with("window:") => {
            PropertyOrder::Window(w["window:".len()..].parse().expect("window:N"))
        }
        Ok(other) => {
            panic!("FORMWORK_BENCH_ORDER must be `schema`, `any` or `window:N`, not {other:?}")
        }
        Err(_) => default,
    }
}
