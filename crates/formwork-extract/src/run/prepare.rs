//! The constraint compiler: [`Prepared`], a [`Constraint`] compiled once for a run (schema
//! compiled with grounded placeholders, tools composed, validator built, prompt pieces ready),
//! and what is built from it per document: the grammar with the document's grounded fields
//! ([`Prepared::grammar_for`]), a fresh matcher of it ([`document_matcher`]) and the user
//! message ([`user_message`]).
//!
//! Does not own reading outputs ([`judge`](super::judge)) or decoding.
//!
//! Cost: compiling the schema or tools once per run; per document with grounded fields, the
//! document's substring automata (one shared by the fields without constraints of their own,
//! one per other field) and one grammar compile against the shared [`TokEnv`].
//!
//! May use (within `run`): `config`.

use std::sync::Arc;

use serde_json::Value;

use super::config::{Constraint, ExtractConfig, GroundedSpans, Mode};
use crate::compose::{call_rule, import, refusal_rule, text_rule};
use crate::grounded::{mark_grounded, placeholder_index, GroundedDoc, GroundedField};
use crate::prompt::{order_like_schema, Answer, Example, PromptParts, PromptTemplate};
use crate::tools::{self, Tool, ToolChoice};
use crate::validate::SchemaValidator;
use crate::ExtractError;
use formwork_core::grammar::regex::grammar_from_regex;
use formwork_core::grammar::{Grammar, GrammarBuilder, Symbol};
use formwork_core::matcher::{CompiledGrammar, Matcher};
use formwork_core::schema::{CompileOptions, PropertyOrder};
use formwork_core::toktrie::TokEnv;

/// What the output is read as.
#[derive(Debug)]
pub(super) enum Kind {
    /// JSON validated against a schema; grounded pointers into the original schema.
    Schema {
        validator: SchemaValidator,
        grounded: Vec<String>,
    },
    /// Any JSON.
    Json,
    /// Text accepted by a grammar.
    Text,
    /// A tool call, or text with `auto`.
    Tools { allowed: Vec<Tool>, auto: bool },
}

/// A constraint prepared once for a run: the compiled grammar (with grounded placeholders),
/// the validator, the prompt pieces.
#[derive(Debug)]
pub struct Prepared {
    pub(super) kind: Kind,
    /// The grammar before refusal / grounded composition (constrained mode only).
    pub(super) base: Option<Grammar>,
    /// The grounded fields' own constraints, by placeholder number.
    grounded_fields: Vec<GroundedField>,
    pub(super) grounded_spans: GroundedSpans,
    pub(super) allow_refusal: bool,
    prompt_schema: Option<String>,
    prompt_keys: Option<String>,
    prompt_tools: Option<String>,
    /// The regex of a regex constraint, shown in the prompt.
    prompt_regex: Option<String>,
    pub(super) examples: Vec<Example>,
}

