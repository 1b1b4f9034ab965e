"""The official `openai` SDK, unchanged but for `base_url`, against `formwork serve`.

Runs against the server `serve.start()` starts on 127.0.0.1 with a free port and the default
model (one process for all test modules, killed at exit). A 135M model gives silly values: the
tests assert validity and types, not accuracy.
"""

import enum
import json
import time
import unittest
from typing import Annotated, List, Literal, Optional, Union

import openai
from pydantic import BaseModel, Field

from serve import KEY, MODEL, SERVER, OPENAI_NAME
import serve


def setUpModule():
    serve.start()


def client(**kw):
    return openai.OpenAI(base_url=SERVER["url"], api_key=KEY, max_retries=0, timeout=120, **kw)


def raw_post(path, body, key=KEY):
    """POSTs raw bytes; returns (status, parsed JSON body)."""
    return serve.raw_post(path, body, {"Authorization": f"Bearer {key}"})


class CalendarEvent(BaseModel):
    name: str
    date: str
    address: str
    participants: List[str]


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    city: str


class Ticket(BaseModel):
    title: str
    kind: Literal["bug", "feature"]
    priority: Priority
    assignee: Optional[str]
    address: Address


class Node(BaseModel):
    """Recursive: a `$ref` back to itself under `$defs`."""
    name: str
    children: List["Node"]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Pet(BaseModel):
    """A discriminated union: `oneOf` of two `$ref`s with OpenAPI's `discriminator`."""
    owner: str
    pet: Annotated[Union[Cat, Dog], Field(discriminator="kind")]


class TriageResult(BaseModel):
    category: Literal["bug", "question", "feature"]
    summary: str
    checks: List[str] = Field(max_length=3)


class Sum(BaseModel):
    """Adds numbers."""
    numbers: List[float]


SUM_TOOL = {"type": "function", "function": {
    "name": "sum", "description": "Add a list of numbers and return the total.",
    "parameters": {"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "number"}}},
                   "required": ["numbers"], "additionalProperties": False}}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
EVENT_MSG = [{"role": "system", "content": "Extract the event."},
             {"role": "user", "content": "Alice and Bob are going to a science fair on Friday."}]
SUM_MSG = [{"role": "user", "content": "What is 2.5 plus 4 plus 10? Use the sum tool."}]


def check_sum_call(test, call):
    test.assertTrue(call.id)
    test.assertEqual(call.type, "function")
    test.assertEqual(call.function.name, "sum")
    args = json.loads(call.function.arguments)
    test.assertEqual(list(args), ["numbers"])
    test.assertTrue(all(isinstance(x, (int, float)) for x in args["numbers"]))
    return args


class StructuredOutputs(unittest.TestCase):
    def test_parse_calendar_event(self):
        c = client().chat.completions.parse(model=OPENAI_NAME, messages=EVENT_MSG,
                                            response_format=CalendarEvent, max_tokens=96)
        msg = c.choices[0].message
        self.assertIsInstance(msg.parsed, CalendarEvent)
        self.assertTrue(all(isinstance(p, str) for p in msg.parsed.participants))
        self.assertEqual(c.choices[0].finish_reason, "stop")
        self.assertGreater(c.usage.completion_tokens, 0)
        self.assertEqual(c.model, MODEL)

    def test_parse_nested_optional_literal_enum(self):
        c = client().chat.completions.parse(
            model=OPENAI_NAME, max_tokens=128, response_format=Ticket,
            messages=[{"role": "user", "content": "The login page at 1 Main St, Springfield crashes. Urgent."}])
        t = c.choices[0].message.parsed
        self.assertIsInstance(t, Ticket)
        self.assertIsInstance(t.priority, Priority)
        self.assertIn(t.kind, ("bug", "feature"))
        self.assertIsInstance(t.address, Address)
        self.assertTrue(t.assignee is None or isinstance(t.assignee, str))

    def test_parse_recursive_model(self):
        c = client().chat.completions.parse(
            model=OPENAI_NAME, max_tokens=96, response_format=Node,
            messages=[{"role": "user", "content": "A tree: root has children a and b; a has child c."}])
        self.assertEqual(c.choices[0].finish_reason, "stop")
        tree = c.choices[0].message.parsed
        self.assertIsInstance(tree, Node)
        stack = [tree]
        while stack:
            node = stack.pop()
            self.assertIsInstance(node, Node)
            stack.extend(node.children)

    def test_parse_discriminated_union(self):
        c = client().chat.completions.parse(
            model=OPENAI_NAME, max_tokens=64, response_format=Pet,
            messages=[{"role": "user", "content": "Ana has a dog called Rex who is a good boy."}])
        pet = c.choices[0].message.parsed
        self.assertIsInstance(pet, Pet)
        self.assertIsInstance(pet.pet, (Cat, Dog))
        # The discriminator picked the member whose other field is there, rightly typed.
        raw = json.loads(c.choices[0].message.content)["pet"]
        self.assertEqual(set(raw), {"kind", "lives"} if raw["kind"] == "cat" else {"kind", "good"})

    def test_beta_parse_is_the_same_call(self):
        kw = dict(model=OPENAI_NAME, messages=EVENT_MSG, response_format=CalendarEvent, max_tokens=96,
                  temperature=0, seed=5)
        beta = client().beta.chat.completions.parse(**kw).choices[0].message.parsed
        self.assertIsInstance(beta, CalendarEvent)
        self.assertEqual(beta, client().chat.completions.parse(**kw).choices[0].message.parsed)

    def test_json_object_mode_gives_json(self):
        c = client().chat.completions.create(model=OPENAI_NAME, messages=EVENT_MSG, max_tokens=48,
                                             response_format={"type": "json_object"})
        if c.choices[0].finish_reason == "stop":
            json.loads(c.choices[0].message.content)

    def test_a_repeated_schema_hits_the_grammar_cache(self):
        for _ in range(2):
            client().chat.completions.parse(model=OPENAI_NAME, messages=EVENT_MSG, max_tokens=64,
                                            response_format=CalendarEvent)
        # The server logs a request after answering it, and the log reaches SERVER["lines"]
        # through a reader thread: wait for the line rather than race it.
        deadline = time.time() + 10
        while not any(" cache=hit" in line for line in SERVER["lines"]):
            if time.time() > deadline:
                self.fail("no cache=hit line in the server log")
            time.sleep(0.05)

    def test_stream_with_schema_equals_the_non_streamed_result(self):
        kw = dict(model=OPENAI_NAME, messages=EVENT_MSG, response_format=CalendarEvent,
                  max_tokens=96, temperature=0, seed=7)
        plain = client().chat.completions.parse(**kw).choices[0].message.parsed
        kinds = []
        with client().chat.completions.stream(**kw, stream_options={"include_usage": True}) as s:
            for event in s:
                kinds.append(event.type)
            final = s.get_final_completion()
        self.assertIn("content.delta", kinds)
        self.assertIn("content.done", kinds)
        self.assertEqual(final.choices[0].message.parsed, plain)
        self.assertGreater(final.usage.completion_tokens, 0)


class Tools(unittest.TestCase):
    def test_tool_loop_required_then_text_answer(self):
        cl = client()
        first = cl.chat.completions.create(model=OPENAI_NAME, messages=SUM_MSG, tools=[SUM_TOOL],
                                           tool_choice="required", max_tokens=64)
        self.assertEqual(first.choices[0].finish_reason, "tool_calls")
        msg = first.choices[0].message
        self.assertIsNone(msg.content)
        args = check_sum_call(self, msg.tool_calls[0])
        result = sum(args["numbers"])
        messages = SUM_MSG + [msg.model_dump(exclude_none=True),
                              {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": str(result)}]
        second = cl.chat.completions.create(model=OPENAI_NAME, messages=messages, tools=[SUM_TOOL],
                                            tool_choice="none", max_tokens=32)
        answer = second.choices[0].message
        self.assertFalse(answer.tool_calls)
        self.assertTrue(answer.content)

    def test_named_tool_choice_calls_that_tool(self):
        c = client().chat.completions.create(
            model=OPENAI_NAME, messages=SUM_MSG, tools=[WEATHER_TOOL, SUM_TOOL], max_tokens=64,
            tool_choice={"type": "function", "function": {"name": "sum"}})
        check_sum_call(self, c.choices[0].message.tool_calls[0])

    def test_allowed_tools_restricts_the_call(self):
        # The weather tool is listed but not allowed: the call can only be `sum`.
        c = client().chat.completions.create(
            model=OPENAI_NAME, messages=[{"role": "user", "content": "What's the weather in Lisbon?"}],
            tools=[WEATHER_TOOL, SUM_TOOL], max_tokens=64,
            tool_choice={"type": "allowed_tools", "allowed_tools": {
                "mode": "required", "tools": [{"type": "function", "function": {"name": "sum"}}]}})
        self.assertEqual(c.choices[0].finish_reason, "tool_calls")
        check_sum_call(self, c.choices[0].message.tool_calls[0])

    def test_parallel_tool_calls_true_and_false(self):
        kw = dict(model=OPENAI_NAME, messages=[{"role": "user", "content": "Add 1 and 2, then add 3 and 4."}],
                  tools=[SUM_TOOL], tool_choice="required", max_tokens=160)
        c = client().chat.completions.create(**kw, parallel_tool_calls=True)
        calls = c.choices[0].message.tool_calls
        self.assertGreaterEqual(len(calls), 1)
        for call in calls:
            check_sum_call(self, call)
        self.assertEqual(len({call.id for call in calls}), len(calls))
        one = client().chat.completions.create(**kw, parallel_tool_calls=False)
        self.assertEqual(len(one.choices[0].message.tool_calls), 1)
        check_sum_call(self, one.choices[0].message.tool_calls[0])

    def test_a_repeated_call_ends_the_list_and_is_dropped(self):
        # Issue 18: SmolLM2-135M repeated this call until max_tokens (9 calls, 8 identical).
        c = client().chat.completions.create(
            model=OPENAI_NAME, messages=[{"role": "user", "content": "What is 1 plus 2?"}],
            tools=[SUM_TOOL], tool_choice="required", max_tokens=160)
        calls = c.choices[0].message.tool_calls
        self.assertEqual(c.choices[0].finish_reason, "tool_calls")
        arguments = [call.function.arguments for call in calls]
        self.assertEqual(len(set(arguments)), len(arguments), "no call repeats another")
        for call in calls:
            check_sum_call(self, call)
        self.assertTrue(c.model_extra["formwork"]["duplicate_call_dropped"])
        self.assertLess(c.usage.completion_tokens, 160, "generation stopped at the repeat")

    def test_auto_gives_a_valid_call_or_text(self):
        c = client().chat.completions.create(model=OPENAI_NAME, messages=SUM_MSG,
                                             tools=[WEATHER_TOOL, SUM_TOOL], max_tokens=48)
        m = c.choices[0].message
        if m.tool_calls:
            self.assertEqual(c.choices[0].finish_reason, "tool_calls")
            call = m.tool_calls[0]
            self.assertIn(call.function.name, ("sum", "weather"))
            json.loads(call.function.arguments)
        else:
            self.assertIsInstance(m.content, str)

    def test_pydantic_tool_streamed_equals_non_streamed(self):
        kw = dict(model=OPENAI_NAME, messages=SUM_MSG, tools=[openai.pydantic_function_tool(Sum)],
                  tool_choice="required", max_tokens=64, temperature=0, seed=3)
        plain = client().chat.completions.parse(**kw).choices[0].message.tool_calls[0]
        self.assertIsInstance(plain.function.parsed_arguments, Sum)
        with client().chat.completions.stream(**kw) as s:
            kinds = [e.type for e in s]
            final = s.get_final_completion()
        self.assertIn("tool_calls.function.arguments.delta", kinds)
        streamed = final.choices[0].message.tool_calls[0]
        self.assertEqual(streamed.function.parsed_arguments, plain.function.parsed_arguments)
        self.assertTrue(streamed.id)


RESPONSES_SUM_TOOL = {"type": "function", "name": "sum", "strict": True,
                      "description": SUM_TOOL["function"]["description"],
                      "parameters": SUM_TOOL["function"]["parameters"]}


class Responses(unittest.TestCase):
    def test_parse_triage_result_with_at_most_three_checks(self):
        r = client().responses.parse(
            model=OPENAI_NAME, instructions="Triage the user's report.", text_format=TriageResult,
            input="The app crashes every time I upload a 2 GB video from my phone.",
            max_output_tokens=160)
        self.assertEqual(r.object, "response")
        self.assertEqual(r.status, "completed")
        parsed = r.output_parsed
        self.assertIsInstance(parsed, TriageResult)
        self.assertLessEqual(len(parsed.checks), 3)
        self.assertEqual(TriageResult.model_validate_json(r.output_text), parsed)
        self.assertEqual(r.output[0].content[0].annotations, [])
        self.assertEqual(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens)

    def test_streamed_response_equals_the_created_one(self):
        kw = dict(model=OPENAI_NAME, instructions="Triage the user's report.", text_format=TriageResult,
                  input="The app crashes every time I upload a 2 GB video from my phone.",
                  max_output_tokens=160)
        plain = client().responses.parse(**kw)
        with client().responses.stream(**kw) as s:
            kinds = [e.type for e in s]
            final = s.get_final_response()
        self.assertEqual(kinds[0], "response.created")
        self.assertIn("response.output_text.delta", kinds)
        self.assertEqual(kinds[-1], "response.completed")
        self.assertIsInstance(final.output_parsed, TriageResult)
        self.assertEqual(final.output_parsed, plain.output_parsed)
        self.assertEqual(final.output_text, plain.output_text)
        self.assertEqual(final.usage.output_tokens, plain.usage.output_tokens)
        # A streamed function call: its arguments arrive as deltas.
        tool_kw = dict(model=OPENAI_NAME, input="What is 2.5 plus 4? Use the sum tool.",
                       tools=[RESPONSES_SUM_TOOL], tool_choice="required", max_output_tokens=64)
        with client().responses.stream(**tool_kw) as s:
            kinds = [e.type for e in s]
            final = s.get_final_response()
        self.assertIn("response.function_call_arguments.delta", kinds)
        self.assertEqual(final.output[0].type, "function_call")
        self.assertEqual(list(json.loads(final.output[0].arguments)), ["numbers"])

    def test_function_call_then_its_output_then_text(self):
        cl = client()
        question = [{"role": "user", "content": "What is 2.5 plus 4 plus 10? Use the sum tool."}]
        first = cl.responses.create(model=OPENAI_NAME, input=question, tools=[RESPONSES_SUM_TOOL],
                                    tool_choice="required", max_output_tokens=64)
        call = first.output[0]
        self.assertEqual(call.type, "function_call")
        self.assertEqual(call.name, "sum")
        self.assertTrue(call.call_id)
        args = json.loads(call.arguments)
        self.assertEqual(list(args), ["numbers"])
        self.assertEqual(first.output_text, "")
        follow = question + [call.model_dump(exclude_none=True),
                             {"type": "function_call_output", "call_id": call.call_id,
                              "output": str(sum(args["numbers"]))}]
        second = cl.responses.create(model=OPENAI_NAME, input=follow, tools=[RESPONSES_SUM_TOOL],
                                     tool_choice="none", max_output_tokens=24)
        self.assertEqual(second.output[0].type, "message")
        self.assertTrue(second.output_text)

    def test_unsupported_schema_is_a_400_naming_text_format(self):
        schema = {"type": "object", "properties": {"tags": {"type": "array", "unevaluatedItems": False}}}
        with self.assertRaises(openai.BadRequestError) as cm:
            client().responses.create(model=OPENAI_NAME, input="x", text={"format": {
                "type": "json_schema", "name": "x", "schema": schema}})
        self.assertEqual(cm.exception.body["param"], "text.format")
        self.assertIn("/properties/tags/unevaluatedItems", cm.exception.body["message"])


class FailClosed(unittest.TestCase):
    def assert_still_serving(self):
        c = client().chat.completions.create(model=OPENAI_NAME, messages=EVENT_MSG, max_tokens=4)
        self.assertTrue(c.choices[0].message.content is not None)

    def test_unsupported_schema_is_a_400_naming_keyword_and_pointer(self):
        schema = {"type": "object", "properties": {"tags": {"type": "array", "unevaluatedItems": False}}}
        with self.assertRaises(openai.BadRequestError) as cm:
            client().chat.completions.create(
                model=OPENAI_NAME, messages=EVENT_MSG,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        err = cm.exception.body
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("unevaluatedItems", err["message"])
        self.assertIn("/properties/tags/unevaluatedItems", err["message"])
        self.assertEqual(err["type"], "invalid_request_error")
        self.assertEqual(err["param"], "response_format")
        with self.assertRaises(openai.BadRequestError):
            bad_tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
            client().chat.completions.create(model=OPENAI_NAME, messages=EVENT_MSG, tools=[bad_tool])
        self.assert_still_serving()

    def test_bad_requests_are_clear_4xx(self):
        status, body = raw_post("/chat/completions", b'{"model": "smollm2-135m", "messages": [')
        self.assertEqual(status, 400)
        self.assertIn("malformed JSON", body["error"]["message"])
        with self.assertRaises(openai.BadRequestError) as cm:
            client().chat.completions.create(model=OPENAI_NAME, messages=EVENT_MSG, temperature="hot")
        self.assertEqual(cm.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError) as cm:
            client().chat.completions.create(model=OPENAI_NAME, messages=EVENT_MSG, max_tokens=100000)
        self.assertEqual(cm.exception.body["param"], "max_tokens")
        big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * (2 << 20)}]})
        status, body = raw_post("/chat/completions", big.encode())
        self.assertEqual(status, 413)
        self.assertIn("limit", body["error"]["message"])
        with self.assertRaises(openai.AuthenticationError):
            openai.OpenAI(base_url=SERVER["url"], api_key="wrong", max_retries=0).models.list()
        self.assertEqual([m.id for m in client().models.list()], [MODEL])
        self.assert_still_serving()


