//! The options of [`compile`](super::compile()): [`CompileOptions`], with its [`Whitespace`]
//! and [`PropertyOrder`] choices.
//!
//! Owns the options' meaning, defaults and JSON/TOML form (unknown fields are errors); every
//! stage of the compiler reads them, none writes them. Plain data, no costs.

use serde::{Deserialize, Serialize};

use super::registry::SchemaRegistry;
use super::resolve::Draft;

/// Whitespace the grammar allows between JSON tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Whitespace {
    /// No whitespace at all (the default): the shortest output, and no way for a model to
    /// loop on blanks.
    Compact,
    /// Spaces, tabs and newlines around punctuation, at most `max_run` bytes per run. The
    /// bound exists because models left free to emit whitespace can loop until max tokens
    /// (reported by users of peer engines).
    Flexible {
        /// Longest whitespace run allowed at one place.
        max_run: u32,
    },
}

/// The order in which an object's listed properties may appear.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PropertyOrder {
    /// Listed properties in the order of `properties` (the default): one text per instance
    /// shape, a grammar linear in the number of properties, and the order a schema's author
    /// chose, which is what generation wants.
    #[default]
    Schema,
    /// Listed properties in any order, each at most once, every required one present (what a
    /// validator accepts, and how MaskBench's instances are written). Exact for any number
    /// of properties: an object is a permutation rule ([`crate::grammar::Permutation`]), two
    /// rules whatever its size, and the parser carries the set of properties written (and
    /// the count, under `minProperties`/`maxProperties`).
    Any,
    /// Listed properties in any order *within a window* of this many schema positions: a
    /// property may come before up to `width - 1` properties listed ahead of it. An object
    /// with at most `width` listed properties is in any order, exactly as under
    /// [`PropertyOrder::Any`] (the same permutation rule); a larger one accepts every order
    /// whose inversions span fewer
    /// than `width` schema positions, with the width narrowed (down to 1, schema order) until
    /// its (n + 1) · 2^(width-1) states fit [`CompileOptions::max_property_subsets`]. Each
    /// property still at most once, every required one present: never an invalid object,
    /// only fewer orders of a large one, and never a limit error. Written `{"window": 8}`.
    Window(u32),
}

