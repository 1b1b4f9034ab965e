"""What the adapter tests share beyond ../support.py (the formwork binary, the registry's GGUF
files): `hf_dir()`, the tokenizer and config transformers reads from SmolLM2-135M's GGUF file
(`gguf_file=`), written once per process into a temporary Hugging Face model directory, which
vLLM's ModelConfig and SGLang's tokenizer loader want.
"""

import atexit
import functools
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support import gguf_path  # noqa: E402

MODEL = "smollm2-135m"

__all__ = ["MODEL", "PROMPTS_CITY", "SCHEMA_CITY", "gguf_path", "hf_dir", "hf_model_dir"]


@functools.cache
def hf_dir(name: str = MODEL) -> str:
    """A Hugging Face directory (tokenizer.json, tokenizer_config.json, config.json) made by
    transformers from the model's GGUF file."""
    from transformers import AutoConfig, AutoTokenizer

    folder, file = os.path.split(gguf_path(name))
    out = tempfile.mkdtemp(prefix=f"formwork-{name}-")
    atexit.register(shutil.rmtree, out, True)
    AutoTokenizer.from_pretrained(folder, gguf_file=file).save_pretrained(out)
    AutoConfig.from_pretrained(folder, gguf_file=file).save_pretrained(out)
    return out


@functools.cache
def hf_model_dir(name: str = MODEL) -> str:
    """`hf_dir()` with the weights too (transformers dequantizes the GGUF file and saves
    safetensors): what a vLLM or SGLang engine loads (scripts/gpu-engine-test)."""
    from transformers import AutoModelForCausalLM

    folder, file = os.path.split(gguf_path(name))
    out = hf_dir(name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file)
    # A model loaded from GGUF counts as quantized and refuses save_pretrained: copy its
    # (dequantized) weights into a plain model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out)
    return out


SCHEMA_CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 24},
        "country": {"type": "string", "minLength": 1, "maxLength": 24},
        "population": {"type": "integer", "minimum": 0},
    },
    "required": ["city", "country", "population"],
    "additionalProperties": False,
}
# Chat-formatted prompts for SmolLM2 (ChatML) asking for SCHEMA_CITY's JSON.
PROMPTS_CITY = [
    f"<|im_start|>user\nName a large city in {c} as JSON.<|im_end|>\n<|im_start|>assistant\n"
    for c in ["Japan", "France", "Brazil", "Kenya", "Canada", "India", "Italy", "Peru"]
]
