//! Bitmask rows in caller memory: the layout vLLM, SGLang, xgrammar and llguidance share.
//!
//! A row is `words_per_row` int32 words; token `i` is bit `i % 32` of word `i / 32`, 1 = allowed,
//! and words past `ceil(vocab / 32)` (a row wider than the vocabulary) are zeroed. Rows live in
//! any writable C-contiguous buffer (buffer protocol: a numpy int32 array, a `bytearray`, an
//! `array.array('i')`), a CPU torch int32 tensor (through `data_ptr()`: torch implements no
//! buffer protocol), or raw memory given as an address and a size. A 2-D int32 buffer gives
//! its row width; anything else has rows of exactly `ceil(vocab / 32)` words.
//!
//! Owns: finding the rows of a target ([`BitmaskTarget`]) and writing one mask into one row
//! ([`Rows::write`]). Writes are unaligned-safe (a `bytearray` has no alignment guarantee).
//! Cost: one pass over the row, `vocab / 64` word copies.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use formwork_core::TokenSet;

/// Rows of int32 words at `ptr`: `rows` of `words_per_row` each. Threads write disjoint rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rows {
    ptr: *mut u8,
    rows: usize,
    words_per_row: usize,
}

// SAFETY: `Rows` is a view of memory the caller keeps alive (the buffer export in
// `BitmaskTarget`, or the caller's promise for raw pointers) for the duration of a fill; the
// fills write each row from one thread only (the batch calls refuse a row used twice).
unsafe impl Send for Rows {}
unsafe impl Sync for Rows {}

impl Rows {
    /// Rows of `words_per_row` words over `len_bytes` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len_bytes` must be writable memory that outlives every use of the result.
    pub(crate) unsafe fn new(
        ptr: *mut u8,
        len_bytes: usize,
        words_per_row: usize,
        vocab_len: usize,
    ) -> Result<Self, String> {
        let need = vocab_len.div_ceil(32);
        if words_per_row < need {
            return Err(format!(
                "bitmask rows of {words_per_row} int32 words are too narrow for a vocabulary of \
                 {vocab_len} tokens (need {need})"
            ));
        }
        if ptr.is_null() && len_bytes > 0 {
            return Err("null bitmask pointer".into());
        }
        Ok(Self {
            ptr,
            rows: len_bytes / 4 / words_per_row,
            words_per_row,
        })
    }

    /// The number of rows.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Whether `row` is a row of the target.
    pub(crate) fn contains(&self, row: usize) -> bool {
        row < self.rows
    }

    /// An `IndexError` unless `row` is a row of the target.
    pub(crate) fn check(&self, row: usize) -> PyResult<()> {
        if self.contains(row) {
            Ok(())
        } else {
            Err(PyIndexError::new_err(format!(
                "bitmask row {row} is outside the {} rows of the buffer",
                self.len()
            )))
        }
    }

    /// Writes `mask` into `row` (checked by [`check`](Self::check) before).
    pub(crate) fn write(&self, row: usize, mask: &TokenSet) {
        let words = mask.as_words();
        let need = mask.universe_len().div_ceil(32);
        self.write_words(row, need, |i| {
            let w = words[i / 2];
            if i % 2 == 0 {
                w as u32
            } else {
                (w >> 32) as u32
            }
        });
    }

    /// Writes a row allowing every token below `vocab_len` (what a terminated sequence gets,
    /// as vLLM gives it).
    pub(crate) fn write_all(&self, row: usize, vocab_len: usize) {
        let need = vocab_len.div_ceil(32);
        let rem = vocab_len % 32;
        self.write_words(row, need, |i| {
            if i + 1 == need && rem != 0 {
                (1u32 << rem) - 1
            } else {
                u32::MAX
            }
        });
    }

    fn write_words(&self, row: usize, need: usize, word: impl Fn(usize) -> u32) {
        assert!(row < self.rows, "row {row} of {}", self.rows);
        // SAFETY: the row lies inside the memory `new` was given (checked just above), and
        // `write_unaligned` needs no alignment.
        unsafe {
            let base = self.ptr.add(row * self.words_per_row * 4).cast::<u32>();
            for i in 0..self.words_per_row {
                let w = if i < need { word(i) } else { 0 };
                base.add(i).write_unaligned(w);
            }
        }
    }
}

/// The rows of a Python object, with the buffer export that keeps them alive.
#[derive(Debug)]
pub(crate) struct BitmaskTarget {
    rows: Rows,
    _export: Option<PyUntypedBuffer>,
}

