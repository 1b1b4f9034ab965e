"""The playground page (`GET /` on `formwork serve`) and an eval HTML report in headless
Chromium (issue 21).

Drives Debian's `chromium` through Debian's `chromium-driver` with the pinned `selenium`
(given both paths, so nothing is downloaded). Skipped, saying why, when either is missing
(`scripts/test` installs them with apt-get where it can).

Against the shared test server (loopback, API key, SmolLM2): loads `/#key=KEY`, runs
the shipped course example (schema with a grounded field + document) and waits for the
stream's end: the valid badge, the parsed fields, forced and sampled tokens shown apart, the
grounded quote highlighted in the document; the same page at 390x844 without sideways
scrolling; a refused schema shows its keyword and pointer beside the schema; keyboard only
(tab order, Enter in a field runs it). Then a tiny `formwork eval --format html` run (two
configurations, two cases, ~30 s) opened from disk: tables, charts and the A/B verdict render.
No test may log a console error. Screenshots go to target/browser-test/.

Costs about 1-2 minutes in CI (debug build; most of it the two decodes and the eval run).
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from serve import KEY, MODEL, ROOT, SERVER
import serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
OUT = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "browser-test")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
BROWSER = {}


def setUpModule():
    missing = [p for p in (CHROMIUM, DRIVER) if not os.access(p, os.X_OK)]
    if missing:
        raise unittest.SkipTest(f"no headless browser here ({', '.join(missing)} missing; "
                                "apt-get install chromium chromium-driver): browser tests skipped")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    serve.start()
    os.makedirs(OUT, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="formwork-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={profile}", "--window-size=1280,800"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_window_size(1280, 800)
    BROWSER.update(driver=driver, profile=profile)


def tearDownModule():
    if "driver" in BROWSER:
        BROWSER["driver"].quit()
        shutil.rmtree(BROWSER["profile"], ignore_errors=True)


def page_url():
    return SERVER["url"].removesuffix("/v1") + "/"


class Page:
    """Helpers over the shared driver."""

    def __init__(self, test):
        self.test = test
        self.d = BROWSER["driver"]

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def by_id(self, id_):
        from selenium.webdriver.common.by import By
        return self.d.find_element(By.ID, id_)

    def css(self, selector):
        from selenium.webdriver.common.by import By
        return self.d.find_elements(By.CSS_SELECTOR, selector)

    def viewport(self, width, height):
        """An exact viewport (the window's size would include the browser's frame)."""
        self.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})

    def open(self):
        self.viewport(1280, 800)
        # The key in the fragment: the page's first request already carries it.
        self.d.get(page_url() + "#key=" + KEY)
        self.wait(lambda: self.js("return document.getElementById('model').options.length") > 0,
                  "the model list")

    def wait(self, ok, what, timeout=300):
        deadline = time.time() + timeout
        while not ok():
            if time.time() > deadline:
                self.test.fail(f"waited {timeout} s for {what}")
            time.sleep(0.2)

    def state(self):
        return self.js("return document.body.dataset.state")

    def set_text(self, id_, text):
        # Sets a field the way typing would end (input + change events), without typing
        # a long schema key by key.
        self.js("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                "e.dispatchEvent(new Event('input')); e.dispatchEvent(new Event('change'));",
                id_, text)

    def console_errors(self):
        return [e for e in self.d.get_log("browser") if e["level"] == "SEVERE"]

    def shot(self, name, top=True):
        if top:
            self.js("window.scrollTo(0, 0)")
        path = os.path.join(OUT, name)
        self.d.save_screenshot(path)
        return path


class Playground(unittest.TestCase):
    def test_extract_the_course_example_streams_a_valid_grounded_answer(self):
        p = Page(self)
        p.open()
        self.assertEqual(p.by_id("model").get_attribute("value"), MODEL)
        # The shipped example, one click.
        course = [b for b in p.css("#examples button") if b.text == "course"]
        self.assertEqual(len(course), 1)
        course[0].click()
        schema = json.loads(p.by_id("constraint").get_attribute("value"))
        self.assertTrue(schema["properties"]["course"]["x-grounded"])
        document = p.by_id("document").get_attribute("value")
        self.assertIn("Rust for Beginners", document)
        p.by_id("extract").click()
        p.wait(lambda: p.state() in ("done", "error", "refused"), "the end of the stream")
        self.assertEqual(p.state(), "done", p.by_id("refused").text)
        self.assertEqual(p.by_id("badge").text, "valid")
        # Tokens streamed in, forced ones shown apart from sampled ones.
        self.assertGreater(len(p.css("#output .tok.forced")), 0)
        self.assertGreater(len(p.css("#output .tok.sampled")), 0)
        output = json.loads(p.by_id("output").text)
        self.assertEqual(set(output), {"course", "done_lessons", "total_lessons", "status"})
        # The parsed fields, the grounded one marked, and its quote highlighted in the document.
        fields = {row.find_element("css selector", "th").text:
                  row.find_element("css selector", "td") for row in p.css("#fields tr")}
        self.assertEqual(set(fields), {"/course", "/done_lessons", "/total_lessons", "/status"})
        self.assertEqual(json.loads(fields["/course"].text), output["course"])
        self.assertEqual(fields["/course"].get_attribute("class"), "grounded")
        marks = p.css("#docview mark.grounded")
        self.assertEqual([m.text for m in marks], [output["course"]])
        self.assertIn(output["course"], document)
        stats = p.by_id("stats").text
        for label in ("tokens", "forced", "time to first token", "tokens/s"):
            self.assertIn(label, stats)
        p.shot("playground-1280x800.png")
        # A phone's width: one column, nothing wider than the screen.
        p.viewport(390, 844)
        width = p.js("return [document.documentElement.scrollWidth, window.innerWidth]")
        self.assertLessEqual(width[0], width[1], "the page scrolls sideways at 390 px")
        extract = p.by_id("extract").rect
        self.assertLessEqual(extract["x"] + extract["width"], width[1])
        p.shot("playground-390x844.png")
        self.assertEqual(p.console_errors(), [])

    def test_a_refused_schema_shows_keyword_and_pointer_beside_it(self):
        p = Page(self)
        p.open()
        p.set_text("mode", "json_schema")
        schema = {"type": "object", "properties": {"tags": {"type": "array", "unevaluatedItems": False}}}
        p.set_text("constraint", json.dumps(schema, indent=2))
        p.by_id("extract").click()
        p.wait(lambda: p.state() == "refused", "the refusal")
        self.assertEqual(p.by_id("refused-keyword").text, "unevaluatedItems")
        self.assertEqual(p.by_id("refused-pointer").text, "/properties/tags/unevaluatedItems")
        self.assertTrue(p.by_id("refused").is_displayed())
        self.assertTrue(p.by_id("badge").get_attribute("hidden"))
        # Beside the schema: right under its text area, in the same column.
        box, text = p.by_id("refused").rect, p.by_id("constraint").rect
        self.assertLess(abs(box["x"] - text["x"]), 2)
        self.assertLess(box["y"] - (text["y"] + text["height"]), 80)
        p.shot("playground-refused.png")
        # The 400 is the one expected failure in the console (the browser logs it).
        errors = [e for e in p.console_errors() if "/v1/formwork/extract" not in e["message"]]
        self.assertEqual(errors, [])

    def test_keyboard_only_tab_order_and_enter_runs(self):
        from selenium.webdriver.common.keys import Keys
        p = Page(self)
        p.open()
        p.js("document.getElementById('model').focus()")
        order = []
        for _ in range(12):
            order.append(p.js("return document.activeElement.id || document.activeElement.textContent"))
            p.d.switch_to.active_element.send_keys(Keys.TAB)
        # Controls in reading order: model, constraint kind, the example buttons, the
        # constraint, the document, the budget, the key, Extract.
        named = [x for x in order if x in ("model", "mode", "constraint", "document",
                                           "max-tokens", "api-key", "extract")]
        self.assertEqual(named[:7], ["model", "mode", "constraint", "document", "max-tokens",
                                     "api-key", "extract"], order)
        # A small regex run, started with Enter in the budget field.
        [b for b in p.css("#examples button") if b.text == "date (regex)"][0].click()
        budget = p.by_id("max-tokens")
        budget.clear()
        budget.send_keys("24", Keys.ENTER)
        p.wait(lambda: p.state() in ("done", "error", "refused"), "the regex run")
        self.assertEqual(p.state(), "done")
        self.assertIn(p.by_id("badge").text, ("valid", "incomplete"))
        self.assertEqual(p.console_errors(), [])


class EvalReport(unittest.TestCase):
    def test_a_small_eval_report_renders_tables_charts_and_verdicts(self):
        binary = os.environ.get("FORMWORK_BIN") or os.path.join(
            os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "formwork")
        report = os.path.join(OUT, "eval-report.html")
        suite = os.path.join(ROOT, "evals", "course_progress.jsonl")
        run = subprocess.run(
            [binary, "eval", suite, "--model", MODEL, "--mode", "prompt,constrained",
             "--limit", "2", "--max-tokens", "48", "--format", "html", "--out", report],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, run.stderr)
        p = Page(self)
        p.viewport(1280, 800)
        p.d.get("file://" + report)
        self.assertGreaterEqual(len(p.css("table")), 1)
        text = p.js("return document.body.innerText")
        for config in ("prompt", "constrained"):
            self.assertIn(config, text)
        # Charts: SVG with drawn marks, laid out at a readable size.
        charts = p.css("svg")
        self.assertGreaterEqual(len(charts), 1)
        for svg in charts:
            self.assertGreater(svg.rect["width"], 100)
            self.assertGreater(len(svg.find_elements("css selector", "rect, line, circle, path")), 0)
        self.assertIn("verdict", text.lower())
        p.shot("eval-report.png")
        self.assertEqual(p.console_errors(), [])


if __name__ == "__main__":
    unittest.main()
