"""Tiny random replicas of published PRM families, saved as their Hub folders are: the
same architecture class and config keys, the same special tokens and chat template, and
(for Qwen's remote-code class) a modeling file in the folder, loaded only with
trust_remote_code. Each replica also has the model card's own scoring procedure, written
from the card and independent of prmkit's encoder, for the golden tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
CORPUS = [
    "Let x be a number. Then 2x + 3 = 11, so x = 4.",
    "The answer is 42. We add 17 and 25 to get 42.",
    "First, compute 3 * 4 = 12. Next, 12 - 5 = 7. ки + - ки + -",
    "Step 1: simplify the fraction. ки Step 2: divide both sides by 2. ки",
    "+ - 0 = ( ) [ ] { } \\frac{1}{2} \\boxed{7} # Answer + + - - ки ки",
    "Problem: how many apples? Solution: 5 apples. Please reason step by step.",
    "system user assistant Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024",
]
PROBLEM = "Problem: how many apples? Let x be 2x + 3 = 11."
STEPS = ["First, compute 3 * 4 = 12.", "Next, 12 - 5 = 7, so x = 4.",
         "The answer is \\boxed{7}."]

# Qwen2.5-Math's chat template (the path without tools), as in its tokenizer_config.json.
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nPlease reason step by step, and put your final "
    "answer within \\\\boxed{}.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

# Llama 3.1's chat template (the path without tools), as in its tokenizer_config.json.
LLAMA31_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")

QWEN_MODELING = '''
import torch
from torch import nn
from transformers import Qwen2Config, Qwen2Model, Qwen2PreTrainedModel
from transformers.modeling_outputs import ModelOutput


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    config_class = Qwen2Config

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = 2
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size),
                                   nn.ReLU(), nn.Linear(config.hidden_size, self.num_labels))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, use_cache=False)
        return ModelOutput(logits=self.score(out[0]))
'''


def byte_bpe(specials: list[str], bos: str | None, eos: str, pad: str, template: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    out = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos,
                                  pad_token=pad)
    out.chat_template = template
    return out


def sentencepiece_like():
    """A Mistral-style tokenizer: Metaspace ("▁", prefix space on the first word), BOS
    added by the post-processor, <unk>/<s>/</s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    alphabet = sorted(set("".join(CORPUS)) | {"▁", "\n"})
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def small(config_cls, tok, **extra):
    return config_cls(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, **extra)


