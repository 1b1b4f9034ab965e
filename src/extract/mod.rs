//! Extraction: a schema and a document in, a JSON value out, one record or a batch.

pub mod batch;
