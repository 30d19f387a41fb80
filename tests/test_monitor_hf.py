"""Monitor readings inside training loops: probe hidden states, ``monitor_step`` (plain PyTorch) and
``RankMeCallback`` (transformers Trainer), with tiny models built here."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainerControl, TrainerState

from monitor_helpers import tiny_model, tokenizer
from stages.models import GPT, GPTConfig
from stages.monitor import (COLLAPSE, PRECURSOR, RankMeCallback, RankMeMonitor, monitor_step, probe_hidden_states,
                            rankme)
from stages.monitor.probe import token_positions


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


def test_callback_without_a_trainer_logs_into_log_history():
    ranks = [10, 10, 2, 1, 1, 1, 1, 10, 10]
    cb = RankMeCallback(probe_inputs=None, every=2, hidden_fn=DipStates(ranks), accuracy_fn=lambda m: 0.0,
                        print_events=False)
    state, control, model = TrainerState(), TrainerControl(), torch.nn.Linear(2, 2)
    cb.on_train_begin(None, state, control, model=model)
    for step in range(1, 17):
        state.global_step = step
        cb.on_step_end(None, state, control, model=model)
    cb.on_train_end(None, state, control, model=model)  # step 16 already read: no second reading
    logged = [e for e in state.log_history if "rankme/layer_1" in e]
    assert [e["step"] for e in logged] == list(range(0, 17, 2))
    kinds = [e.kind for e in cb.events]
    assert COLLAPSE in kinds and PRECURSOR in kinds
    assert any("rankme_monitor/acquisition_expected_step" in e for e in logged)
    assert all("rankme_centred/layer_1" in e for e in logged)

    # resuming: a new callback rebuilds the monitor from log_history and reports nothing twice
    again = RankMeCallback(probe_inputs=None, every=2, hidden_fn=DipStates([10]), print_events=False)
    again.on_train_begin(None, state, control, model=model)
    assert again.monitor.steps == cb.monitor.steps and again.events == cb.events


def test_callback_logs_through_the_trainer(tmp_path):
    pytest.importorskip("accelerate")  # transformers' Trainer needs it
    from transformers import Trainer, TrainerCallback, TrainingArguments

    tok = tokenizer()
    model = tiny_model(tok)
    data = torch.randint(3, len(tok), (32, 12))

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return len(data)

        def __getitem__(self, i):
            return {"input_ids": data[i], "labels": data[i]}

    class Recorder(TrainerCallback):  # stands in for a report_to integration
        def __init__(self):
            self.logs = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs))

    recorder = Recorder()
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=8, logging_steps=3,
                             report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[recorder])
    probe = tok(["the cat sleeps", "a dog runs", "the bird sings loudly"] * 4, return_tensors="pt", padding=True)
    cb = RankMeCallback(probe, every=2, print_events=False).attach(trainer)
    trainer.train()
    readings = [e for e in trainer.state.log_history if "rankme/layer_2" in e]
    assert [e["step"] for e in readings] == [0, 2, 4, 6]
    assert sum("rankme/layer_2" in logs for logs in recorder.logs) == 4  # integrations see every reading
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [3, 6]  # the Trainer's own logs kept
    assert cb.monitor.steps == [0, 2, 4, 6] and model.training
