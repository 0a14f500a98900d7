"""End-of-turn tokens: the special tokens a chat model may leave at the end of its text.

A generation returned with its stop token (`skip_special_tokens=False`, or a server that echoes the stop
string) ends in one of these; they are not part of the answer. `strip_end_of_turn` removes any run of them
at the end of a response (and the blanks between them). The verifiers do not call it yet: where a response
is cut is the caller's decision, made once per route.
"""

from __future__ import annotations

END_OF_TURN_TOKENS = (
    "<|im_end|>",  # ChatML (Qwen, many fine-tunes)
    "<|eot_id|>",  # Llama 3
    "<|end|>",  # Phi-3, gpt-oss
    "<|return|>",  # gpt-oss
    "<end_of_turn>",  # Gemma
    "<|endoftext|>",  # GPT-2 family, Qwen base models
    "<｜end▁of▁sentence｜>",  # DeepSeek
    "</s>",  # Llama 2, Mistral
    "<eos>",  # Gemma
)
"""Known end-of-turn and end-of-sequence tokens, as text."""


def strip_end_of_turn(text: str, tokens: tuple[str, ...] = END_OF_TURN_TOKENS) -> str:
    """The text without the run of end-of-turn tokens (and the blanks between them) that ends it.

    Blanks before the first removed token stay; a text that ends in no token is returned unchanged. Linear:
    each step moves the cut left past one token.
    """
    cut = len(text)
    while True:
        position = cut
        while position > 0 and text[position - 1].isspace():
            position -= 1
        for token in tokens:
            if text.endswith(token, 0, position):
                cut = position - len(token)
                break
        else:
            return text[:cut]
