use std::io::Write as _;

use serde_json::{json, Value};

use super::*;
use crate::eval::error::EvalError;
use crate::eval::range::{CaseRange, CaseRangeError};
use crate::eval::report::{SlotCounts, Status};
use crate::eval::suite::{Case, Input, Scoring, Target};
use crate::run::GroundedSpans;
use formwork_core::schema::PropertyOrder;

fn case(id: &str, group: Option<&str>) -> Case {
    Case {
        id: id.into(),
        input: Input::Text("Add the album to my Flow playlist".into()),
        target: Target::Schema(json!({
            "type": "object",
            "properties": {"playlist": {"type": "string"}, "music_item": {"type": "string"}},
            "additionalProperties": false
        })),
        gold: json!({"playlist": "Flow", "music_item": "album"}),
        scoring: Scoring::Slots,
        group: group.map(str::to_string),
        examples: Vec::new(),
    }
}

#[test]
fn toml_configs_are_named_checked_and_typos_fail() {
    let f = EvalFile::parse(
        "runs = 3\n[[config]]\nmode = \"prompt\"\n[[config]]\nmode = \"constrained+grounded\"\ntemperature = 0.7\nseed = 10\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(f.runs, Some(3));
    let names: Vec<&str> = f.config.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["prompt", "grounded"]);
    assert_eq!(f.config[0].runs(3), 1, "greedy runs once");
    assert_eq!(f.config[1].runs(3), 3);
    let c = &f.config[1];
    assert_eq!(c.seed_for(2, "a"), c.seed_for(2, "a"), "deterministic");
    assert_ne!(c.seed_for(2, "a"), c.seed_for(2, "b"), "cases draw apart");
    assert_ne!(c.seed_for(2, "a"), c.seed_for(1, "a"), "runs draw apart");
    let same_seed = EvalConfig {
        name: "other".into(),
        ..c.clone()
    };
    assert_eq!(
        same_seed.seed_for(2, "a"),
        c.seed_for(2, "a"),
        "paired across configs"
    );
    let e = EvalFile::parse("[[config]]\ntemprature = 0.5\n", "t.toml").unwrap_err();
    assert!(e.to_string().contains("temprature"), "{e}");
    let e = EvalFile::parse("[[config]]\n[[config]]\n", "t.toml").unwrap_err();
    assert!(e.to_string().contains("duplicate"), "{e}");
    assert!(EvalFile::parse("", "t.toml").is_err());
}

#[test]
fn examples_come_from_unselected_cases_of_the_same_group() {
    let all: Vec<Case> = [
        ("a1", "A"),
        ("a2", "A"),
        ("b1", "B"),
        ("a3", "A"),
        ("b2", "B"),
    ]
    .into_iter()
    .chain([("b3", "B")])
    .map(|(id, g)| Case {
        input: Input::Text(format!("text of {id}")),
        ..case(id, Some(g))
    })
    .collect();
    let mut sel = select_cases(all.clone(), None, GroupSelection::First(1)).unwrap();
    attach_examples(&mut sel, &all, 2, None).unwrap();
    let shown = |c: &Case| -> Vec<String> { c.examples.iter().map(|e| e.0.clone()).collect() };
    assert_eq!(sel[0].id, "a1");
    assert_eq!(shown(&sel[0]), ["text of a2", "text of a3"]);
    assert_eq!(shown(&sel[1]), ["text of b2", "text of b3"]);
    let first = choose_examples("text of a1", &sel[0].examples, 1, ShotSelection::First);
    assert_eq!(first[0].0, "text of a2");
    let err = attach_examples(&mut sel, &all, 3, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("only 2 cases outside the run"), "{err}");
    let mut none = select_cases(all.clone(), None, GroupSelection::First(1)).unwrap();
    attach_examples(&mut none, &all, 0, None).unwrap();
    assert!(none.iter().all(|c| c.examples.is_empty()));
}

