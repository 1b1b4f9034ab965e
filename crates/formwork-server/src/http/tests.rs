//! Tests of the HTTP layer: every endpoint through the router, on fake models.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::Router;
use serde_json::{json, Value};

use super::job::{token_budget, DROPPED_HEADER};
use super::router::router;
use super::state::{Encoder, HttpConfig};
use crate::cache::ConstraintCache;
use axum::body::Body;
use formwork_core::chat::Turn;
use formwork_core::generate::batch::BatchLogitsSource;
use formwork_core::generate::testing::FixedLogits;
use formwork_core::toktrie::{SyntheticVocab, TokEnv, TokenId};
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::worker::{spawn, Backend};

/// A fake model that takes `delay` per (batched) forward pass, like a real one.
struct Slow(FixedLogits, Duration);

impl BatchLogitsSource for Slow {
    type Sequence = usize;

    fn new_sequence(&mut self) -> usize {
        0
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut usize, &[u32])],
    ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
        std::thread::sleep(self.1);
        self.0.forward_batch(batch)
    }

    fn fork(&mut self, seq: &usize, len: usize) -> usize {
        len.min(*seq)
    }
}

/// A fake model whose favourite digit depends on the position (`(pos + 1) % 10` after
/// feeding up to `pos`), over the preferences of a [`FixedLogits`]: its tool calls
/// differ from each other.
struct Cycling(FixedLogits);

impl BatchLogitsSource for Cycling {
    type Sequence = usize;

    fn new_sequence(&mut self) -> usize {
        0
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut usize, &[u32])],
    ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
        let mut all = self.0.forward_batch(batch)?;
        for ((len, _), logits) in batch.iter().zip(&mut all) {
            logits[usize::from(b'0') + **len % 10] = 11.0;
        }
        Ok(all)
    }

    fn fork(&mut self, seq: &usize, len: usize) -> usize {
        len.min(*seq)
    }
}

/// A server over a fake model that prefers the bytes of `prefer`, in order.
fn app(prefer: &[u8], key: Option<&str>) -> Router {
    slow_app(prefer, key, Duration::ZERO)
}

fn slow_app(prefer: &[u8], key: Option<&str>, delay: Duration) -> Router {
    app_with(prefer, key, delay, |_| {})
}

fn app_with(
    prefer: &[u8],
    key: Option<&str>,
    delay: Duration,
    adjust: impl FnOnce(&mut HttpConfig),
) -> Router {
    let fixed = FixedLogits::preferring(257, prefer.iter().map(|&b| u32::from(b)));
    app_over(Slow(fixed, delay), key, false, adjust)
}

/// A server over the fake model `source` (byte-level vocabulary, 256 its stop token),
/// `lenient` as `formwork serve --lenient` makes it.
fn app_over(
    source: impl BatchLogitsSource + Send + 'static,
    key: Option<&str>,
    lenient: bool,
    adjust: impl FnOnce(&mut HttpConfig),
) -> Router {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let backend = Backend {
        source,
        vocab: vocab.clone(),
        stop: vec![TokenId(256)],
    };
    let (queue, _worker) = spawn(backend, 2, 4).unwrap();
    let mut config = crate::ServerConfig::new("fake").http;
    config.api_key = key.map(str::to_string);
    config.max_tokens_cap = 64;
    config.body_limit = 4096;
    adjust(&mut config);
    let encode: Encoder = Arc::new(|turns: &[Turn]| {
        Ok(turns
            .iter()
            .flat_map(|t| t.content.bytes().map(u32::from))
            .collect())
    });
    router(
        config,
        ConstraintCache::new(TokEnv::new(vocab), 8).lenient(lenient),
        queue,
        encode,
    )
}

fn post(body: impl Into<Body>) -> Request {
    Request::post("/v1/chat/completions")
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap()
}

