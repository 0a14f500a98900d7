"""A character-level tokenizer built locally (nothing downloaded), with a chat template, for tiny test models.

One token per character of `alphabet`, plus the special tokens a chat model needs. The chat template renders
`<|user|>3 7<|end|><|assistant|>`; `<|end|>` is the end-of-sequence token, so a policy ends its turn with it.
`tokens` adds whole multi-character tokens after the characters: a tool call such as `lookup()` (one token, so
a random model can find it) or the `<|tool|>` role that tool observations render with (a name shaped
`<|...|>` is a special token, dropped when a completion is decoded to text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PAD, UNK, END = "<pad>", "<unk>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, UNK, END, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_char_tokenizer(alphabet: str, tokens: Sequence[str] = ()) -> Any:
    """A PreTrainedTokenizerFast with one token per distinct character of `alphabet`, the chat specials and
    the whole `tokens`.

    Ids: the specials first (pad 0, unk 1, end 2, roles 3-5), then the characters in the order given, then
    `tokens` in the order given (so a tokenizer without `tokens` keeps its ids and size). A token of `tokens` is
    matched whole wherever it occurs in text, before the text is split into characters. Text outside the
    alphabet encodes to `<unk>`.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = list(dict.fromkeys(alphabet))
    if not characters:
        raise ValueError("tokenizer alphabet is empty")
    whole = [t for t in dict.fromkeys(tokens) if t not in SPECIAL_TOKENS and t not in characters]
    if any(not t for t in whole):
        raise ValueError("a tokenizer token may not be empty")
    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *characters, *whole])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every character is its own word; the specials are matched whole before this split runs.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    roles = [t for t in whole if t.startswith("<|") and t.endswith("|>")]
    backend.add_special_tokens(roles)
    backend.add_tokens([t for t in whole if t not in roles])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=END,
        additional_special_tokens=[*ROLE_TOKENS, *roles],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer
