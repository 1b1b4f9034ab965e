"""Reasoning before a constrained answer (issue 19) through the official `openai` SDK.

A request asks for it with `extra_body={"formwork": {"think": N}}` (the server's `--think N`
makes it the default; the Responses API, whose reply has no field for it, refuses it). The reasoning comes back beside the answer, in the message's
`reasoning_content` (streamed: `delta.reasoning_content`), as llama.cpp's and vLLM's servers
return it; the content, and so `message.parsed`, is the schema-valid answer alone. Runs
against the shared server of `serve.start()` (a 135M model: the tests assert where things
are, and validity, not accuracy).
"""

import json
import unittest

import openai
from pydantic import BaseModel

from serve import KEY, MODEL, SERVER, OPENAI_NAME
import serve


def setUpModule():
    serve.start()


def client():
    return openai.OpenAI(base_url=SERVER["url"], api_key=KEY, max_retries=0, timeout=120)


class Lessons(BaseModel):
    done_lessons: int
    total_lessons: int


MESSAGES = [{"role": "user", "content":
             "Course progress: I have finished 5 of the 12 lessons of Rust for Beginners."}]
THINK = {"formwork": {"think": 24}}


class Reasoning(unittest.TestCase):
    def kw(self):
        return dict(model=OPENAI_NAME, messages=MESSAGES, response_format=Lessons, max_tokens=48,
                    temperature=0, seed=3, extra_body=THINK)

    def test_parsed_is_the_answer_and_the_reasoning_has_its_own_field(self):
        c = client().chat.completions.parse(**self.kw())
        msg = c.choices[0].message
        self.assertIsInstance(msg.parsed, Lessons)
        # The content is the answer alone: JSON of the schema, the reasoning nowhere in it.
        self.assertEqual(Lessons.model_validate(json.loads(msg.content)), msg.parsed)
        reasoning = msg.model_extra["reasoning_content"]
        self.assertIsInstance(reasoning, str)
        self.assertTrue(reasoning.strip(), "the model reasoned")
        self.assertNotIn(reasoning.strip(), msg.content)
        details = c.usage.completion_tokens_details
        self.assertGreater(details.reasoning_tokens, 0)
        self.assertLessEqual(details.reasoning_tokens, 24)
        self.assertGreater(c.usage.completion_tokens, details.reasoning_tokens)

        # Without the field this server does not reason: no reasoning field, same shape; nor
        # with the field at 0.
        for extra in ({}, {"formwork": {"think": 0}}):
            c = client().chat.completions.parse(**dict(self.kw(), extra_body=extra))
            msg = c.choices[0].message
            self.assertIsInstance(msg.parsed, Lessons)
            self.assertNotIn("reasoning_content", msg.model_extra or {}, extra)
            self.assertEqual(c.usage.completion_tokens_details.reasoning_tokens, 0, extra)

    def test_streamed_reasoning_comes_first_and_parsed_equals_the_whole_answer(self):
        whole = client().chat.completions.parse(**self.kw()).choices[0].message
        reasoning, content = "", ""
        with client().chat.completions.stream(**self.kw()) as s:
            for event in s:
                if event.type != "chunk" or not event.chunk.choices:
                    continue
                delta = event.chunk.choices[0].delta
                piece = (delta.model_extra or {}).get("reasoning_content")
                if piece is not None:
                    self.assertEqual(content, "", "reasoning after the answer started")
                    self.assertFalse(delta.content)
                    reasoning += piece
                if delta.content:
                    content += delta.content
            final = s.get_final_completion()
        # Greedy: the stream says what the whole response said, each part in its place.
        self.assertEqual(reasoning, whole.model_extra["reasoning_content"])
        self.assertEqual(content, whole.content)
        self.assertEqual(final.choices[0].message.parsed, whole.parsed)

    def test_free_text_cannot_ask_for_reasoning(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model=OPENAI_NAME, messages=MESSAGES, max_tokens=8,
                                             extra_body=THINK)
        self.assertEqual(e.exception.body["param"], "formwork.think")

    def test_the_responses_api_refuses_reasoning_instead_of_dropping_it(self):
        # Its reply has no field for the reasoning: asking is a 400, not a silent no.
        with self.assertRaises(openai.BadRequestError) as e:
            client().responses.parse(model=OPENAI_NAME, input=MESSAGES[0]["content"],
                                     text_format=Lessons, max_output_tokens=32,
                                     extra_body=THINK)
        self.assertEqual(e.exception.body["param"], "formwork.think")
        self.assertIn("/v1/chat/completions", e.exception.body["message"])


class ServerDefault(unittest.TestCase):
    """`formwork serve --think N`: every constrained Chat Completions request reasons unless
    it says `"formwork": {"think": 0}`."""

    def test_the_server_flag_makes_reasoning_the_default(self):
        server = serve.launch(["--think", "8", "--think-trigger", "Final:"])
        try:
            c = openai.OpenAI(base_url=server["url"], api_key=KEY, max_retries=0, timeout=120)
            kw = dict(model=OPENAI_NAME, messages=MESSAGES, response_format=Lessons, max_tokens=48,
                      temperature=0)
            r = c.chat.completions.parse(**kw)
            msg = r.choices[0].message
            self.assertIsInstance(msg.parsed, Lessons)
            self.assertTrue((msg.model_extra or {}).get("reasoning_content", "").strip())
            self.assertIn(r.usage.completion_tokens_details.reasoning_tokens, range(1, 9))
            r = c.chat.completions.parse(**kw, extra_body={"formwork": {"think": 0}})
            self.assertNotIn("reasoning_content", r.choices[0].message.model_extra or {})
            self.assertEqual(r.usage.completion_tokens_details.reasoning_tokens, 0)
        finally:
            serve.stop(server)


if __name__ == "__main__":
    unittest.main()
