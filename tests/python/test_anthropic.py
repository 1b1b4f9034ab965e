"""The official `anthropic` SDK, unchanged but for `base_url`, against `formwork serve`'s
`POST /v1/messages`.

Runs against the server `serve.start()` starts (one process for all test modules). The SDK
sends the key as `x-api-key` and appends `/v1/messages` to its base URL. A 135M model gives
silly values: the tests assert validity and types, not accuracy.
"""

import json
import unittest
from typing import List

import anthropic
from pydantic import BaseModel

from serve import KEY, MODEL, SERVER, ANTHROPIC_NAME
import serve


def setUpModule():
    serve.start()


def client(key=KEY):
    base = SERVER["url"].removesuffix("/v1")
    return anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=120)


SUBMIT_TOOL = {
    "name": "submit_result",
    "description": "Submit the order read from the message.",
    "input_schema": {"type": "object",
                     "properties": {"customer": {"type": "string"}, "total": {"type": "number"}},
                     "required": ["customer", "total"], "additionalProperties": False}}
FORCE_SUBMIT = {"type": "tool", "name": "submit_result"}
ORDER_MSG = [{"role": "user", "content": "Order 4471: Dana Reyes paid 37.50 dollars. Submit the result."}]


class Order(BaseModel):
    customer: str
    items: List[str]


def check_submit(test, message):
    """The message is one or more submit_result calls (parallel calls are allowed unless
    disabled), each input with both fields, rightly typed; returns the blocks."""
    test.assertEqual(message.type, "message")
    test.assertEqual(message.role, "assistant")
    test.assertEqual(message.model, MODEL)
    test.assertEqual(message.stop_reason, "tool_use")
    test.assertGreaterEqual(len(message.content), 1)
    for block in message.content:
        test.assertEqual(block.type, "tool_use")
        test.assertEqual(block.name, "submit_result")
        test.assertTrue(block.id.startswith("toolu_"))
        test.assertIsInstance(block.input, dict)
        test.assertEqual(set(block.input), {"customer", "total"})
        test.assertIsInstance(block.input["customer"], str)
        test.assertIsInstance(block.input["total"], (int, float))
        test.assertNotIsInstance(block.input["total"], bool)
    test.assertEqual(len({b.id for b in message.content}), len(message.content))
    test.assertGreater(message.usage.input_tokens, 0)
    test.assertGreater(message.usage.output_tokens, 0)
    return message.content


