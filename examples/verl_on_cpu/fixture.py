"""The run's inputs, made locally in a few seconds: nothing is downloaded.

``make_fixture(directory)`` writes

    directory/model/   a random Qwen2ForCausalLM (hidden 64, 2 layers, ~99k parameters) and its
                       tokenizer: byte-level BPE trained here with `tokenizers`
    directory/data/    train.parquet and test.parquet in the column layout of veRL's
                       examples/data_preprocess/gsm8k.py ("what is A plus B?")

Two constraints of veRL 0.9.1 and transformers 5 shape the tokenizer:

* for ``model_type: qwen2``, ``AutoTokenizer`` builds ``Qwen2Tokenizer`` from ``vocab.json`` and
  ``merges.txt`` (transformers' models/qwen2/tokenization_qwen2.py, with Qwen's own
  pre-tokenizer regex), so the tokenizer must be a byte-level BPE saved in those two files;
* veRL's agent loop tokenizes every prompt through a ``QwenContinuousTokenBuilder``
  (`verl/utils/tokenizer/continuous_token.py`), which raises unless ``"\\n"`` encodes to exactly
  one token and ``<|im_end|>`` is a token. Both hold for a byte-level BPE whose alphabet has all
  256 bytes and whose special tokens include ``<|im_end|>``; ``check_tokenizer`` checks them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 384  # 256 byte tokens, 3 special tokens, the rest merges
# Qwen2's chat format, without the default system message and tool calls.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# The instruction examples/data_preprocess/gsm8k.py appends to every question.
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MODEL_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=True,
)


def questions(count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` pairs (question, answer) of the form "what is A plus B?"."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        pairs.append((f"what is {a} plus {b}?", str(a + b)))
    return pairs


def render(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The chat template, in Python: the text the tokenizer is trained on."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def train_tokenizer(directory: Path) -> None:
    """Train a byte-level BPE on the prompts and save it the way Qwen2Tokenizer loads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = []
    for question, answer in questions(512, seed=1):
        corpus.append(render([{"role": "user", "content": f"{question} {INSTRUCTION}"}]))
        corpus.append(f"{question} The answer is #### {answer}\n")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.model.save(str(directory))  # vocab.json and merges.txt
    vocab = json.loads((directory / "vocab.json").read_text())
    added = {
        str(vocab[token]): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": MODEL_SHAPE["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def make_model(directory: Path, seed: int = 0) -> None:
    """A randomly initialised Qwen2ForCausalLM of MODEL_SHAPE, saved with its generation config."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(directory)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer), eos_token_id=im_end, pad_token_id=pad, **MODEL_SHAPE
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.save_pretrained(directory)
    GenerationConfig(eos_token_id=im_end, pad_token_id=pad).save_pretrained(directory)


def check_tokenizer(directory: Path) -> None:
    """Fail early, here, with the reason veRL would fail later in an agent-loop worker."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    name = type(tokenizer).__name__
    assert name == "Qwen2Tokenizer", f"transformers built {name}, not Qwen2Tokenizer"
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert len(newline) == 1, f'"\\n" encodes to {newline}, veRL needs exactly one token'
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.encode("<|im_end|>", add_special_tokens=False) == [im_end]
    text = render([{"role": "user", "content": "what is 3 plus 4?"}])
    assert tokenizer.decode(tokenizer.encode(text)) == text, "the tokenizer does not round-trip"


def write_data(directory: Path, train: int = 32, test: int = 8) -> None:
    """gsm8k-shaped parquet files: data_source, prompt, ability, reward_model, extra_info."""
    import pandas as pd

    for split, count, seed in (("train", train, 2), ("test", test, 3)):
        rows = []
        for index, (question, answer) in enumerate(questions(count, seed)):
            rows.append(
                {
                    "data_source": "openai/gsm8k",
                    "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": answer},
                    "extra_info": {
                        "split": split,
                        "index": index,
                        "answer": f"#### {answer}",
                        "question": question,
                    },
                }
            )
        pd.DataFrame(rows).to_parquet(directory / f"{split}.parquet")


def make_fixture(directory: Path) -> dict[str, str]:
    """Write model/ and data/ under ``directory``; return the paths main_ppo needs."""
    directory = Path(directory)
    model, data = directory / "model", directory / "data"
    model.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    train_tokenizer(model)
    check_tokenizer(model)
    make_model(model)
    write_data(data)
    return {
        "model": str(model),
        "train": str(data / "train.parquet"),
        "test": str(data / "test.parquet"),
    }


if __name__ == "__main__":
    import sys

    print(json.dumps(make_fixture(Path(sys.argv[1])), indent=2))