impl BitmaskTarget {
    /// The rows of `obj` for a vocabulary of `vocab_len` tokens: a writable buffer, or a CPU
    /// int32 torch tensor.
    pub(crate) fn of(obj: &Bound<'_, PyAny>, vocab_len: usize) -> PyResult<Self> {
        // The buffer protocol first: it is what numpy arrays and bytearrays answer, and asking
        // a numpy array for torch's attributes first cost a failed attribute lookup (an
        // exception raised and cleared) on every fill, a quarter of a cached mask's time.
        let buf = match PyUntypedBuffer::get(obj) {
            Ok(buf) => buf,
            Err(_) if obj.hasattr("data_ptr")? && obj.hasattr("is_contiguous")? => {
                return Self::tensor(obj, vocab_len);
            }
            Err(e) => {
                return Err(PyTypeError::new_err(format!(
                    "the bitmask must be a writable int32 buffer (numpy array, bytearray, \
                     array.array) or a CPU int32 torch tensor: {e}"
                )))
            }
        };
        if buf.readonly() {
            return Err(PyTypeError::new_err("the bitmask buffer is read-only"));
        }
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "the bitmask buffer must be C-contiguous",
            ));
        }
        let format = buf.format().to_string_lossy().into_owned();
        let code = format.trim_start_matches(['@', '=', '<']);
        let words_per_row = match (buf.item_size(), code) {
            (4, "i" | "I" | "l" | "L") if buf.dimensions() >= 2 => {
                buf.shape()[buf.dimensions() - 1]
            }
            (4, "i" | "I" | "l" | "L") | (1, "B" | "b" | "c") => vocab_len.div_ceil(32),
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "the bitmask must hold int32 words (or bytes), not format {format:?} of {} \
                     bytes per item",
                    buf.item_size()
                )))
            }
        };
        let ptr = buf.buf_ptr().cast::<u8>();
        // SAFETY: the export (kept in `_export`) pins the writable memory until dropped.
        let rows = unsafe { Rows::new(ptr, buf.len_bytes(), words_per_row, vocab_len) }
            .map_err(PyValueError::new_err)?;
        Ok(Self {
            rows,
            _export: Some(buf),
        })
    }

    /// A torch tensor: int32, contiguous, on the CPU; its last dimension is the row width.
    fn tensor(t: &Bound<'_, PyAny>, vocab_len: usize) -> PyResult<Self> {
        let dtype = t.getattr("dtype")?.str()?.to_string();
        if dtype != "torch.int32" {
            return Err(PyTypeError::new_err(format!(
                "the bitmask tensor must be torch.int32, not {dtype}"
            )));
        }
        let device = t.getattr("device")?.getattr("type")?.str()?.to_string();
        if device != "cpu" {
            return Err(PyValueError::new_err(format!(
                "the bitmask tensor must be on the CPU, not {device} (fill a CPU tensor and copy it)"
            )));
        }
        if !t.call_method0("is_contiguous")?.extract::<bool>()? {
            return Err(PyValueError::new_err(
                "the bitmask tensor must be contiguous",
            ));
        }
        let shape: Vec<usize> = t.getattr("shape")?.extract()?;
        let numel: usize = t.call_method0("numel")?.extract()?;
        let words_per_row = match shape.len() {
            0 | 1 => vocab_len.div_ceil(32),
            n => shape[n - 1],
        };
        let ptr: usize = t.call_method0("data_ptr")?.extract()?;
        // SAFETY: a contiguous CPU int32 tensor owns `numel * 4` bytes at `data_ptr()`; the
        // caller keeps the tensor alive for the call (it is borrowed from Python arguments).
        let rows = unsafe { Rows::new(ptr as *mut u8, numel * 4, words_per_row, vocab_len) }
            .map_err(PyValueError::new_err)?;
        Ok(Self {
            rows,
            _export: None,
        })
    }

    /// Raw memory: `size_bytes` bytes at address `ptr`, rows of `words_per_row` int32 words
    /// (default `ceil(vocab_len / 32)`).
    ///
    /// # Safety
    /// The memory must be writable and outlive the call that uses the target.
    pub(crate) unsafe fn raw(
        ptr: usize,
        size_bytes: usize,
        words_per_row: Option<usize>,
        vocab_len: usize,
    ) -> PyResult<Self> {
        let wpr = words_per_row.unwrap_or(vocab_len.div_ceil(32));
        // SAFETY: the caller's promise, passed on.
        let rows = unsafe { Rows::new(ptr as *mut u8, size_bytes, wpr, vocab_len) }
            .map_err(PyValueError::new_err)?;
        Ok(Self {
            rows,
            _export: None,
        })
    }

    /// The rows.
    pub(crate) fn rows(&self) -> Rows {
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_core::TokenId;

    /// Token i must land on bit i % 32 of int32 word i / 32, whatever the u64 packing inside
    /// `TokenSet`; words past the vocabulary are zeroed and a row wider than needed keeps its
    /// neighbours intact.
    #[test]
    fn rows_use_the_shared_int32_layout() {
        let vocab = 70; // 3 words, the last partly used
        let mut mask = TokenSet::new(vocab);
        for t in [0, 31, 32, 63, 64, 69] {
            mask.insert(TokenId(t));
        }
        let mut mem = vec![0xAAAA_AAAAu32; 2 * 4];
        let rows = unsafe { Rows::new(mem.as_mut_ptr().cast(), mem.len() * 4, 4, vocab) }.unwrap();
        assert_eq!(rows.len(), 2);
        rows.write(1, &mask);
        assert_eq!(&mem[..4], &[0xAAAA_AAAA; 4], "row 0 untouched");
        assert_eq!(&mem[4..], &[1 | 1 << 31, 1 | 1 << 31, 1 | 1 << 5, 0]);
        rows.write_all(0, vocab);
        assert_eq!(&mem[..4], &[u32::MAX, u32::MAX, 0b11_1111, 0]);
        assert!(rows.contains(1) && !rows.contains(2));
    }

    #[test]
    fn narrow_rows_are_refused() {
        let mut mem = [0u32; 2];
        let e = unsafe { Rows::new(mem.as_mut_ptr().cast(), 8, 2, 65) }.unwrap_err();
        assert!(e.contains("need 3"), "{e}");
    }
}