async fn call(app: &Router, req: Request) -> (StatusCode, String) {
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

fn chat(extra: Value) -> String {
    let mut body = json!({"model": "fake", "messages": [{"role": "user", "content": "hi"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body.to_string()
}

#[test]
fn budgets_fit_the_context_window_or_are_refused() {
    let mut config = crate::ServerConfig::new("fake").http;
    config.max_tokens_cap = 64;
    assert_eq!(
        token_budget(5000, None, &config).unwrap(),
        64,
        "no window known"
    );
    config.context_len = Some(100);
    assert_eq!(token_budget(10, None, &config).unwrap(), 64);
    assert_eq!(
        token_budget(60, None, &config).unwrap(),
        40,
        "default clamped to the room"
    );
    assert_eq!(token_budget(60, Some(40), &config).unwrap(), 40);
    for (prompt, asked, param) in [(60, Some(41), "max_tokens"), (100, None, "messages")] {
        let e = token_budget(prompt, asked, &config).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let body = e.body();
        assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
        assert_eq!(body["error"]["param"], param, "{body}");
    }
}

#[tokio::test]
async fn an_over_long_conversation_is_a_400_before_any_generation() {
    let app = app_with(b"7", None, Duration::ZERO, |c| c.context_len = Some(8));
    let long = json!({"messages": [{"role": "user", "content": "a long question"}]});
    let (status, text) = call(&app, post(chat(long))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("context_length_exceeded"), "{text}");
    let (status, text) = call(&app, post(chat(json!({"max_tokens": 5})))).await;
    assert_eq!(status, StatusCode::OK, "`hi` + 5 fit in 8: {text}");
}

#[tokio::test]
async fn a_request_that_allows_refusal_gets_content_null_and_the_refusal() {
    // The fake model prefers `{`, `"`, then the letters of "refusal" over the schema's key.
    let app = app(b"{\"refusal:", None);
    let schema = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["a"], "additionalProperties": false}}});
    let body = chat(json!({"max_tokens": 24, "response_format": schema,
        "formwork": {"allow_refusal": true}}));
    let (status, text) = call(&app, post(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let m = &v["choices"][0]["message"];
    assert_eq!(m["content"], Value::Null, "{text}");
    assert!(m["refusal"].as_str().is_some(), "{text}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Without the field the same model must answer the schema.
    let body = chat(json!({"max_tokens": 24, "response_format": schema}));
    let (status, text) = call(&app, post(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(parsed["a"].is_number(), "{content}");
    let bad = chat(json!({"response_format": schema, "formwork": {"allow_refusal": 1}}));
    let (status, text) = call(&app, post(bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("formwork.allow_refusal"), "{text}");
}

#[tokio::test]
async fn schema_request_gives_a_valid_completion() {
    let app = app(b"7", None);
    let body = chat(
        json!({"max_tokens": 8, "response_format": {"type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "integer", "maximum": 999}}}}),
    );
    let (status, text) = call(&app, post(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "777");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 3);
}

/// Issue 19: reasoning before a constrained answer comes back in
/// `message.reasoning_content` (streamed: `delta.reasoning_content` chunks, all before the
/// content), never in the content, which is the schema-valid answer alone; its tokens
/// count in `completion_tokens` and `completion_tokens_details.reasoning_tokens`. The
/// request field turns it on or (0) off over the server's default; free text cannot ask.
#[tokio::test]
async fn reasoning_comes_back_apart_from_the_constrained_answer() {
    // The fake writes `z` while free (the reasoning), then `7` where the schema wants it.
    let schema = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "type": "object", "properties": {"n": {"type": "integer", "maximum": 9}},
        "required": ["n"], "additionalProperties": false}}});
    let body = |extra: Value| {
        let mut b = json!({"max_tokens": 16, "response_format": schema});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        chat(b)
    };
    let off = app(b"z7", None);
    let (status, text) = call(&off, post(body(json!({"formwork": {"think": 6}})))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], r#"{"n":7}"#, "{v}");
    assert_eq!(msg["reasoning_content"], "zzzzzz", "{v}");
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        6
    );
    // `7` and `}`... : the answer's own tokens, plus the reasoning's six.
    let answer = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(answer > 6, "{v}");
    // Without the field, this server does not reason: no reasoning field at all.
    let (_, text) = call(&off, post(body(json!({})))).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], r#"{"n":7}"#);
    assert!(
        v["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{v}"
    );
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        0
    );

    // A server that reasons by default (`--think 4`); a request turns it off with 0.
    let on = app_with(b"z7", None, Duration::ZERO, |c| c.think = 4);
    let (_, text) = call(&on, post(body(json!({})))).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["reasoning_content"], "zzzz",
        "{v}"
    );
    assert_eq!(v["choices"][0]["message"]["content"], r#"{"n":7}"#);
    let (_, text) = call(&on, post(body(json!({"formwork": {"think": 0}})))).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(
        v["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{v}"
    );

    // Streamed: reasoning chunks first, then content chunks; neither holds the other.
    let (status, text) = call(
        &off,
        post(body(json!({"stream": true, "formwork": {"think": 6}}))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (mut reasoning, mut content) = (String::new(), String::new());
    for e in events(&text) {
        let Ok(c) = serde_json::from_str::<Value>(&e) else {
            continue;
        };
        let delta = &c["choices"][0]["delta"];
        if let Some(r) = delta["reasoning_content"].as_str() {
            assert!(content.is_empty(), "reasoning after content: {text}");
            assert!(delta.get("content").is_none(), "{e}");
            reasoning.push_str(r);
        }
        if let Some(t) = delta["content"].as_str() {
            content.push_str(t);
        }
    }
    assert_eq!(reasoning, "zzzzzz", "{text}");
    assert_eq!(content, r#"{"n":7}"#, "{text}");

    // Free text has no answer to reason before; a bad value names the field.
    for (extra, what) in [
        (json!({"formwork": {"think": 4}}), "json_schema"),
        (json!({"formwork": {"think": "yes"}}), "token count"),
        (json!({"formwork": {"think": 65}}), "at most 64"),
    ] {
        let free = extra["formwork"]["think"] == 4;
        let b = if free { chat(extra) } else { body(extra) };
        let (status, text) = call(&off, post(b)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], "formwork.think", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(what),
            "{v}"
        );
    }
}

#[tokio::test]
async fn errors_are_openai_bodies_with_their_status() {
    let app = app(b"a", Some("k"));
    let authed = |body: String| {
        let mut r = post(body);
        r.headers_mut()
            .insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
        r
    };
    let (status, text) = call(&app, post(chat(json!({})))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    let cases = [
        (
            "{\"model\": ".to_string(),
            StatusCode::BAD_REQUEST,
            "malformed JSON",
        ),
        (
            chat(json!({"max_tokens": 65})),
            StatusCode::BAD_REQUEST,
            "cap",
        ),
        (
            chat(json!({"messages": [{"role": "user", "content": "x".repeat(5000)}]})),
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit of 4096 bytes",
        ),
        (
            chat(
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "object", "unevaluatedProperties": false}}}}),
            ),
            StatusCode::BAD_REQUEST,
            "`unevaluatedProperties` at /unevaluatedProperties",
        ),
    ];
    for (body, want, says) in cases {
        let (status, text) = call(&app, authed(body)).await;
        assert_eq!(status, want, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    // Still serving.
    let (status, _) = call(&app, authed(chat(json!({"max_tokens": 2})))).await;
    assert_eq!(status, StatusCode::OK);
}

/// Client code names the models of the API it was written for: any name is answered by the
/// served model (the response says which), unless the server is strict about names; then only
/// the served names are, the others get a 404 naming them. `/v1/models` lists every name.
#[tokio::test]
async fn any_model_name_is_answered_unless_the_server_is_strict() {
    let models = |app: Router| async move {
        let r = Request::get("/v1/models").body(Body::empty()).unwrap();
        let (status, text) = call(&app, r).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let ids: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        ids
    };
    let named = |strict: bool| {
        app_with(b"a", None, Duration::ZERO, move |c| {
            c.served_names = vec!["gpt-4o-mini".into()];
            c.strict_model_name = strict;
        })
    };
    let open = named(false);
    for name in ["gpt-4o-mini", "claude-sonnet-4-5", "my-placeholder", "fake"] {
        let (status, text) = call(&open, post(chat(json!({"model": name, "max_tokens": 2})))).await;
        assert_eq!(status, StatusCode::OK, "{name}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["model"], "fake",
            "the answer names the model that answered"
        );
    }
    assert_eq!(models(open).await, ["fake", "gpt-4o-mini"]);

    let strict = named(true);
    for name in ["gpt-4o-mini", "fake"] {
        let (status, text) =
            call(&strict, post(chat(json!({"model": name, "max_tokens": 2})))).await;
        assert_eq!(status, StatusCode::OK, "{name}: {text}");
    }
    let (status, text) = call(&strict, post(chat(json!({"model": "gpt-9"})))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    assert_eq!(v["error"]["param"], "model", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`gpt-9`") && message.contains("`fake`, `gpt-4o-mini`"),
        "{message}"
    );
    assert_eq!(models(strict).await, ["fake", "gpt-4o-mini"]);
}

/// The `data:` payloads of an SSE body.
fn events(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_streamed_tool_call_has_the_sdk_chunk_format() {
    // The fake model prefers digits: the grammar forces the rest of the call.
    let app = app(b"5]", None);
    let tools = json!([{"type": "function", "function": {"name": "sum", "parameters": {
        "type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "integer", "maximum": 9},
        "maxItems": 1}}, "required": ["numbers"]}}}]);
    let body = chat(
        json!({"stream": true, "tools": tools, "tool_choice": "required",
        "max_tokens": 64, "stream_options": {"include_usage": true}}),
    );
    let (status, text) = call(&app, post(body)).await;
    assert_eq!(status, StatusCode::OK);
    let data = events(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let finish = &chunks[chunks.len() - 2]["choices"][0];
    assert_eq!(finish["finish_reason"], "tool_calls");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert!(calls[0]["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(calls[0]["function"]["name"], "sum");
    assert!(calls[1..].iter().all(|c| c.get("id").is_none()));
    let args: String = calls
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    let args: Value = serde_json::from_str(&args).unwrap();
    assert!(args["numbers"].is_array(), "{args}");
}

/// The `sum` tool of the parallel-call tests: one digit in a list (a call is 42 tokens).
fn digit_tool_body(extra: Value) -> String {
    let tools = json!([{"type": "function", "function": {"name": "sum", "parameters": {
        "type": "object", "properties": {"numbers": {"type": "array",
        "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 1}},
        "required": ["numbers"]}}}]);
    let mut b = json!({"tools": tools, "tool_choice": "required", "max_tokens": 150});
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    chat(b)
}

/// The calls of a streamed chat completion, folded by index as the SDK does, and the
/// final chunk.
fn streamed_calls(text: &str) -> (Vec<String>, Value) {
    let mut args: Vec<String> = Vec::new();
    let mut last = Value::Null;
    for d in events(text).iter().filter(|d| *d != "[DONE]") {
        let c: Value = serde_json::from_str(d).unwrap();
        if let Some(tc) = c["choices"][0]["delta"]["tool_calls"].get(0) {
            let i = tc["index"].as_u64().unwrap() as usize;
            if tc.get("id").is_some() {
                assert_eq!(i, args.len());
                args.push(String::new());
            }
            args[i].push_str(tc["function"]["arguments"].as_str().unwrap());
        }
        if !c["choices"][0]["finish_reason"].is_null() {
            last = c;
        }
    }
    (args, last)
}

#[tokio::test]
async fn parallel_tool_calls_make_several_valid_calls_or_at_most_one() {
    // The fake model's favourite digit changes with the position and it prefers a newline
    // after a call: it starts call after call, each with another digit, until the budget
    // has no room for one more (a call is 42 tokens, 150 fit three).
    let app = app_over(
        Cycling(FixedLogits::preferring(257, [u32::from(b'\n')])),
        None,
        false,
        |c| c.max_tokens_cap = 256,
    );
    let (status, text) = call(&app, post(digit_tool_body(json!({})))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{text}");
    assert_eq!(v["formwork"]["duplicate_call_dropped"], false, "{text}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{text}");
    let mut ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
    let mut digits = Vec::new();
    for c in calls {
        let args: Value =
            serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
        let n = args["numbers"][0].as_u64().unwrap();
        assert!(
            n <= 9 && args["numbers"].as_array().unwrap().len() == 1,
            "{text}"
        );
        digits.push(n);
    }
    digits.dedup();
    assert_eq!(digits.len(), 3, "the calls differ: {text}");
    ids.dedup();
    assert_eq!(ids.len(), calls.len(), "ids are unique: {text}");
    // Streamed: the same calls, each with its own index.
    let (_, streamed) = call(&app, post(digit_tool_body(json!({"stream": true})))).await;
    let (args, _) = streamed_calls(&streamed);
    let whole: Vec<&str> = calls
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(args, whole);
    // `parallel_tool_calls: false`: exactly one call.
    let body = digit_tool_body(json!({"parallel_tool_calls": false}));
    let (status, text) = call(&app, post(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{text}");
}

#[tokio::test]
async fn only_a_lenient_server_drops_constraints_and_every_response_says_which() {
    let format = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "type": "object", "properties": {"a": {"type": "integer", "maximum": 9}},
        "required": ["a"], "additionalProperties": false,
        "unevaluatedProperties": false}}});
    let body = |stream: bool| {
        chat(json!({"max_tokens": 16, "response_format": format,
        "stream": stream}))
    };
    // Exact (the default): a 400 naming the keyword and pointer.
    let (status, text) = call(&app(b"7", None), post(body(false))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(
        text.contains("`unevaluatedProperties` at /unevaluatedProperties"),
        "{text}"
    );
    // Lenient: the rest of the schema is enforced, and the response says what was not.
    let fixed = FixedLogits::preferring(257, [u32::from(b'7')]);
    let lenient = app_over(Slow(fixed, Duration::ZERO), None, true, |_| {});
    let want = json!([{"param": "response_format", "keyword": "unevaluatedProperties",
        "pointer": "/unevaluatedProperties"}]);
    let header_value = "response_format:unevaluatedProperties@/unevaluatedProperties";
    for stream in [false, true] {
        let r = lenient.clone().oneshot(post(body(stream))).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[DROPPED_HEADER], header_value);
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let v: Value = if stream {
            let data = events(&text);
            serde_json::from_str(&data[data.len() - 2]).unwrap()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        assert_eq!(v["formwork"]["dropped_constraints"], want, "{text}");
        if !stream {
            let content = v["choices"][0]["message"]["content"].as_str().unwrap();
            assert_eq!(content, r#"{"a":7}"#, "maximum 9 still holds: {text}");
        }
    }
    // A schema with nothing to drop: an empty list and no header, on every endpoint.
    let fine = json!({"type": "json_schema", "json_schema": {"name": "n",
        "schema": {"type": "integer", "maximum": 9}}});
    let r = lenient
        .clone()
        .oneshot(post(chat(
            json!({"max_tokens": 4, "response_format": fine}),
        )))
        .await
        .unwrap();
    assert!(r.headers().get(DROPPED_HEADER).is_none());
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["formwork"]["dropped_constraints"], json!([]));
    // Messages and Responses carry the same report.
    let tools = json!([{"name": "f", "input_schema": {"type": "object",
        "properties": {"a": {"type": "integer", "maximum": 9}}, "required": ["a"],
        "unevaluatedProperties": false}}]);
    let r = lenient
        .clone()
        .oneshot(post_to(
            "/v1/messages",
            messages_body(json!({"tools": tools, "tool_choice": {"type": "any"}})),
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()[DROPPED_HEADER],
        "tools.f:unevaluatedProperties@/unevaluatedProperties"
    );
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["formwork"]["dropped_constraints"][0]["param"], "tools.f");
    let responses = json!({"model": "fake", "input": "hi", "max_output_tokens": 16,
        "text": {"format": {"type": "json_schema", "name": "n",
            "schema": format["json_schema"]["schema"]}}});
    let r = lenient
        .clone()
        .oneshot(post_to("/v1/responses", responses.to_string()))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[DROPPED_HEADER], header_value);
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["formwork"]["dropped_constraints"], want);
}

#[tokio::test]
async fn a_repeated_call_ends_the_list_and_is_dropped() {
    // Issue 18: SmolLM2 repeated `sum(1, 2)` until max_tokens. This fake model does the
    // same: it prefers `5` and then a newline, so every call is `{"numbers":[5]}`.
    let app = app_with(b"5\n", None, Duration::ZERO, |c| c.max_tokens_cap = 256);
    let (status, text) = call(&app, post(digit_tool_body(json!({})))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{text}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"numbers":[5]}"#);
    assert_eq!(v["formwork"]["duplicate_call_dropped"], true, "{text}");
    // Generation stopped at the repeat (two calls and a newline), not at the budget.
    let used = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((84..=90).contains(&used), "{used} tokens: {text}");
    // Streamed: the repeat is never sent, not even its start.
    let (_, streamed) = call(&app, post(digit_tool_body(json!({"stream": true})))).await;
    let (args, last) = streamed_calls(&streamed);
    assert_eq!(args, [r#"{"numbers":[5]}"#], "{streamed}");
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        last["formwork"]["duplicate_call_dropped"], true,
        "{streamed}"
    );
    assert!(!streamed.contains("\\n"), "no separator sent: {streamed}");
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_frees_the_worker() {
    // 64 tokens at 10 ms each: a stream left running holds the worker for 640 ms.
    let app = slow_app(b"a", None, Duration::from_millis(10));
    let start = Instant::now();
    for _ in 0..3 {
        // Each stream would run to the cap; reading one chunk and leaving must cancel it,
        // or the queue of two would fill and the last request get a 503.
        let r = app
            .clone()
            .oneshot(post(chat(json!({"stream": true, "max_tokens": 64}))))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let mut body = r.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        drop(body);
        // Cancelling takes up to one forward pass: `GET /health` then counts nothing
        // running or queued (the stream, left running, would take 640 ms).
        let mut idle = false;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let get = Request::get("/health").body(Body::empty()).unwrap();
            let (_, text) = call(&app, get).await;
            let v: Value = serde_json::from_str(&text).unwrap();
            if (&v["running"], &v["queued"]) == (&json!(0), &json!(0)) {
                idle = true;
                break;
            }
        }
        assert!(idle, "the left stream still holds the worker after 200 ms");
    }
    let (status, text) = call(&app, post(chat(json!({"max_tokens": 3})))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(
        start.elapsed() < Duration::from_millis(600),
        "{:?}",
        start.elapsed()
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "aaa");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

fn post_to(path: &str, body: impl Into<Body>) -> Request {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap()
}

fn messages_body(extra: Value) -> String {
    let mut body = json!({"model": "fake", "max_tokens": 48,
        "messages": [{"role": "user", "content": "hi"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body.to_string()
}

/// The `(event, data)` pairs of an SSE body with named events.
fn named_events(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut name = None;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = Some(n.to_string());
        } else if let Some(d) = line.strip_prefix("data: ") {
            let name = name.take().expect("every event is named");
            out.push((name, serde_json::from_str(d).unwrap()));
        }
    }
    out
}

#[tokio::test]
async fn messages_tool_use_streamed_and_whole_agree() {
    // The fake model prefers digits: the grammar forces the rest of the call.
    let app = app(b"42", None);
    let tools = json!([{"name": "submit_result", "input_schema": {"type": "object",
        "properties": {"score": {"type": "integer", "maximum": 99}},
        "required": ["score"]}}]);
    let body = |stream: bool| {
        messages_body(json!({"tools": tools, "stream": stream,
            "tool_choice": {"type": "tool", "name": "submit_result"}}))
    };
    let (status, text) = call(&app, post_to("/v1/messages", body(false))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let whole: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(whole["type"], "message");
    assert_eq!(whole["role"], "assistant");
    assert_eq!(whole["stop_reason"], "tool_use");
    assert_eq!(whole["stop_sequence"], Value::Null);
    let block = &whole["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "submit_result");
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    let score = block["input"]["score"].as_u64();
    assert!(score.is_some_and(|n| n <= 99), "{text}");
    assert_eq!(block["input"].as_object().unwrap().len(), 1, "{text}");
    assert!(whole["usage"]["output_tokens"].as_u64().unwrap() > 0);

    let (status, text) = call(&app, post_to("/v1/messages", body(true))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let events = named_events(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "content_block_start"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert!(names[2..names.len() - 3]
        .iter()
        .all(|n| *n == "content_block_delta"));
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str());
    }
    let start = &events[1].1["content_block"];
    assert_eq!(
        (&start["type"], &start["name"], &start["input"]),
        (&json!("tool_use"), &json!("submit_result"), &json!({}))
    );
    let args: String = events[2..events.len() - 3]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        block["input"]
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"], whole["usage"]);
    assert_eq!(
        events[0].1["message"]["usage"]["input_tokens"],
        whole["usage"]["input_tokens"]
    );
}

#[tokio::test]
async fn messages_errors_are_anthropic_bodies() {
    // Strict about model names, so that an unknown one is an error to check the shape of.
    let app = app_with(b"a", Some("k"), Duration::ZERO, |c| {
        c.strict_model_name = true
    });
    let with_key = |header: &str, value: &str, body: String| {
        let mut r = post_to("/v1/messages", body);
        r.headers_mut().insert(
            header::HeaderName::from_bytes(header.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        r
    };
    let (status, text) = call(
        &app,
        with_key("x-api-key", "wrong", messages_body(json!({}))),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&v["type"], &v["error"]["type"]),
        (&json!("error"), &json!("authentication_error"))
    );
    let no_budget = json!({"model": "fake", "messages": [{"role": "user", "content": "x"}]});
    let cases = [
        (
            no_budget.to_string(),
            StatusCode::BAD_REQUEST,
            "max_tokens: ",
        ),
        (
            messages_body(json!({"output_config": {"format": {"type": "json_schema",
                "schema": {"type": "object", "unevaluatedProperties": false}}}})),
            StatusCode::BAD_REQUEST,
            "`unevaluatedProperties` at /unevaluatedProperties",
        ),
        (
            messages_body(
                json!({"tools": [{"name": "f", "input_schema": {"type": "object",
                "properties": {"a": {"type": "array", "unevaluatedItems": false}}}}]}),
            ),
            StatusCode::BAD_REQUEST,
            "/properties/a/unevaluatedItems",
        ),
        (
            messages_body(json!({"model": "claude-9"})),
            StatusCode::NOT_FOUND,
            "model: ",
        ),
        ("{".to_string(), StatusCode::BAD_REQUEST, "malformed JSON"),
    ];
    for (body, want, says) in cases {
        let (status, text) = call(&app, with_key("x-api-key", "k", body)).await;
        assert_eq!(status, want, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["type"], "error", "{text}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        assert!(v["error"]["type"].is_string());
    }
    let (status, text) = call(
        &app,
        with_key(
            "authorization",
            "Bearer k",
            messages_body(json!({"max_tokens": 3})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["content"], json!([{"type": "text", "text": "aaa"}]));
    assert_eq!(v["stop_reason"], "max_tokens");
}

/// Issue 19: only Chat Completions has a field for reasoning; asked for on the Responses
/// or Messages API it is a 400 naming `formwork.think`, not silently dropped (0, off, is
/// accepted everywhere).
#[tokio::test]
async fn reasoning_elsewhere_than_chat_completions_is_refused() {
    let app = app(b"7", None);
    let responses = |think: u64| {
        json!({"model": "fake", "input": "hi", "max_output_tokens": 8,
            "formwork": {"think": think},
            "text": {"format": {"type": "json_schema", "name": "n", "strict": true,
                "schema": {"type": "integer", "maximum": 999}}}})
        .to_string()
    };
    let messages = |think: u64| {
        messages_body(json!({"formwork": {"think": think},
            "output_config": {"format": {"type": "json_schema",
                "schema": {"type": "integer", "maximum": 999}}}}))
    };
    for (path, body) in [
        ("/v1/responses", responses(4)),
        ("/v1/messages", messages(4)),
    ] {
        let (status, text) = call(&app, post_to(path, body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {text}");
        assert!(text.contains("formwork.think"), "{path}: {text}");
        assert!(text.contains("chat/completions"), "{path}: {text}");
    }
    for (path, body) in [
        ("/v1/responses", responses(0)),
        ("/v1/messages", messages(0)),
    ] {
        let (status, text) = call(&app, post_to(path, body)).await;
        assert_eq!(status, StatusCode::OK, "{path}: {text}");
        assert!(!text.contains("reasoning_content"), "{path}: {text}");
    }
}

#[tokio::test]
async fn responses_answer_a_schema_and_fail_closed() {
    let app = app(b"7", None);
    let body = json!({"model": "fake", "input": "hi", "max_output_tokens": 8,
        "text": {"format": {"type": "json_schema", "name": "n", "strict": true,
            "schema": {"type": "integer", "maximum": 999}}}});
    let (status, text) = call(&app, post_to("/v1/responses", body.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&v["object"], &v["status"]),
        (&json!("response"), &json!("completed"))
    );
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    let item = &v["output"][0];
    assert_eq!(
        (&item["type"], &item["role"]),
        (&json!("message"), &json!("assistant"))
    );
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(item["content"][0]["text"], "777");
    assert_eq!(v["usage"]["output_tokens"], 3);
    let bad = json!({"model": "fake", "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "n",
        "schema": {"type": "object", "unevaluatedProperties": false}}}});
    let (status, text) = call(&app, post_to("/v1/responses", bad.to_string())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["param"], "text.format", "{text}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`unevaluatedProperties` at /unevaluatedProperties"));
}

#[tokio::test]
async fn count_tokens_counts_the_rendered_prompt() {
    let app = app_with(b"a", None, Duration::ZERO, |c| c.strict_model_name = true);
    let body = json!({"model": "fake", "messages": [{"role": "user", "content": "hello"}]});
    let (status, text) = call(&app, post_to("/v1/messages/count_tokens", body.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // The test encoder is one token per byte of each turn's text.
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"input_tokens": 5})
    );
    let other = json!({"model": "claude-9", "messages": [{"role": "user", "content": "x"}]});
    let (status, text) = call(
        &app,
        post_to("/v1/messages/count_tokens", other.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["type"],
        "error"
    );
}

#[tokio::test]
async fn messages_stop_sequences_cut_the_text() {
    // The fake model writes `a` forever: `aaa` cuts it before anything is said.
    let app = app(b"a", None);
    let body = messages_body(json!({"stop_sequences": ["b", "aaa"], "max_tokens": 10}));
    let (status, text) = call(&app, post_to("/v1/messages", body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["stop_reason"], "stop_sequence", "{text}");
    assert_eq!(v["stop_sequence"], "aaa");
    assert_eq!(v["content"], json!([]));
}

#[tokio::test]
async fn the_playground_page_is_public_and_its_endpoint_streams_tokens_then_the_verdict() {
    let app = app(b"7}", Some("k"));
    let r = app
        .clone()
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the page needs no key");
    let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    // The endpoint needs the key like every other.
    let body = json!({"constraint": {"type": "json_schema", "schema": {"type": "object",
        "properties": {"n": {"type": "integer", "maximum": 99}}, "required": ["n"],
        "additionalProperties": false}}, "document": "n is 77", "max_tokens": 16});
    let (status, _) = call(&app, post_to("/v1/formwork/extract", body.to_string())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let keyed = |b: &Value| {
        Request::post("/v1/formwork/extract")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, "Bearer k")
            .body(Body::from(b.to_string()))
            .unwrap()
    };
    let (status, text) = call(&app, keyed(&body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let events = named_events(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"start"));
    assert_eq!(names.last(), Some(&"end"));
    let tokens: Vec<(String, bool)> = events
        .iter()
        .filter(|(n, _)| n == "tokens")
        .flat_map(|(_, v)| v["tokens"].as_array().unwrap().clone())
        .map(|t| (t["text"].as_str().unwrap().to_string(), t["forced"] == true))
        .collect();
    let written: String = tokens.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(written, r#"{"n":77}"#);
    // The key is forced, the digits sampled, the closing brace forced by `maximum`.
    let forced: String = tokens
        .iter()
        .filter(|t| t.1)
        .map(|t| t.0.as_str())
        .collect();
    assert_eq!(forced, r#"{"n":}"#);
    let end = &events.last().unwrap().1;
    assert_eq!(end["status"], "ok", "{end}");
    assert_eq!(end["output"], json!({"n": 77}));
    assert_eq!(
        (end["tokens"].as_u64(), end["forced_tokens"].as_u64()),
        (Some(8), Some(6))
    );
    // A refused schema: a 400 with keyword and pointer.
    let bad = json!({"constraint": {"type": "json_schema", "schema": {"type": "array",
        "unevaluatedItems": false}}, "document": "d"});
    let (status, text) = call(&app, keyed(&bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["keyword"], "unevaluatedItems");
    assert_eq!(e["error"]["pointer"], "/unevaluatedItems");
    assert_eq!(e["error"]["param"], "constraint.schema");
}

/// A busy server says when to come back: a full queue and a wait over the queue timeout are
/// 503s with `Retry-After` (the estimate, at least a second) and their own codes.
#[test]
fn busy_answers_are_503_with_retry_after() {
    use crate::error::ApiError;
    use crate::worker::SubmitError;
    use axum::response::IntoResponse;
    let cases = [
        (SubmitError::Full, "1", "queue_full"),
        (
            SubmitError::TooLong {
                estimate: Duration::from_millis(42_700),
            },
            "42",
            "queue_timeout",
        ),
        (
            SubmitError::TooLong {
                estimate: Duration::from_millis(300),
            },
            "1",
            "queue_timeout",
        ),
    ];
    for (e, after, code) in cases {
        let e = ApiError::from(e);
        assert_eq!(e.code, Some(code));
        let r = e.into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], after, "{code}");
    }
}
