"""A training run's metrics rows (``metrics.jsonl``): one row type, whichever driver wrote it.

The local loop (``OUT/metrics.jsonl``) and scheduled rounds (``STATE/metrics.jsonl``) write one
JSON object per round; ``tracerl report --runs``, the trackers (``--report-to``) and the
benchmarks read them. A field means the same in both, so a reader never asks which driver wrote
a row. The training fields come from the round's registry record
(:mod:`tracerl.orchestration.round_record`); the loop adds what its own rollout measured.

==============================  ========================================================================
field                           meaning
==============================  ========================================================================
``round``                       the round's number: the loop counts from 0 (round 0 evaluates the
                                starting policy); a scheduled round is numbered by the version it makes
``policy_version``              the version the round started from: what served its calls, what it trained
``version``                     the version the round made (trained, or held back by the gate); absent
                                when it made none
``status``                      ``trained``, ``held`` (the gate's), ``skipped`` (nothing to train on,
                                ``reason``), ``publish_failed`` (the loop's; ``reason``); absent for a
                                round that only evaluates (the loop's last)
``episodes``                    episodes trained on (a skipped round: set aside)
``samples`` ... ``entropy``     the trainer's metrics, :class:`~tracerl.trainer.training.backend.TrainMetrics`
                                under its own names: ``loss``, ``tokens`` (action tokens, over epochs),
                                ``trained_tokens`` (every token of the samples, once), ...; its own timer
                                is left out: the phases are timed on one clock
``skipped``                     dataset rows not trained on, by reason
``checkpoint_bytes``            the checkpoint's weights, config and tokenizer (its manifest left out)
``<phase>_seconds``             each phase's wall seconds (``rollout``, ``judge``, ``build``, ``plan``,
                                ``train``, ``checkpoint``, ``gate``, ``publish``, ``record``), on the round's
                                one clock (:class:`~tracerl.orchestration.phases.PhaseClock`); a scheduled
                                round's are those its registry entry recorded, up to its publish
``seconds``                     the round's: the sum of its phases
``set_aside``                   a scheduled round's row of a skipped round: no version, no chart point
==============================  ========================================================================

The loop's rows add the round's rollout (``train_mean_reward``, ``eval_mean_reward``,
``transitions``, ``generated_tokens``, ``task_groups``, ``groups_with_signal``, the judge's counts),
``kept_checkpoint_bytes`` and, with several policies, ``policies``: one object per policy with
the training fields above.

Rows written before the two drivers shared this type used other names; :func:`upgraded` renames
them as they are read, so the runs committed under ``benchmarks/results/`` keep reading.
"""

from __future__ import annotations

from typing import Any

from tracerl.schemas import attributes as A

RENAMED = {"train_loss": "loss", "save_seconds": "checkpoint_seconds", "published_version": "version"}
"""The local loop's names before the row was shared (old -> now). Its ``seconds`` already meant the round's
wall time, and its ``train_seconds`` (the trainer's own timer) the train phase: kept as they are."""

MACHINE_MEASUREMENTS = frozenset({"seconds", "peak_memory_bytes", "tokens_per_second"})
"""Fields (with every ``*_seconds``) that measure the machine, not the run: the same seed reproduces every other field exactly."""


def upgraded(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with today's names (and each policy's in ``policies``); a row already in them comes back equal."""
    new = {RENAMED.get(name, name): value for name, value in row.items()}
    if isinstance(new.get("policies"), dict):
        new["policies"] = {name: upgraded(part) if isinstance(part, dict) else part for name, part in new["policies"].items()}
    if new.get(A.RUN_METRICS_SET_ASIDE):
        new.setdefault("status", "skipped")
    return new


def is_machine_measurement(name: str) -> bool:
    return name in MACHINE_MEASUREMENTS or name.endswith("_seconds")


def reproducible(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without the fields that measure the machine (nor in ``policies``): what the same seed must give again."""
    kept = {name: value for name, value in row.items() if not is_machine_measurement(name)}
    if isinstance(kept.get("policies"), dict):
        kept["policies"] = {name: reproducible(part) for name, part in kept["policies"].items()}
    return kept