if __name__ == "__main__":
    unittest.main()


class ModelNames(unittest.TestCase):
    """Any model name is answered by the served model, which the response names; a server
    started with --strict-model-name answers only its names (404 for others)."""

    def test_any_name_is_answered_by_the_served_model(self):
        for name in ["gpt-4o-mini", "gpt-9", "my-local-model"]:
            c = client().chat.completions.create(model=name, messages=EVENT_MSG, max_tokens=4)
            self.assertEqual(c.model, MODEL, name)
        names = [m.id for m in client().models.list()]
        self.assertEqual(names, [MODEL])

    def test_strict_names_answer_only_theirs(self):
        server = serve.launch(["--strict-model-name", "--served-model-name", "gpt-4o-mini",
                               "--max-tokens-cap", "16"])
        try:
            cl = openai.OpenAI(base_url=server["url"], api_key=KEY, max_retries=0, timeout=120)
            self.assertEqual([m.id for m in cl.models.list()], [MODEL, "gpt-4o-mini"])
            for name in [MODEL, "gpt-4o-mini"]:
                c = cl.chat.completions.create(model=name, messages=EVENT_MSG, max_tokens=4)
                self.assertEqual(c.model, MODEL)
            with self.assertRaises(openai.NotFoundError) as cm:
                cl.chat.completions.create(model="gpt-9", messages=EVENT_MSG)
            self.assertEqual(cm.exception.body["code"], "model_not_found")
            self.assertIn("`gpt-4o-mini`", cm.exception.body["message"])
        finally:
            serve.stop(server)


