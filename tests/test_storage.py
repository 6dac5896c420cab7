"""EventStorage: smoothing windows, lazy tensors, history and state."""
from __future__ import annotations

import torch

from launcher.engine.storage import EventStorage


def test_median_and_mean_over_a_window_and_latest():
    s = EventStorage()
    for i, v in enumerate([5.0, 1.0, 100.0, 2.0, 3.0]):
        s.iter = i
        s.put_scalar("train/loss", v)
    h = s.history("train/loss")
    assert h.median(3) == 3.0  # of 100, 2, 3
    assert h.avg(2) == 2.5
    assert h.latest() == 3.0 and h.latest_iter() == 4
    assert s.latest_with_smoothing_hint(window=3)["train/loss"] == (3.0, 4)
    assert s.latest()["train/loss"] == (3.0, 4)


def test_a_nan_in_the_window_makes_the_smoothed_value_nan_not_an_arbitrary_one():
    """sorted() cannot order a NaN: the median of [3, nan, 1] came out as whatever the order left in the middle."""
    import math

    s = EventStorage()
    for i, v in enumerate([3.0, float("nan"), 1.0, 2.0, 5.0]):
        s.iter = i
        s.put_scalar("train/loss", v)
    h = s.history("train/loss")
    assert math.isnan(h.median(3)) is False and h.median(3) == 2.0  # of 1, 2, 5: the NaN left the window
    assert math.isnan(h.median(4)) and math.isnan(h.median(5))
    assert math.isnan(s.latest_with_smoothing_hint(window=5)["train/loss"][0])


def test_unsmoothed_keys_report_their_latest_value():
    s = EventStorage()
    for i, v in enumerate([0.5, 0.9]):
        s.iter = i
        s.put_scalar("val/accuracy", v, smoothing_hint=False)
    assert s.latest_with_smoothing_hint(window=20)["val/accuracy"] == (0.9, 1)


def test_tensor_values_are_kept_until_read_then_become_floats():
    s = EventStorage()
    t = torch.tensor(2.0, requires_grad=True) * 1.5
    s.put_scalar("train/loss", t)
    s.put_scalar("train/loss", 1.0)
    h = s.history("train/loss")
    [(slot, raw)] = h._tensors
    assert slot == 0 and not raw.requires_grad  # detached, not yet read
    assert h.values() == [(3.0, 0), (1.0, 0)]
    assert not h._tensors


def test_tensors_not_yet_read_survive_the_history_being_cut_back():
    s = EventStorage(max_length=4)
    for i in range(11):  # cut back at 8 values: the tensors put after the cut keep their values
        s.iter = i
        s.put_scalar("x", torch.tensor(float(i)) if i % 3 == 0 else float(i))
    assert s.history("x").values() == [(float(i), i) for i in range(7, 11)]
    assert s.history("x").median(3) == 9.0 and s.history("x").avg(4) == 8.5


def test_a_value_that_is_not_a_number_names_the_key():
    s = EventStorage()
    try:
        s.put_scalar("train/acc", "high")
    except TypeError as e:
        assert "train/acc" in str(e) and "'high'" in str(e) and "number or a one-element tensor" in str(e)
    else:
        raise AssertionError("expected TypeError")


def test_a_value_refused_leaves_no_empty_history_and_a_tensor_of_several_values_is_refused_as_it_is_put():
    """A str put under a new key left an empty history that every writer's next read failed on (IndexError in
    after_train, the run's record left running); a 3-element tensor was taken and failed at the writers' read."""
    import pytest

    s = EventStorage()
    s.put_scalar("loss", 1.0)
    with pytest.raises(TypeError, match=r"put_scalar\('mine/s', ...\): a scalar is a number or a one-element tensor, not a str"):
        s.put_scalar("mine/s", "hello")
    with pytest.raises(TypeError, match=r"'mine/v', ...\): .* not a tensor of shape \[3\]"):
        s.put_scalar("mine/v", torch.ones(3))
    s.put_scalar("one", torch.ones(1, 1))  # one element, whatever its shape
    assert sorted(s.keys()) == ["loss", "one"] and s.latest(sync=False)["one"][0] == 1.0
    assert set(s.latest_with_smoothing_hint()) == {"loss", "one"}


def test_history_is_bounded():
    s = EventStorage(max_length=10)
    for i in range(100):
        s.iter = i
        s.put_scalar("x", float(i))
    assert len(s.history("x")) == 10 and s.history("x").values()[0] == (90.0, 90)


def test_ranks_average_each_value_once_also_across_a_cut_back():
    """Under DDP a read averages what was put since the previous read, floats and ints alike;
    values averaged once are never sent again, also after the history was cut back."""
    sent = []

    def reduce(values, layout):  # stands in for the all-reduce: "the other rank" adds 100
        sent.append(values.tolist())
        return values + 100

    s = EventStorage(max_length=3, reduce=reduce)
    for i in range(4):
        s.iter = i
        s.put_scalar("x", float(i) if i % 2 else i)  # ints take the general path, floats the fast one
    assert s.history("x").values() == [(1.0, 1), (2.0, 2), (3.0, 3)]  # not read: not averaged yet
    s.synchronize()
    assert sent == [[1.0, 2.0, 3.0]]  # the kept values only
    for i in range(4, 7):  # 6 values put in all: the arrays are cut back to 3 on the next put
        s.iter = i
        s.put_scalar("x", float(i))
    assert s.latest()["x"] == (106.0, 6)
    assert sent[1] == [4.0, 5.0, 6.0]
    assert s.history("x").values() == [(104.0, 4), (105.0, 5), (106.0, 6)]
    s.iter = 7
    s.put_scalar("x", 7.0)  # the cut: the synced values stay synced
    s.synchronize()
    assert sent[2] == [7.0]
    assert s.history("x").values() == [(105.0, 5), (106.0, 6), (107.0, 7)]


