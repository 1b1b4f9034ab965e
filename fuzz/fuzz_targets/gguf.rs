//! Fuzz target: arbitrary bytes as a GGUF file. The checked pre-parse
//! (`formwork_model::gguf::check_bytes`) must never panic and never allocate more than the
//! input's size allows (run with `-rss_limit_mb=` and `-malloc_limit_mb=`); a problem it reports
//! must point inside the file. When it accepts a file, candle's reader, which runs after it in
//! the model loader and the tokenizer, must read the header and every tensor without error or
//! panic, at the data offset the check computed. Seeded with the first KiB of the three
//! registry models (`scripts/fuzz` writes them into the corpus) and files candle writes.
#![no_main]

use std::io::Cursor;

use candle_core::quantized::gguf_file::Content;
use candle_core::Device;
use formwork_model::gguf::check_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match check_bytes(data) {
        Err(p) => assert!(p.offset <= data.len() as u64, "{p}"),
        Ok(summary) => {
            let mut r = Cursor::new(data);
            let content = Content::read(&mut r)
                .unwrap_or_else(|e| panic!("checked header refused by candle: {e}"));
            assert_eq!(content.tensor_data_offset, summary.data_offset);
            assert_eq!(content.tensor_infos.len() as u64, summary.tensor_count);
            assert_eq!(content.metadata.len() as u64, summary.kv_count);
            for name in content.tensor_infos.keys() {
                content
                    .tensor(&mut r, name, &Device::Cpu)
                    .unwrap_or_else(|e| panic!("checked tensor `{name}` unreadable: {e}"));
            }
        }
    }
});
