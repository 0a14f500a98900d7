"""verl's own reward loader and reward-loop managers calling Proctor's verl adapter (issue 16, item 4).

verl's code is the verl wheel pinned in the Makefile (VERL_VERSION, installed by `make setup` with
`pip install --no-deps`: ray, tensordict, omegaconf and the rest of verl's dependencies are not installed).
What runs is verl's: `verl/trainer/ppo/reward.py` (`get_custom_reward_fn`, `load_reward_manager`,
`resolve_reward_manager_cls`), `verl/utils/import_utils.py` (`load_extern_object`, which imports
`pkg://...` and file paths) and the reward-loop managers in `verl/experimental/reward_loop/reward_manager/`
(naive, dapo, gdpo, rate_limited: their `run_single`, and `assemble_rm_scores`).

What does not run, and stands in:
- `verl/__init__.py` and `verl/protocol.py` import ray and tensordict: the parent packages are loaded bare
  (their `__init__` not run) and `DataProto` is `Batch` below, which has the slicing and the fields
  `run_single` reads (`batch["responses"]`, `batch["attention_mask"]`, `non_tensor_batch`).
- `import ray` (in `verl/utils/ray_utils.py`, whose `get_event_loop` the managers use, and `remote.py`) gets an
  empty module; the `remote` manager runs the function in Ray actors and is not run here.
- `omegaconf` cannot be installed beside math-verify (it pins antlr4-python3-runtime 4.9, math-verify 4.13):
  verl's config is `Config` below, a dict with attribute access, which is what verl reads from a DictConfig.
- The tokenizer decodes a response's one token id to its text.
- The reward loop's aggregation (`RewardLoopManager.compute_rm_score`, `reward_loop.py` lines 364-369 in
  0.9.1, and the same lines in `AgentLoopWorker._postprocess`) runs in Ray: `aggregate` replays it exactly.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from proctor.adapters import verl as adapter
from proctor.policy import ScoringFailed

VERL_VERSION = "0.9.1"  # the Makefile's VERL_VERSION
MISBEHAVE = "test.misbehave"  # tests/plugins/slow.py: "crash" is a verifier error, else exact match
KEYS = {"score", "acc", "failed", "status", "reason"}
ROOT = Path(__file__).resolve().parents[1]
MANAGERS = ["naive", "dapo", "gdpo", "rate_limited"]


class Config(dict):
    """verl's config as its code reads a DictConfig: `config.reward.get("x")` and `config.reward.x`."""

    def __init__(self, data: dict[str, Any]):
        super().__init__(
            {key: Config(value) if isinstance(value, dict) else value for key, value in data.items()}
        )

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Batch:
    """Stands in for verl.DataProto: `batch` (tensors), `non_tensor_batch` (object arrays), slicing, items."""

    def __init__(self, batch: dict[str, Any], non_tensor_batch: dict[str, Any]):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch

    def __len__(self) -> int:
        return len(self.batch["responses"])

    def __getitem__(self, index: int | slice) -> Batch:
        return Batch(
            {key: value[index] for key, value in self.batch.items()},
            {key: value[index] for key, value in self.non_tensor_batch.items()},
        )


class Tokenizer:
    """Decodes a response's single token id to the text it stands for."""

    def __init__(self, texts: list[str]):
        self.texts = texts

    def decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> str:
        return "".join(self.texts[int(token)] for token in ids)


def make_batch(rows: list[tuple[str, str, Any]]) -> tuple[Batch, Tokenizer]:
    """verl's rollout batch for (data_source, response, ground_truth) rows: 2 prompt tokens, 1 response token."""
    count = len(rows)
    responses = torch.zeros((count, 3), dtype=torch.long)
    responses[:, 0] = torch.arange(count)
    attention = torch.tensor([[1, 1, 1, 0, 0]] * count)
    objects = lambda values: np.array(values + [None], dtype=object)[:-1]  # noqa: E731  1-d, even of dicts
    batch = Batch(
        {
            "prompts": torch.zeros((count, 2), dtype=torch.long),
            "responses": responses,
            "attention_mask": attention,
        },
        {
            "data_source": objects([source for source, _, _ in rows]),
            "reward_model": objects([{"ground_truth": truth} for _, _, truth in rows]),
            "extra_info": objects([{"index": index} for index in range(count)]),
        },
    )
    return batch, Tokenizer([response for _, response, _ in rows])


