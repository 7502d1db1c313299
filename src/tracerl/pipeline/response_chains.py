"""Responses API conversations kept by the server: each call's input made whole before it is written.

A Responses call made with ``previous_response_id`` sends only its new input items; the server
puts the conversation's earlier turns before them, so the prompt the model saw (and the prompt
ids the server returned) is the whole conversation. Capture records the id it continued
(``tracerl.llm.previous_response_id``, :mod:`tracerl.instrumentation.responses_api`); here,
once an episode's rows are all read, each such call's input messages become its own
instructions, the earlier call's whole input (without that call's instructions: the Responses
API does not carry them over) and that call's output, then its own input, turn after turn.
The token ids need nothing of this: the server's prompt ids hold the earlier turns already.
A call rebuilt from its messages (``--retokenize``) needs it: its prompt is rendered from them.
vLLM 0.32 keeps only the earlier response's message items (not its ``function_call`` items) when
it resolves ``previous_response_id``, so a chained call's input messages made whole here can hold
a tool call its prompt ids lack; the ids are what the model saw.

The earlier call is looked for among the episode's transitions (a chain is one agent's
conversation within one episode). When it is not there (another episode's, or a call that is
no transition), the call keeps its own input only: a call with the server's ids is still
written (counted as ``previous_unresolved``), a call that would be retokenized is not (its
prompt would lack the earlier turns), counted in the skipped calls as ``previous_response_unresolved``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tracerl.schemas import attributes as A

UNRESOLVED = "previous_response_unresolved"  # the skip reason of a retokenized call whose chain is cut
_KEY = json.dumps(A.PREVIOUS_RESPONSE_ID)


def _attributes(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _messages(text: str | None) -> list[Any] | None:
    try:
        value = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None


def resolve_chains(part: pa.Table, skipped: Counter, tally: Counter) -> pa.Table:
    """``part`` (whole episodes, with ``input_messages``) with the input of every chained call made whole.

    ``skipped`` counts the calls dropped, ``tally`` the chained calls resolved (``previous_resolved``)
    and those written with their own input only (``previous_unresolved``).
    """
    attributes = part.column("attributes")
    chained = pc.fill_null(pc.match_substring(attributes, _KEY), False)
    if not pc.any(chained).as_py():
        return part
    episodes = part.column("episode_id").to_pylist()
    response_ids = part.column("response_id").to_pylist()
    where = {(e, r): i for i, (e, r) in enumerate(zip(episodes, response_ids)) if r is not None}
    inputs, outputs = part.column("input_messages"), part.column("output_messages")
    served = pc.is_valid(part.column("response_token_ids")).to_pylist()
    memo: dict[int, tuple[str | None, bool]] = {}  # row -> (previous response id, had instructions)

    def about(i: int) -> tuple[str | None, bool]:
        if i not in memo:
            found = _attributes(attributes[i].as_py())
            previous = found.get(A.PREVIOUS_RESPONSE_ID)
            memo[i] = (previous if isinstance(previous, str) else None, A.GEN_AI_SYSTEM_INSTRUCTIONS in found)
        return memo[i]

    whole: dict[int, list[Any] | None] = {}  # row -> its whole prompt's messages (None: cannot be made)

    def prompt(i: int) -> list[Any] | None:
        chain, current = [], i  # the rows back to the conversation's start, or to a missing one
        while current not in whole:
            chain.append(current)
            previous = about(current)[0]
            if previous is None:
                break
            earlier = where.get((episodes[current], previous))
            if earlier is None or earlier in chain:
                whole[current] = None
                chain.pop()
                break
            current = earlier
        for row in reversed(chain):
            own = _messages(inputs[row].as_py())
            previous = about(row)[0]
            if previous is None:
                whole[row] = own
                continue
            earlier = where[(episodes[row], previous)]
            before, said = whole.get(earlier), _messages(outputs[earlier].as_py())
            if own is None or before is None or said is None:
                whole[row] = None
                continue
            if about(earlier)[1] and before and isinstance(before[0], dict) and before[0].get("role") == "system":
                before = before[1:]  # the earlier call's instructions: not carried over
            said = [{k: v for k, v in m.items() if k != A.GEN_AI_FINISH_REASON} if isinstance(m, dict) else m for m in said]
            head = own[:1] if about(row)[1] and own and isinstance(own[0], dict) and own[0].get("role") == "system" else []
            whole[row] = [*head, *before, *said, *own[len(head):]]
        return whole.get(i)

    new_inputs = inputs.to_pylist()
    keep = [True] * len(part)
    for i in pc.indices_nonzero(chained).to_pylist():
        if about(i)[0] is None:  # the key's text in some other attribute
            continue
        messages = prompt(i)
        if messages is not None:
            new_inputs[i] = json.dumps(messages, ensure_ascii=False)
            tally["previous_resolved"] += 1
        elif served[i]:
            tally["previous_unresolved"] += 1
        else:
            keep[i] = False
            skipped[UNRESOLVED] += 1
    part = part.set_column(part.schema.get_field_index("input_messages"), "input_messages", pa.array(new_inputs, pa.string()))
    return part if all(keep) else part.filter(pa.array(keep))