/// Options for [`compile`](super::compile()). Written by users in JSON/TOML, so unknown fields are errors.
///
/// # Example
/// ```
/// use formwork_core::schema::{compile, CompileOptions};
/// let opts: CompileOptions = serde_json::from_str(r#"{"no_additional_properties": true}"#).unwrap();
/// let out = compile(&serde_json::json!({"type": "object"}), &opts)?;
/// assert!(out.warnings.is_empty());
/// # Ok::<(), formwork_core::schema::SchemaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompileOptions {
    /// Whitespace between tokens. Default: [`Whitespace::Compact`].
    pub whitespace: Whitespace,
    /// The separator between array items and object members. Default `","` (in flexible
    /// mode its surrounding spaces count as whitespace).
    pub item_separator: String,
    /// The separator between a key and its value. Default `":"`.
    pub key_separator: String,
    /// Treat an absent `additionalProperties` as `false`. Default `false` (what the
    /// specification says); extraction users usually want `true`.
    pub no_additional_properties: bool,
    /// OpenAI-style strict mode: every listed property is required and an absent
    /// `additionalProperties` is `false`. Default `false`.
    pub strict: bool,
    /// Turn refusals of unsupported keywords into warnings (the keyword is then not
    /// enforced). Default `false`: never silently drop a keyword.
    pub lenient: bool,
    /// Compile a `oneOf` whose branches are not provably disjoint as `anyOf` (accepting values
    /// matching several branches). Default `false`.
    pub coerce_one_of: bool,
    /// Enforce the formats this compiler knows (as MaskBench's validators do), in every
    /// draft. Default `true`: a validator configured to assert formats, which drafts 4–7
    /// allow and 2019-09/2020-12 allow as an option (their default is annotation); `false`
    /// treats every `format` as the annotation those drafts say it is by default. An
    /// unknown format is no constraint either way (what validators do with formats they do
    /// not know), unless [`strict_format`](Self::strict_format).
    pub assert_format: bool,
    /// Refuse a schema with a `format` this compiler does not know, as an implementation of
    /// draft 2020-12's format-assertion vocabulary must, instead of ignoring it. Default
    /// `false`. (Only with `assert_format`.)
    pub strict_format: bool,
    /// The draft for documents without `$schema`. Default 2020-12.
    #[serde(with = "draft_serde")]
    pub default_draft: Draft,
    /// Largest grammar (in symbols, see [`Grammar::size`]) accepted. Default 2,000,000.
    /// Checked as the grammar is emitted, after each schema node: the compile stops there,
    /// with a [`SchemaError::LimitExceeded`] naming the node to blame.
    ///
    /// [`Grammar::size`]: crate::grammar::Grammar::size
    /// [`SchemaError::LimitExceeded`]: super::SchemaError::LimitExceeded
    pub max_grammar_size: usize,
    /// The order of listed properties. Default [`PropertyOrder::Schema`].
    pub property_order: PropertyOrder,
    /// The longest a compile may run, in milliseconds, before it stops with a
    /// [`SchemaError::LimitExceeded`] naming `compile time` and the schema node it was at.
    /// Default 10,000: a server compiles strangers' schemas on its request path; five times
    /// issue 22's bound on the slowest real schema (2 s), so it stops only schemas made to
    /// explode. Checked per schema node lowered or emitted and every 64 algebra steps.
    ///
    /// [`SchemaError::LimitExceeded`]: super::SchemaError::LimitExceeded
    pub max_compile_ms: u64,
    /// Under [`PropertyOrder::Window`], the most states one object's window may need:
    /// (n + 1) · 2^(width-1) for n listed properties (times the `maxProperties` count states,
    /// if any); the width narrows until they fit. Default 4,096.
    pub max_property_subsets: usize,
    /// Documents the schema's remote `$ref`s may name (never fetched: a reference to any
    /// other is [`SchemaError::RemoteRef`]). Not read from JSON/TOML; built by the caller
    /// (`formwork compile/extract --schema-dir DIR`).
    ///
    /// [`SchemaError::RemoteRef`]: super::SchemaError::RemoteRef
    #[serde(skip)]
    pub registry: SchemaRegistry,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            whitespace: Whitespace::Compact,
            item_separator: ",".to_string(),
            key_separator: ":".to_string(),
            no_additional_properties: false,
            strict: false,
            lenient: false,
            coerce_one_of: false,
            assert_format: true,
            strict_format: false,
            default_draft: Draft::Draft2020,
            max_grammar_size: 2_000_000,
            property_order: PropertyOrder::Schema,
            max_compile_ms: 10_000,
            max_property_subsets: 4096,
            registry: SchemaRegistry::default(),
        }
    }
}

mod draft_serde {
    use super::Draft;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Draft, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match d {
            Draft::Draft4 => "draft4",
            Draft::Draft6 => "draft6",
            Draft::Draft7 => "draft7",
            Draft::Draft2019 => "2019-09",
            Draft::Draft2020 => "2020-12",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Draft, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "draft4" | "4" => Ok(Draft::Draft4),
            "draft6" | "6" => Ok(Draft::Draft6),
            "draft7" | "7" => Ok(Draft::Draft7),
            "2019-09" => Ok(Draft::Draft2019),
            "2020-12" => Ok(Draft::Draft2020),
            other => Err(serde::de::Error::custom(format!("unknown draft `{other}`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_reject_unknown_fields() {
        let e = serde_json::from_str::<CompileOptions>(r#"{"lenientt": true}"#);
        assert!(e.is_err());
        let o: CompileOptions = serde_json::from_str(
            r#"{"whitespace": {"flexible": {"max_run": 4}}, "default_draft": "draft7"}"#,
        )
        .unwrap();
        assert_eq!(o.whitespace, Whitespace::Flexible { max_run: 4 });
        assert_eq!(o.default_draft, Draft::Draft7);
    }
}