#[test]
fn similar_examples_share_the_rarest_words_and_come_last() {
    let c = |t: &str| (t.to_string(), Value::Null);
    let pool = [
        c("play some jazz music"),
        c("add this song to my road trip playlist"),
        c("play the album by Miles Davis"),
        c("add Miles Davis to my jazz playlist"),
    ];
    let doc = "Add Miles Davis to the workout playlist";
    let texts = |v: Vec<(String, Value)>| -> Vec<String> { v.into_iter().map(|e| e.0).collect() };
    // "miles" and "davis" (2 of 4 candidates) outweigh "add" and "playlist" alone; the best
    // match shares all four and is shown last.
    assert_eq!(
        texts(choose_examples(doc, &pool, 2, ShotSelection::Similar)),
        [
            "play the album by Miles Davis",
            "add Miles Davis to my jazz playlist"
        ]
    );
    assert_eq!(
        texts(choose_examples(doc, &pool, 2, ShotSelection::First)),
        [
            "play some jazz music",
            "add this song to my road trip playlist"
        ]
    );
    assert_eq!(
        choose_examples(doc, &pool, 9, ShotSelection::Similar).len(),
        4
    );
    let f = EvalFile::parse(
        "[[config]]\nshots = 2\nshot_selection = \"similar\"\n",
        "t.toml",
    );
    assert_eq!(f.unwrap().config[0].shot_selection, ShotSelection::Similar);
    assert!(EvalFile::parse("[[config]]\nshot_selection = \"best\"\n", "t.toml").is_err());
    let f = EvalFile::parse("[[config]]\nproperty_order = { window = 8 }\n", "t.toml");
    assert_eq!(
        f.unwrap().config[0].property_order,
        PropertyOrder::Window(8)
    );
    let f = EvalFile::parse("[[config]]\nproperty_order = \"any\"\n", "t.toml");
    assert_eq!(f.unwrap().config[0].property_order, PropertyOrder::Any);
    let f = EvalFile::parse("[[config]]\ngrounded_spans = \"disjoint\"\n", "t.toml");
    assert_eq!(f.unwrap().config[0].grounded_spans, GroundedSpans::Disjoint);
    let f = EvalFile::parse("[[config]]\nthink = 64\n", "t.toml").unwrap();
    assert_eq!(f.config[0].think, Some(64));
    for bad in [
        "[[config]]\nmode = \"prompt\"\nthink = 64\n",
        "[[config]]\nthink_trigger = \"A:\"\n",
        "[[config]]\nthink = 8\nthink_trigger = \"\"\n",
    ] {
        let e = EvalFile::parse(bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("think"), "{bad}: {e}");
    }
    let f = EvalFile::parse("[[config]]\nsystem = \"Be brief.\"\n", "t.toml");
    assert_eq!(f.unwrap().config[0].system.as_deref(), Some("Be brief."));
    // The old boolean spelling is gone: a typo-level mistake, so it fails loudly.
    assert!(EvalFile::parse("[[config]]\ndistinct_grounded = true\n", "t.toml").is_err());
}

#[test]
fn per_group_then_limit_selection() {
    let cases = vec![
        case("a1", Some("A")),
        case("a2", Some("A")),
        case("a3", Some("A")),
        case("b1", Some("B")),
        case("b2", Some("B")),
    ];
    let ids =
        |v: Result<Vec<Case>, EvalError>| v.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>();
    let first = GroupSelection::First;
    assert_eq!(
        ids(select_cases(cases.clone(), None, first(2))),
        ["a1", "a2", "b1", "b2"]
    );
    assert_eq!(
        ids(select_cases(cases.clone(), Some(3), first(1))),
        ["a1", "b1"]
    );
    assert_eq!(
        ids(select_cases(cases, Some(2), GroupSelection::All)),
        ["a1", "a2"]
    );
}

#[test]
fn case_ranges_parse_both_ends_included_and_reject_the_malformed() {
    let r: CaseRange = "40..59".parse().unwrap();
    assert_eq!((r.first(), r.last()), (40, 59));
    assert!(r.contains(40) && r.contains(59));
    assert!(!r.contains(39) && !r.contains(60));
    assert_eq!(r.to_string(), "40..59");
    let one: CaseRange = "7..7".parse().unwrap();
    assert!(one.contains(7) && !one.contains(6) && !one.contains(8));
    for bad in [
        "", "40", "40..", "..59", "40...59", "40..=59", "a..b", "-1..5", " 40..59", "40-59",
        "1..2..3",
    ] {
        let e = bad.parse::<CaseRange>().unwrap_err();
        assert_eq!(e, CaseRangeError::Malformed { text: bad.into() }, "{bad:?}");
        assert!(
            e.to_string().contains("FIRST..LAST, both ends included"),
            "{e}"
        );
    }
    let e = "59..40".parse::<CaseRange>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "case range `59..40` is empty: its first case 59 comes after its last 40"
    );
    assert!(CaseRange::new(3, 2).is_err());
    // A number too large for usize is malformed, not a panic.
    assert!("0..99999999999999999999999".parse::<CaseRange>().is_err());
}

/// Cases of two interleaved groups, `<group><position>` in suite order.
fn grouped(sizes: &[(&str, usize)]) -> Vec<Case> {
    let longest = sizes.iter().map(|s| s.1).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| {
            sizes.iter().filter(move |s| i < s.1).map(move |s| Case {
                input: Input::Text(format!("text of {}{i}", s.0)),
                ..case(&format!("{}{i}", s.0), Some(s.0))
            })
        })
        .collect()
}

