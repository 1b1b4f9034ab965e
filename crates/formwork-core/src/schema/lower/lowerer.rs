//! The [`Lowerer`]'s state: the document and options being compiled, the `$ref` targets
//! lowered so far, lenient-mode warnings, and the budgets every lowering and algebra step
//! counts against (work [`MAX_WORK`], nesting [`MAX_DEPTH`], wall time
//! [`CompileOptions::max_compile_ms`]).
//!
//! Owns the struct, its budgets and [`Lowerer::refuse`]; the methods that lower keywords and
//! compute the set algebra are in `keywords` and `algebra`. Costs: a budget check is a counter
//! increment, plus an `Instant::now` (~25 ns) per schema node and every 64 algebra steps.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::schema::error::{display_pointer, SchemaError};
use crate::schema::ir::Schema;
use crate::schema::options::CompileOptions;
use crate::schema::resolve::Document;

/// Budget on intersection/negation steps per schema, so adversarial `allOf`/`oneOf` nests end
/// in an error instead of exponential time.
pub const MAX_WORK: usize = 200_000;
/// Maximum nesting depth of schema objects (and `$ref` expansions inside one intersection).
pub const MAX_DEPTH: usize = 200;

/// Lowers one document.
#[derive(Debug)]
pub(crate) struct Lowerer<'d> {
    pub(crate) doc: &'d Document,
    pub(crate) opts: &'d CompileOptions,
    /// Lowered `$ref` targets by pointer.
    pub(super) refs: HashMap<String, Schema>,
    pub(super) in_progress: HashSet<String>,
    /// Refusals turned into warnings (lenient mode).
    pub warnings: Vec<SchemaError>,
    work: usize,
    /// Current nesting depth: schema objects being lowered plus `$ref` expansions inside the
    /// algebra, bounded by [`MAX_DEPTH`].
    pub(super) depth: usize,
    /// When the compile started, for [`CompileOptions::max_compile_ms`].
    started: Instant,
}

impl<'d> Lowerer<'d> {
    pub(crate) fn new(doc: &'d Document, opts: &'d CompileOptions) -> Self {
        Lowerer {
            doc,
            opts,
            refs: HashMap::new(),
            in_progress: HashSet::new(),
            warnings: Vec::new(),
            work: 0,
            depth: 0,
            started: Instant::now(),
        }
    }

    /// Fails once the compile has run longer than [`CompileOptions::max_compile_ms`],
    /// naming `ptr`, the schema node being worked on when the budget ran out. Called per
    /// schema node lowered and emitted and per algebra step (an `Instant::now` each, ~25 ns).
    /// (`None`: in an algebra step, which has no single node.)
    pub(crate) fn check_time(&self, ptr: Option<&str>) -> Result<(), SchemaError> {
        let limit = self.opts.max_compile_ms;
        let spent = self.started.elapsed().as_millis();
        if spent > u128::from(limit) {
            let at = match ptr {
                Some(p) => format!("at {}", display_pointer(p)),
                None => "in the schema algebra".to_string(),
            };
            return Err(SchemaError::LimitExceeded {
                what: format!("compile time in ms ({at})"),
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
                given: usize::try_from(spent).unwrap_or(usize::MAX),
            });
        }
        Ok(())
    }

    /// Refuses `keyword` at `ptr`: an error, or (lenient) a warning and `Ok`, after which the
    /// caller skips the keyword.
    pub(crate) fn refuse(
        &mut self,
        keyword: &str,
        ptr: &str,
        detail: impl Into<String>,
    ) -> Result<(), SchemaError> {
        let e = SchemaError::unsupported(keyword, ptr, detail);
        if self.opts.lenient {
            self.warnings.push(e);
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Counts one algebra step against [`MAX_WORK`].
    pub(super) fn tick(&mut self) -> Result<(), SchemaError> {
        self.work += 1;
        if self.work % 64 == 0 {
            self.check_time(None)?;
        }
        if self.work > MAX_WORK {
            return Err(SchemaError::LimitExceeded {
                what: "schema algebra steps".into(),
                limit: MAX_WORK,
                given: self.work,
            });
        }
        Ok(())
    }

    /// Runs `f` one nesting level deeper (a schema object, or a `$ref` expanded by the
    /// algebra); past [`MAX_DEPTH`] levels, fails with a limit error naming `what` instead.
    pub(super) fn deeper<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Self) -> Result<T, SchemaError>,
    ) -> Result<T, SchemaError> {
        self.depth += 1;
        let r = if self.depth > MAX_DEPTH {
            Err(SchemaError::LimitExceeded {
                what: what.into(),
                limit: MAX_DEPTH,
                given: self.depth,
            })
        } else {
            f(self)
        };
        self.depth -= 1;
        r
    }
}
