"""The RLVE dataset through verl's own create_rl_dataset, StatefulDataLoader, sampler and collate:
static rows and fresh environment rows in one epoch, the validation set untouched, and the source's
state saved by the dataloader so a resumed run continues exactly like an uninterrupted one."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402

from rlec.data.mix import Question, Sample  # noqa: E402
from rlec.data.writer import write_parquet  # noqa: E402
from rlec.environments import EnvironmentSource, Problem  # noqa: E402
from rlec.prompts import CHAT_TEMPLATE_KWARGS, math_task  # noqa: E402
from rlec.verl_plugin.rlve_dataset import RLVEDataset  # noqa: E402

STATIC_ROWS, ENV_ROWS, BATCH = 6, 10, 4
LEVEL = {"arithmetic": 2, "maze": 1}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("rlve_data")
    samples = [Sample(Question("math", f"q{i}", math_task(f"What is {i} + {i}?"), str(2 * i)), "train", 0, "rlec", 0.25)
               for i in range(STATIC_ROWS)]
    write_parquet(samples, root / "train.parquet")
    write_parquet(samples[:3], root / "val.parquet")
    return root


def data_config(files, **overrides):
    rlve = {"enable": True, "rows_per_epoch": ENV_ROWS, "samples_per_prompt": 1, "environments": list(LEVEL), "seed": 3}
    rlve.update(overrides.pop("rlve", {}))
    cfg = {"train_files": [str(files / "train.parquet")], "val_files": [str(files / "val.parquet")],
           "max_prompt_length": 2048, "filter_overlong_prompts": False, "shuffle": True, "seed": 11,
           "prompt_key": "prompt", "return_raw_chat": True, "truncation": "error",
           "apply_chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS), "cache_dir": str(files / "cache"),
           "custom_cls": {"path": "pkg://rlec.verl_plugin.rlve_dataset", "name": "RLVEDataset"}, "rlve": rlve}
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def loader(cfg, tokenizer):
    dataset = create_rl_dataset(cfg.train_files, cfg, tokenizer, None)
    return dataset, StatefulDataLoader(dataset, batch_size=BATCH, num_workers=0, drop_last=True, collate_fn=collate_fn,
                                       sampler=create_rl_sampler(cfg, dataset))


class Fetcher:
    """verl's V1 ``_fetch_one_gen_batch``: a new iterator when an epoch ends."""

    def __init__(self, dl):
        self.dl, self.it = dl, None

    def __call__(self):
        try:
            if self.it is None:
                self.it = iter(self.dl)
            return next(self.it)
        except StopIteration:
            self.it = iter(self.dl)
            return next(self.it)


def train_step(dataset, batch):
    """The trainer side: a scripted policy, right below each environment's level (2 samples per prompt)."""
    samples = [{"environment": e.get("environment"), "difficulty": e.get("difficulty"),
                "correct": float(e.get("difficulty", 0) < LEVEL.get(e.get("environment"), 0))}
               for e in batch["extra_info"] for _ in range(2)]
    return dataset.rlve_source.update(samples)


def summary(batch):
    return [(ds, e["question_id"], e["target_p"], p[0]["content"]) for ds, e, p in
            zip(batch["data_source"], batch["extra_info"], batch["raw_prompt"])]


def test_verl_builds_it_from_data_custom_cls_and_one_epoch_mixes_static_and_fresh_rows(files, qwen_tokenizer):
    cfg = data_config(files)
    dataset, dl = loader(cfg, qwen_tokenizer)
    assert type(dataset) is RLVEDataset and len(dataset) == STATIC_ROWS + ENV_ROWS
    assert dataset.static_rows == STATIC_ROWS and isinstance(dataset.rlve_source, EnvironmentSource)
    seen = [row for batch in dl for row in summary(batch)]
    assert len(seen) == (STATIC_ROWS + ENV_ROWS) // BATCH * BATCH
    static = [r for r in seen if r[0] == "math_dapo"]
    fresh = [r for r in seen if r[0].startswith("rlve/")]
    assert len({r[1] for r in static}) == len(static)  # each static row at most once per epoch
    assert len(fresh) == dataset.rlve_source.counter and len({r[1] for r in fresh}) == len(fresh)
    assert {r[0] for r in fresh} <= {"rlve/arithmetic", "rlve/maze"}
    validation = create_rl_dataset(cfg.val_files, cfg, qwen_tokenizer, None)
    assert type(validation) is RLVEDataset and validation.rlve_source is None and len(validation) == 3
    assert validation.state_dict() == {}


def test_environment_rows_match_what_verls_own_dataset_returns(files, qwen_tokenizer, tmp_path):
    dataset, _ = loader(data_config(files), qwen_tokenizer)
    row = dataset.rlve_source.row(0)
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "one.parquet")
    config = data_config(files, rlve={"enable": False})
    reference = RLHFDataset(str(tmp_path / "one.parquet"), qwen_tokenizer, config)[0]
    ours = dataset._verl_row(dataset.rlve_source.row(0))
    assert sorted(ours) == sorted(reference)
    for key in reference:
        if isinstance(reference[key], torch.Tensor):
            assert torch.equal(ours[key], reference[key]) and ours[key].dtype == reference[key].dtype
        else:
            assert ours[key] == reference[key], key