#[test]
fn a_case_range_selects_per_group_in_suite_order() {
    let cases = grouped(&[("a", 5), ("b", 4)]);
    let range = |t: &str| GroupSelection::Range(t.parse().unwrap());
    let ids = |v: Vec<Case>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    // Positions count within each group; suite order (interleaved groups) is kept.
    assert_eq!(
        ids(select_cases(cases.clone(), None, range("1..3")).unwrap()),
        ["a1", "b1", "a2", "b2", "a3", "b3"]
    );
    assert_eq!(
        ids(select_cases(cases.clone(), Some(3), range("1..3")).unwrap()),
        ["a1", "b1", "a2"]
    );
    // Without groups the range is over the whole suite.
    let flat: Vec<Case> = ["x", "y", "z"].iter().map(|id| case(id, None)).collect();
    assert_eq!(
        ids(select_cases(flat.clone(), None, range("1..2")).unwrap()),
        ["y", "z"]
    );
    // Group b has no position 4: an error naming the group and its size, not fewer cases.
    let e = select_cases(cases, None, range("2..4")).unwrap_err();
    assert_eq!(e.to_string(), "cases 2..4: group `b` has only 4 cases");
    let e = select_cases(flat, None, range("0..3")).unwrap_err();
    assert_eq!(e.to_string(), "cases 0..3: the suite has only 3 cases");
}

#[test]
fn worked_examples_come_from_the_pool_range_of_each_group() {
    let all = grouped(&[("a", 6), ("b", 6)]);
    let range = |t: &str| -> CaseRange { t.parse().unwrap() };
    let mut sel = select_cases(all.clone(), None, GroupSelection::Range(range("1..2"))).unwrap();
    attach_examples(&mut sel, &all, 2, Some(range("4..5"))).unwrap();
    let shown = |c: &Case| -> Vec<String> { c.examples.iter().map(|e| e.0.clone()).collect() };
    assert_eq!(sel[0].id, "a1");
    assert_eq!(shown(&sel[0]), ["text of a4", "text of a5"]);
    assert_eq!(sel[1].id, "b1");
    assert_eq!(shown(&sel[1]), ["text of b4", "text of b5"]);
    // Without a pool, every unselected case of the group is a candidate.
    attach_examples(&mut sel, &all, 2, None).unwrap();
    assert_eq!(
        shown(&sel[0]),
        ["text of a0", "text of a3", "text of a4", "text of a5"]
    );
    // Too few in the pool, a pool past a group's end, a pool holding an evaluated case.
    let e = attach_examples(&mut sel, &all, 3, Some(range("4..5"))).unwrap_err();
    assert!(e.to_string().contains("only 2 cases in 4..5"), "{e}");
    let e = attach_examples(&mut sel, &all, 2, Some(range("4..6"))).unwrap_err();
    assert_eq!(e.to_string(), "shots from 4..6: group `a` has only 6 cases");
    let e = attach_examples(&mut sel, &all, 2, Some(range("2..5"))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "shots from 2..5 include case `a2`, which the run evaluates"
    );
    // A pool with no shots to draw is a mistake, not silently ignored.
    let e = attach_examples(&mut sel, &all, 0, Some(range("4..5"))).unwrap_err();
    assert!(e.to_string().contains("shots = 0"), "{e}");
}

