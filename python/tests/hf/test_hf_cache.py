"""The Hugging Face plumbing on CPU: the cache, the attention and mask functions, branching and
the decode loops, checked against transformers' own sdpa decoding and the torch §6 reference.
Not in CI (it needs torch and transformers); README "Inside a real model" has the command."""

import pytest
import torch
from _hf_models import backends, chat_ids, tiny_model
from transformers import DynamicCache

import fathom
from fathom.hf import Engine, FathomCache, Prompt, greedy, record_prompt
from fathom.hf.layout import layout_of

ARCHS = ["llama", "qwen2", "qwen3", "gemma3_text"]


def sdpa_tokens(model, ids, n):
    """transformers' own sdpa decoding (the model switched to "sdpa" and back)."""
    model.set_attn_implementation("sdpa")
    try:
        return model.generate(
            ids,
            past_key_values=DynamicCache(config=model.config),
            max_new_tokens=n,
            do_sample=False,
        )
    finally:
        model.set_attn_implementation("fathom")


# -- the real model -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", backends())
def test_dense_through_the_cache_is_sdpa_on_smollm2(smollm2, backend):
    model, tok = smollm2
    ids = chat_ids(tok, "Write a short poem about the sea and the sky.")
    want = sdpa_tokens(model, ids, 32)
    cache = FathomCache(model, "dense", backend=backend, device="cpu")
    got = model.generate(ids, past_key_values=cache, max_new_tokens=32, do_sample=False)
    assert got.tolist() == want.tolist()
    assert cache.lengths == [want.shape[1] - 1]  # the last token is generated, not yet attended


@pytest.mark.parametrize("backend", backends())
def test_oracle_with_k_above_n_is_dense_on_smollm2(smollm2, backend):
    model, tok = smollm2
    ids = chat_ids(tok, "Name three colours of the rainbow.")
    dense = model.generate(
        ids,
        past_key_values=FathomCache(model, "dense", backend=backend, device="cpu"),
        max_new_tokens=24,
        do_sample=False,
    )
    oracle = model.generate(
        ids,
        past_key_values=FathomCache(model, "oracle", k=2048, backend=backend, device="cpu"),
        max_new_tokens=24,
        do_sample=False,
    )
    assert oracle.tolist() == dense.tolist()


# -- every architecture, tiny random models ---------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_decodes_dense_as_sdpa(arch):
    model = tiny_model(arch)
    ids = torch.randint(3, 97, (1, 40), generator=torch.Generator().manual_seed(2))
    want = sdpa_tokens(model, ids, 16)
    cache = FathomCache(model, "dense", backend="reference", device="cpu")
    got = model.generate(ids, past_key_values=cache, max_new_tokens=16, do_sample=False)
    assert got.tolist() == want.tolist()
    layout = layout_of(model.config)
    assert cache.store.shape.layers == len(layout.full_layers)


def test_gemma3_sliding_layers_stay_dense_over_their_window():
    model = tiny_model("gemma3_text")
    layout = layout_of(model.config)
    assert layout.kinds == ("sliding_attention", "full_attention") * 2 and layout.full_layers == [
        1,
        3,
    ]
    ids = torch.randint(3, 97, (1, 30), generator=torch.Generator().manual_seed(3))
    cache = FathomCache(model, "oracle", k=1, backend="reference", device="cpu")
    model.generate(ids, past_key_values=cache, max_new_tokens=6, do_sample=False)
    # The window layers keep window - 1 rows like transformers' own sliding cache; the store
    # holds every token of the full layers.
    assert cache.layers[0].keys.shape[-2] == 11
    assert cache.store.lengths(cache.seqs[0], 0) == (35, 35)


