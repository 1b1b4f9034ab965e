//! A checked pre-parse of a GGUF file's header, run before candle's reader sees the file.
//!
//! Owns: deciding whether a file's header (magic, version, counts, metadata, tensor index) is
//! well formed and whether everything it declares fits in the file, **before anything is
//! allocated from a count or a length in it**. A GGUF file may come from anywhere (any local
//! path is accepted as a model), and candle's `gguf_file::Content::read` builds its maps
//! straight from the header: it bounds each count by the bytes left, but it panics on a
//! `general.alignment` of 0, keeps the last of two tensors or keys with the same name, accepts
//! tensors that overlap or are misaligned, and turns every one-byte array element into a 32-byte
//! `Value` (so a crafted file can ask for 32 times its size). Does not own reading values or
//! tensor data (candle does, after this check passes) or what the metadata means (the runtime
//! and the tokenizer).
//!
//! # What is refused
//! Every problem is a [`HeaderProblem`] naming the byte offset of the field at fault:
//! - a bad magic (only little-endian `GGUF` is read) or a version other than 1, 2 or 3;
//! - a tensor or key-value count, string length or array length that cannot fit in the bytes
//!   left in the file (every element has a known minimum size on disk);
//! - a key that is empty, longer than 65,535 bytes, not UTF-8, or repeated; a tensor name that is
//!   empty, longer than 64 bytes, not UTF-8, or repeated (names are compared as candle stores
//!   them: trailing NUL bytes removed);
//! - an unknown value type, a bool byte other than 0 or 1, arrays nested deeper than
//!   [`MAX_ARRAY_DEPTH`];
//! - `general.alignment` that is not an integer, or not a power of two;
//! - a tensor with no dimensions or more than 4, an unknown dtype or one candle cannot read
//!   (Q8_1, Q8K: its header reader knows them, its tensor reader does not), a first dimension
//!   that is not a whole number of its dtype's blocks, an element count or byte size that
//!   overflows, an offset that is not a multiple of the alignment, data past the end of the
//!   file, or data overlapping another tensor's;
//! - a header whose in-memory form would exceed [`MAX_HEADER_MEMORY`] bytes.
//!
//! # Costs
//! One pass over the header through a buffered reader, skipping value strings and fixed-size
//! arrays without reading them: a few milliseconds for Gemma 3's 262k-token vocabulary. Memory:
//! the keys and tensor names (to find repeats) and one entry per tensor, all bounded by the
//! header's size.
//!
//! May use: `error`.

use std::collections::HashSet;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::GgmlDType;

use crate::error::{candle_message, ModelError};

/// The most memory a header may need once read (candle's maps, values and strings), in bytes.
/// Default 1 GiB: the three registry models need 1–40 MB (Gemma 3's 262k tokens, scores and
/// types are ~800k values).
pub const MAX_HEADER_MEMORY: u64 = 1 << 30;

/// The deepest nesting of arrays inside a metadata value. The GGUF format allows arrays of
/// arrays; no known file nests at all, and candle reads nested values recursively.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Longest metadata key, per the GGUF specification.
const MAX_KEY_LEN: u64 = 65_535;

/// Longest tensor name, per the GGUF specification (ggml's `GGML_MAX_NAME`).
const MAX_TENSOR_NAME_LEN: u64 = 64;

/// Most dimensions of one tensor (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// The alignment of tensor data when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;

/// What is wrong with a header, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderProblem {
    /// Byte offset in the file of the field at fault.
    pub offset: u64,
    /// What is wrong with it.
    pub what: String,
}

impl std::fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at byte {})", self.what, self.offset)
    }
}

impl std::error::Error for HeaderProblem {}

/// What a checked header holds (for diagnostics and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderSummary {
    /// The GGUF version (1, 2 or 3).
    pub version: u32,
    /// Number of tensors in the index.
    pub tensor_count: u64,
    /// Number of metadata key-value pairs.
    pub kv_count: u64,
    /// Where the tensor data starts (the header's end rounded up to the alignment).
    pub data_offset: u64,
    /// The tensor data alignment (`general.alignment`, else 32).
    pub alignment: u64,
    /// Estimated bytes candle's reader allocates for the header.
    pub memory: u64,
}

/// Checks the header of the GGUF file at `path`.
///
/// # Errors
/// [`ModelError::Io`] if the file cannot be opened or read, [`ModelError::InvalidGguf`] naming
/// the byte offset and the problem otherwise.
pub fn check_file(path: &Path) -> Result<HeaderSummary, ModelError> {
    let file = std::fs::File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| ModelError::io("read", path, e))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 16, file);
    check_header(&mut reader, len).map_err(|p| invalid(path, &p))
}

