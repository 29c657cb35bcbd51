"""Compaction's policy without a server: what a fold takes, over a 2,000-message task whose messages
arrive in batches (hypothesis over their sizes): every request stays within the budget, each
message is folded once and in order, and a fold happens only when it is needed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness_core.agents.compaction import choose_fold, estimate_tokens, transcript
from harness_core.agents.turn import TextPart, TurnMessage

BUDGET = 4_000


def test_a_fold_keeps_half_the_budget_and_never_the_turns_own_messages():
    costs = [500, 500, 500, 500, 300, 300]
    # 2,600 + 200 fixed: fold the oldest until what stays fits in 2,000 (half of 4,000).
    assert choose_fold(costs, 200, BUDGET, foldable=6) == 2
    # Only the first three may go (the rest are the turn's own).
    assert choose_fold(costs, 2_800, BUDGET, foldable=3) == 3
    assert choose_fold(costs, 0, BUDGET, foldable=0) == 0
    assert choose_fold([], 100, BUDGET, foldable=0) == 0
    # Folding all that may be folded would still leave it over the budget: nothing is folded.
    assert choose_fold(costs, 3_500, BUDGET, foldable=3) == 0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=2_000, max_size=2_000),
    batches=st.lists(st.integers(1, 8), min_size=1, max_size=50),
)
def test_a_2000_message_task_stays_within_its_budget_folding_each_message_once(
    sizes: list[int], batches: list[int]
):
    fixed = 150  # the system prompt and the summary
    answer = 80
    costs: list[int] = []  # every message of the task, by position
    folded = 0  # messages before this position are folded away
    displaced: list[int] = []  # what listeners heard, in order
    folds = 0
    arrived = 0
    turn = 0
    while arrived < len(sizes):
        batch = sizes[arrived : arrived + batches[turn % len(batches)]]
        arrived += len(batch)
        turn += 1
        first_new = len(costs)
        costs.extend(batch)
        while True:  # the turn's model step, then a fold and the step again
            live = costs[folded:]
            total = fixed + sum(live)
            if total <= BUDGET:
                break
            cut = choose_fold(live, fixed, BUDGET, foldable=first_new - folded)
            assert cut > 0, "over the budget with something foldable, yet nothing folded"
            displaced.extend(range(folded, folded + cut))
            folded += cut
            folds += 1
        assert fixed + sum(costs[folded:]) <= BUDGET
        costs.append(answer)
    assert displaced == list(range(folded))  # each message heard once, oldest first
    assert folds <= len(costs)  # a fold takes at least one message
    # Folding leaves at most half the budget, so folds are far fewer than turns.
    assert folds * 2 <= turn + 1


def test_the_estimate_counts_text_tool_calls_and_results():
    from pydantic_ai import messages as pai

    text = "x" * 400
    request = pai.ModelRequest(parts=[pai.SystemPromptPart("s" * 40), pai.UserPromptPart(text)])
    call = pai.ModelResponse(
        parts=[pai.ToolCallPart("lookup", {"order_id": 42}, tool_call_id="c1")]
    )
    result = pai.ModelRequest(parts=[pai.ToolReturnPart("lookup", "r" * 800, tool_call_id="c1")])
    assert estimate_tokens([request]) == (40 + 400) // 4 + 8
    assert estimate_tokens([request, call, result]) > estimate_tokens([request]) + 200


def test_the_transcript_names_who_said_what_and_the_tools_they_used():
    user = TurnMessage(message_id="m0", role="user", parts=(TextPart("where is order 42?"),))
    agent = TurnMessage(message_id="a1", role="agent", parts=(TextPart("It shipped."),))
    exchange = [
        {"parts": [{"part_kind": "tool-call", "tool_name": "lookup", "args": {"id": 42}}]},
        {"tool_results": [{"name": "lookup", "text": "shipped Monday"}]},
    ]
    text = transcript("they talked about orders", [(0, user), (1, agent)], {1: exchange})
    assert text.splitlines() == [
        "Earlier summary:",
        "they talked about orders",
        "",
        "user: where is order 42?",
        "agent called lookup({'id': 42})",
        "tool lookup returned: shipped Monday",
        "agent: It shipped.",
    ]