def test_a_scalar_only_this_rank_records_stays_its_own_and_the_others_are_still_averaged(caplog):
    """A hook that records on rank 0 only must not turn every logged value rank-local."""
    from launcher.engine.distributed import layout_id

    def reduce(values, layout):  # the other rank recorded train/loss = 3.0 and nothing else
        return None if layout != layout_id([("train/loss", 1)]) else (values + 3.0) / 2

    def gather(layout):
        return [layout, [("train/loss", 1)]]

    s = EventStorage(reduce=reduce, gather=gather)
    s.put_scalar("train/loss", 1.0)
    s.put_scalar("rank0/only", 5.0)
    with caplog.at_level("WARNING"):
        assert s.latest() == {"train/loss": (2.0, 0), "rank0/only": (5.0, 0)}
    assert "different scalars since the last write (rank0/only)" in caplog.text
    s.iter = 1
    s.put_scalar("train/loss", 5.0)  # the next write has the same keys on both ranks again
    assert s.latest()["train/loss"] == (4.0, 1)


def test_state_dict_round_trip():
    s = EventStorage()
    for i in range(5):
        s.iter = i
        s.put_scalar("train/loss", torch.tensor(float(i)))
        s.put_scalar("lr", 0.1, smoothing_hint=False)
    s.epoch = 3
    t = EventStorage()
    t.load_state_dict(s.state_dict())
    assert t.iter == 4 and t.epoch == 3
    assert t.latest_with_smoothing_hint(3) == s.latest_with_smoothing_hint(3)
    assert t.history("train/loss").values() == s.history("train/loss").values()


def test_state_survives_a_checkpoint_file_and_reads_the_older_per_key_layout(tmp_path):
    s = EventStorage()
    for i in range(7):
        s.iter = i
        s.put_scalar("train/loss", torch.tensor(float(i) / 3))
        if i % 2:
            s.put_scalar("val/accuracy", i / 10, smoothing_hint=False)
    torch.save(s.state_dict(), tmp_path / "s.pt")
    t = EventStorage()
    t.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    for key in ("train/loss", "val/accuracy"):
        assert t.history(key).values() == s.history(key).values()
    assert t.latest_with_smoothing_hint(3) == s.latest_with_smoothing_hint(3)

    packed_as_tensors = {**s.state_dict(), "values": torch.tensor([0.5, 0.25], dtype=torch.float64),  # 2026-12-03
                         "iters": torch.tensor([1, 2]), "keys": ["lr"], "lengths": [2], "smoothing_hints": {"lr": False}}
    v = EventStorage()
    v.load_state_dict(packed_as_tensors)
    assert v.history("lr").values() == [(0.5, 1), (0.25, 2)]

    older = {"iter": 6, "epoch": 0, "smoothing_hints": {"lr": False},  # checkpoints written before 2026-12-03
             "history": {"lr": {"values": torch.tensor([0.1, 0.05], dtype=torch.float64), "iters": torch.tensor([4, 5])}}}
    u = EventStorage()
    u.load_state_dict(older)
    assert u.history("lr").values() == [(0.1, 4), (0.05, 5)] and u.iter == 6


def test_unknown_key_names_what_exists():
    s = EventStorage()
    s.put_scalar("a", 1.0)
    try:
        s.history("b")
    except KeyError as e:
        assert "'b'" in str(e) and "['a']" in str(e)
    else:
        raise AssertionError("expected KeyError")


def test_epoch_of_a_step_survives_a_checkpoint_and_keeps_only_the_epochs_a_held_value_can_be_in(tmp_path):
    s = EventStorage(max_length=5)
    for epoch in range(4):  # 4 steps an epoch
        s.begin_epoch(epoch, 4 * epoch)
        for i in range(4 * epoch, 4 * epoch + 4):
            s.iter = i
            s.put_scalar("train/loss", float(i))
    assert [s.epoch_of(i) for i in (0, 3, 4, 9, 15)] == [0, 0, 1, 2, 3]
    torch.save(s.state_dict(), tmp_path / "s.pt")
    t = EventStorage()
    t.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    assert t.state_dict()["epoch_starts"] == [8, 2, 12, 3]  # the 5 values held start at step 11
    assert [t.epoch_of(i) for i in (11, 12, 15)] == [2, 3, 3]
    assert EventStorage().epoch_of(7) == 0  # no epoch begun: the current one


def test_a_scalar_put_again_with_another_smoothing_hint_is_refused_naming_it_and_both_hints():
    """The second hint was dropped in silence: writers went on smoothing (or not) as the first put said."""
    import pytest

    s = EventStorage()
    s.put_scalar("val/loss", 1.0, smoothing_hint=False)
    s.put_scalar("val/loss", torch.tensor(0.5), smoothing_hint=False)  # the same hint: taken
    with pytest.raises(ValueError, match=r"put_scalar\('val/loss', ...\): smoothing_hint=True, but 'val/loss' was put "
                                         r"with smoothing_hint=False before"):
        s.put_scalar("val/loss", 2.0)
    s.put_scalar("train/loss", 3.0)
    with pytest.raises(ValueError, match=r"smoothing_hint=False, but 'train/loss' was put with smoothing_hint=True"):
        s.put_scalars(smoothing_hint=False, **{"train/loss": 1.0})
    assert s.history("val/loss").values() == [(1.0, 0), (0.5, 0)]  # the refused value is not recorded
    t = EventStorage()  # a resumed run's storage keeps the hints its checkpoint holds
    t.load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="'val/loss' was put with smoothing_hint=False"):
        t.put_scalar("val/loss", 2.0, smoothing_hint=True)
