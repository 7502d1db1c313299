"""One clock times a round's phases for both drivers: each phase's seconds, the phase that starts
inside another, the stop asked for between phases."""

from __future__ import annotations

import time

import pytest

from tracerl.orchestration.phases import PhaseClock


def test_each_phase_is_timed_and_announced_and_a_mark_starts_the_next_inside_one():
    seen: list[str] = []
    clock = PhaseClock(on_phase=seen.append)
    with clock("train"):
        time.sleep(0.02)
        clock.mark("checkpoint")  # the save at the end of training: its own phase
        time.sleep(0.01)
    with clock("publish"):
        pass
    assert seen == ["train", "checkpoint", "publish"]
    assert list(clock.seconds) == ["train", "checkpoint", "publish"]
    assert clock.seconds["train"] >= 0.02 and clock.seconds["checkpoint"] >= 0.01
    assert list(clock.fields()) == ["train_seconds", "checkpoint_seconds", "publish_seconds"]


def test_a_stop_is_taken_between_phases_and_never_inside_one():
    stop = {"asked": False}

    def check(name: str) -> None:
        if stop["asked"]:
            raise RuntimeError(f"stopped before {name}")

    summary: dict[str, float] = {}
    clock = PhaseClock(summary, check=check)
    with clock("train"):
        stop["asked"] = True
        clock.mark("checkpoint")  # inside a phase: no check
    with pytest.raises(RuntimeError, match="stopped before publish"):
        clock("publish")
    assert list(summary) == ["train", "checkpoint"]  # the caller's dict holds what ran


def test_a_policys_part_of_a_round_goes_to_its_own_seconds_and_the_round_counts_every_phase():
    clock = PhaseClock()
    with clock("build"):
        time.sleep(0.01)
    with clock.part({}) as writer:  # a round that trains two policies: each records its own phases
        with clock("train"):
            time.sleep(0.01)
    with clock.part({}) as checker:
        with clock("train"):
            time.sleep(0.01)
    assert list(clock.seconds) == ["build"] and list(writer) == list(checker) == ["train"]
    assert clock.total >= 0.03 and clock.total >= sum(clock.seconds.values()) + writer["train"] + checker["train"] - 1e-3