#[test]
fn judging_statuses_and_missed_slots() {
    let c = case("x", None);
    let cfg = EvalConfig {
        name: "c".into(),
        ..EvalConfig::default()
    };
    let ok = |raw: &str| Attempt {
        raw: raw.into(),
        status: None,
        error: None,
        tokens: 4,
        forced_tokens: 1,
        grounded_substrings: false,
    };
    let r = judge_attempt(&c, &cfg, 0, Ok(ok(r#"{"playlist": "Flow"}"#)), 1.0);
    assert_eq!(r.status, Status::Ok);
    assert!(!r.correct);
    assert_eq!(
        r.slots,
        Some(SlotCounts {
            true_positives: 1,
            predicted: 1,
            gold: 2
        })
    );
    let r = judge_attempt(&c, &cfg, 0, Ok(ok(r#"{"playlist": 3}"#)), 1.0);
    assert_eq!(r.status, Status::Invalid, "{}", r.reason);
    assert_eq!(
        r.slots.map(|s| s.gold),
        Some(2),
        "failures still count gold"
    );
    let r = judge_attempt(&c, &cfg, 0, Ok(ok("{\"playlist\": ")), 1.0);
    assert_eq!(r.status, Status::Invalid);
    assert!(r.reason.contains("does not parse"), "{}", r.reason);
    let mut refused = ok("");
    refused.status = Some(Status::Refusal);
    assert_eq!(
        judge_attempt(&c, &cfg, 0, Ok(refused), 1.0).status,
        Status::Refusal
    );
    // A backend's failure keeps the model's text as the output and its reason.
    let mut prose = ok("Sure! The playlist is Flow");
    prose.status = Some(Status::Invalid);
    prose.error = Some("no JSON object or array in the output".into());
    let r = judge_attempt(&c, &cfg, 0, Ok(prose), 1.0);
    assert_eq!(
        (r.status, r.raw.as_str(), r.reason.as_str()),
        (
            Status::Invalid,
            "Sure! The playlist is Flow",
            "invalid: no JSON object or array in the output"
        )
    );
    // The backend claiming validity for an invalid output is a bug, not an invalid output.
    let mut lying = ok("[]");
    lying.status = Some(Status::Ok);
    assert_eq!(
        judge_attempt(&c, &cfg, 0, Ok(lying), 1.0).status,
        Status::Error
    );
    let r = judge_attempt(&c, &cfg, 0, Err("model failed".into()), 1.0);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (Status::Error, "model failed")
    );
}

#[test]
fn tool_calls_are_validated_against_bfcl_parameters() {
    let c = Case {
        id: "t".into(),
        input: Input::Text("area of base 10".into()),
        target: Target::Tools(vec![json!({"name": "area", "parameters": {
            "type": "dict",
            "properties": {"base": {"type": "float"}},
            "required": ["base"]}})]),
        gold: Value::Null,
        scoring: Scoring::Call(vec![json!({"area": {"base": [10]}})]),
        group: None,
        examples: Vec::new(),
    };
    assert!(check_output(&c, r#"{"name": "area", "arguments": {"base": 10}}"#).is_ok());
    let e = check_output(&c, r#"{"name": "area", "arguments": {"base": "10"}}"#);
    assert!(e.unwrap_err().to_string().contains("/base"));
    let e = check_output(&c, r#"{"name": "volume", "arguments": {}}"#);
    assert_eq!(e, Err(OutputError::UnknownTool("volume".into())));
}

#[test]
fn results_are_written_as_they_come_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.jsonl");
    let cases = vec![case("a", None), case("b", None)];
    let mut configs = vec![
        EvalConfig {
            mode: Mode::Prompt,
            ..EvalConfig::default()
        },
        EvalConfig {
            mode: Mode::Grounded,
            temperature: 0.5,
            seed: 7,
            ..EvalConfig::default()
        },
    ];
    name_configs(&mut configs, "flags").unwrap();
    let outputs = r#"{"id": "a", "output": "{\"playlist\": \"Flow\", \"music_item\": \"album\"}"}
{"id": "b", "output": "not json"}
{"id": "b", "config": "grounded", "run": 1, "output": "{}"}"#;
    // Every (case, config, run) triple: prompt is greedy (1 run), grounded gets 2.
    assert_eq!(plan(&cases, &configs, 2).len(), 2 + 4);
    let mut backend = ReplayBackend::parse(outputs, "o.jsonl").unwrap();
    {
        let mut log = ResultsLog::open(&path, false).unwrap();
        // Stop after 3 attempts, as a killed run would.
        let mut n = 0;
        let mut partial = plan(&cases, &configs, 2);
        partial.truncate(3);
        for (c, cfg, run) in partial {
            let a = backend.attempt(c, cfg, run);
            log.push(judge_attempt(c, cfg, run, a, 0.0)).unwrap();
            n += 1;
        }
        assert_eq!(n, 3);
    }
    // A torn last line from the kill is dropped on resume.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"case\": \"b\", \"con")
        .unwrap();
    let mut log = ResultsLog::open(&path, true).unwrap();
    assert_eq!(log.results().len(), 3);
    let mut made = 0;
    run_eval(&cases, &configs, 2, &mut backend, &mut log, &mut |r| {
        made += usize::from(r.is_some())
    })
    .unwrap();
    assert_eq!(made, 3, "only the missing triples are attempted");
    let results = log.into_results();
    assert_eq!(results.len(), 6);
    let on_disk = std::fs::read_to_string(&path).unwrap();
    assert_eq!(on_disk.lines().count(), 6);
    let get = |case: &str, config: &str, run: usize| {
        results
            .iter()
            .find(|r| r.case == case && r.config == config && r.run == run)
            .unwrap()
    };
    assert!(get("a", "prompt", 0).correct);
    assert_eq!(get("b", "prompt", 0).status, Status::Invalid);
    assert_eq!(get("b", "grounded", 1).status, Status::Ok);
    assert_eq!(get("b", "grounded", 0).status, Status::Invalid);
}