impl Prepared {
    /// Compiles the constraint. Errors are the user's: bad schema (with JSON pointers), bad
    /// tools, bad grounded markers.
    pub fn new(constraint: &Constraint, cfg: &ExtractConfig) -> Result<Prepared, ExtractError> {
        let constrained = cfg.mode == Mode::Constrained;
        if cfg.think.is_some() && !constrained {
            return Err(ExtractError::Config(
                "thinking before the answer (think) needs the constrained mode: the prompt \
                 and retry baselines decode free text already"
                    .into(),
            ));
        }
        let mut prompt_schema = None;
        let mut prompt_keys = None;
        let mut prompt_tools = None;
        let mut prompt_regex = None;
        let mut grounded_fields = Vec::new();
        let (kind, base) = match constraint {
            Constraint::Schema(schema) => {
                let validator = SchemaValidator::new(schema)?;
                let marked = mark_grounded(schema, &cfg.grounded)?;
                grounded_fields = marked.fields;
                let base = if constrained {
                    Some(formwork_core::schema::compile(&marked.schema, &cfg.compile)?.grammar)
                } else {
                    None
                };
                prompt_schema = Some(schema_for_prompt(schema));
                prompt_keys = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().map(String::as_str).collect::<Vec<_>>().join(", "));
                (
                    Kind::Schema {
                        validator,
                        grounded: marked.pointers,
                    },
                    base,
                )
            }
            Constraint::Json => {
                let base = if constrained {
                    Some(
                        formwork_core::schema::compile(&serde_json::json!({}), &cfg.compile)?
                            .grammar,
                    )
                } else {
                    None
                };
                (Kind::Json, base)
            }
            // Whole-output semantics: `^…$` anchors are redundant and dropped, other
            // look-arounds and the empty match are handled or refused by the regex front end.
            Constraint::Regex(re) => {
                prompt_regex = Some(re.clone());
                (Kind::Text, Some(grammar_from_regex(re)?))
            }
            Constraint::Grammar(g) => (Kind::Text, Some(g.clone())),
            Constraint::Tools { tools, choice } => {
                let allowed: Vec<Tool> = tools::allowed(tools, choice)?
                    .into_iter()
                    .cloned()
                    .collect();
                let auto = *choice == ToolChoice::Auto;
                prompt_tools = Some(tools::describe(&allowed.iter().collect::<Vec<_>>()));
                let base = if constrained {
                    let mut b = GrammarBuilder::new();
                    let mut alts = Vec::new();
                    // A function takes the arguments it declares: an absent
                    // `additionalProperties` means none other (as in OpenAI's strict mode);
                    // without it a small model fills `arguments` with a copy of the schema.
                    let opts = CompileOptions {
                        no_additional_properties: true,
                        ..cfg.compile.clone()
                    };
                    for (i, t) in allowed.iter().enumerate() {
                        let g = formwork_core::schema::compile(&t.parameters, &opts)?.grammar;
                        let args = import(&mut b, &g, &format!("tool{i}/"), |_, _| None);
                        alts.push(vec![Symbol::Rule(call_rule(&mut b, &t.name, args))]);
                    }
                    if auto {
                        alts.push(vec![Symbol::Rule(text_rule(&mut b))]);
                    }
                    let top = b.define("tools", alts);
                    Some(b.build(top)?)
                } else {
                    None
                };
                (Kind::Tools { allowed, auto }, base)
            }
        };
        let examples = cfg
            .examples
            .iter()
            .map(|(document, answer)| Example {
                document: document.clone(),
                // Shown in the order the decoder will emit: the schema's, unless the grammar
                // accepts other orders, when the example's own order (a SNIPS answer's is the
                // order of the spans in the request) is the better lesson.
                answer: match constraint {
                    Constraint::Schema(schema)
                        if cfg.compile.property_order == PropertyOrder::Schema =>
                    {
                        order_like_schema(answer, schema)
                    }
                    _ => answer.to_string(),
                },
            })
            .collect();
        Ok(Prepared {
            kind,
            base,
            grounded_fields,
            grounded_spans: cfg.grounded_spans,
            allow_refusal: cfg.allow_refusal,
            prompt_schema,
            prompt_keys,
            prompt_tools,
            prompt_regex,
            examples,
        })
    }

    /// Whether the grammar depends on the document (grounded fields).
    pub fn per_document(&self) -> bool {
        !self.grounded_fields.is_empty()
    }

    /// The grammar to decode `document` under (constrained mode), or `None` in the baselines.
    ///
    /// # Errors
    /// [`ExtractError::Grounded`] naming a grounded field whose quotes in this document are
    /// over the product budget (see [`GroundedDoc::add_field`]).
    pub fn grammar_for(&self, document: &str) -> Result<Option<Grammar>, ExtractError> {
        let doc = self.per_document().then(|| GroundedDoc::new(document));
        self.grammar_with(doc.as_ref())
    }

    /// [`grammar_for`](Self::grammar_for) with the document already indexed (`None` when
    /// there are no grounded fields).
    fn grammar_with(&self, doc: Option<&GroundedDoc>) -> Result<Option<Grammar>, ExtractError> {
        let Some(base) = &self.base else {
            return Ok(None);
        };
        if !self.per_document() && !self.allow_refusal {
            return Ok(Some(base.clone()));
        }
        let mut b = GrammarBuilder::new();
        // Fields without constraints of their own share one rule; each other field gets the
        // product of the document with its constraints.
        let mut plain = None;
        let mut own: std::collections::HashMap<usize, Symbol> = Default::default();
        let mut unsatisfiable: Vec<&GroundedField> = Vec::new();
        let mut failed = None;
        let mut replaced = 0;
        let main = import(&mut b, base, "main/", |b, id| {
            let lx = base.lexeme(id);
            let n = placeholder_index(&lx.name).or_else(|| placeholder_index(lx.regex()))?;
            let doc = doc?;
            replaced += 1;
            let Some(field) = self.grounded_fields.get(n) else {
                failed.get_or_insert(ExtractError::Grounded {
                    pointer: "/".into(),
                    message: format!("internal: placeholder {n} has no grounded field"),
                });
                return None;
            };
            if field.is_plain() {
                return Some(Symbol::Rule(
                    *plain.get_or_insert_with(|| doc.add_to(b, "grounded/")),
                ));
            }
            if let Some(&s) = own.get(&n) {
                return Some(s);
            }
            match doc.add_field(b, &format!("grounded{n}/"), field) {
                Ok(r) => {
                    if !r.satisfiable {
                        unsatisfiable.push(field);
                    }
                    Some(*own.entry(n).or_insert(Symbol::Rule(r.rule)))
                }
                Err(e) => {
                    failed.get_or_insert(e);
                    None
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if self.per_document() && replaced == 0 {
            return Err(ExtractError::Grounded {
                pointer: "/".into(),
                message: "the compiled schema lost the grounded fields' placeholders".into(),
            });
        }
        let mut alts = vec![vec![Symbol::Rule(main)]];
        if self.allow_refusal {
            alts.push(vec![Symbol::Rule(refusal_rule(&mut b))]);
        }
        let top = b.define("extract", alts);
        match b.build(top) {
            // Name the field that emptied the language, not the grammar's top rule.
            Err(formwork_core::grammar::GrammarError::EmptyLanguage { .. })
                if !unsatisfiable.is_empty() =>
            {
                let f = unsatisfiable[0];
                Err(ExtractError::Grounded {
                    pointer: f.pointer().to_string(),
                    message: format!(
                        "no quote of the document satisfies this field's {}, and the schema \
                         requires a value",
                        f.keywords().join(", ")
                    ),
                })
            }
            built => Ok(Some(built?)),
        }
    }

    /// What the answer is, for the prompt's wording.
    pub(super) fn answer(&self) -> Answer<'_> {
        match (&self.kind, &self.prompt_regex) {
            (Kind::Text, Some(re)) => Answer::Regex(re),
            (Kind::Text, None) => Answer::Grammar,
            _ => Answer::Json,
        }
    }

    /// The user message for `document` (what `extract` sends; `formwork serve`'s playground
    /// sends the same).
    pub fn user_message(&self, template: &PromptTemplate, document: &str) -> String {
        template.render(&PromptParts {
            schema: self.prompt_schema.as_deref(),
            keys: self.prompt_keys.as_deref(),
            tools: self.prompt_tools.as_deref(),
            answer: self.answer(),
            allow_refusal: self.allow_refusal,
            examples: &self.examples,
            document,
        })
    }
}

/// The schema as shown in the prompt: compact, without formwork's own `x-` markers.
fn schema_for_prompt(schema: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| k.as_str() != "x-grounded")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(xs) => Value::Array(xs.iter().map(strip).collect()),
            v => v.clone(),
        }
    }
    strip(schema).to_string()
}

