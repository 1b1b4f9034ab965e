//! The batch calls: many matchers' rows filled in one crossing from Python, without the GIL,
//! spread over rayon's threads (one per core; `RAYON_NUM_THREADS` sets it).
//!
//! `fill_bitmasks` fills one row per matcher (a decode step of a batch); `fill_draft_bitmasks`
//! fills `len(draft) + 1` rows per matcher for speculative decoding (the mask before each draft
//! token and after the last: consume, fill, and finally roll back, as vLLM's structured-output
//! manager does one call at a time). Rows must be distinct: two threads never write one row.
//! An engine error in one matcher does not stop the others; the first is raised after all ran.

use std::collections::HashSet;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rayon::prelude::*;

use crate::bitmask::{BitmaskTarget, Rows};
use crate::errors::MatcherError;
use crate::matcher::PyMatcher;

/// The rows each job starts at (default: 0, 1, ...), checked against the target and for
/// overlaps, given `span[i]` rows per job.
fn job_rows(rows: &Rows, given: Option<Vec<usize>>, span: &[usize]) -> PyResult<Vec<usize>> {
    let starts = match given {
        Some(r) if r.len() != span.len() => {
            return Err(PyValueError::new_err(format!(
                "{} rows for {} matchers",
                r.len(),
                span.len()
            )))
        }
        Some(r) => r,
        None => span
            .iter()
            .scan(0, |next, &n| {
                let start = *next;
                *next += n;
                Some(start)
            })
            .collect(),
    };
    let mut used = HashSet::new();
    for (&start, &n) in starts.iter().zip(span) {
        for r in start..start + n {
            rows.check(r)?;
            if !used.insert(r) {
                return Err(PyValueError::new_err(format!(
                    "bitmask row {r} is used twice"
                )));
            }
        }
    }
    Ok(starts)
}

/// The vocabulary width shared by `matchers` (they must all be of one tokenizer width).
fn shared_width(matchers: &[Py<PyMatcher>]) -> PyResult<Option<usize>> {
    let mut width = None;
    for m in matchers {
        let w = m.get().vocab_len();
        match width {
            Some(v) if v != w => {
                return Err(PyValueError::new_err(format!(
                    "matchers of different vocabulary sizes ({v} and {w}) in one bitmask"
                )))
            }
            _ => width = Some(w),
        }
    }
    Ok(width)
}

/// Runs `job(i)` for every job on rayon's threads, without the GIL; the first error raised.
fn run(
    py: Python<'_>,
    jobs: usize,
    job: impl Fn(usize) -> Result<(), String> + Sync + Send,
) -> PyResult<()> {
    let errors: Vec<String> = py.detach(|| {
        (0..jobs)
            .into_par_iter()
            .filter_map(|i| job(i).err())
            .collect()
    });
    match errors.into_iter().next() {
        Some(e) => Err(MatcherError::new_err(e)),
        None => Ok(()),
    }
}

/// Fills the next-token mask of each matcher into its row of `bitmask` (rows `rows[i]`,
/// default `i`), in one call: without the GIL, on several threads.
#[pyfunction]
#[pyo3(signature = (bitmask, matchers, rows=None))]
pub(crate) fn fill_bitmasks(
    py: Python<'_>,
    bitmask: &Bound<'_, PyAny>,
    matchers: Vec<Py<PyMatcher>>,
    rows: Option<Vec<usize>>,
) -> PyResult<()> {
    let Some(width) = shared_width(&matchers)? else {
        return Ok(());
    };
    let target = BitmaskTarget::of(bitmask, width)?;
    let out = target.rows();
    let starts = job_rows(&out, rows, &vec![1; matchers.len()])?;
    run(py, matchers.len(), |i| {
        let m = matchers[i].get();
        m.lock()
            .fill(&out, starts[i])
            .map_err(|e| format!("matcher {i}: {e}"))
    })
}

/// Fills the rows of speculative drafts: for matcher `i` with draft tokens `drafts[i]`, rows
/// `rows[i]` .. `rows[i] + len(drafts[i])` (default: packed one after another) get the mask
/// before each draft token and after the last; each draft token is consumed to reach the next
/// row and all are rolled back at the end, so the matchers end where they started. Rows after
/// a draft token the grammar refuses allow every token.
#[pyfunction]
#[pyo3(signature = (bitmask, matchers, drafts, rows=None))]
pub(crate) fn fill_draft_bitmasks(
    py: Python<'_>,
    bitmask: &Bound<'_, PyAny>,
    matchers: Vec<Py<PyMatcher>>,
    drafts: Vec<Vec<u32>>,
    rows: Option<Vec<usize>>,
) -> PyResult<()> {
    if drafts.len() != matchers.len() {
        return Err(PyValueError::new_err(format!(
            "{} drafts for {} matchers",
            drafts.len(),
            matchers.len()
        )));
    }
    let Some(width) = shared_width(&matchers)? else {
        return Ok(());
    };
    let target = BitmaskTarget::of(bitmask, width)?;
    let out = target.rows();
    let span: Vec<usize> = drafts.iter().map(|d| d.len() + 1).collect();
    let starts = job_rows(&out, rows, &span)?;
    // One matcher twice would consume its drafts on two threads at once (each under the lock,
    // but interleaved with the other's rollback): refuse it.
    let mut seen = HashSet::new();
    for m in &matchers {
        if !seen.insert(m.as_ptr()) {
            return Err(PyValueError::new_err(
                "the same matcher appears twice in one draft fill",
            ));
        }
    }
    run(py, matchers.len(), |i| {
        let m = matchers[i].get();
        m.lock()
            .fill_draft(&out, starts[i], &drafts[i])
            .map_err(|e| format!("matcher {i}: {e}"))
    })
}