def test_oracle_selects_when_k_is_small():
    # With k far below n the oracle must differ from dense somewhere: a selection that kept every
    # token would pass the equality tests above without selecting anything.
    model = tiny_model("llama")
    ids = torch.randint(3, 97, (1, 200), generator=torch.Generator().manual_seed(4))
    prompt = record_prompt(model, ids, Engine(model, backend="reference", device="cpu"))
    engine = Engine(model, backend="reference", device="cpu")
    outs = {}
    for method, k in [("dense", None), ("oracle", 2), ("oracle", 2048)]:
        cache = FathomCache(None, method, k=k, engine=engine, prompt=prompt)
        targets = torch.randint(3, 97, (1, 4), generator=torch.Generator().manual_seed(5))
        from fathom.hf import teacher_forced

        outs[(method, k)] = teacher_forced(model, cache, targets)
        cache.release()
    assert torch.allclose(outs[("oracle", 2048)], outs[("dense", None)], atol=1e-2)
    assert not torch.allclose(outs[("oracle", 2)], outs[("dense", None)], atol=1e-2)


# -- branching and the batched loop -----------------------------------------------------------


def test_branches_from_one_prefill_equal_fresh_generations():
    model = tiny_model("qwen3")
    ids = torch.randint(3, 97, (1, 48), generator=torch.Generator().manual_seed(6))
    engine = Engine(model, backend="reference", device="cpu")
    prompt = record_prompt(model, ids, engine)
    for method, k in [("dense", None), ("oracle", 8)]:
        fresh = model.generate(
            ids,
            past_key_values=FathomCache(model, method, k=k, engine=engine),
            max_new_tokens=10,
            do_sample=False,
        )[0, 48:].tolist()
        branch = FathomCache(None, method, k=k, engine=engine, prompt=prompt)
        assert greedy(model, branch, 10) == [fresh]
        branch.release()


def test_batched_rows_of_different_lengths_decode_as_alone():
    model = tiny_model("llama")
    engine = Engine(model, backend="reference", device="cpu")
    gen = torch.Generator().manual_seed(7)
    prompts = [
        record_prompt(model, torch.randint(3, 97, (1, n), generator=gen), engine)
        for n in (30, 45, 37)
    ]
    alone = []
    for p in prompts:
        c = FathomCache(None, "oracle", k=8, engine=engine, prompt=p)
        alone += greedy(model, c, 8)
        c.release()
    batch = FathomCache(None, "oracle", k=8, engine=engine, prompt=Prompt.join(prompts))
    assert greedy(model, batch, 8) == alone


def test_cache_branch_keeps_the_recorded_prefill():
    model = tiny_model("qwen2")
    ids = torch.randint(3, 97, (1, 33), generator=torch.Generator().manual_seed(8))
    first = FathomCache(model, "dense", backend="reference", device="cpu", keep_prompt=True)
    a = model.generate(ids, past_key_values=first, max_new_tokens=8, do_sample=False)
    second = first.branch("dense")
    prompt_ids = a[:, :34]  # the prompt and the token the prefill's logits gave
    b = model.generate(prompt_ids, past_key_values=second, max_new_tokens=7, do_sample=False)
    assert b.tolist() == a.tolist()


# -- errors leave things usable ---------------------------------------------------------------