/// The header's bytes (everything before the tensor data), read from the start of `reader`
/// in one go, for candle's `Content::read` to parse from memory: it asks its reader for the
/// stream position before every string, which on a file is an `lseek` system call each —
/// about 200,000 for a 49k-token vocabulary's tokens and merges, read twice (model and
/// tokenizer). `summary` is [`check_header`]'s for the same file.
///
/// # Errors
/// The read's I/O error.
pub fn header_bytes<R: Read + Seek>(
    reader: &mut BufReader<R>,
    summary: &HeaderSummary,
) -> std::io::Result<Vec<u8>> {
    reader.rewind()?;
    let mut bytes = Vec::with_capacity(usize::try_from(summary.data_offset).unwrap_or(0));
    reader.take(summary.data_offset).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Checks the header of the GGUF file open in `reader` (`file_len` bytes, at `path`), then
/// reads it with candle from memory: the one way the runtime and the tokenizer read a header.
///
/// # Errors
/// [`ModelError::InvalidGguf`] naming the problem (and its byte offset where the check finds
/// it), [`ModelError::Io`] if the file cannot be read.
pub fn read_header<R: Read + Seek>(
    reader: &mut BufReader<R>,
    file_len: u64,
    path: &Path,
) -> Result<Content, ModelError> {
    let summary = check_header(reader, file_len).map_err(|p| invalid(path, &p))?;
    let header = header_bytes(reader, &summary).map_err(|e| ModelError::io("read", path, e))?;
    Content::read(&mut std::io::Cursor::new(header)).map_err(|e| ModelError::InvalidGguf {
        path: path.to_path_buf(),
        message: format!("unreadable header: {}", candle_message(&e)),
    })
}

/// The [`ModelError`] for a header problem in `path`.
pub fn invalid(path: &Path, problem: &HeaderProblem) -> ModelError {
    ModelError::InvalidGguf {
        path: path.to_path_buf(),
        message: problem.to_string(),
    }
}

/// Checks an in-memory GGUF file (the fuzz target's and the tests' entry point).
pub fn check_bytes(bytes: &[u8]) -> Result<HeaderSummary, HeaderProblem> {
    let mut reader = BufReader::new(std::io::Cursor::new(bytes));
    check_header(&mut reader, bytes.len() as u64)
}

/// Checks the header read from `reader`, positioned at the start of a file of `file_len`
/// bytes; leaves the reader somewhere inside the header (rewind it before reading again).
pub fn check_header<R: Read + Seek>(
    reader: &mut BufReader<R>,
    file_len: u64,
) -> Result<HeaderSummary, HeaderProblem> {
    let mut s = Scan {
        r: reader,
        pos: 0,
        len: file_len,
        memory: 0,
    };
    // A file that is not GGUF at all, or whose header or tensor data is cut short, says so
    // first; every other problem is in how the header is written.
    s.header().map_err(|mut p| {
        if !p.what.starts_with("not a gguf file") && !p.what.starts_with("truncated") {
            p.what = format!("unreadable header: {}", p.what);
        }
        p
    })
}

/// Per-entry memory candle's `HashMap`s spend beyond the key and value (hash, control bytes,
/// load factor), an overestimate.
const MAP_ENTRY_OVERHEAD: u64 = 16;

struct Scan<'a, R> {
    r: &'a mut BufReader<R>,
    pos: u64,
    len: u64,
    memory: u64,
}

/// A metadata value type, by its GGUF code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Fixed(u64),
    Bool,
    Str,
    Array,
}

impl Ty {
    fn from_code(code: u32) -> Option<Ty> {
        Some(match code {
            0 | 1 => Ty::Fixed(1),   // u8, i8
            2 | 3 => Ty::Fixed(2),   // u16, i16
            4..=6 => Ty::Fixed(4),   // u32, i32, f32
            7 => Ty::Bool,           // one byte, 0 or 1
            8 => Ty::Str,            // length-prefixed
            9 => Ty::Array,          // element type, length, elements
            10..=12 => Ty::Fixed(8), // u64, i64, f64
            _ => return None,
        })
    }
}

