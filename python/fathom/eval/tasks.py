"""RULER-style tasks (NVIDIA/RULER `scripts/data/synthetic`, `scripts/synthetic.yaml`): the same
templates, answer prefixes, needle and chain formats and score, over a real haystack text.

Standard library only (the CI tests import it without torch or numpy). A sample is made for a
token budget: the haystack grows (binary search, as RULER does) until the prompt, measured with
the caller's `count_tokens`, plus the tokens to generate, fills the context.

Score (RULER `string_match_all`): the fraction of a sample's gold strings found in its generation,
case-insensitive; a cell's score is the mean over its samples, in percent.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field

from .words import ADJECTIVES, NOUNS

NIAH_TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. "
    "Make sure to memorize it. I will quiz you about the {type_needle_v} afterwards.\n"
    "{context}\nWhat are all the special magic {type_needle_v} for {query} mentioned in the "
    "provided text?"
)
NIAH_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
VT_TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text."
    "\n\n{context}\nQuestion: Find all variables that are assigned the value {query} in the "
    "text above."
)
VT_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
    "variables are assigned the value {query}, they are: "
)
FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the "
    "above coded text?"
)
FWE_PREFIX = (
    " Answer: According to the coded text above, the three most frequently appeared words are:"
)

# RULER's needle depths: 40 points evenly over 0..100 %.
DEPTHS = [round(i * 100 / 39) for i in range(40)]


@dataclass(frozen=True)
class TaskSpec:
    """One task: its RULER config and how many tokens it generates (RULER: 128 for NIAH, 30 for
    variable tracking, 50 for frequent words; the NIAH answers here are one to four 7-digit
    numbers, so 64 tokens hold them with room)."""

    name: str
    kind: str
    tokens: int
    args: dict = field(default_factory=dict)


TASKS = {
    "niah_single": TaskSpec("niah_single", "niah", 32, dict(num_k=1, num_v=1, num_q=1)),
    "niah_multikey": TaskSpec("niah_multikey", "niah", 32, dict(num_k=4, num_v=1, num_q=1)),
    "niah_multivalue": TaskSpec("niah_multivalue", "niah", 64, dict(num_k=1, num_v=4, num_q=1)),
    "niah_multiquery": TaskSpec("niah_multiquery", "niah", 64, dict(num_k=4, num_v=1, num_q=4)),
    "vt": TaskSpec("vt", "vt", 30, dict(num_chains=1, num_hops=4)),
    "fwe": TaskSpec("fwe", "fwe", 50, dict(alpha=2.0)),
}


@dataclass
class Sample:
    task: str
    prompt: str  # the task text (the user turn)
    answer_prefix: str  # appended after the model's chat template, as RULER does
    gold: list[str]
    tokens: int  # tokens to generate


def score(generation: str, gold: list[str]) -> float:
    """The fraction of `gold` strings present in `generation` (case-insensitive)."""
    if not gold:
        raise ValueError("a sample without gold strings cannot be scored")
    text = generation.lower()
    return sum(1.0 for g in gold if g.lower() in text) / len(gold)


def haystack_words(text: str) -> list[str]:
    """RULER's essay haystack: the text with every run of whitespace made one space, as words."""
    return re.sub(r"\s+", " ", text).strip().split(" ")


