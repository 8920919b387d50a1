"""The evaluation's task generators, scorer, reports and method strings: standard library only
(no torch, no GPU), so CI runs them."""

import collections
import json
import re

import pytest

from fathom.eval import report, tasks
from fathom.eval.haystack import python_reference
from fathom.hf.methods import paper_k, parse_method, same_share_budget

HAYSTACK = python_reference().text


def words(text):
    """A stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())


@pytest.mark.parametrize("task", list(tasks.TASKS))
@pytest.mark.parametrize("context", [600, 2048])
def test_sample_fills_its_context_and_holds_its_answers(task, context):
    s = tasks.make_sample(task, HAYSTACK, context, words, seed=3)
    size = words(s.prompt + s.answer_prefix)
    assert size + s.tokens <= context
    # The haystack is grown as far as it fits (RULER's binary search): a much smaller prompt
    # would mean the search stopped early.
    assert size + s.tokens > context * 0.8
    assert s.gold and all(g in s.prompt for g in s.gold)
    assert s.tokens == tasks.TASKS[task].tokens


def test_samples_are_deterministic_per_seed():
    a = tasks.make_sample("niah_multikey", HAYSTACK, 1024, words, seed=1)
    b = tasks.make_sample("niah_multikey", HAYSTACK, 1024, words, seed=1)
    c = tasks.make_sample("niah_multikey", HAYSTACK, 1024, words, seed=2)
    assert (a.prompt, a.gold) == (b.prompt, b.gold)
    assert a.gold != c.gold


def test_niah_needles_keys_and_queries():
    single = tasks.make_sample("niah_single", HAYSTACK, 1024, words, seed=0)
    assert single.prompt.startswith("A special magic number is hidden")
    assert single.prompt.count("One of the special magic numbers for") == 1
    assert single.answer_prefix.endswith("mentioned in the provided text is")
    multikey = tasks.make_sample("niah_multikey", HAYSTACK, 1024, words, seed=0)
    needles = re.findall(
        r"One of the special magic numbers for (\S+) is: (\d{7})\.", multikey.prompt
    )
    assert len(needles) == 4 and len({k for k, _ in needles}) == 4
    asked = re.search(r"numbers? for (\S+) mentioned", multikey.answer_prefix).group(1)
    assert dict(needles)[asked] == multikey.gold[0]
    multivalue = tasks.make_sample("niah_multivalue", HAYSTACK, 1024, words, seed=0)
    found = re.findall(
        r"One of the special magic numbers for (\S+) is: (\d{7})\.", multivalue.prompt
    )
    assert len({k for k, _ in found}) == 1 and sorted(v for _, v in found) == sorted(
        multivalue.gold
    )
    multiquery = tasks.make_sample("niah_multiquery", HAYSTACK, 1024, words, seed=0)
    assert len(multiquery.gold) == 4 and ", and " in multiquery.answer_prefix


def test_variable_tracking_chain():
    s = tasks.make_sample("vt", HAYSTACK, 1024, words, seed=5)
    first, *rest = s.gold
    value = re.search(rf"VAR {first} = (\d{{5}})", s.prompt).group(1)
    for prev, name in zip(s.gold, rest):
        assert f"VAR {name} = VAR {prev}" in s.prompt
    # RULER keeps a chain's statements in order in the text.
    positions = [s.prompt.index(f"VAR {name} =") for name in s.gold]
    assert positions == sorted(positions)
    assert f"assigned the value {value}" in s.answer_prefix and "5 variables" in s.answer_prefix


def test_frequent_words_are_the_most_frequent():
    s = tasks.make_sample("fwe", HAYSTACK, 2048, words, seed=0)
    coded = s.prompt.split("coded words. ", 1)[1].split("\nQuestion:")[0].split()
    counts = collections.Counter(w for w in coded if w != "...")
    top = [w for w, _ in counts.most_common(3)]
    assert sorted(top) == sorted(s.gold)
    assert counts.most_common(1)[0][1] < collections.Counter(coded)["..."]


def test_score_is_the_fraction_of_gold_found():
    assert tasks.score("The numbers are 1234567 and 7654321.", ["1234567", "7654321"]) == 1.0
    assert tasks.score("only 1234567", ["1234567", "7654321"]) == 0.5
    assert tasks.score("VAR abcde", ["ABCDE"]) == 1.0  # case-insensitive, as RULER
    assert tasks.score("", ["x"]) == 0.0
    with pytest.raises(ValueError):
        tasks.score("anything", [])


def test_unknown_task_and_too_small_context():
    with pytest.raises(ValueError, match="unknown task"):
        tasks.make_sample("qa", HAYSTACK, 1024, words, seed=0)
    with pytest.raises(ValueError, match="does not fit"):
        tasks.make_sample("niah_single", HAYSTACK, 64, words, seed=0)


def test_haystack_is_real_text_with_its_hash():
    h = python_reference()
    assert len(h.text.split()) > 30000 and len(h.sha256) == 64
    assert len(tasks.sentences(h.text[:5000])) > 10
    assert "  " not in " ".join(tasks.haystack_words("a  b\n\nc\td"))


def test_results_json_table_and_svg(tmp_path):
    res = report.Results(str(tmp_path / "ruler-x.json"), {"gpu": "test"})
    rows = [
        ("niah_single", 4096, "dense", "hbm", 100.0),
        ("niah_single", 4096, "fathom(24)", "host", 50.0),
        ("vt", 4096, "dense", "hbm", 80.0),
        ("niah_single", 8192, "dense", "hbm", 75.0),
    ]
    for task, n, m, p, sc in rows:
        res.add("rows", dict(task=task, context=n, method=m, placement=p, score=sc, samples=4))
        # Every cell leaves a complete JSON file behind (a time limit may stop the run anywhere).
        data = json.loads((tmp_path / "ruler-x.json").read_text())
        assert data["complete"] is False and data["rows"][-1]["score"] == sc
    res.add(
        "teacher_forced",
        dict(
            task="teacher_forced",
            context=4096,
            method="fathom(24)",
            placement="hbm",
            steps=63,
            samples=4,
            agreement=97.5,
            ppl_ratio=1.01,
            kl=0.002,
            score=97.5,
        ),
    )
    res.add(
        "errors",
        dict(
            task="vt",
            context=4096,
            method="loki(16)",
            placement="hbm",
            error="MethodError: loki needs a klt store",
        ),
    )
    res.finish(True)
    data = json.loads((tmp_path / "ruler-x.json").read_text())
    assert data["complete"] is True
    table = report.table(data)
    # fathom(24)@host did not run vt at 4k, so the 4k means are over niah_single alone.
    assert "mean over niah_single, the tasks every method ran" in table
    assert "| dense | 100.0 (4) | 80.0 (4) | 100.0 |" in table
    assert "fathom(24)@host | 50.0 (4) | - | 50.0 |" in table
    assert report._means(data["rows"])[(4096, "dense")] == 100.0
    assert "| fathom(24) | 4096 | 63 | 97.50 |" in table
    assert "not run: loki(16)@hbm (vt, 4096): MethodError" in table
    svg = report.svg(data)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "fathom(24)@host" in svg


def test_method_strings():
    assert [paper_k(n) for n in (2048, 8192, 16384, 32768)] == [128, 128, 256, 512]
    m = parse_method("pariskv(100)")
    assert m.needs_pariskv_index and m.own_k == 100 and not m.needs_calibration
    assert parse_method("fathom(48)").needs_calibration and not parse_method("dense").selects
    for bad in ["fathom", "dense(3)", "fathom(48", "magic(3)", 48]:
        with pytest.raises(ValueError):
            parse_method(bad)
    assert [
        same_share_budget(m, 64)
        for m in ("fathom(48)", "fathom(92)", "sparq(16)", "loki(32)", "pariskv(100)")
    ] == ["fathom(24)", "fathom(46)", "sparq(8)", "loki(16)", "pariskv(100)"]
    assert same_share_budget("fathom(48)", 128) == "fathom(48)"