def test_dataloader_state_resumes_exactly_like_an_uninterrupted_run(files, qwen_tokenizer):
    cfg = data_config(files)
    dataset, dl = loader(cfg, qwen_tokenizer)
    fetch = Fetcher(dl)
    for _ in range(3):
        train_step(dataset, fetch())
    buffer = io.BytesIO()
    torch.save(dl.state_dict(), buffer)  # what verl writes to global_step_N/data.pt
    straight = []
    for _ in range(6):  # crosses the end of the epoch (4 batches per epoch)
        batch = fetch()
        straight.append((summary(batch), train_step(dataset, batch)))
    assert dataset.rlve_source.difficulties() != {"arithmetic": 0, "maze": 0}  # the controllers did move

    buffer.seek(0)
    resumed_dataset, resumed_dl = loader(cfg, qwen_tokenizer)
    resumed_dl.load_state_dict(torch.load(buffer, weights_only=False))
    fetch = Fetcher(resumed_dl)
    resumed = []
    for _ in range(6):
        batch = fetch()
        resumed.append((summary(batch), train_step(resumed_dataset, batch)))
    assert resumed == straight
    assert resumed_dataset.rlve_source.state_dict() == dataset.rlve_source.state_dict()


def test_disabled_or_validation_behaves_as_rlhf_dataset(files, qwen_tokenizer):
    cfg = data_config(files, rlve={"enable": False})
    dataset = create_rl_dataset(cfg.train_files, cfg, qwen_tokenizer, None)
    assert dataset.rlve_source is None and len(dataset) == STATIC_ROWS
    assert dataset[2]["extra_info"]["question_id"] == RLHFDataset(cfg.train_files, qwen_tokenizer, cfg)[2]["extra_info"]["question_id"]


def test_environments_only_and_static_plus_environment_validation(files, qwen_tokenizer, tmp_path):
    from rlec.environments.testset import EnvTestConfig, prepare_environments

    prepare_environments(tmp_path / "env", EnvTestConfig(environments=("maze",), difficulties=(0,), per_difficulty=2),
                         tokenizer=qwen_tokenizer, progress=False)
    cfg = data_config(files, train_files=[], val_files=[str(files / "val.parquet"), str(tmp_path / "env" / "test.parquet")])
    dataset, dl = loader(cfg, qwen_tokenizer)
    assert len(dataset) == ENV_ROWS and all(ds.startswith("rlve/") for batch in dl for ds in batch["data_source"])
    validation = create_rl_dataset(cfg.val_files, cfg, qwen_tokenizer, None)
    assert len(validation) == 5 and {validation[i]["data_source"] for i in range(5)} == {"math_dapo", "rlve/maze"}
    problem = Problem.from_json(validation[4]["reward_model"]["ground_truth"])
    assert problem.environment == "maze" and problem.seed % 2 == 1


def test_misconfigurations_fail_at_construction(files, qwen_tokenizer):
    same = data_config(files, val_files=[str(files / "train.parquet")])
    with pytest.raises(ValueError, match="the same list"):
        create_rl_dataset(same.train_files, same, qwen_tokenizer, None)
    short = data_config(files, max_prompt_length=120)
    with pytest.raises(ValueError, match="max_prompt_length 120"):
        create_rl_dataset(short.train_files, short, qwen_tokenizer, None)
    bad = data_config(files, rlve={"environments": ["maze", "nope"]})
    with pytest.raises(ValueError, match="unknown environment 'nope'"):
        create_rl_dataset(bad.train_files, bad, qwen_tokenizer, None)


def test_rlve_gym_rows_through_verls_loader_fit_the_prompt_budget(files, qwen_tokenizer):
    """RLVE-Gym's environments in verl's dataset: the cap follows data.max_prompt_length, every
    row fits it, and the step's metrics carry the pool's counters."""
    from rlec.environments.rlve_gym import cap_for

    cap = cap_for("Sudoku", 1024)  # the controller starts at it: rows from [cap - 3, cap]
    cfg = data_config(files, max_prompt_length=1024,
                      rlve={"environments": ["rlve_gym:Sudoku", "maze"], "max_prompt_tokens": 1024,
                            "difficulty": {"rlve_gym:Sudoku": {"initial": cap}}})
    dataset, dl = loader(cfg, qwen_tokenizer)
    assert dataset.rlve_source.controllers["rlve_gym:Sudoku"].maximum == cap_for("Sudoku", 1024) < cap_for("Sudoku", 2048)
    rows = [row for batch in dl for row in zip(batch["data_source"], batch["raw_prompt"], batch["extra_info"])]
    gym = [(p, e) for ds, p, e in rows if ds == "rlve/rlve_gym:Sudoku"]
    assert gym and all(len(qwen_tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                                              **CHAT_TEMPLATE_KWARGS)) <= 1024 for p, _ in gym)
    assert max(e["difficulty"] for _, e in gym) <= cap
    metrics = dataset.rlve_source.update([{"environment": "rlve_gym:Sudoku", "difficulty": 0, "correct": 1.0}])
    assert metrics["rlve/gym/Sudoku/generated"] >= len(gym) and metrics["rlve/gym/Sudoku/skipped"] == 0.0
