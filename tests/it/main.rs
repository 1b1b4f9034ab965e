//! formwork's integration tests: one target, one module per topic.
mod model_runtime;
