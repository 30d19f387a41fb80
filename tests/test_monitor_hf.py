"""Monitor readings inside training loops: probe hidden states, ``monitor_step`` (plain PyTorch) and
``RankMeCallback`` (transformers Trainer), with tiny models built here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from transformers import GPT2Config, GPT2LMHeadModel, TrainerControl, TrainerState

from monitor_helpers import tiny_model, tokenizer
from stages.models import GPT, GPTConfig
from stages.monitor import (COLLAPSE, PRECURSOR, RankMeCallback, RankMeMonitor, event_rules, monitor_step,
                            probe_hidden_states, rankme)
from stages.monitor.probe import token_positions

ROOT = Path(__file__).resolve().parents[1]


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2))


def test_token_positions_last_non_pad_either_padding_side():
    ids = torch.zeros((3, 5), dtype=torch.long)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    assert token_positions({"input_ids": ids, "attention_mask": right}).tolist() == [2, 4, 0]
    assert token_positions({"input_ids": ids, "attention_mask": left}).tolist() == [4, 4, 4]
    assert token_positions({"input_ids": ids}).tolist() == [4, 4, 4]
    assert token_positions({"input_ids": ids}, position=-2).tolist() == [3, 3, 3]
    assert token_positions({"input_ids": ids}, position=[0, 1, 2]).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="outside"):
        token_positions({"input_ids": ids}, position=5)
    with pytest.raises(ValueError, match="no token"):
        token_positions({"input_ids": ids, "attention_mask": torch.zeros((3, 5))})


def test_probe_states_are_the_models_hidden_states_and_leave_training_untouched():
    model = tiny_gpt2()
    model.train()
    batch = {"input_ids": torch.randint(0, 50, (6, 7)), "attention_mask": torch.ones((6, 7), dtype=torch.long)}
    batch["attention_mask"][0, 4:] = 0
    states = probe_hidden_states(model, batch)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert len(states) == 3 and states[0].shape == (6, 16)
    model.eval()
    with torch.no_grad():
        ref = model(**batch, output_hidden_states=True).hidden_states
    assert torch.allclose(states[2][0], ref[2][0, 3]) and torch.allclose(states[2][1], ref[2][1, 6])


def test_monitor_step_in_a_plain_pytorch_loop():
    model = tiny_gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    probe = torch.randint(0, 50, (32, 8))
    monitor = RankMeMonitor()
    for step in range(6):
        if step % 2 == 0:
            assert monitor_step(model, probe, step, monitor, accuracy=0.0) == []
        x = torch.randint(0, 50, (8, 8))
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert monitor.steps == [0, 2, 4] and sorted(monitor.latest) == [0, 1, 2]
    assert monitor.chosen_layer == 2


def test_monitor_step_with_the_projects_gpt_through_hidden_fn():
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, d_model=16))
    probe = torch.randint(0, 20, (24, 8))
    monitor = RankMeMonitor()
    monitor_step(model, probe, 0, monitor, hidden_fn=lambda m, b: m(b, hidden_states=True)[1], position=3)
    assert sorted(monitor.latest) == [0, 1, 2]
    with torch.no_grad():
        _, states = model(probe, hidden_states=True)
    assert monitor.latest[1]["rankme"] == pytest.approx(rankme(states[1][:, 3]))


class DipStates:
    """A ``hidden_fn`` whose states have a prescribed rank per reading: a dip and a recovery."""

    def __init__(self, ranks, n=32, d=12):
        self.ranks, self.n, self.d, self.i = list(ranks), n, d, 0
        self.rng = np.random.default_rng(0)

    def __call__(self, model, batch):
        r = self.ranks[min(self.i, len(self.ranks) - 1)]
        self.i += 1
        z = self.rng.normal(size=(self.n, r)) @ self.rng.normal(size=(r, self.d))
        return [torch.as_tensor(self.rng.normal(size=(self.n, self.d))).float(), torch.as_tensor(z).float()]


def trainer_log(cb, state, control, model, step, **values):
    """What ``Trainer.log`` does: append the entry to ``log_history``, then call ``on_log``."""
    state.global_step = step
    logs = dict(values)
    state.log_history.append({**logs, "step": step})
    cb.on_log(None, state, control, model=model, logs=logs)
    return logs


def test_callback_reads_at_the_trainers_logs_and_into_log_history():
    ranks = [10, 10, 2, 1, 1, 1, 1, 10, 10]
    cb = RankMeCallback(probe_inputs=None, hidden_fn=DipStates(ranks), accuracy_fn=lambda m: 0.0)
    state, control, model = TrainerState(), TrainerControl(), torch.nn.Linear(2, 2)
    cb.on_train_begin(None, state, control, model=model)  # step 0: a reading, into log_history only
    seen = [trainer_log(cb, state, control, model, step, loss=1.0) for step in range(2, 17, 2)]
    trainer_log(cb, state, control, model, 16, train_runtime=1.0)  # the summary at an already-read step
    logged = [e for e in state.log_history if "rankme/layer_1" in e]
    assert [e["step"] for e in logged] == list(range(0, 17, 2))
    assert all("rankme/layer_1" in logs and logs["loss"] == 1.0 for logs in seen)  # merged into the same log
    assert [e["step"] for e in state.log_history if "loss" in e] == list(range(2, 17, 2))  # no entry added
    kinds = [e.kind for e in cb.events]
    assert COLLAPSE in kinds and PRECURSOR in kinds
    assert any("rankme_monitor/acquisition_expected_step" in e for e in logged)
    assert all("rankme_centred/layer_1" in e for e in logged)

    # resuming: a new callback rebuilds the monitor from log_history and reports nothing twice
    again = RankMeCallback(probe_inputs=None, hidden_fn=DipStates([10]))
    again.on_train_begin(None, state, control, model=model)
    assert again.monitor.steps == cb.monitor.steps and again.events == cb.events


def test_every_spaces_the_readings_and_the_last_log_is_always_read():
    cb = RankMeCallback(probe_inputs=None, every=4, hidden_fn=DipStates([10]))
    state, control, model = TrainerState(), TrainerControl(), torch.nn.Linear(2, 2)
    cb.on_train_begin(None, state, control, model=model)
    for step in (2, 4, 6, 8, 10):
        trainer_log(cb, state, control, model, step, loss=1.0)
    trainer_log(cb, state, control, model, 11, train_runtime=1.0)
    assert cb.monitor.steps == [0, 4, 8, 11]
    with pytest.raises(ValueError, match="every"):
        RankMeCallback(None, every=0)


def test_rules_take_the_keys_of_params_yaml(tmp_path):
    cb = RankMeCallback(None, rules={"min_depth": 0.3, "acquisition_window": 2, "measure": "rankme"})
    r = cb.monitor.rules
    assert (r.min_depth, r.window, r.threshold, cb.monitor.measure) == (0.3, 2, 0.5, "rankme")
    assert RankMeMonitor(rules={"acquisition_threshold": 0.9}).rules.threshold == 0.9
    with pytest.raises(ValueError, match="unknown events key 'threshold'"):
        RankMeMonitor(rules={"threshold": 0.9})
    with pytest.raises(ValueError, match="events.min_depth"):
        event_rules({"min_depth": 1.5})
    with pytest.raises(ValueError, match="offline"):
        RankMeCallback(None, rules={"layer": "mean"})
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["events"]["precursor_min_lead"] = 0.25
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert event_rules(path).min_lead == 0.25 and event_rules(str(path)).window == params["events"]["acquisition_window"]


def tiny_trainer(tmp_path, callbacks, report_to=(), max_steps=6, logging_steps=2):
    pytest.importorskip("accelerate")  # transformers' Trainer needs it
    from transformers import Trainer, TrainingArguments

    tok = tokenizer()
    model = tiny_model(tok)
    data = torch.randint(3, len(tok), (32, 12), generator=torch.Generator().manual_seed(0))
    train = [{"input_ids": x, "labels": x} for x in data]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=max_steps, per_device_train_batch_size=8,
                             logging_steps=logging_steps, report_to=list(report_to), save_strategy="no",
                             use_cpu=True, disable_tqdm=True, seed=0, data_seed=0)
    probe = tok(["the cat sleeps", "a dog runs", "the bird sings loudly"] * 4, return_tensors="pt", padding=True)
    return Trainer(model=model, args=args, train_dataset=train, callbacks=callbacks), probe


class Recorder:
    """Stands in for a report_to integration such as TensorBoard's: ``(global_step, logs)`` per ``on_log``."""

    def __new__(cls):
        from transformers import TrainerCallback

        class _Recorder(TrainerCallback):
            def __init__(self):
                self.logs = []

            def on_log(self, args, state, control, logs=None, **kwargs):
                self.logs.append((state.global_step, dict(logs)))

        return _Recorder()


