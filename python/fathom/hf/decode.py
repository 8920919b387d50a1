"""Prefill once, then decode many ways: the loops the evaluation runs (and a user may).

`record_prompt` runs the dense prefill of one prompt and saves it (`Prompt`), with the greedy
first token from the prefill's logits. `greedy` decodes a batch of saved prompts, each row at
its own length, through a `FathomCache`: the same tokens `model.generate(do_sample=False)`
gives for one row (a test checks it), but rows of different lengths decode together, which
generate's padding cannot do with a store. `teacher_forced` feeds given tokens instead of the
argmax and returns the log-probabilities of every step.

No host synchronisation per token: the next input is the argmax on the device; rows are checked
for their end token every `check_every` steps only.
"""

from __future__ import annotations

import torch

from .. import InvalidInputError
from .cache import FathomCache
from .engine import Engine
from .prompt import Prompt


@torch.inference_mode()
def record_prompt(
    model, input_ids: torch.Tensor, engine: Engine, *, calibration_queries: int = 64
) -> Prompt:
    """The dense prefill of `input_ids` (`[1, n]` or `[n]`), saved for branching."""
    ids = input_ids.view(1, -1).to(engine.device)
    cache = FathomCache(model, None, engine=engine, calibration_queries=calibration_queries)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    prompt = cache.recorded_prompt()
    prompt.rows[0].next_token = int(out.logits[0, -1].argmax())
    return prompt


@torch.inference_mode()
def greedy(
    model, cache: FathomCache, steps: int, *, eos_token_ids=(), check_every: int = 16
) -> list[list[int]]:
    """`steps` greedy tokens per row (the prefill's own first token included), each row cut
    after its first end token."""
    rows = cache.prompt_lengths
    device = cache.engine.device
    if None in cache.first_tokens:
        raise InvalidInputError(
            "greedy starts from saved prompts' first tokens (record_prompt saves them)"
        )
    tok = torch.tensor(cache.first_tokens, device=device)
    pos = torch.tensor(rows, device=device)
    eos = torch.tensor(sorted(eos_token_ids) or [-1], device=device)
    out = [tok]
    done = torch.isin(tok, eos)
    for step in range(1, steps):
        logits = model(
            input_ids=tok[:, None], position_ids=pos[:, None], past_key_values=cache, use_cache=True
        ).logits[:, -1]
        tok = logits.argmax(-1)
        pos = pos + 1
        out.append(tok)
        done |= torch.isin(tok, eos)
        if step % check_every == 0 and bool(done.all()):
            break
    tokens = torch.stack(out, dim=1).tolist()
    return [_cut(row, set(eos_token_ids)) for row in tokens]


@torch.inference_mode()
def teacher_forced(model, cache: FathomCache, targets: torch.Tensor) -> torch.Tensor:
    """Feeds `targets` (`[B, T]`, the true continuation of each row's prompt) one token per
    step and returns the log-probabilities the model gives after each fed token, `[B, T, V]`
    as float32 on the device (step t predicts `targets[:, t + 1]`)."""
    device = cache.engine.device
    pos = torch.tensor(cache.prompt_lengths, device=device)
    logps = []
    for t in range(targets.shape[1]):
        logits = model(
            input_ids=targets[:, t : t + 1].to(device),
            position_ids=(pos + t)[:, None],
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1]
        logps.append(torch.log_softmax(logits.float(), dim=-1))
    return torch.stack(logps, dim=1)


def _cut(row: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(row):
        if t in eos:
            return row[:i]
    return row