def qwen_prm(folder: Path) -> Path:
    """Qwen2.5-Math-PRM: Qwen2ForProcessRewardModel (remote code), <extra_0> steps."""
    import importlib.util

    from transformers import Qwen2Config

    folder.mkdir(parents=True, exist_ok=True)
    tok = byte_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<extra_0>"], None,
                   "<|im_end|>", "<|endoftext|>", QWEN_TEMPLATE)
    (folder / "modeling_qwen2_rm.py").write_text(QWEN_MODELING)
    spec = importlib.util.spec_from_file_location("qwen_rm_replica", folder / "modeling_qwen2_rm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = small(Qwen2Config, tok, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                   initializer_range=0.1)
    config.auto_map = {"AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"}
    torch.manual_seed(0)
    model = module.Qwen2ForProcessRewardModel(config).eval()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["Qwen2ForProcessRewardModel"]
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def qwen_card_scores(folder: Path, problem: str, steps: list[str]) -> tuple[list[float], list[int]]:
    """The model card's Quick Start: P(class 1) at every <extra_0>."""
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    messages = [{"role": "system", "content": QWEN_SYSTEM}, {"role": "user", "content": problem},
                {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    input_ids = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        logits = model(input_ids=input_ids)[0]
    mask = input_ids == tokenizer.encode("<extra_0>")[0]
    probs = F.softmax(logits, dim=-1)[mask][:, 1]
    return probs.tolist(), mask[0].nonzero().flatten().tolist()


def math_shepherd(folder: Path) -> Path:
    """math-shepherd-mistral-7b-prm: MistralForCausalLM, Mistral-style tokenizer."""
    from transformers import MistralConfig, MistralForCausalLM

    tok = sentencepiece_like()
    config = small(MistralConfig, tok, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                   tie_word_embeddings=False, initializer_range=0.1)
    torch.manual_seed(1)
    MistralForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def shepherd_card_scores(folder, problem, steps) -> tuple[list[float], list[int]]:
    """The model card: "{question} {output}", steps tagged " ки", softmax over +/-."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    candidate_tokens = tokenizer.encode("+ -")[1:]
    step_tag_id = tokenizer.encode("ки")[-1]
    output = "\n".join(f"{s} ки" for s in steps)
    input_id = torch.tensor([tokenizer.encode(f"{problem} {output}")])
    with torch.no_grad():
        logits = model(input_id).logits[:, :, candidate_tokens]
        scores = logits.softmax(dim=-1)[:, :, 0]
    return scores[input_id == step_tag_id].tolist(), (input_id[0] == step_tag_id).nonzero().flatten().tolist()


def rlhflow(folder: Path) -> Path:
    """RLHFlow/Llama3.1-8B-PRM-*: LlamaForCausalLM with Llama 3.1's tokens and template."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = byte_bpe(["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                    "<|end_header_id|>", "<|eot_id|>"], "<|begin_of_text|>", "<|eot_id|>",
                   "<|end_of_text|>", LLAMA31_TEMPLATE)
    config = small(LlamaConfig, tok, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                   tie_word_embeddings=False, initializer_range=0.1)
    torch.manual_seed(2)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def rlhflow_card_scores(folder, problem, steps) -> list[float]:
    """RLHFlow/RLHF-Reward-Modeling math-rm/prm_evaluate.py (select_sample, lines 36-64;
    worker, lines 77-79) on one answer already cut into `steps` (line 49 cuts it at
    "\n\n"), in fp32 where the script loads bf16. Line by line:"""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    candidate_tokens = [tokenizer.encode("+")[-1], tokenizer.encode("-")[-1]]  # l. 77-79
    prompt = problem  # l. 37
    single_step_score, conversation = [], []  # l. 43-44
    ans_list = [j.strip() for j in steps]  # l. 50
    for k in range(len(ans_list)):  # l. 51
        text = prompt + " " + ans_list[0] if k == 0 else ans_list[k]  # l. 52-55
        conversation.append({"content": text, "role": "user"})  # l. 56
        conversation.append({"content": "+", "role": "assistant"})  # l. 57
        # l. 59 (tokenize=True by default; return_dict=False is transformers 4's return)
        input_ids = tokenizer.apply_chat_template(conversation, return_tensors="pt",
                                                  return_dict=False)
        with torch.no_grad():
            logits = model(input_ids).logits[:, -3, candidate_tokens]  # l. 61
            scores = logits.softmax(dim=-1)[:, 0]  # l. 62
        single_step_score.append(scores[0].item())  # l. 64
    return single_step_score


def implicit_prm(folder: Path) -> tuple[Path, Path]:
    """An implicit PRM (EurusPRM-style): a Qwen2ForCausalLM policy and its reference, with
    Qwen's tokens and chat template."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = byte_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>",
                   "<|endoftext|>", QWEN_TEMPLATE)
    config = small(Qwen2Config, tok, pad_token_id=tok.pad_token_id,
                   eos_token_id=tok.eos_token_id, initializer_range=0.1)
    for name, seed in (("policy", 6), ("reference", 7)):
        torch.manual_seed(seed)
        Qwen2ForCausalLM(config).save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
    return folder / "policy", folder / "reference"


def _implicit_item(tokenizer, problem, steps):
    """The item both authors' scripts score: PRIME-RL/ImplicitPRM eval/processbench.py
    numbers the steps (line 219; the EurusPRM card's example answers are written so), then
    the whole conversation is tokenised by its chat template (the card; processbench.py
    lines 135-141) and step_last_tokens found (the card; processbench.py lines 147-159)."""
    d = {"query": problem, "answer": [f"Step {i + 1}: " + step for i, step in enumerate(steps)]}

    def chat(answer, tokenize):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": d["query"]},
             {"role": "assistant", "content": "\n\n".join(answer)}],
            tokenize=tokenize, add_generation_prompt=False,
            **({"return_tensors": "pt", "return_dict": False} if tokenize else {}))

    input_ids = chat(d["answer"], True)
    step_last_tokens = []
    for step_num in range(0, len(d["answer"]) + 1):
        conv = chat(d["answer"][:step_num], False).strip()
        if step_num != 0 and step_num != len(d["answer"]):
            conv += "\n\n"
        step_last_tokens.append(len(tokenizer.encode(conv, add_special_tokens=False)) - 2)
    return input_ids, step_last_tokens


def _implicit_raw_reward(policy, reference, input_ids, pad_token_id):
    """per_token_logps - ref_per_token_logps: get_logps of the card (processbench.py lines
    102-126, 242-247), labels = input_ids, fp32."""
    from transformers import AutoModelForCausalLM

    def get_logps(folder):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=input_ids != pad_token_id).logits
        labels = input_ids[:, 1:].clone().long()
        logits = logits[:, :-1, :]
        return torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)

    return get_logps(policy) - get_logps(reference)


def implicit_card_rewards(policy, reference, problem, steps, beta) -> list[float]:
    """The running reward before its sigmoid, per step, as the EurusPRM model card's usage
    code computes it (PRIME-RL/EurusPRM-Stage2 README.md "Usage", the statements of
    PRIME-RL/ImplicitPRM eval/prm_eval_utils.py lines 226 and 426-449 too): the label mask
    is 0 before step_last_tokens[0] and 1 from there over the input_ids, and is applied to
    the log-probs as label_mask[:, 1:], so the first summed log-prob is that of token
    step_last_tokens[0] itself; cumsum, gathered at step_last_tokens[1:] (not clamped)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    input_ids, step_last_tokens = _implicit_item(tokenizer, problem, steps)
    first = step_last_tokens[0]
    label_mask = torch.tensor([[0] * first + [1] * (input_ids.shape[-1] - first)])
    raw_reward = _implicit_raw_reward(policy, reference, input_ids, tokenizer.pad_token_id)
    beta_reward = (beta * raw_reward * label_mask[:, 1:]).cumsum(-1)
    return beta_reward.gather(dim=-1, index=torch.tensor([step_last_tokens[1:]]))[0].tolist()


def implicit_processbench_rewards(policy, reference, problem, steps, beta) -> list[float]:
    """The same as PRIME-RL/ImplicitPRM eval/processbench.py computes it (lines 250-264, one
    item, no padding): its mask has seq_len - 1 entries, 1 from first_boundary on, and is
    applied to the log-probs unshifted, so the first summed log-prob is that of the token
    after step_last_tokens[0]; the gather index is clamped to seq_len - 2."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    input_ids, step_pos = _implicit_item(tokenizer, problem, steps)
    seq_len = input_ids.shape[1]
    mask = torch.zeros(seq_len - 1)
    mask[step_pos[0]:] = 1.0
    raw_reward = _implicit_raw_reward(policy, reference, input_ids, tokenizer.pad_token_id)[0]
    csum = (beta * raw_reward * mask).cumsum(dim=-1)
    gather_indices = torch.clamp(torch.tensor(step_pos[1:]), 0, seq_len - 2)
    return csum.gather(dim=-1, index=gather_indices).tolist()


SKYWORK_MODELING = 'raise RuntimeError("the checkpoint\'s remote code ran")\n'


def skywork_prm(folder: Path) -> Path:
    """Skywork-o1-Open-PRM-Qwen-2.5: config.json names Qwen2ForPrmModel (custom code, which
    here raises if run), one pytorch_model.bin with model.*, lm_head.weight and the value
    head v_head.summary.weight / .bias; Qwen's tokens with a BOS token."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = byte_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|endoftext|>",
                   "<|im_end|>", "<|endoftext|>", QWEN_TEMPLATE)
    config = small(Qwen2Config, tok, pad_token_id=tok.pad_token_id,
                   bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                   initializer_range=0.1)
    torch.manual_seed(8)
    state = Qwen2ForCausalLM(config).state_dict()
    state["v_head.summary.weight"] = torch.randn(1, config.hidden_size)
    state["v_head.summary.bias"] = torch.randn(1)
    torch.save(state, folder / "pytorch_model.bin")
    cfg = config.to_dict() | {"architectures": ["Qwen2ForPrmModel"],
                              "auto_map": {"AutoModel": "modeling_prm.Qwen2ForPrmModel"}}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "modeling_prm.py").write_text(SKYWORK_MODELING)
    tok.save_pretrained(folder)
    return folder


def skywork_card_scores(folder, problem, steps) -> list[float]:
    """SkyworkAI/skywork-o1-prm-inference: prepare_input(problem, "\n".join(steps),
    step_token="\n") (BOS + problem + "\n" encoded, then each line encoded alone, an empty
    line as nothing, each followed by encode("\n")[-1], flagged), PRM_MODEL's forward
    (the value head on the causal LM's last hidden state, sigmoid) and derive_step_rewards:
    one value per line of the response."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    state = torch.load(Path(folder) / "pytorch_model.bin", weights_only=True)
    v_head = torch.nn.Linear(model.config.hidden_size, 1)
    v_head.load_state_dict({"weight": state["v_head.summary.weight"],
                            "bias": state["v_head.summary.bias"]})
    input_ids = tokenizer.encode(tokenizer.bos_token + problem + "\n")
    flags = [0] * len(input_ids)
    step_token_id = tokenizer.encode("\n")[-1]
    for line in "\n".join(steps).split("\n"):
        line_ids = (tokenizer.encode(line) if line != "" else []) + [step_token_id]
        input_ids += line_ids
        flags += [0] * (len(line_ids) - 1) + [1]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([input_ids]), output_hidden_states=True)
        values = torch.sigmoid(v_head(out.hidden_states[-1].float()).squeeze(-1))[0]
    return [values[i].item() for i, f in enumerate(flags) if f == 1]