def aggregate(outputs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """verl 0.9.1's RewardLoopManager.compute_rm_score, after `ray.get`: the extra-info columns, exactly."""
    reward_extra_infos = [output.get("reward_extra_info", {}) for output in outputs]
    reward_extra_keys = list(reward_extra_infos[0].keys())
    non_tensor_batch = {}
    for key in reward_extra_keys:
        non_tensor_batch[key] = np.array([info[key] for info in reward_extra_infos])
    return non_tensor_batch


@pytest.fixture(scope="module")
def verl_code() -> Iterator[types.SimpleNamespace]:
    """verl's reward.py and reward-loop managers, loaded from the installed wheel's files (see the docstring)."""
    try:
        installed = importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"verl is not installed: run `make setup` (pip install --no-deps verl=={VERL_VERSION})")
    assert installed == VERL_VERSION, f"verl {installed} installed; these tests read verl {VERL_VERSION}"
    spec = importlib.util.find_spec("verl")  # the top-level package, without running its __init__
    assert spec is not None and spec.origin is not None
    root = os.path.dirname(spec.origin)
    ours = lambda name: name in ("verl", "ray", "omegaconf") or name.startswith("verl.")  # noqa: E731
    saved = {name: module for name, module in sys.modules.items() if ours(name)}

    def bare(name: str, **attributes: Any) -> types.ModuleType:
        module = types.ModuleType(name)
        if attributes.pop("package", True):
            module.__path__ = [os.path.join(root, *name.split(".")[1:])]
        module.__dict__.update(attributes)
        sys.modules[name] = module
        return module

    try:
        bare("verl", DataProto=Batch)
        for package in (
            "utils",
            "trainer",
            "trainer.ppo",
            "workers",
            "experimental",
            "experimental.reward_loop",
        ):
            bare(f"verl.{package}")
        bare("verl.protocol", package=False, DataProto=Batch)
        bare("ray", package=False, remote=lambda *args, **kwargs: lambda cls: cls)
        bare("omegaconf", package=False, DictConfig=Config)
        reward = importlib.import_module("verl.trainer.ppo.reward")
        managers = importlib.import_module("verl.experimental.reward_loop.reward_manager")
        base = importlib.import_module("verl.experimental.reward_loop.reward_manager.base")
        yield types.SimpleNamespace(reward=reward, managers=managers, base=base)
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.fixture(autouse=True)
def clean_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in [k for k in os.environ if k.startswith("PROCTOR_") and k != "PROCTOR_PLUGINS"]:
        monkeypatch.delenv(key)
    adapter.reset_config()
    yield
    adapter.reset_config()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The event loop verl's managers take with get_event_loop() (a reward-loop worker's)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def verl_config(function: dict[str, Any] | None, manager: str = "naive", **top: Any) -> Config:
    """verl 0.9's trainer config, the parts the reward code reads."""
    reward: dict[str, Any] = {
        "num_workers": 8,
        "custom_reward_function": function or {"path": None, "name": "compute_score"},
        "reward_manager": {"source": "register", "name": manager, "module": {"path": None}},
        "sandbox_fusion": {"url": None},
        "max_concurrent": 8,  # rate_limited's concurrency (its default is 1)
        "timeout": 60.0,
    }
    return Config({"reward": reward, "trainer": {"experiment_name": "proctor"}, **top})


def run_manager(
    verl_code: types.SimpleNamespace,
    loop: asyncio.AbstractEventLoop,
    config: Config,
    rows: list[tuple[str, str, Any]],
) -> tuple[list[dict[str, Any]], torch.Tensor, Batch]:
    """verl's load_reward_manager, then run_single on each sample as a reward-loop worker does; the rm_scores."""
    cls = verl_code.reward.resolve_reward_manager_cls(config)
    cls._class_initialized = False  # rate_limited keeps its limiters on the class: start each test fresh
    batch, tokenizer = make_batch(rows)
    manager = verl_code.reward.load_reward_manager(config, tokenizer)

    async def all_items() -> list[dict[str, Any]]:
        return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(len(batch))))

    outputs = loop.run_until_complete(all_items())
    scores = verl_code.base.RewardManagerBase.assemble_rm_scores(
        batch, [out["reward_score"] for out in outputs]
    )
    return outputs, scores, batch


def proctor_function(live_server: str, name: str = "compute_score", **kwargs: Any) -> dict[str, Any]:
    return {
        "path": "pkg://proctor.adapters.verl",
        "name": name,
        "reward_kwargs": {"server_url": live_server, "verifiers": {"misc": MISBEHAVE}, **kwargs},
    }


# -- the loader ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["pkg://proctor.adapters.verl", str(ROOT / "proctor" / "adapters" / "verl.py")]
)
def test_verls_loader_reads_reward_custom_reward_function(
    verl_code: types.SimpleNamespace, live_server: str, path: str
) -> None:
    function = {**proctor_function(live_server, on_failure="value", failure_value=-1.0), "path": path}
    reward_fn = verl_code.reward.get_custom_reward_fn(verl_config(function))
    assert reward_fn is not None
    # as the managers call it, keywords only; reward_kwargs are merged in and win
    right = reward_fn(data_source="misc", solution_str="42", ground_truth="42", extra_info={"index": 0})
    failed = reward_fn(data_source="misc", solution_str="crash", ground_truth="42", extra_info={})
    assert right == {"score": 1.0, "acc": 1.0, "failed": 0.0, "status": "ok", "reason": ""}
    assert failed["score"] == -1.0 and failed["failed"] == 1.0 and failed.keys() == right.keys()