class Messages(unittest.TestCase):
    def test_forced_tool_then_an_error_result_then_a_corrected_call(self):
        cl = client()
        kw = dict(model=ANTHROPIC_NAME, max_tokens=96, tools=[SUBMIT_TOOL], tool_choice=FORCE_SUBMIT)
        first = cl.messages.create(messages=ORDER_MSG, **kw)
        blocks = check_submit(self, first)
        retry = ORDER_MSG + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in blocks]},
            {"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": b.id, "is_error": True,
                "content": "Rejected: total must be the amount paid, and customer the full name."}
                for b in blocks]}]
        second = cl.messages.create(messages=retry, **kw)
        again = check_submit(self, second)
        self.assertNotEqual(second.id, first.id)
        self.assertNotEqual(again[0].id, blocks[0].id)

    def test_disable_parallel_tool_use_gives_exactly_one_call(self):
        c = client().messages.create(
            model=ANTHROPIC_NAME, max_tokens=160, messages=ORDER_MSG, tools=[SUBMIT_TOOL],
            tool_choice={**FORCE_SUBMIT, "disable_parallel_tool_use": True})
        self.assertEqual(len(check_submit(self, c)), 1)

    def test_any_and_auto_tool_choice(self):
        c = client().messages.create(model=ANTHROPIC_NAME, max_tokens=96, messages=ORDER_MSG,
                                     tools=[SUBMIT_TOOL], tool_choice={"type": "any"})
        check_submit(self, c)
        c = client().messages.create(model=ANTHROPIC_NAME, max_tokens=48, messages=ORDER_MSG,
                                     system="You submit orders.", tools=[SUBMIT_TOOL])
        if c.stop_reason == "tool_use":
            check_submit(self, c)
        else:
            self.assertIn(c.stop_reason, ("end_turn", "max_tokens"))
            self.assertEqual([b.type for b in c.content], ["text"])

    def test_streamed_message_equals_the_created_one(self):
        for kw in [dict(tools=[SUBMIT_TOOL], tool_choice=FORCE_SUBMIT, max_tokens=96),
                   dict(max_tokens=24)]:
            # No temperature: this SDK no longer sends one, and the server is greedy without it.
            kw.update(model=ANTHROPIC_NAME, messages=ORDER_MSG)
            plain = client().messages.create(**kw)
            with client().messages.stream(**kw) as s:
                kinds = [e.type for e in s]
                final = s.get_final_message()
            self.assertEqual(kinds[0], "message_start")
            self.assertIn("content_block_stop", kinds)
            self.assertIn("input_json" if "tools" in kw else "text", kinds)
            self.assertEqual(kinds[-1], "message_stop")
            # Ids differ per request; everything else is the same greedy output. The `formwork`
            # extension comes on a stream's message_delta event, which the SDK's accumulator
            # does not copy onto the message.
            strip = lambda m: m.model_dump(exclude={"id": True, "formwork": True,
                                                    "content": {"__all__": {"id"}}})
            self.assertEqual(strip(final), strip(plain))

    def test_count_tokens_is_the_prompt_a_create_sends(self):
        kw = dict(model=ANTHROPIC_NAME, messages=ORDER_MSG, tools=[SUBMIT_TOOL], tool_choice=FORCE_SUBMIT)
        counted = client().messages.count_tokens(**kw)
        created = client().messages.create(max_tokens=96, **kw)
        self.assertGreater(counted.input_tokens, 0)
        self.assertEqual(counted.input_tokens, created.usage.input_tokens)

    def test_output_format_parses_into_the_model(self):
        m = client().messages.parse(
            model=ANTHROPIC_NAME, max_tokens=96, output_format=Order,
            messages=[{"role": "user", "content": "Dana ordered a lamp and two chairs."}])
        self.assertIn(m.stop_reason, ("end_turn",))
        self.assertIsInstance(m.parsed_output, Order)
        self.assertTrue(all(isinstance(i, str) for i in m.parsed_output.items))

    def test_stop_sequences_cut_free_text(self):
        plain = client().messages.create(model=ANTHROPIC_NAME, max_tokens=24, messages=ORDER_MSG)
        text = plain.content[0].text
        self.assertGreater(len(text), 2, text)
        stop = text[1:3]
        cut = client().messages.create(model=ANTHROPIC_NAME, max_tokens=24, messages=ORDER_MSG,
                                       stop_sequences=[stop])
        self.assertEqual(cut.stop_reason, "stop_sequence")
        self.assertEqual(cut.stop_sequence, stop)
        self.assertEqual("".join(b.text for b in cut.content), text[:text.index(stop)])


class FailClosed(unittest.TestCase):
    def test_unsupported_schema_keyword_is_a_400_naming_keyword_and_pointer(self):
        schema = {"type": "object", "properties": {"tags": {"type": "array", "unevaluatedItems": False}}}
        with self.assertRaises(anthropic.BadRequestError) as cm:
            client().messages.create(model=ANTHROPIC_NAME, max_tokens=32, messages=ORDER_MSG,
                                     tools=[{"name": "f", "input_schema": schema}])
        body = cm.exception.body
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(body["type"], "error")
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        self.assertIn("unevaluatedItems", body["error"]["message"])
        self.assertIn("/properties/tags/unevaluatedItems", body["error"]["message"])
        with self.assertRaises(anthropic.BadRequestError) as cm:
            client().messages.create(model=ANTHROPIC_NAME, max_tokens=32, messages=ORDER_MSG,
                                     output_config={"format": {"type": "json_schema", "schema": schema}})
        self.assertIn("/properties/tags/unevaluatedItems", cm.exception.body["error"]["message"])
        # Still serving.
        c = client().messages.create(model=ANTHROPIC_NAME, max_tokens=4, messages=ORDER_MSG)
        self.assertEqual(c.stop_reason, "max_tokens")

    def test_missing_max_tokens_is_a_400(self):
        body = json.dumps({"model": MODEL, "messages": ORDER_MSG}).encode()
        status, err = serve.raw_post("/messages", body, {"x-api-key": KEY})
        self.assertEqual(status, 400)
        self.assertEqual(err["type"], "error")
        self.assertEqual(err["error"]["type"], "invalid_request_error")
        self.assertTrue(err["error"]["message"].startswith("max_tokens:"), err)

    def test_wrong_key_and_any_model_name(self):
        with self.assertRaises(anthropic.AuthenticationError):
            client(key="wrong").messages.create(model=ANTHROPIC_NAME, max_tokens=4, messages=ORDER_MSG)
        # Any name is answered by the served model, which the message names (the strict
        # server's 404 is tested in test_openai.ModelNames and in Rust, in Anthropic's shape).
        m = client().messages.create(model="claude-9", max_tokens=4, messages=ORDER_MSG)
        self.assertEqual(m.model, MODEL)


if __name__ == "__main__":
    unittest.main()