def test_callback_in_callbacks_reaches_an_integration_listed_before_it(tmp_path, capsys):
    recorder = Recorder()
    trainer, probe = tiny_trainer(tmp_path, [recorder], logging_steps=3)
    cb = RankMeCallback(probe)
    trainer.add_callback(cb)  # after the recorder, as callbacks=[...] comes after the report_to integrations
    trainer.train()
    readings = [e for e in trainer.state.log_history if "rankme/layer_2" in e]
    assert [e["step"] for e in readings] == [0, 3, 6]
    train_logs = [(step, logs) for step, logs in recorder.logs if "loss" in logs]
    assert [step for step, _ in train_logs] == [3, 6] and all("rankme/layer_2" in logs for _, logs in train_logs)
    by_step = {e["step"]: e["rankme/layer_2"] for e in readings}
    assert [logs["rankme/layer_2"] for _, logs in train_logs] == [by_step[3], by_step[6]]
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [3, 6]  # the Trainer's own logs kept
    assert len(recorder.logs) == 3  # two loss logs and the summary: the monitor added no log call
    assert trainer.callback_handler.callbacks[0] is cb
    assert cb.monitor.steps == [0, 3, 6] and trainer.model.training
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(printed) == 3  # the Trainer's own log lines (PrinterCallback), nothing printed besides


def test_dvclive_keeps_the_users_steps_and_receives_the_readings(tmp_path, monkeypatch):
    pytest.importorskip("dvclive")
    import pandas as pd

    curves = {}
    for name, monitored in (("plain", False), ("monitored", True)):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)  # DVCLive writes dvclive/ under the working directory
        trainer, probe = tiny_trainer(tmp_path / name, [], report_to=["dvclive"])
        cb = RankMeCallback(probe) if monitored else None
        if cb is not None:
            trainer.add_callback(cb)
        trainer.train()
        metrics = tmp_path / name / "dvclive" / "plots" / "metrics"
        curves[name] = pd.read_csv(metrics / "loss.tsv", sep="\t")
        if monitored:
            rankme = pd.read_csv(metrics / "rankme" / "layer_2.tsv", sep="\t")
            readings = [e["rankme/layer_2"] for e in trainer.state.log_history if "rankme/layer_2" in e]
    assert curves["plain"]["step"].tolist() == [0, 1, 2]
    pd.testing.assert_frame_equal(curves["monitored"], curves["plain"])  # same steps, same losses
    assert rankme["step"].tolist() == [0, 1, 2]  # DVCLive steps of the logs at global steps 2, 4, 6
    assert rankme["layer_2"].tolist() == pytest.approx(readings[1:])  # step 0 is in log_history only
