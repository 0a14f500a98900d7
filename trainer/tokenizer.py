"""A character-level tokenizer built locally (nothing downloaded), with a chat template, for tiny test models.

One token per character of `alphabet`, plus the special tokens a chat model needs. The chat template renders
`<|user|>3 7<|end|><|assistant|>`; `<|end|>` is the end-of-sequence token, so a policy ends its turn with it.
"""

from __future__ import annotations

from typing import Any

PAD, UNK, END = "<pad>", "<unk>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, UNK, END, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_char_tokenizer(alphabet: str) -> Any:
    """A PreTrainedTokenizerFast with one token per distinct character of `alphabet` and the chat specials.

    Ids: the specials first (pad 0, unk 1, end 2, roles 3-5), then the characters in the order given. Text
    outside the alphabet encodes to `<unk>`.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = list(dict.fromkeys(alphabet))
    if not characters:
        raise ValueError("tokenizer alphabet is empty")
    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *characters])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every character is its own word; the specials are matched whole before this split runs.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=END,
        additional_special_tokens=list(ROLE_TOKENS),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer
