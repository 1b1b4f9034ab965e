//! Lowering: JSON Schema (a [`Document`](super::resolve::Document)) → the normalized
//! [`Schema`](super::ir::Schema) IR, with the set algebra that makes combinators exact.
//!
//! Owns keyword semantics (`keywords`), the set algebra over the IR that `allOf`, `not`,
//! `if`/`then`/`else`, `oneOf` and `enum` filtering need (`algebra`: intersection, negation,
//! disjointness, membership), and the state both share (`lowerer`: the `$ref` targets lowered
//! so far, the work, depth and time budgets, lenient-mode warnings). Does not build grammar
//! rules (`emit`). Lowering and the algebra are one unit split by concern: lowering a
//! combinator calls the algebra, and the algebra lowers a `$ref` target on demand
//! ([`Lowerer::ref_schema`]), both as methods of the one [`Lowerer`]. Costs: each `$ref` target
//! is lowered once; intersections that must look through `$ref` re-lower nothing but copy the
//! target's IR, and every algebra step counts against [`MAX_WORK`](lowerer::MAX_WORK).
//!
//! Files: `lowerer` → `algebra` → `keywords`.

mod algebra;
mod keywords;
mod lowerer;

pub(crate) use lowerer::Lowerer;