/// A fresh matcher for `document` (its grounded fields' automata built from it) and whether
/// grounded values stay whole-word spans (see [`RecordResult::grounded_substrings`]).
///
/// [`RecordResult::grounded_substrings`]: crate::batch::RecordResult::grounded_substrings
pub(super) fn document_matcher(
    prepared: &Prepared,
    env: &TokEnv,
    cfg: &ExtractConfig,
    document: &str,
) -> Result<(Matcher, bool), ExtractError> {
    let doc = prepared.per_document().then(|| GroundedDoc::new(document));
    let whole_words = doc.as_ref().is_none_or(GroundedDoc::whole_words);
    let g = prepared
        .grammar_with(doc.as_ref())?
        .expect("constrained mode has a grammar");
    let cg = CompiledGrammar::with_env(g, env, cfg.limits)?;
    Ok((Matcher::new(Arc::new(cg))?, whole_words))
}

/// The user message for `document`: the template filled, and with thinking first the
/// instruction naming the trigger at its end (one-at-a-time and batched runs alike).
pub(super) fn user_message(prepared: &Prepared, cfg: &ExtractConfig, document: &str) -> String {
    let mut user = prepared.user_message(&cfg.template, document);
    if let Some(think) = &cfg.think {
        user.push_str(&crate::prompt::think_instruction(
            &think.trigger,
            prepared.answer(),
        ));
    }
    user
}
