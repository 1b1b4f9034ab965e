//! `formwork eval` end to end on the project's own suites: every suite and configuration file
//! under `evals/` reads cleanly, recorded outputs are judged, aggregated and reported, the
//! default model answers a small suite in two modes, and case ranges (`--cases`) select the
//! same positions of every SNIPS intent, as each documented dev command does.

use std::path::{Path, PathBuf};

use formwork::eval::report::Status;
use formwork::eval::run::EvalFile;
use formwork::eval::suite::read_suite;
use serde_json::Value;

fn evals_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("evals")
}

fn files(ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(evals_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn project_suites_and_configs_read_cleanly() {
    let suites = files("jsonl");
    assert!(suites.len() >= 4, "{suites:?}");
    for s in suites {
        let (cases, skipped) = read_suite(&s).unwrap();
        assert!(skipped.is_empty(), "{}: {skipped:?}", s.display());
        assert!(cases.len() >= 3, "{}", s.display());
        // Gold answers must themselves be right: a suite whose gold fails its own judge
        // would count every correct model answer wrong.
        for c in &cases {
            let score = c.score(&c.gold);
            assert!(score.correct, "{} {}: {}", s.display(), c.id, score.reason);
        }
    }
    for t in files("toml") {
        let f = EvalFile::read(&t).unwrap();
        assert!(!f.config.is_empty(), "{}", t.display());
    }
}

/// Issue 19: the dev set of the project's own suites (`evals/dev/*.jsonl`, where levers are
/// chosen) reads cleanly, its gold answers pass their own judges, each kind has the reported
/// suite's schema and judges, and no dev case repeats a reported one (id or input).
#[test]
fn dev_suites_mirror_the_reported_ones_without_their_cases() {
    let dev_dir = evals_dir().join("dev");
    let mut kinds = 0;
    for entry in std::fs::read_dir(&dev_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let (dev, skipped) = read_suite(&path).unwrap();
        assert!(skipped.is_empty(), "{}: {skipped:?}", path.display());
        assert!(dev.len() >= 5, "{}", path.display());
        let reported_path = evals_dir().join(path.file_name().unwrap());
        let (reported, _) = read_suite(&reported_path).unwrap();
        for c in &dev {
            let score = c.score(&c.gold);
            assert!(
                score.correct,
                "{} {}: {}",
                path.display(),
                c.id,
                score.reason
            );
            assert_eq!(c.target, reported[0].target, "{}: schema", c.id);
            assert_eq!(c.scoring, reported[0].scoring, "{}: judges", c.id);
            for r in &reported {
                assert_ne!(c.id, r.id);
                assert_ne!(c.input, r.input, "{} repeats {}", c.id, r.id);
            }
        }
        kinds += 1;
    }
    assert_eq!(kinds, 4);
}

/// Runs the CLI and returns the JSON report.
fn eval(args: &[&str], outputs: &str) -> (std::process::ExitCode, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("outputs.jsonl");
    std::fs::write(&out_path, outputs).unwrap();
    let report = dir.path().join("report.json");
    let mut argv: Vec<String> = vec!["formwork".into(), "eval".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    argv.extend([
        "--outputs".into(),
        out_path.display().to_string(),
        "--format".into(),
        "json".into(),
        "--out".into(),
        report.display().to_string(),
    ]);
    let code = formwork::cli::run(argv.iter().map(Into::into)).unwrap();
    let text = std::fs::read_to_string(&report).unwrap();
    (code, serde_json::from_str(&text).unwrap())
}

#[test]
fn calculator_float_trap_is_judged_with_tolerance_and_reported() {
    let suite = evals_dir().join("calculator.jsonl");
    // Two configurations: "prompt" answers the float trap with the binary sum (right within
    // tolerance) and 17*23 wrong; "constrained" answers everything right except an invalid line.
    let outputs = r#"{"id": "calc-float-trap", "config": "prompt", "output": "{\"answer\": 0.30000000000000004}"}
{"id": "calc2", "config": "prompt", "output": "{\"answer\": 392}"}
{"id": "calc-float-trap", "config": "constrained", "output": "{\"answer\": 0.3}"}
{"id": "calc2", "config": "constrained", "output": "{\"answer\": \"391\"}"}"#;
    let (code, report) = eval(
        &[
            suite.to_str().unwrap(),
            "--mode",
            "prompt,constrained",
            "--limit",
            "2",
        ],
        outputs,
    );
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert_eq!(report["cases"], 2);
    let metric = |config: usize, m: &str| report["configs"][config]["metrics"][m]["mean"].clone();
    assert_eq!(report["configs"][0]["config"], "prompt");
    assert_eq!(metric(0, "validity"), 1.0);
    assert_eq!(metric(0, "accuracy"), 0.5);
    assert_eq!(
        metric(1, "validity"),
        0.5,
        "a string answer fails the schema"
    );
    assert_eq!(metric(1, "accuracy"), 0.5);
    let results = report["results"].as_array().unwrap();
    let trap = results
        .iter()
        .find(|r| r["case"] == "calc-float-trap" && r["config"] == "prompt")
        .unwrap();
    assert_eq!(trap["correct"], true, "{trap}");
    let invalid = results
        .iter()
        .find(|r| r["case"] == "calc2" && r["config"] == "constrained")
        .unwrap();
    let status: Status = serde_json::from_value(invalid["status"].clone()).unwrap();
    assert_eq!(status, Status::Invalid);
    // Two cases cannot separate the configurations.
    assert_eq!(
        report["comparisons"][0]["verdict"],
        "no significant difference"
    );
}

/// `--cases 40..42` (issue 23, the dev subsets of docs/evals.md) keeps positions 40 to 42 of
/// each SNIPS intent, both ends included, in suite order; `--limit` then cuts that list.
#[test]
fn case_ranges_select_the_same_positions_of_every_intent() {
    let suite = crate::data::data_dir().join("snips/snips_validate.jsonl");
    let suite = suite.to_str().unwrap();
    let case_ids = |report: &Value| -> Vec<String> {
        let mut seen = Vec::new();
        for r in report["results"].as_array().unwrap() {
            let id = r["case"].as_str().unwrap().to_string();
            if !seen.contains(&id) {
                seen.push(id);
            }
        }
        seen
    };
    let (code, report) = eval(&[suite, "--mode", "prompt", "--cases", "40..42"], "");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert_eq!(report["cases"], 7 * 3);
    let intents = [
        "AddToPlaylist",
        "BookRestaurant",
        "GetWeather",
        "PlayMusic",
        "RateBook",
        "SearchCreativeWork",
        "SearchScreeningEvent",
    ];
    let expected: Vec<String> = intents
        .iter()
        .flat_map(|i| (40..=42).map(move |n| format!("{i}_validate_{n}")))
        .collect();
    assert_eq!(case_ids(&report), expected);
    let (_, limited) = eval(
        &[
            suite, "--mode", "prompt", "--cases", "40..42", "--limit", "4",
        ],
        "",
    );
    assert_eq!(case_ids(&limited), expected[..4]);
}

#[test]
fn sampled_configs_repeat_with_seeds_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results.jsonl");
    let suite = evals_dir().join("course_progress.jsonl");
    let config = evals_dir().join("sampled.toml");
    // Run 0 gets every case right, runs 1 and 2 get the totals wrong: accuracy 1, 0, 0.
    let mut outputs = String::new();
    for (id, course, done, total) in [
        ("cp1", "Intro to Rust", 4, 12),
        ("cp2", "Linear Algebra", 9, 9),
        ("cp3", "Spanish for Travellers", 0, 20),
        ("cp4", "Organic Chemistry II", 7, 15),
    ] {
        for run in 0..3 {
            let total = if run == 0 { total } else { total + 1 };
            let out =
                serde_json::json!({"course": course, "lessons_done": done, "lessons_total": total});
            outputs.push_str(
                &serde_json::json!({"id": id, "run": run, "output": out.to_string()}).to_string(),
            );
            outputs.push('\n');
        }
    }
    let args = [
        suite.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ];
    let (_, report) = eval(&args, &outputs);
    let acc = &report["configs"][0]["metrics"]["accuracy"];
    assert_eq!(report["configs"][0]["runs"], 3);
    assert!(
        (acc["mean"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9,
        "{acc}"
    );
    assert_eq!(acc["min"], 0.0);
    assert_eq!(acc["max"], 1.0);
    let field = report["configs"][0]["metrics"]["field_accuracy"]["mean"]
        .as_f64()
        .unwrap();
    assert!((field - (1.0 + 2.0 / 3.0 + 2.0 / 3.0) / 3.0).abs() < 1e-9);
    let lines = std::fs::read_to_string(&results).unwrap().lines().count();
    assert_eq!(lines, 2 * 3 * 4, "2 configs × 3 runs × 4 cases");
    // Resuming with no outputs at all: nothing is re-attempted, the report is the same.
    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let (_, again) = eval(&resumed, "");
    assert_eq!(again["configs"], report["configs"]);
    assert_eq!(
        std::fs::read_to_string(&results).unwrap().lines().count(),
        lines
    );
}

/// The product path: `formwork eval` loads the default model, runs two modes over two cases,
/// writes results as they come, and a resumed run renders the text and HTML reports from them
/// without decoding again. Cheap: 2 attempts of at most 16 tokens on the default model
/// (Qwen2.5-Coder-0.5B; with the other eval test of this file about 16 s of CPU in the dev
/// profile, mostly loading).
#[test]
fn the_default_model_answers_a_small_suite_in_two_modes() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results.jsonl");
    let suite = evals_dir().join("calculator.jsonl");
    let run = |format: &str, resume: bool| {
        let out = dir.path().join(format!("report.{format}"));
        let mut argv: Vec<String> = [
            "formwork",
            "eval",
            suite.to_str().unwrap(),
            "--mode",
            "prompt,constrained",
            "--limit",
            "1",
            "--max-tokens",
            "16",
            "--results",
            results.to_str().unwrap(),
            "--format",
            format,
            "--out",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        if resume {
            argv.push("--resume".into());
        }
        let code = formwork::cli::run(argv.iter().map(Into::into)).unwrap();
        assert_eq!(code, std::process::ExitCode::SUCCESS);
        std::fs::read_to_string(out).unwrap()
    };
    let report: Value = serde_json::from_str(&run("json", false)).unwrap();
    assert_eq!(report["cases"], 1);
    let config = |i: usize| &report["configs"][i];
    assert_eq!(config(0)["config"], "prompt");
    assert_eq!(config(1)["config"], "constrained");
    assert_eq!(
        config(1)["metrics"]["validity"]["mean"],
        1.0,
        "constrained outputs are valid by construction: {report}"
    );
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows.iter().filter(|r| r["config"] == "constrained") {
        let answer = &r["output"]["answer"];
        assert!(answer.is_number(), "{r}");
        assert!(r["tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(r["tokens"].as_u64().unwrap() <= 16, "{r}");
    }
    let written = std::fs::read_to_string(&results).unwrap();
    assert_eq!(written.lines().count(), 2, "one line per attempt");
    // Resumed: every attempt is already there, so the reports come from the results file.
    let text = run("text", true);
    assert!(text.contains("constrained"), "{text}");
    assert!(text.contains("prompt"), "{text}");
    let html = run("html", true);
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(html.contains("<svg"), "charts are drawn: {html}");
    assert_eq!(std::fs::read_to_string(&results).unwrap(), written);
}

/// Issue 23: grounded mode grounds every non-enum string, and a grounded field keeps its own
/// `pattern` / `format` / lengths. Every shipped suite's schema must still mark (no keyword
/// refused) and give each case's document a grammar (every required grounded field has a
/// quote that satisfies it), or grounded runs would turn into errors.
#[test]
fn every_shipped_suite_has_a_grounded_grammar_for_each_case() {
    use formwork::eval::backend::string_pointers;
    use formwork::eval::suite::Target;
    use formwork::extract::run::{Constraint, ExtractConfig, Prepared};
    let mut failures = Vec::new();
    for s in files("jsonl") {
        let (cases, _) = read_suite(&s).unwrap();
        for c in &cases {
            let Target::Schema(schema) = &c.target else {
                continue;
            };
            let cfg = ExtractConfig {
                grounded: string_pointers(schema),
                ..ExtractConfig::default()
            };
            let text = c.input.text();
            let got = Prepared::new(&Constraint::Schema(schema.clone()), &cfg)
                .map_err(|e| e.to_string())
                .and_then(|p| p.grammar_for(&text).map_err(|e| e.to_string()));
            if let Err(e) = got {
                failures.push(format!("{} {}: {e}", s.display(), c.id));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 23 end to end: the calendar suite's fields carry `format: date` and a time
/// `pattern`; in grounded mode the small model's outputs must validate against their
/// schema (they used to be free quotes, checked only afterwards). 3 cases of at most 48
/// tokens on the 135M model, named (the default is the larger Qwen).
#[test]
fn calendar_grounded_outputs_validate_against_their_schema() {
    let dir = tempfile::tempdir().unwrap();
    let suite = evals_dir().join("calendar_events.jsonl");
    let out = dir.path().join("report.json");
    let argv: Vec<String> = [
        "formwork",
        "eval",
        suite.to_str().unwrap(),
        "--model",
        "smollm2-135m",
        "--mode",
        "grounded",
        "--max-tokens",
        "48",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let code = formwork::cli::run(argv.iter().map(Into::into)).unwrap();
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let (cases, _) = read_suite(&suite).unwrap();
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), cases.len(), "{report}");
    for r in rows {
        assert_eq!(r["status"], "ok", "{r}");
        let case = cases.iter().find(|c| c.id == r["case"]).unwrap();
        let formwork::eval::suite::Target::Schema(schema) = &case.target else {
            unreachable!("the calendar suite has schemas")
        };
        let errors = formwork::extract::validate::validate(schema, &r["output"]).unwrap();
        assert!(errors.is_empty(), "{r}: {errors:?}");
        let text = case.input.text();
        for k in ["title", "date", "start"] {
            let v = r["output"][k].as_str().unwrap();
            assert!(text.contains(v), "{k} = {v:?} is not a quote of {text:?}");
        }
    }
}

/// The configuration files the documented commands use parse, and their templates exist
/// (paths are relative to the crate root, where the commands run).
#[test]
fn shipped_eval_configs_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in std::fs::read_dir(root.join("evals")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let f = EvalFile::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for c in &f.config {
            if let Some(t) = &c.template {
                assert!(
                    root.join(t).is_file(),
                    "{}: {}",
                    path.display(),
                    t.display()
                );
            }
        }
        seen += 1;
    }
    assert!(seen >= 8, "{seen} eval configuration files");
}

/// The `formwork eval` commands with a case range that docs/evals.md, the README and the
/// comments of `evals/*.toml` give for the dev figures, as single-space token lists: a command
/// ends at the first word that is neither a flag nor a flag's value.
fn documented_range_commands() -> Vec<Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = vec![
        std::fs::read_to_string(root.join("docs/evals.md")).unwrap(),
        std::fs::read_to_string(root.join("README.md")).unwrap(),
    ];
    texts.extend(
        files("toml")
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap()),
    );
    let mut commands = Vec::new();
    for text in texts {
        // Backticks, line continuations and comment marks are layout, not arguments.
        let flat = text.replace(['`', '\\', '#'], " ");
        let words: Vec<&str> = flat.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            if *w != "formwork" || words.get(i + 1) != Some(&"eval") {
                continue;
            }
            let Some(head) = words.get(i..i + 3) else {
                continue;
            };
            let mut cmd: Vec<String> = head.iter().map(|s| s.to_string()).collect();
            let mut rest = words[i + 3..].iter();
            while let Some(flag) = rest.next().filter(|f| f.starts_with("--")) {
                cmd.push(flag.to_string());
                if *flag != "--resume" {
                    cmd.extend(rest.next().map(|v| v.to_string()));
                }
            }
            if cmd.iter().any(|a| a == "--cases") {
                commands.push(cmd);
            }
        }
    }
    commands
}

/// Issue 23: every dev figure's command in the docs parses and selects its cases and worked
/// examples on the real SNIPS file (no model is run): its configuration file exists, its range
/// fits each intent, and its worked examples never include an evaluated case.
#[test]
fn documented_dev_commands_select_their_cases() {
    use clap::Parser;
    use formwork::cli::{eval::selection, Args, Command};
    let commands = documented_range_commands();
    let text: Vec<String> = commands.iter().map(|c| c.join(" ")).collect();
    for needed in ["--cases 40..45", "--cases 40..59 --shots-from 60..99"] {
        assert!(
            text.iter().any(|c| c.contains(needed)),
            "no documented command with {needed}: {text:#?}"
        );
    }
    let data = crate::data::data_dir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for mut cmd in commands {
        // Paths are relative to the crate root; the data sets may live elsewhere.
        cmd[2] = cmd[2].replace("../shared/data", data.to_str().unwrap());
        for w in cmd.iter_mut().filter(|w| w.starts_with("evals/")) {
            *w = root.join(&*w).display().to_string();
        }
        let line = cmd.join(" ");
        let args = Args::try_parse_from(&cmd).unwrap_or_else(|e| panic!("{line}: {e}"));
        let Command::Eval(args) = args.command else {
            panic!("{line}: not eval")
        };
        let (configs, _) = formwork::cli::eval::configs(&args).unwrap();
        let (cases, _) = read_suite(&args.suite).unwrap();
        let selected = selection(&args, &configs, &cases).unwrap_or_else(|e| panic!("{line}: {e}"));
        let range = args.cases.unwrap();
        // SNIPS has 7 intents (groups); GSM8K has none.
        let groups = if line.contains("snips") { 7 } else { 1 };
        assert_eq!(
            selected.len(),
            groups * (range.last() - range.first() + 1),
            "{line}"
        );
        let evaluated: Vec<String> = selected.iter().map(|c| c.input.text()).collect();
        for c in &selected {
            assert!(
                c.examples.iter().all(|e| !evaluated.contains(&e.0)),
                "{line}: {} is shown an evaluated case",
                c.id
            );
        }
    }
}

/// Issue 17: `formwork eval --parallel N` decodes attempts together through the batched
/// forward pass, and every result equals the one-at-a-time run's (latency aside): greedy
/// prompt, retry (a second round for an invalid first answer), constrained and grounded, and
/// two sampled runs per case, so paired comparisons and seeded runs are unchanged. Cheap:
/// 3 cases x 6 attempts of at most 32 tokens, twice, on the 135M model.
#[test]
fn parallel_eval_results_equal_the_one_at_a_time_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("configs.toml");
    let mut toml = String::from("runs = 2\n");
    for (name, mode, temperature) in [
        ("prompt", "prompt", 0.0),
        ("retry", "retry", 0.0),
        ("constrained", "constrained", 0.0),
        ("grounded", "grounded", 0.0),
        ("sampled", "constrained", 0.9),
    ] {
        toml.push_str(&format!(
            "[[config]]\nname = \"{name}\"\nmode = \"{mode}\"\ntemperature = {temperature}\n\
             model = \"smollm2-135m\"\nmax_tokens = 32\nseed = 3\n"
        ));
    }
    std::fs::write(&config, toml).unwrap();
    let suite = evals_dir().join("course_progress.jsonl");
    let run = |parallel: &str| {
        let results = dir.path().join(format!("results-{parallel}.jsonl"));
        let argv: Vec<String> = [
            "formwork",
            "eval",
            suite.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--limit",
            "3",
            "--parallel",
            parallel,
            "--results",
            results.to_str().unwrap(),
            "--out",
            dir.path().join("report.txt").to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        let code = formwork::cli::run(argv.iter().map(Into::into)).unwrap();
        assert_eq!(code, std::process::ExitCode::SUCCESS);
        let mut rows: Vec<Value> = std::fs::read_to_string(results)
            .unwrap()
            .lines()
            .map(|l| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                v["latency_ms"] = Value::Null;
                v
            })
            .collect();
        let key = |v: &Value| {
            (
                v["case"].to_string(),
                v["config"].to_string(),
                v["run"].to_string(),
            )
        };
        rows.sort_by_key(key);
        rows
    };
    let one = run("1");
    assert_eq!(one.len(), 3 * (4 + 2), "{one:?}");
    let sampled: std::collections::HashSet<String> = one
        .iter()
        .filter(|r| r["config"] == "sampled")
        .map(|r| r["raw"].to_string())
        .collect();
    assert!(sampled.len() > 1, "sampled runs draw apart: {sampled:?}");
    let batched = run("4");
    for (a, b) in one.iter().zip(&batched) {
        assert_eq!(a, b);
    }
    assert_eq!(one.len(), batched.len());
}