class Lenient(unittest.TestCase):
    """A server started with `--lenient` (its own process): an unsupported keyword is dropped,
    not refused, and the response says so. The shared server refuses it (FailClosed)."""

    SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}},
              "required": ["name"], "additionalProperties": False, "unevaluatedProperties": False}

    @classmethod
    def setUpClass(cls):
        cls.server = serve.launch(["--lenient", "--max-tokens-cap", "64"])

    @classmethod
    def tearDownClass(cls):
        serve.stop(cls.server)

    def test_a_dropped_keyword_is_named_in_the_body_and_a_header(self):
        cl = openai.OpenAI(base_url=self.server["url"], api_key=KEY, max_retries=0, timeout=120)
        raw = cl.chat.completions.with_raw_response.create(
            model=OPENAI_NAME, messages=EVENT_MSG, max_tokens=48,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": self.SCHEMA}})
        self.assertEqual(raw.headers["formwork-dropped-constraints"],
                         "response_format:unevaluatedProperties@/unevaluatedProperties")
        c = raw.parse()
        self.assertEqual(c.model_extra["formwork"]["dropped_constraints"], [
            {"param": "response_format", "keyword": "unevaluatedProperties",
             "pointer": "/unevaluatedProperties"}])
        # The rest is enforced.
        if c.choices[0].finish_reason == "stop":
            self.assertEqual(list(json.loads(c.choices[0].message.content)), ["name"])
        # Nothing to drop: an empty list, no header.
        raw = cl.chat.completions.with_raw_response.create(
            model=OPENAI_NAME, messages=EVENT_MSG, max_tokens=4)
        self.assertNotIn("formwork-dropped-constraints", raw.headers)
        self.assertEqual(raw.parse().model_extra["formwork"]["dropped_constraints"], [])