def sentences(text: str) -> list[str]:
    """Sentence split (RULER uses nltk's `sent_tokenize`; this splits after `.`, `!` or `?`
    followed by a space and a capital or digit, which is what matters for placing needles)."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])", text.strip())
    return [p for p in parts if p]


def _number(rng: random.Random) -> str:
    return str(rng.randint(10**6, 10**7 - 1))


def _word(rng: random.Random) -> str:
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def _insert_at_depths(
    words: list[str], n_words: int, inserts: list[str], rng: random.Random
) -> str:
    text = " ".join((words * (n_words // max(1, len(words)) + 1))[:n_words])
    sents = sentences(text)
    cuts = sorted(int(len(sents) * d / 100) for d in rng.sample(DEPTHS, len(inserts)))
    bounds = [0] + cuts + [len(sents)]
    pieces = []
    for i in range(1, len(bounds)):
        pieces.append(" ".join(sents[bounds[i - 1] : bounds[i]]))
        if i - 1 < len(inserts):
            pieces.append(inserts[i - 1])
    return " ".join(p for p in pieces if p)


def niah(
    words: list[str], n_words: int, rng: random.Random, num_k: int, num_v: int, num_q: int
) -> Sample:
    num_k = max(num_k, num_q)
    keys, values, needles = [], [], []
    for _ in range(num_k):
        key = _word(rng)
        while key in keys:
            key = _word(rng)
        keys.append(key)
        vals = [_number(rng) for _ in range(num_v)]
        values.append(vals)
        needles += [NEEDLE.format(type_needle_v="numbers", key=key, value=v) for v in vals]
    rng.shuffle(needles)
    context = _insert_at_depths(words, n_words, needles, rng)
    picked = rng.sample(range(num_k), num_q)
    queries = [keys[i] for i in picked]
    gold = [v for i in picked for v in values[i]]
    query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
    template, prefix, kind = NIAH_TEMPLATE, NIAH_PREFIX, "numbers"
    if num_q * num_v == 1:  # RULER's singular wording for one answer
        template = template.replace("Some", "A").replace("are all", "is").replace("are", "is")
        prefix = prefix.replace("are", "is")
        kind = "number"
    return Sample(
        "niah",
        template.format(type_needle_v=kind, context=context, query=query),
        prefix.format(type_needle_v=kind, query=query),
        gold,
        0,
    )


def vt(
    words: list[str], n_words: int, rng: random.Random, num_chains: int, num_hops: int
) -> Sample:
    names: list[str] = []
    while len(names) < (num_hops + 1) * num_chains:
        name = "".join(rng.choices(string.ascii_uppercase, k=5))
        if name not in names:
            names.append(name)
    chains = []
    for c in range(num_chains):
        var = names[c * (num_hops + 1) : (c + 1) * (num_hops + 1)]
        chain = [f"VAR {var[0]} = {rng.randint(10000, 99999)}"]
        chain += [f"VAR {var[j + 1]} = VAR {var[j]}" for j in range(num_hops)]
        chains.append((var, chain))
    value = chains[0][1][0].split("=")[-1].strip()
    # RULER keeps each chain's statements in order while interleaving chains.
    flat = [s + "." for _, chain in chains for s in chain]
    context = (
        _insert_at_depths(words, n_words, flat, rng)
        if num_chains == 1
        else _insert_at_depths(words, n_words, _interleave([c for _, c in chains], rng), rng)
    )
    return Sample(
        "vt",
        VT_TEMPLATE.format(context=context, query=value),
        VT_PREFIX.format(num_v=num_hops + 1, query=value),
        list(chains[0][0]),
        0,
    )


def _interleave(chains: list[list[str]], rng: random.Random) -> list[str]:
    pos = [0] * len(chains)
    out = []
    while any(p < len(c) for p, c in zip(pos, chains)):
        i = rng.choice([i for i, (p, c) in enumerate(zip(pos, chains)) if p < len(c)])
        out.append(chains[i][pos[i]] + ".")
        pos[i] += 1
    return out


def fwe(n_words: int, rng: random.Random, alpha: float, vocab_size: int) -> Sample:
    vocab = sorted(
        {"".join(rng.choices(string.ascii_lowercase, k=6)) for _ in range(vocab_size * 2)}
    )[:vocab_size]
    rng.shuffle(vocab)
    vocab[0] = "..."  # RULER: the most frequent word is noise
    zeta = sum(k**-alpha for k in range(1, 100000))
    counts = [int(n_words * (k**-alpha) / zeta) for k in range(1, len(vocab) + 1)]
    text = [w for w, c in zip(vocab, counts) for _ in range(c)]
    rng.shuffle(text)
    return Sample("fwe", FWE_TEMPLATE.format(context=" ".join(text)), FWE_PREFIX, vocab[1:4], 0)


def make_sample(task: str, haystack: str, context_tokens: int, count_tokens, seed: int) -> Sample:
    """One sample of `task` whose prompt (as `count_tokens` measures it) plus the tokens to
    generate fits `context_tokens`; the haystack size is the largest that fits, as in RULER."""
    spec = TASKS.get(task)
    if spec is None:
        raise ValueError(f"unknown task {task!r}: expected one of {', '.join(TASKS)}")
    words = haystack_words(haystack)
    budget = context_tokens - spec.tokens

    def build(n: int) -> Sample:
        rng = random.Random(f"{task}/{context_tokens}/{seed}")
        if spec.kind == "niah":
            s = niah(words, n, rng, **spec.args)
        elif spec.kind == "vt":
            s = vt(words, n, rng, **spec.args)
        else:
            s = fwe(n, rng, vocab_size=max(16, context_tokens // 50), **spec.args)
        s.task, s.tokens = task, spec.tokens
        return s

    def size(s: Sample) -> int:
        return count_tokens(s.prompt + s.answer_prefix)

    lo, hi, best = 16, max(32, budget * 2), None
    while lo <= hi:
        mid = (lo + hi) // 2
        if size(build(mid)) <= budget:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise ValueError(f"{task}: even the smallest haystack does not fit {context_tokens} tokens")
    return build(best)
