//! Fuzz target: `formwork serve`'s request bodies. The input is JSON (seeded with the request
//! shapes of the OpenAI Chat Completions and Responses APIs and Anthropic's Messages API); each
//! of the server's parsers (chat, responses, messages, count_tokens, the playground's extract)
//! must accept it or answer a 400-style error naming a field, never panic. An accepted chat
//! request's cache key must be computable. Calls the server crate's public parsing functions
//! only; it does not start a server.
#![no_main]

use formwork_server::request::ChatRequest;
use formwork_server::{anthropic, playground, responses};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let refusals = data.len() % 2 == 0;
    for parsed in [
        ChatRequest::parse_with(&body, 4096, refusals),
        responses::parse(&body, 4096, refusals),
        anthropic::parse(&body, 4096, refusals),
        anthropic::parse_count(&body, 4096),
    ] {
        match parsed {
            Ok(req) => {
                let _ = req.output.cache_key();
            }
            Err(e) => assert!(!format!("{e:?}").is_empty()),
        }
    }
    if let Ok(req) = playground::ExtractRequest::parse(&body) {
        let _ = playground::plan(&req);
    }
});
