"""The evaluation run: RULER-style cells, teacher-forced metrics and decode speed of a real model
decoding through fathom (SPEC §13, issue #16).

Per (context, task): `samples` prompts, each prefilled densely once (`record_prompt`); one
calibration fitted from those prefills (all methods of the cell share it); then every method
decodes all samples together from the saved prefills (`FathomCache(prompt=...)`), greedily, and
each sample scores the fraction of its gold strings found. Cells run context by context, task by
task, all methods of a cell together, so a time budget cuts whole cells.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

from .. import FathomError
from ..hf import FathomCache, record_prompt, use_fathom
from ..hf.engine import Engine
from ..hf.methods import parse_method, same_share_budget
from ..hf.prompt import Prompt
from . import report, tasks
from .haystack import load as load_haystack

BASE_METHODS = [
    "dense",
    "oracle",
    "fathom(48)",
    "fathom(64)",
    "fathom(92)",
    "sparq(16)",
    "sparq(32)",
    "double_sparsity(32)",
    "loki(32)",
    "pariskv(100)",
]
# Budgets whose targets the issue sets also run from host memory by default (the selection is
# the same in both placements; the host rows check that and time the offloaded store).
HOST_DEFAULT = ["fathom(48)", "fathom(92)"]


def default_methods(head_dim: int) -> list[str]:
    methods = list(BASE_METHODS)
    if head_dim != 128:
        for m in [
            "fathom(48)",
            "fathom(64)",
            "fathom(92)",
            "sparq(16)",
            "sparq(32)",
            "double_sparsity(32)",
            "loki(32)",
        ]:
            scaled = same_share_budget(m, head_dim)
            if scaled not in methods:
                methods.append(scaled)
    return methods


def method_placements(
    methods: list[str], head_dim: int, host: list[str] | None
) -> list[tuple[str, str]]:
    if host is None:
        host = HOST_DEFAULT + [same_share_budget(m, head_dim) for m in HOST_DEFAULT]
    runs = [(m, "hbm") for m in methods]
    runs += [(m, "host") for m in methods if m in host and parse_method(m).name == "fathom"]
    return runs


class Run:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(args.device)
        path = os.path.join(args.model_dir, args.gguf)
        dtype = torch.bfloat16
        self.model = AutoModelForCausalLM.from_pretrained(
            args.model_dir, gguf_file=args.gguf, dtype=dtype
        )
        self.model.to(self.device).eval()
        self.tok = AutoTokenizer.from_pretrained(args.model_dir, gguf_file=args.gguf)
        use_fathom(self.model)
        self.engine = Engine(
            self.model,
            backend=args.backend,
            device=self.device,
            max_batch=max(1, args.samples),
            capacity_tokens=max(1, args.samples) * (max(args.contexts) + 256),
            basis=args.basis,
        )
        self.haystack = load_haystack(args.haystack)
        d = self.engine.layout.head_dim
        methods = args.methods or default_methods(d)
        self.runs = method_placements(methods, d, args.host_methods)
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.eos.update(t for t in [self.tok.eos_token_id] if t is not None)
        header = dict(
            what="RULER-style greedy decoding through fathom (SPEC §13)",
            gpu=torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            driver=report.driver_version(),
            commit=args.commit or os.environ.get("FATHOM_COMMIT") or _git_commit(),
            date=datetime.date.today().isoformat(),
            model=path,
            model_sha256=_sha256(path),
            text=self.haystack.source,
            text_sha256=self.haystack.sha256,
            torch=torch.__version__,
            transformers=_version("transformers"),
            python=platform.python_version(),
            backend=args.backend,
            head_dim=d,
            layers=len(self.engine.layout.kinds),
            full_layers=len(self.engine.layout.full_layers),
            k="paper_k(n)" if args.k is None else args.k,
            samples=args.samples,
            contexts=args.contexts,
            tasks=args.tasks,
            basis=getattr(self.engine.shape, "basis", None),
            runs=[f"{m}@{p}" for m, p in self.runs],
            time_budget_s=args.time_budget,
            score="percent of gold strings found in the generation (RULER string_match_all)",
        )
        os.makedirs(args.out_dir, exist_ok=True)
        gpu = header["gpu"].lower().replace("nvidia ", "").replace(" ", "-")
        self.stem = os.path.join(args.out_dir, f"ruler-{gpu}-{header['date']}-{header['commit']}")
        self.results = report.Results(self.stem + ".json", header)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def out_of_time(self) -> bool:
        return self.args.time_budget is not None and self.elapsed() > self.args.time_budget

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():7.1f}s] {msg}", flush=True)

    def encode(self, sample: tasks.Sample) -> list[int]:
        text = self.tok.apply_chat_template(
            [{"role": "user", "content": sample.prompt}], tokenize=False, add_generation_prompt=True
        )
        return self.tok(text + sample.answer_prefix, add_special_tokens=False)["input_ids"]

    def count(self, text: str) -> int:
        return (
            len(self.tok(text, add_special_tokens=False)["input_ids"]) + 24
        )  # + the chat template's tokens

    def prompts(self, ids_list: list[list[int]]) -> Prompt:
        return Prompt.join(
            [record_prompt(self.model, torch.tensor(ids), self.engine) for ids in ids_list]
        )

    def refused(self, task, context, method, placement, error) -> None:
        """A method the model's store cannot serve (loki on a raw store, say) is recorded, not
        fatal: the other methods of the cell go on."""
        row = dict(
            task=task,
            context=context,
            method=method,
            placement=placement,
            error=f"{type(error).__name__}: {error}",
        )
        self.results.add("errors", row)
        self.log(f"{task:16s} {context:6d} {method:20s} {placement:4s} refused: {row['error']}")

    def ruler_cell(self, context: int, task: str) -> None:
        samples = [
            tasks.make_sample(task, self.haystack.text, context, self.count, seed)
            for seed in range(self.args.samples)
        ]
        prompt = self.prompts([self.encode(s) for s in samples])
        cals = Calibrations(self.engine, prompt)
        steps = self.args.max_new_tokens or samples[0].tokens
        for method, placement in self.runs:
            t = time.monotonic()
            cache = FathomCache(
                None,
                method,
                placement=placement,
                k=self.args.k,
                calibration=cals.get(method),
                engine=self.engine,
                prompt=prompt,
            )
            try:
                tokens = _greedy(self.model, cache, steps, self.eos)
            except FathomError as e:
                self.refused(task, context, method, placement, e)
                continue
            finally:
                cache.release()
            texts = [self.tok.decode(row, skip_special_tokens=True) for row in tokens]
            scores = [tasks.score(text, s.gold) for text, s in zip(texts, samples)]
            row = dict(
                task=task,
                context=context,
                method=method,
                placement=placement,
                score=100 * statistics.fmean(scores),
                samples=len(samples),
                prompt_tokens=prompt.lengths,
                new_tokens=steps,
                seconds=round(time.monotonic() - t, 3),
                k=cache.k,
                generations=texts if self.args.keep_text else None,
            )
            self.results.add("rows", row)
            self.log(
                f"{task:16s} {context:6d} {method:20s} {placement:4s} score {row['score']:6.1f} "
                f"({row['seconds']:.2f}s)"
            )
        cals.forget()

    def teacher_forced(self, context: int) -> None:
        steps = self.args.tf_steps
        ids = self.tok(self.haystack.text, add_special_tokens=False)["input_ids"]
        stride = max(1, (len(ids) - context) // max(1, self.args.samples))
        windows = [ids[i * stride : i * stride + context] for i in range(self.args.samples)]
        prompt = self.prompts([w[: context - steps] for w in windows])
        cals = Calibrations(self.engine, prompt)
        targets = torch.tensor([w[context - steps :] for w in windows], device=self.device)
        dense = None
        for method, placement in [("dense", "hbm")] + [
            r for r in self.runs if r != ("dense", "hbm")
        ]:
            cache = FathomCache(
                None,
                method,
                placement=placement,
                k=self.args.k,
                calibration=cals.get(method),
                engine=self.engine,
                prompt=prompt,
            )
            try:
                logp = _teacher_forced(self.model, cache, targets)
            except FathomError as e:
                self.refused("teacher_forced", context, method, placement, e)
                continue
            finally:
                cache.release()
            if dense is None:
                dense = logp
                continue
            truth = targets[:, 1:]
            nll = -logp.gather(-1, truth[..., None]).mean()
            nll_dense = -dense.gather(-1, truth[..., None]).mean()
            row = dict(
                task="teacher_forced",
                context=context,
                method=method,
                placement=placement,
                steps=steps - 1,
                samples=len(windows),
                agreement=100 * float((logp.argmax(-1) == dense.argmax(-1)).float().mean()),
                ppl_ratio=float(torch.exp(nll - nll_dense)),
                kl=float((dense.exp() * (dense - logp)).sum(-1).mean()),
            )
            row["score"] = row["agreement"]
            self.results.add("teacher_forced", row)
            self.log(
                f"teacher-forced {context:6d} {method:20s} {placement:4s} "
                f"agreement {row['agreement']:6.2f}% "
                f"ppl x{row['ppl_ratio']:.4f} KL {row['kl']:.5f}"
            )
        cals.forget()

    def speed(self, context: int) -> None:
        from transformers import DynamicCache

        tokens = self.args.speed_tokens
        ids = self.tok(self.haystack.text, add_special_tokens=False)["input_ids"][
            : context - tokens
        ]
        prompt = self.prompts([ids])
        d = self.engine.layout.head_dim
        budget = same_share_budget("fathom(48)", d)
        cal = self.engine.calibration(None, prompt, parse_method(budget))
        runs = [
            ("sdpa", "hbm"),
            ("dense", "hbm"),
            ("dense", "host"),
            (budget, "hbm"),
            (budget, "host"),
        ]
        if self.args.backend == "reference":  # it runs dense and oracle only, in one placement
            runs = runs[:2]
        for method, placement in runs:
            if method == "sdpa":
                cache = DynamicCache(config=self.model.config)
                with torch.inference_mode():
                    out = self.model(
                        input_ids=torch.tensor([ids], device=self.device),
                        past_key_values=cache,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                first = out.logits[:, -1].argmax(-1)
            else:
                cache = FathomCache(
                    None,
                    method,
                    placement=placement,
                    k=self.args.k,
                    calibration=cal,
                    engine=self.engine,
                    prompt=prompt,
                )
                first = torch.tensor(cache.first_tokens, device=self.device)
            try:
                tps, gpu_ms = _timed_decode(self.model, cache, first, len(ids), tokens, self.device)
            finally:
                if isinstance(cache, FathomCache):
                    cache.release()
            row = dict(
                task="speed",
                context=context,
                method=method,
                placement=placement,
                tokens=tokens,
                tokens_per_s=tps,
                gpu_ms_per_token=gpu_ms,
                prompt_tokens=len(ids),
            )
            self.results.add("speed", row)
            self.log(
                f"speed {context:6d} {method:20s} {placement:4s} {tps:8.1f} tokens/s, "
                f"GPU {gpu_ms if gpu_ms is None else round(gpu_ms, 3)} ms/token"
            )
        self.engine.forget_calibration(cal)

    def run(self) -> int:
        a = self.args
        self.log(
            f"{len(self.runs)} method runs x {len(a.tasks)} tasks x {len(a.contexts)} contexts, "
            f"{a.samples} samples a cell"
        )
        stopped = None
        try:
            if a.speed and not self.out_of_time():
                self.speed(max(a.contexts))
            for context in a.contexts:
                for task in a.tasks:
                    if self.out_of_time():
                        raise _OutOfTime(f"{task} at {context}")
                    self.ruler_cell(context, task)
                if a.teacher_forced:
                    if self.out_of_time():
                        raise _OutOfTime(f"teacher-forced at {context}")
                    self.teacher_forced(context)
        except _OutOfTime as e:
            stopped = (
                f"time budget of {a.time_budget} s spent after {self.elapsed():.0f} s; "
                f"stopped before {e}"
            )
            self.log(stopped)
        self.results.finish(stopped is None, stopped)
        with open(self.stem + ".md", "w") as f:
            f.write(report.table(self.results.data))
        with open(self.stem + ".svg", "w") as f:
            f.write(report.svg(self.results.data))
        print(report.table(self.results.data))
        self.log(f"wrote {self.stem}.json, .md and .svg")
        return 0


class _OutOfTime(Exception):
    pass


class Calibrations:
    """The calibrations of one cell, fitted from its prefills on first use: one shared by every
    method, and one more per double_sparsity(r) (its channel sets are fitted for its r)."""

    def __init__(self, engine: Engine, prompt: Prompt):
        self.engine, self.prompt, self.fitted = engine, prompt, {}

    def get(self, method: str):
        m = parse_method(method)
        key = m.text if m.name == "double_sparsity" else "shared"
        if key not in self.fitted:
            fit_for = m if m.name == "double_sparsity" else parse_method("fathom(48)")
            self.fitted[key] = self.engine.calibration(None, self.prompt, fit_for)
        return self.fitted[key]

    def forget(self) -> None:
        for cal in self.fitted.values():
            self.engine.forget_calibration(cal)


@torch.inference_mode()
def _greedy(model, cache, steps, eos):
    from ..hf.decode import greedy

    return greedy(model, cache, steps, eos_token_ids=eos)


@torch.inference_mode()
def _teacher_forced(model, cache, targets):
    from ..hf.decode import teacher_forced

    return teacher_forced(model, cache, targets[:, :-1])


@torch.inference_mode()
def _timed_decode(model, cache, first, length, tokens, device):
    """Greedy decode of `tokens` tokens; tokens/s by wall clock, GPU ms per token by CUDA events
    around each forward (median)."""
    cuda = device.type == "cuda"
    tok, pos = first.view(1), torch.tensor([length], device=device)
    events = []
    for i in range(tokens + 4):
        if i == 4:  # four warm-up tokens, then the clock
            if cuda:
                torch.cuda.synchronize(device)
            t = time.perf_counter()
        if cuda and i >= 4:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        logits = model(
            input_ids=tok[:, None], position_ids=pos[:, None], past_key_values=cache, use_cache=True
        ).logits[:, -1]
        if cuda and i >= 4:
            end.record()
            events.append((start, end))
        tok, pos = logits.argmax(-1), pos + 1
    if cuda:
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - t
    gpu = statistics.median(s.elapsed_time(e) for s, e in events) if events else None
    return tokens / wall, gpu


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _version(name: str) -> str | None:
    mod = sys.modules.get(name)
    return getattr(mod, "__version__", None)