def test_verls_loader_ignores_a_top_level_custom_reward_function(
    verl_code: types.SimpleNamespace, live_server: str
) -> None:
    """verl 0.9's main_ppo reads only reward.custom_reward_function: a top-level one silently does nothing."""
    config = verl_config(None, custom_reward_function=proctor_function(live_server))
    assert verl_code.reward.get_custom_reward_fn(config) is None


def test_the_documented_config_is_what_verls_loader_reads(verl_code: types.SimpleNamespace) -> None:
    text = (ROOT / "docs" / "trainers" / "adapters.md").read_text()
    section = text.split("## verl", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert blocks, "the verl section has a YAML config"
    documented = yaml.safe_load(blocks[0])
    assert "custom_reward_function" not in documented, "verl 0.9 ignores a top-level custom_reward_function"
    reward = documented["reward"]
    config = verl_config(reward["custom_reward_function"], reward["reward_manager"]["name"])
    reward_fn = verl_code.reward.get_custom_reward_fn(config)
    assert reward_fn is not None
    assert reward_fn.args[0] in (adapter.compute_score, adapter.compute_score_async)
    assert verl_code.reward.resolve_reward_manager_cls(config) is not None  # a manager verl 0.9 has
    assert "reward_manager=batch" not in section.split("verl 0.7 and older", 1)[0]


def test_batch_and_prime_managers_are_gone_from_the_reward_loop(verl_code: types.SimpleNamespace) -> None:
    """compute_score_batch has no caller in verl 0.9: its reward loop scores one sample per call."""
    for name in ("batch", "prime"):
        with pytest.raises(ValueError, match=f"Unknown reward manager: {name}"):
            verl_code.managers.get_reward_manager_cls(name)


# -- the reward-loop managers ---------------------------------------------------------------------------------

ROWS = [("misc", "42", "42"), ("misc", "crash", "42"), ("misc", "41", "42"), ("misc", "crash", "7")]


@pytest.mark.parametrize("name", ["compute_score", "compute_score_async"])
@pytest.mark.parametrize("manager", MANAGERS)
def test_every_manager_gets_the_same_keys_from_failed_and_scored_items(
    verl_code: types.SimpleNamespace,
    loop: asyncio.AbstractEventLoop,
    live_server: str,
    manager: str,
    name: str,
) -> None:
    function = proctor_function(live_server, name, on_failure="value", failure_value=-0.5)
    outputs, scores, _ = run_manager(verl_code, loop, verl_config(function, manager), ROWS)
    assert [out["reward_extra_info"].keys() for out in outputs] == [KEYS] * len(ROWS)
    columns = aggregate(outputs)
    assert columns["failed"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert columns["status"].tolist() == ["ok", "verifier_error", "ok", "verifier_error"]
    assert scores[:, 0].tolist() == [1.0, -0.5, 0.0, -0.5]  # each sample's reward on its last response token


@pytest.mark.parametrize("name", ["compute_score", "compute_score_async"])
def test_rate_limited_with_the_default_policy_trains_on_the_failure_value_with_the_same_keys(
    verl_code: types.SimpleNamespace, loop: asyncio.AbstractEventLoop, live_server: str, name: str
) -> None:
    """rate_limited catches a raise and logs {error, acc} for that item: verl's aggregation then fails on the
    missing keys (or trains on zeros when every item failed). Proctor answers as `value` would there."""
    outputs, scores, _ = run_manager(
        verl_code, loop, verl_config(proctor_function(live_server, name), "rate_limited"), ROWS
    )
    assert all("error" not in out["reward_extra_info"] for out in outputs)
    columns = aggregate(outputs)
    assert set(columns) == KEYS
    assert columns["failed"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert scores[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("manager", ["naive", "dapo", "gdpo"])
def test_other_managers_let_the_default_policy_stop_the_step(
    verl_code: types.SimpleNamespace, loop: asyncio.AbstractEventLoop, live_server: str, manager: str
) -> None:
    with pytest.raises(ScoringFailed, match="verifier_error"):
        run_manager(verl_code, loop, verl_config(proctor_function(live_server), manager), ROWS)


def test_a_none_reward_cannot_enter_verls_reward_tensor(verl_code: types.SimpleNamespace) -> None:
    """Why on_failure='none' is refused: verl writes each score into rm_scores, where None is a TypeError."""
    batch, _ = make_batch([("misc", "42", "42"), ("misc", "crash", "42")])
    with pytest.raises(TypeError):
        verl_code.base.RewardManagerBase.assemble_rm_scores(batch, [1.0, None])
