"""End-of-turn tokens: the special tokens a chat model leaves where its turn ends.

The engine cuts them (and a run-on next turn after one) from every response before a verifier reads it, so
verifiers never see them; the rule and the built-in list live in `proctor.end_of_turn`, in the core, because
the engine sits below the verifiers. This module is the reader's name for them, for verifiers and
environments that read text the engine did not prepare (docs/service/end-of-turn.md):

- `END_OF_TURN_TOKENS`: the built-in list (`PROCTOR_END_TOKENS` replaces it in the service);
- `cut_end_of_turn`: the engine's whole rule (cut at the first token that cannot be ordinary text, then the
  trailing run of tokens; `</s>` and `<eos>` read as markup and are cut only at the end);
- `strip_end_of_turn`: only the trailing run of tokens (and the blanks between them).
"""

from __future__ import annotations

from proctor.end_of_turn import END_OF_TURN_TOKENS, Cut, cut_end_of_turn, is_markup, strip_end_of_turn

__all__ = ["END_OF_TURN_TOKENS", "Cut", "cut_end_of_turn", "is_markup", "strip_end_of_turn"]