def test_exception_mid_decode_then_reset_gives_the_next_generation():
    model = tiny_model("llama")
    ids = torch.randint(3, 97, (1, 40), generator=torch.Generator().manual_seed(9))
    engine = Engine(model, backend="reference", device="cpu")
    want = model.generate(
        ids,
        past_key_values=FathomCache(model, "oracle", k=4, engine=engine),
        max_new_tokens=12,
        do_sample=False,
    )
    cache = FathomCache(model, "oracle", k=4, engine=engine)
    calls = {"n": 0}

    def boom(module, args, kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # layer 2 of the 4th decode step (call 1 is the prefill)
            raise RuntimeError("interrupted")

    hook = model.model.layers[2].self_attn.register_forward_pre_hook(boom, with_kwargs=True)
    with pytest.raises(RuntimeError, match="interrupted"):
        model.generate(ids, past_key_values=cache, max_new_tokens=12, do_sample=False)
    hook.remove()
    # Layers 0-1 appended that token and layers 2-3 did not: going on is refused, not garbage.
    with pytest.raises(fathom.SequenceError, match="reset"):
        model(input_ids=ids[:, :1], past_key_values=cache)
    cache.reset()
    again = model.generate(ids, past_key_values=cache, max_new_tokens=12, do_sample=False)
    assert again.tolist() == want.tolist()
    cache.release()
    # Every sequence of the interrupted and the finished generations was freed.
    assert engine.memory()["hbm"]["sequences"] == 1  # only `want`'s cache, never released


def test_padded_batches_and_bad_methods_are_typed_errors():
    model = tiny_model("llama")
    ids = torch.randint(3, 97, (2, 20), generator=torch.Generator().manual_seed(10))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with pytest.raises(fathom.InvalidInputError, match="padding"):
        model.generate(
            ids,
            attention_mask=mask,
            past_key_values=FathomCache(model, "dense", backend="reference", device="cpu"),
            max_new_tokens=2,
        )
    with pytest.raises(fathom.MethodError, match="unknown method"):
        FathomCache(model, "fathom48", backend="reference", device="cpu")
    with pytest.raises(fathom.MethodError, match="dense and oracle only"):
        model.generate(
            ids[:1],
            past_key_values=FathomCache(model, "sparq(8)", backend="reference", device="cpu"),
            max_new_tokens=3,
            do_sample=False,
        )
    # An unpadded batch decodes: both rows in one step.
    cache = FathomCache(model, "dense", backend="reference", device="cpu")
    out = model.generate(ids, past_key_values=cache, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, 24) and cache.lengths == [23, 23]


def test_a_model_not_set_to_fathom_is_refused_before_decoding():
    model = tiny_model("llama")
    model.set_attn_implementation("sdpa")
    ids = torch.randint(3, 97, (1, 20), generator=torch.Generator().manual_seed(11))
    with pytest.raises(fathom.ConfigError, match="use_fathom"):
        model.generate(
            ids,
            past_key_values=FathomCache(model, "dense", backend="reference", device="cpu"),
            max_new_tokens=3,
            do_sample=False,
        )


@pytest.mark.skipif("fathom" not in backends(), reason="this fathom package has no KeyStore yet")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_fathom_cpu_backend_decodes_every_method(arch):
    # A shape the kernels serve (D = 64, G = 2): fathom's CPU backend over the f64 reference.
    model = tiny_model(arch, head_dim=64, num_hidden_layers=2, hidden_size=128)
    ids = torch.randint(3, 97, (1, 150), generator=torch.Generator().manual_seed(12))
    engine = Engine(model, backend="fathom", device="cpu", max_batch=2, capacity_tokens=1024)
    want = sdpa_tokens(model, ids, 8)
    dense = model.generate(
        ids,
        past_key_values=FathomCache(model, "dense", engine=engine),
        max_new_tokens=8,
        do_sample=False,
    )
    assert dense.tolist() == want.tolist()
    oracle = model.generate(
        ids,
        past_key_values=FathomCache(model, "oracle", k=2048, engine=engine),
        max_new_tokens=8,
        do_sample=False,
    )
    assert oracle.tolist() == want.tolist()
    prompt = record_prompt(model, ids, engine)
    for method in ["fathom(24)", "sparq(8)", "double_sparsity(16)", "loki(16)", "pariskv(100)"]:
        cache = FathomCache(None, method, k=16, engine=engine, prompt=prompt)
        if method.startswith("loki") and engine.shape.basis == "raw":
            # Qwen3 has QK-norm: a raw store (SPEC §5), which loki cannot read.
            with pytest.raises(fathom.MethodError, match="klt"):
                greedy(model, cache, 6)
            cache.reset()
            continue
        assert len(greedy(model, cache, 6)[0]) == 6
        cache.release()