/// The dtype of a GGUF tensor code, as candle reads it (`GgmlDType::from_u32` is private to
/// candle; the table is the same, checked by a test).
fn dtype(code: u32) -> Option<GgmlDType> {
    Some(match code {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// One tensor's data range, for the overlap check.
struct Extent {
    start: u64,
    end: u64,
    name: String,
}

fn problem(offset: u64, what: impl Into<String>) -> HeaderProblem {
    HeaderProblem {
        offset,
        what: what.into(),
    }
}

impl<R: Read + Seek> Scan<'_, R> {
    fn left(&self) -> u64 {
        self.len - self.pos
    }

    /// Fails unless `n` more bytes are in the file.
    fn need(&self, n: u64, what: &str) -> Result<(), HeaderProblem> {
        if n > self.left() {
            return Err(problem(
                self.pos,
                format!(
                    "truncated: {what} needs {n} bytes, only {} left in the file ({} bytes)",
                    self.left(),
                    self.len
                ),
            ));
        }
        Ok(())
    }

    fn io(&self, e: std::io::Error) -> HeaderProblem {
        problem(self.pos, format!("read failed: {e}"))
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], HeaderProblem> {
        self.need(N as u64, what)?;
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| self.io(e))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32, HeaderProblem> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, HeaderProblem> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count or length: 32 bits in version 1, 64 after.
    fn length(&mut self, version: u32, what: &str) -> Result<u64, HeaderProblem> {
        if version == 1 {
            self.u32(what).map(u64::from)
        } else {
            self.u64(what)
        }
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), HeaderProblem> {
        self.need(n, what)?;
        let mut rest = n;
        while rest > 0 {
            let step = rest.min(i64::MAX as u64);
            self.r.seek_relative(step as i64).map_err(|e| self.io(e))?;
            rest -= step;
        }
        self.pos += n;
        Ok(())
    }

    /// A string's length, checked against the bytes left (and `max`, if any).
    fn string_len(
        &mut self,
        version: u32,
        what: &str,
        max: Option<u64>,
    ) -> Result<u64, HeaderProblem> {
        let at = self.pos;
        let n = self.length(version, &format!("the length of {what}"))?;
        if let Some(max) = max {
            if n > max {
                return Err(problem(
                    at,
                    format!("{what} is {n} bytes long, more than the {max} allowed"),
                ));
            }
        }
        if n > self.left() {
            return Err(problem(
                at,
                format!(
                    "{what} claims {n} bytes, only {} left in the file ({} bytes)",
                    self.left(),
                    self.len
                ),
            ));
        }
        Ok(n)
    }

    /// A name (a key or a tensor name): read whole, UTF-8, non-empty after candle's trailing-NUL
    /// removal.
    fn name(&mut self, version: u32, what: &str, max: u64) -> Result<String, HeaderProblem> {
        let at = self.pos;
        let n = self.string_len(version, what, Some(max))?;
        let mut bytes = vec![0u8; n as usize];
        self.r.read_exact(&mut bytes).map_err(|e| self.io(e))?;
        self.pos += n;
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        let name = String::from_utf8(bytes)
            .map_err(|_| problem(at, format!("{what} is not valid UTF-8")))?;
        if name.is_empty() {
            return Err(problem(at, format!("{what} is empty")));
        }
        Ok(name)
    }

    fn charge(&mut self, bytes: u64, at: u64) -> Result<(), HeaderProblem> {
        self.memory = self.memory.saturating_add(bytes);
        if self.memory > MAX_HEADER_MEMORY {
            return Err(problem(
                at,
                format!(
                    "the header would need more than {} MiB of memory to read (limit {} MiB)",
                    self.memory >> 20,
                    MAX_HEADER_MEMORY >> 20
                ),
            ));
        }
        Ok(())
    }

    /// One value of type `ty` (code already read); returns it as an integer when it is one of
    /// the integer types candle reads `general.alignment` from.
    fn value(
        &mut self,
        version: u32,
        code: u32,
        key: &str,
        depth: usize,
    ) -> Result<Option<i128>, HeaderProblem> {
        let at = self.pos;
        let ty = Ty::from_code(code)
            .ok_or_else(|| problem(at, format!("`{key}` has unknown value type {code}")))?;
        match ty {
            Ty::Fixed(n) => {
                let b: [u8; 8] = {
                    self.need(n, &format!("the value of `{key}`"))?;
                    let mut b = [0u8; 8];
                    self.r
                        .read_exact(&mut b[..n as usize])
                        .map_err(|e| self.io(e))?;
                    self.pos += n;
                    b
                };
                let signed = matches!(code, 1 | 3 | 5 | 11);
                let int = match (n, signed) {
                    _ if matches!(code, 6 | 12) => None, // floats
                    (1, false) => Some(i128::from(b[0])),
                    (1, true) => Some(i128::from(b[0] as i8)),
                    (2, false) => Some(i128::from(u16::from_le_bytes([b[0], b[1]]))),
                    (2, true) => Some(i128::from(i16::from_le_bytes([b[0], b[1]]))),
                    (4, false) => Some(i128::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
                    (4, true) => Some(i128::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
                    (_, false) => Some(i128::from(u64::from_le_bytes(b))),
                    (_, true) => Some(i128::from(i64::from_le_bytes(b))),
                };
                Ok(int)
            }
            Ty::Bool => {
                let [b] = self.array::<1>(&format!("the value of `{key}`"))?;
                if b > 1 {
                    return Err(problem(at, format!("`{key}` is a bool with byte {b}")));
                }
                Ok(None)
            }
            Ty::Str => {
                let n = self.string_len(version, &format!("a string in `{key}`"), None)?;
                self.charge(n, at)?;
                self.skip(n, "a string")?;
                Ok(None)
            }
            Ty::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(problem(
                        at,
                        format!("`{key}` nests arrays deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem_at = self.pos;
                let elem = self.u32(&format!("the element type of `{key}`"))?;
                let elem_ty = Ty::from_code(elem).ok_or_else(|| {
                    problem(elem_at, format!("`{key}` has unknown element type {elem}"))
                })?;
                let len_at = self.pos;
                let len = self.length(version, &format!("the length of `{key}`"))?;
                let prefix = if version == 1 { 4 } else { 8 };
                let min = match elem_ty {
                    Ty::Fixed(n) => n,
                    Ty::Bool => 1,
                    Ty::Str => prefix,
                    Ty::Array => 4 + prefix,
                };
                if len.checked_mul(min).is_none_or(|b| b > self.left()) {
                    return Err(problem(
                        len_at,
                        format!(
                            "`{key}` claims {len} elements of at least {min} bytes, only {} left in the file ({} bytes)",
                            self.left(),
                            self.len
                        ),
                    ));
                }
                // candle pushes each element as a `Value` into a growing Vec.
                let slots = len.checked_next_power_of_two().unwrap_or(u64::MAX);
                self.charge(
                    slots.saturating_mul(std::mem::size_of::<Value>() as u64),
                    len_at,
                )?;
                match elem_ty {
                    Ty::Fixed(n) => self.skip(len * n, "array elements")?,
                    _ => {
                        for _ in 0..len {
                            self.value(version, elem, key, depth + 1)?;
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    fn header(&mut self) -> Result<HeaderSummary, HeaderProblem> {
        let magic = self.array::<4>("the magic")?;
        if &magic != b"GGUF" {
            return Err(problem(
                0,
                format!(
                    "not a gguf file (bad magic {:02x}{:02x}{:02x}{:02x}, expected \"GGUF\")",
                    magic[0], magic[1], magic[2], magic[3]
                ),
            ));
        }
        let version = self.u32("the version")?;
        if !(1..=3).contains(&version) {
            return Err(problem(
                4,
                format!("unsupported gguf version {version} (1, 2 or 3 are read)"),
            ));
        }
        let prefix = if version == 1 { 4 } else { 8 };
        let counts_at = self.pos;
        let tensor_count = self.length(version, "the tensor count")?;
        let kv_count = self.length(version, "the metadata count")?;
        // Minimum sizes: a key-value pair is a key length, a type and one byte; a tensor entry
        // a name length, a dimension count, a dtype and an offset.
        let min_kv = prefix + 4 + 1;
        let min_tensor = prefix + 4 + 4 + 8;
        let needed = kv_count
            .checked_mul(min_kv)
            .and_then(|a| tensor_count.checked_mul(min_tensor).map(|b| (a, b)))
            .and_then(|(a, b)| a.checked_add(b));
        if needed.is_none_or(|n| n > self.left()) {
            return Err(problem(
                counts_at,
                format!(
                    "truncated or corrupt: header declares {tensor_count} tensors and {kv_count} metadata entries, more than the {} bytes left in the file can hold",
                    self.left()
                ),
            ));
        }

        let mut keys = HashSet::new();
        let mut alignment = DEFAULT_ALIGNMENT;
        for i in 0..kv_count {
            let key_at = self.pos;
            let key = self.name(version, &format!("metadata key #{i}"), MAX_KEY_LEN)?;
            let code_at = self.pos;
            let code = self.u32(&format!("the type of `{key}`"))?;
            let value_at = self.pos;
            let int = self.value(version, code, &key, 0)?;
            self.charge(
                key.len() as u64
                    + std::mem::size_of::<(String, Value)>() as u64
                    + MAP_ENTRY_OVERHEAD,
                key_at,
            )?;
            if key == "general.alignment" {
                alignment = match int {
                    Some(a) if a > 0 && (a as u128).is_power_of_two() && a <= 1 << 30 => a as u64,
                    Some(a) => {
                        return Err(problem(
                            value_at,
                            format!("`general.alignment` is {a}, not a power of two up to 2^30"),
                        ))
                    }
                    None => {
                        return Err(problem(
                            code_at,
                            format!("`general.alignment` has type {code}, not an integer"),
                        ))
                    }
                };
            }
            if keys.contains(&key) {
                return Err(problem(key_at, format!("metadata key `{key}` is repeated")));
            }
            keys.insert(key);
        }

        let mut names = HashSet::new();
        let mut extents = Vec::new();
        let mut pending = Vec::new();
        for i in 0..tensor_count {
            let entry_at = self.pos;
            let name = self.name(version, &format!("tensor name #{i}"), MAX_TENSOR_NAME_LEN)?;
            let dims_at = self.pos;
            let n_dims = self.u32(&format!("the dimension count of `{name}`"))?;
            // candle cannot read a 0-dimension (scalar) tensor (found by the gguf fuzz target).
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(problem(
                    dims_at,
                    format!("tensor `{name}` has {n_dims} dimensions, 1 to {MAX_DIMS} allowed"),
                ));
            }
            let mut dims = [0u64; MAX_DIMS as usize];
            for d in dims.iter_mut().take(n_dims as usize) {
                *d = self.length(version, &format!("a dimension of `{name}`"))?;
            }
            let dtype_at = self.pos;
            let code = self.u32(&format!("the dtype of `{name}`"))?;
            let dt = dtype(code).ok_or_else(|| {
                problem(
                    dtype_at,
                    format!("tensor `{name}` has unknown dtype {code}"),
                )
            })?;
            // candle's header reader knows these, its tensor reader does not (issue 20, found
            // by the gguf fuzz target: "quantized type Q8_1 is not supported yet").
            if matches!(dt, GgmlDType::Q8_1 | GgmlDType::Q8K) {
                return Err(problem(
                    dtype_at,
                    format!("tensor `{name}` has dtype {dt:?}, which candle cannot read"),
                ));
            }
            let offset_at = self.pos;
            let offset = self.u64(&format!("the offset of `{name}`"))?;
            let dims = &dims[..n_dims as usize];
            let block = dt.block_size() as u64;
            if dims.first().is_some_and(|&d| d % block != 0) {
                return Err(problem(
                    dims_at,
                    format!(
                        "tensor `{name}` has rows of {} elements, not a whole number of {dt:?} blocks of {block}",
                        dims[0]
                    ),
                ));
            }
            let elems = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .filter(|&n| n <= isize::MAX as u64)
                .ok_or_else(|| {
                    problem(
                        dims_at,
                        format!("tensor `{name}` has an impossible shape {dims:?}"),
                    )
                })?;
            if elems % block != 0 {
                return Err(problem(
                    dims_at,
                    format!("tensor `{name}` has {elems} elements, not a multiple of {block}"),
                ));
            }
            let bytes = (elems / block)
                .checked_mul(dt.type_size() as u64)
                .ok_or_else(|| {
                    problem(dims_at, format!("tensor `{name}` is too large ({dims:?})"))
                })?;
            self.charge(
                name.len() as u64
                    + std::mem::size_of::<(String, TensorInfo)>() as u64
                    + MAP_ENTRY_OVERHEAD
                    + 8 * n_dims as u64,
                entry_at,
            )?;
            if names.contains(&name) {
                return Err(problem(
                    entry_at,
                    format!("tensor `{name}` is listed twice"),
                ));
            }
            names.insert(name.clone());
            pending.push((offset_at, offset, bytes, name));
        }

        let header_end = self.pos;
        let data_offset = header_end.div_ceil(alignment) * alignment;
        for (offset_at, offset, bytes, name) in pending {
            if offset % alignment != 0 {
                return Err(problem(
                    offset_at,
                    format!("tensor `{name}` starts at data offset {offset}, not a multiple of the alignment {alignment}"),
                ));
            }
            let start = data_offset.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(bytes));
            match (start, end) {
                (Some(start), Some(end)) if end <= self.len => {
                    if bytes > 0 {
                        extents.push(Extent { start, end, name });
                    }
                }
                _ => {
                    return Err(problem(
                        offset_at,
                        format!(
                            "truncated: tensor `{name}` ({bytes} bytes at data offset {offset}) extends past the end of the file ({} bytes)",
                            self.len
                        ),
                    ))
                }
            }
        }
        extents.sort_by_key(|e| (e.start, e.end));
        for w in extents.windows(2) {
            if w[1].start < w[0].end {
                return Err(problem(
                    w[1].start,
                    format!(
                        "tensor `{}` (bytes {}..{}) overlaps tensor `{}` (bytes {}..{})",
                        w[1].name, w[1].start, w[1].end, w[0].name, w[0].start, w[0].end
                    ),
                ));
            }
        }
        Ok(HeaderSummary {
            version,
            tensor_count,
            kv_count,
            data_offset,
            alignment,
            memory: self.memory,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file::{self, Content};
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    /// A GGUF file written byte by byte (version 3 unless set), so each test can break one field.
    struct Gguf(Vec<u8>);

    impl Gguf {
        fn new(version: u32, tensors: u64, kvs: u64) -> Self {
            let mut g = Gguf(b"GGUF".to_vec());
            g.u32(version).u64(tensors).u64(kvs);
            g
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn u64(&mut self, v: u64) -> &mut Self {
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn str(&mut self, s: &str) -> &mut Self {
            self.u64(s.len() as u64);
            self.0.extend_from_slice(s.as_bytes());
            self
        }
        /// A `u32` metadata entry.
        fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
            self.str(key).u32(4).u32(v)
        }
        /// A tensor entry (dims in GGUF order, innermost first).
        fn tensor(&mut self, name: &str, dims: &[u64], dtype: u32, offset: u64) -> &mut Self {
            self.str(name).u32(dims.len() as u32);
            for &d in dims {
                self.u64(d);
            }
            self.u32(dtype).u64(offset)
        }
        /// Pads to 32 and appends `n` data bytes.
        fn data(&mut self, n: usize) -> Vec<u8> {
            let mut b = self.0.clone();
            b.resize(b.len().div_ceil(32) * 32 + n, 0);
            b
        }
    }

    fn refused(bytes: &[u8], needle: &str) -> HeaderProblem {
        let p = check_bytes(bytes).expect_err(needle);
        assert!(p.what.contains(needle), "{p}");
        assert!(p.offset <= bytes.len() as u64, "{p}");
        p
    }

    /// A small file candle writes itself: two F32 tensors and some metadata.
    fn candle_file() -> Vec<u8> {
        let dev = Device::Cpu;
        let a = QTensor::quantize(
            &Tensor::zeros((2, 32), candle_core::DType::F32, &dev).unwrap(),
            GgmlDType::F32,
        )
        .unwrap();
        let b = QTensor::quantize(
            &Tensor::ones((3, 32), candle_core::DType::F32, &dev).unwrap(),
            GgmlDType::Q8_0,
        )
        .unwrap();
        let arch = Value::String("llama".into());
        let toks = Value::Array(vec![Value::String("a".into()), Value::String("bc".into())]);
        let mut out = std::io::Cursor::new(Vec::new());
        gguf_file::write(
            &mut out,
            &[
                ("general.architecture", &arch),
                ("tokenizer.ggml.tokens", &toks),
            ],
            &[("a", &a), ("b", &b)],
        )
        .unwrap();
        out.into_inner()
    }

    #[test]
    fn a_file_candle_writes_passes_and_every_truncation_is_refused() {
        let bytes = candle_file();
        let s = check_bytes(&bytes).unwrap();
        assert_eq!(
            (s.version, s.tensor_count, s.kv_count, s.alignment),
            (2, 2, 2, 32)
        );
        let content = Content::read(&mut std::io::Cursor::new(&bytes)).unwrap();
        assert_eq!(s.data_offset, content.tensor_data_offset);
        // candle pads the last tensor's data to 32 bytes: cutting only padding is no loss.
        let data_end = content
            .tensor_infos
            .values()
            .map(|t| {
                let size =
                    t.shape.elem_count() / t.ggml_dtype.block_size() * t.ggml_dtype.type_size();
                content.tensor_data_offset + t.offset + size as u64
            })
            .max()
            .unwrap() as usize;
        assert!(data_end < bytes.len());
        check_bytes(&bytes[..data_end]).unwrap();
        for cut in 0..data_end {
            let p = check_bytes(&bytes[..cut]).expect_err("a truncated file");
            assert!(
                p.what.contains("truncated") || p.what.contains("left in the file"),
                "cut {cut}: {p}"
            );
        }
    }

    #[test]
    fn counts_and_lengths_beyond_the_file_are_refused_before_allocating() {
        // Each of these would ask candle (or a naive reader) for terabytes.
        let p = refused(&Gguf::new(3, u64::MAX / 2, 0).0, "header declares");
        assert_eq!(p.offset, 8);
        refused(&Gguf::new(3, 0, 1 << 40).0, "header declares");
        let mut g = Gguf::new(3, 0, 1);
        g.u64(1 << 50).0.extend_from_slice(&[b'x'; 16]);
        let p = refused(
            &g.0,
            "is 1125899906842624 bytes long, more than the 65535 allowed",
        );
        assert_eq!(p.offset, 24);
        let mut g = Gguf::new(3, 0, 1);
        g.u64(60_000).0.extend_from_slice(&[b'x'; 16]);
        refused(&g.0, "claims 60000 bytes");
        let mut g = Gguf::new(3, 0, 1);
        g.str("k")
            .u32(8)
            .u64(u64::MAX)
            .0
            .extend_from_slice(&[0; 16]);
        refused(&g.0, "claims 18446744073709551615 bytes");
        let mut g = Gguf::new(3, 0, 1);
        g.str("k")
            .u32(9)
            .u32(8)
            .u64(1 << 40)
            .0
            .extend_from_slice(&[0; 64]);
        refused(&g.0, "claims 1099511627776 elements");
        // Version 1 has 32-bit lengths.
        let mut g = Gguf(b"GGUF".to_vec());
        g.u32(1).u32(u32::MAX).u32(0);
        refused(&g.0, "header declares");
    }

    #[test]
    fn bad_magic_versions_types_and_bools_are_refused() {
        refused(b"GGML\x03\0\0\0", "not a gguf file");
        refused(
            b"FUGG\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
            "not a gguf file",
        );
        refused(&Gguf::new(4, 0, 0).0, "unsupported gguf version 4");
        let mut g = Gguf::new(3, 0, 1);
        g.str("k").u32(13).u32(0);
        refused(&g.0, "unknown value type 13");
        let mut g = Gguf::new(3, 0, 1);
        g.str("k").u32(7).0.push(2);
        refused(&g.0, "bool with byte 2");
        let mut g = Gguf::new(3, 0, 1);
        g.str("k").u32(9).u32(99).u64(0);
        refused(&g.0, "unknown element type 99");
        let mut g = Gguf::new(3, 0, 1);
        g.str("k").u32(9);
        for _ in 0..=MAX_ARRAY_DEPTH {
            g.u32(9).u64(1);
        }
        g.u32(0).u64(0);
        refused(&g.0, "nests arrays deeper");
        let mut g = Gguf::new(3, 0, 1);
        g.u64(2).0.extend_from_slice(b"\xff\xfe");
        g.u32(4).u32(0);
        refused(&g.0, "not valid UTF-8");
        let mut g = Gguf::new(3, 0, 1);
        g.str("\0").u32(4).u32(0);
        refused(&g.0, "is empty");
    }

    #[test]
    fn repeated_keys_and_tensor_names_are_refused() {
        // candle keeps the last of two equal names; "k\0" is "k" once candle strips the NUL.
        let mut g = Gguf::new(3, 0, 2);
        g.kv_u32("k", 1).kv_u32("k\0", 2);
        let p = refused(&g.0, "metadata key `k` is repeated");
        assert_eq!(p.offset, 24 + 8 + 1 + 4 + 4);
        let mut g = Gguf::new(3, 2, 0);
        g.tensor("t", &[32], 0, 0).tensor("t", &[32], 0, 128);
        refused(&g.data(256), "tensor `t` is listed twice");
    }

    #[test]
    fn alignment_must_be_a_power_of_two() {
        // candle's reader divides by it: 0 panics there.
        for bad in [0u32, 3, 48] {
            let mut g = Gguf::new(3, 0, 1);
            g.kv_u32("general.alignment", bad);
            refused(&g.0, "not a power of two");
        }
        let mut g = Gguf::new(3, 0, 1);
        g.str("general.alignment").u32(8).str("32");
        refused(&g.0, "not an integer");
        let mut g = Gguf::new(3, 1, 1);
        g.kv_u32("general.alignment", 64).tensor("t", &[16], 0, 0);
        let mut b = g.0.clone();
        b.resize(b.len().div_ceil(64) * 64 + 64, 0);
        assert_eq!(check_bytes(&b).unwrap().alignment, 64);
    }

    #[test]
    fn tensor_shapes_dtypes_offsets_and_overlaps_are_checked() {
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[1, 1, 1, 1, 1], 0, 0);
        refused(&g.data(4), "5 dimensions");
        // Issue 20, found by the gguf fuzz target: a scalar passed the check and candle then
        // refused to read it ("scalar tensor cannot be quantized").
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[], 0, 0);
        refused(&g.data(4), "0 dimensions");
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[32], 4, 0);
        refused(&g.data(64), "unknown dtype 4");
        // Issue 20, found by the gguf fuzz target: a Q8_1 tensor passed the check and candle
        // then refused to read it ("quantized type Q8_1 is not supported yet"); Q8K likewise.
        for (code, dt) in [(9, "Q8_1"), (15, "Q8K")] {
            let mut g = Gguf::new(3, 1, 0);
            g.tensor("t", &[256], code, 0);
            let p = refused(&g.data(1024), "which candle cannot read");
            assert!(p.what.contains(&format!("dtype {dt},")), "{p}");
        }
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[16, 2], 8, 0); // Q8_0 blocks are 32 wide
        refused(&g.data(64), "not a whole number of Q8_0 blocks");
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[1 << 32, 1 << 32, 1 << 32], 0, 0);
        refused(&g.data(64), "impossible shape");
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[8], 0, 16);
        refused(&g.data(64), "not a multiple of the alignment 32");
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[32], 0, 0);
        refused(&g.data(127), "extends past the end");
        let mut g = Gguf::new(3, 1, 0);
        g.tensor("t", &[8], 0, u64::MAX - 31);
        refused(&g.data(64), "extends past the end");
        let mut g = Gguf::new(3, 2, 0);
        g.tensor("a", &[32], 0, 0).tensor("b", &[32], 0, 96);
        let p = refused(&g.data(256), "tensor `b` (bytes");
        assert!(p.what.contains("overlaps tensor `a`"), "{p}");
        let mut g = Gguf::new(3, 1, 0);
        g.str("this-name-is-longer-than-sixty-four-bytes-which-ggml-does-not-allow")
            .u32(1)
            .u64(8)
            .u32(0)
            .u64(0);
        refused(&g.data(32), "more than the 64 allowed");
        let mut g = Gguf::new(3, 2, 0);
        g.tensor("a", &[32], 0, 0).tensor("b", &[32], 0, 128);
        check_bytes(&g.data(256)).unwrap();
    }

    #[test]
    fn headers_that_would_need_too_much_memory_are_refused() {
        // 40M one-byte elements: 40 MB on disk, 32 bytes each as candle `Value`s.
        let n = 40_000_000u64;
        let mut g = Gguf::new(3, 0, 1);
        g.str("k").u32(9).u32(0).u64(n);
        let mut b = g.0.clone();
        b.resize(b.len() + n as usize, 0);
        refused(&b, "of memory to read");
        let n = 1_000u64;
        let mut g = Gguf::new(3, 0, 1);
        g.str("k").u32(9).u32(0).u64(n);
        let mut b = g.0.clone();
        b.resize(b.len() + n as usize, 0);
        let s = check_bytes(&b).unwrap();
        assert!(s.memory >= 32 * n, "{s:?}");
    }

    #[test]
    fn the_dtype_table_is_candles() {
        // Each code, in a one-tensor file: candle reads the same dtype, or refuses the code.
        for code in 0..40u32 {
            let mut g = Gguf::new(3, 1, 0);
            g.tensor("t", &[256], code, 0);
            let b = g.data(1024);
            let theirs = Content::read(&mut std::io::Cursor::new(&b))
                .ok()
                .map(|c| c.tensor_infos["t"].ggml_dtype);
            assert_eq!(dtype(code), theirs, "code {code}");
            // And a tensor the check accepts, candle reads.
            if check_bytes(&b).is_ok() {
                let mut r = std::io::Cursor::new(&b);
                let c = Content::read(&mut r).unwrap();
                c.tensor(&mut r, "t", &candle_core::Device::Cpu)
                    .unwrap_or_else(|e| panic!("code {code}: {e}"));
            }
        }
    }
}
