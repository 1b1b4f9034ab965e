//! A registry model's vocabulary for the benches that mask over real tokenizers (`mask`,
//! `compile`, `schema_mask`, `schema_suite`): fetched and verified on first use, like the
//! tests' models.

use std::sync::Arc;

use formwork::toktrie::Vocab;

/// The tokenizer of registry model `name` (fetched on first use).
pub fn registry_vocab(name: &str) -> Arc<dyn Vocab> {
    let registry = formwork::model::registry::Registry::builtin().expect("registry");
    let entry = registry.get(name).expect("a registry model name");
    let path = formwork::model::fetch::ensure(entry, &formwork::model::fetch::FetchConfig::new())
        .expect("model fetched");
    Arc::new(formwork::model::tokenizer::GgufTokenizer::for_model(entry, &path).expect("tokenizer"))
}
