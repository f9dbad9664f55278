"""The bisection search with a fake measurement: culprits, skips, budgets, several steps.

``simulate`` plays the driver: it asks ``next_action`` what to measure and answers
from a model of the history (each commit's cumulative effect; a set of commits that
do not build), as paired runs would.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelwatch.jobs.planning.bisect import (
    CaseResult,
    Done,
    Limits,
    Measure,
    Outcome,
    Purpose,
    Step,
    Wait,
    judge,
    next_action,
    probe,
    upcoming,
)


def history(n: int, steps: dict[int, float]) -> Callable[[int], float]:
    """Time factor of commit i: the product of every step at or before i."""

    def level(i: int) -> float:
        f = 1.0
        for at, factor in steps.items():
            if i >= at:
                f *= factor
        return f

    assert n > max(steps, default=0)
    return level


def simulate(
    n: int,
    level: Callable[[int], float],
    broken: frozenset[int] = frozenset(),
    *,
    establish: bool = False,
    seconds: float = 1.0,
    budget: float | None = None,
) -> tuple[Done, list[Step]]:
    steps: list[Step] = []
    while True:
        action = next_action(
            n - 1, steps, Limits(seconds * len(steps), budget), establish=establish
        )
        assert not isinstance(action, Wait)
        if isinstance(action, Done):
            return action, steps
        assert isinstance(action, Measure)
        if action.index in broken:
            outcome = Outcome.SKIP
        else:
            ratio = level(action.index) / level(action.against)
            outcome = Outcome.BAD if ratio > 1.5 else Outcome.GOOD
        steps.append(Step(action.index, action.against, action.purpose, outcome))


def searched(steps: list[Step]) -> list[int]:
    return [s.index for s in steps if s.purpose == Purpose.SEARCH]


@pytest.mark.parametrize("culprit", [1, 2, 17, 31, 32, 40, 62, 63])
def test_one_slowdown_in_64_commits_is_found_in_six_probes_and_confirmed(culprit: int) -> None:
    done, steps = simulate(64, history(64, {culprit: 3.0}))
    assert done.status == "found" and done.culprits == (culprit,), (done, steps)
    assert len(searched(steps)) <= 6  # log2(63 candidates), rounded up
    confirm = [s for s in steps if s.purpose == Purpose.CONFIRM]
    assert [(s.index, s.against) for s in confirm] == [(culprit, culprit - 1)]
    # the residual (bad against the culprit) needs no new build unless the culprit is bad
    assert len({s.index for s in steps}) <= 7


def test_a_commit_that_does_not_build_is_skipped_and_its_neighbour_tried() -> None:
    first = probe(0, 63, {})
    assert first == 31
    done, steps = simulate(64, history(64, {41: 3.0}), frozenset({31}))
    assert done.culprits == (41,)
    idx = searched(steps)
    assert idx[0] == 31 and idx[1] in (30, 32)  # the neighbour of the middle
    assert all(s.outcome == Outcome.SKIP for s in steps if s.index == 31)
    assert len(set(idx)) <= 7


def test_a_skipped_commit_is_never_blamed() -> None:
    # the slowdown lands with commit 10, which does not build: 9 good, 11 bad
    done, steps = simulate(64, history(64, {10: 3.0}), frozenset({10}))
    assert done.status == "not_found" and done.culprits == ()
    assert "skipped" in done.reason


def test_two_slowdowns_in_one_range_are_found_one_after_the_other() -> None:
    done, steps = simulate(64, history(64, {12: 2.0, 50: 2.5}))
    assert done.status == "found" and done.culprits == (12, 50), steps
    residual = [s for s in steps if s.purpose == Purpose.RESIDUAL]
    assert [(s.against, s.outcome) for s in residual] == [(12, Outcome.BAD), (50, Outcome.GOOD)]
    # the second search measures against the first culprit's build
    assert {s.against for s in steps if s.purpose == Purpose.SEARCH and s.index > 12} >= {12}


def test_a_drift_of_small_steps_is_not_one_commits_fault() -> None:
    # every commit 5 % slower: 63 commits add up to far more than 1.5x, no single one does
    done, _ = simulate(64, lambda i: 1.05**i)
    assert done.status == "not_found" and "spread" in done.reason


def test_establish_first_measures_bad_against_good() -> None:
    done, steps = simulate(64, history(64, {}), establish=True)
    assert done.status == "not_found" and len(steps) == 1
    assert steps[0] == Step(63, 0, Purpose.ESTABLISH, Outcome.GOOD)
    done, _ = simulate(64, history(64, {}), frozenset({63}), establish=True)
    assert done.status == "error"
    done, steps = simulate(64, history(64, {20: 3.0}), establish=True)
    assert done.culprits == (20,) and steps[0].purpose == Purpose.ESTABLISH


def test_the_budget_stops_the_search_as_not_found() -> None:
    done, steps = simulate(64, history(64, {20: 3.0}), seconds=10.0, budget=35.0)
    assert done.status == "not_found" and "budget" in done.reason
    assert len(steps) == 4  # 0, 10, 20, 30 s spent: the fifth step would start past 35


def test_a_step_in_flight_means_wait() -> None:
    steps = [Step(31, 0, Purpose.SEARCH, None)]
    assert isinstance(next_action(63, steps), Wait)
    assert next_action(0, []) == Done("error", reason="good and bad are the same commit")


def test_adjacent_good_and_bad_need_only_the_confirmation() -> None:
    done, steps = simulate(2, history(2, {1: 3.0}))
    assert done.culprits == (1,)
    assert [s.purpose for s in steps] == [Purpose.CONFIRM]


def test_only_commits_that_change_the_build_inputs_are_searched() -> None:
    from kernelwatch.jobs.planning.bisect import distinct_builds

    assert distinct_builds(["a", "a", "b", "b", "b", "c", "c"]) == [0, 2, 5, 6]
    assert distinct_builds(["a", "b"]) == [0, 1]
    assert distinct_builds(["a", "a"]) == [0, 1]  # bad is always kept: the user named it
    assert distinct_builds([]) == []


# ------------------------------------------------------------------- builds ahead


def test_upcoming_explores_both_outcomes_of_each_step_nearest_first() -> None:
    flight = [Step(63, 0, Purpose.ESTABLISH)]
    # establish good: nothing to find; bad: the middle; then either half's middle
    assert upcoming(63, flight, establish=True, depth=1) == [31]
    assert upcoming(63, flight, establish=True, depth=2) == [31, 47, 15]
    assert upcoming(63, flight, establish=True, depth=3) == [31, 47, 15, 55, 39, 23, 7]
    assert upcoming(63, flight, establish=True, depth=0) == []
    # nothing in flight: the step next_action plans now comes first
    assert upcoming(63, [], depth=1) == [31, 0]
    assert upcoming(63, [], depth=2) == [31, 0, 47, 15]


def test_upcoming_leaves_out_what_the_steps_measure_and_the_ends_of_the_search() -> None:
    # 39 good, 41 bad, 40 in flight: either way the culprit and its parent are built
    steps = [
        Step(31, 0, Purpose.SEARCH, Outcome.GOOD),
        Step(47, 0, Purpose.SEARCH, Outcome.BAD),
        Step(39, 0, Purpose.SEARCH, Outcome.GOOD),
        Step(43, 0, Purpose.SEARCH, Outcome.BAD),
        Step(41, 0, Purpose.SEARCH, Outcome.BAD),
        Step(40, 0, Purpose.SEARCH),
    ]
    # good: confirm 41 against 40, bad: confirm 40 against 39 (all built); then the
    # residual measures bad, not built yet (no establish step here)
    assert upcoming(63, steps, depth=2) == [63]
    spent = Limits(spent_s=100.0, budget_s=50.0)
    assert upcoming(63, steps[:2] + [Step(39, 0, Purpose.SEARCH)], spent, depth=2) == []
    assert upcoming(63, steps[:2] + [Step(39, 0, Purpose.SEARCH)], Limits(max_steps=3)) == []


@pytest.mark.parametrize("culprit", [1, 17, 31, 32, 41, 62, 63])
@pytest.mark.parametrize("broken", [frozenset(), frozenset({31})])
def test_every_new_build_of_a_search_was_upcoming_one_step_before(
    culprit: int, broken: frozenset[int]
) -> None:
    done, steps = simulate(64, history(64, {culprit: 3.0}), broken, establish=True)
    assert done.status in ("found", "not_found")
    for k in range(1, len(steps)):
        before = [
            *steps[: k - 1],
            Step(steps[k - 1].index, steps[k - 1].against, steps[k - 1].purpose),
        ]
        built = {i for s in before for i in (s.index, s.against)}
        ahead = upcoming(63, before, establish=True, depth=1)
        assert len(ahead) == len(set(ahead)) and not built & set(ahead)
        new = {steps[k].index, steps[k].against} - built
        if steps[k - 1].outcome == Outcome.SKIP:
            continue  # a skip is not explored: its neighbour is built by its own step
        assert new <= set(ahead), (k, steps[k], ahead)


def test_a_confirmation_that_could_not_be_measured_is_tried_again_then_said() -> None:
    # a skipped confirmation read "spread over several commits", untried (an audit)
    def outcome_of(flaky: int) -> Callable[[int, int, int], Outcome]:
        def outcome(index: int, against: int, tries: int) -> Outcome:
            if (index, against) == (20, 19) and tries < flaky:
                return Outcome.SKIP
            return Outcome.BAD if index >= 20 > against else Outcome.GOOD

        return outcome

    for flaky, status in ((1, "found"), (2, "not_found")):
        steps: list[Step] = []
        while not isinstance(action := next_action(63, steps), Done):
            assert isinstance(action, Measure)
            tries = sum((s.index, s.against) == (action.index, action.against) for s in steps)
            steps.append(Step(action.index, action.against, action.purpose,
                              outcome_of(flaky)(action.index, action.against, tries)))  # fmt: skip
        confirms = [s for s in steps if s.purpose == Purpose.CONFIRM]
        assert len(confirms) == 2 and action.status == status, (action, steps)
        if status == "found":
            assert action.culprits == (20,)
        else:
            assert "against its parent it could not be measured (2 tries" in action.reason


def _step_cases(
    level: Callable[[int], float], broken: frozenset[int]
) -> Callable[[int, int], list[CaseResult]]:
    """One case per step as a paired run records it: broken where the candidate is, no
    time where the baseline is, else its ratio and the rule's word at 1.5x."""

    def cases(index: int, against: int) -> list[CaseResult]:
        if index in broken:
            return [CaseResult(("gemm",), "fail", "broken", None)]
        if against in broken:  # a broken baseline: unchanged with a note, no ratio
            return [CaseResult(("gemm",), "pass", "unchanged", None)]
        ratio = level(index) / level(against)
        return [CaseResult(("gemm",), "pass", "regression" if ratio > 1.5 else "unchanged",
                           ratio)]  # fmt: skip

    return cases


def _bisected(
    last: int, cases: Callable[[int, int], list[CaseResult]], follows: frozenset[str] | None
) -> Done:
    steps: list[Step] = []
    while not isinstance(action := next_action(last, steps), Done):
        assert isinstance(action, Measure)
        outcome, _, _ = judge(cases(action.index, action.against), "", follows)
        steps.append(Step(action.index, action.against, action.purpose, outcome))
    return action


def test_a_commit_that_broke_the_case_for_a_while_is_not_blamed_for_a_slowdown() -> None:
    # commit 2 broke the case, commit 3 fixed it and made it 2x slower. Followed as any
    # blocking change, the search blamed 2 (broken is blocking) and, measured against
    # 2's broken build, read 3 as good: "found", the wrong commit (an audit)
    regression = frozenset({"regression"})
    cases = _step_cases(history(11, {3: 2.0}), frozenset({2}))
    assert _bisected(10, cases, None).culprits == (2,)  # what it did
    # following the slowdown: 2 has no time, so the culprit is 2 or 3, and it says so
    done = _bisected(10, cases, regression)
    assert done.status == "not_found" and done.culprits == ()
    assert "only skipped commits lie between indices 1 and 3" in done.reason
    # a break fixed before the slowdown's commit's parent: the slowdown is named
    later = _step_cases(history(11, {6: 2.0}), frozenset({2}))
    assert _bisected(10, later, regression).culprits == (6,)


def test_judge_follows_only_the_kind_it_was_asked_for() -> None:
    broken = [CaseResult(("gemm",), "fail", "broken", None)]
    assert judge(broken, "gemm")[0] == Outcome.BAD  # any blocking kind, as before
    assert judge(broken, "gemm", {"regression"})[:2] == (Outcome.SKIP, "broken")
    no_time = [CaseResult(("gemm",), "pass", "unchanged", None)]
    assert judge(no_time, "gemm", {"regression"})[:2] == (Outcome.SKIP, "no timing")
    assert judge(no_time, "gemm")[0] == Outcome.GOOD
    slow = [CaseResult(("gemm",), "pass", "regression", 1.8)]
    assert judge(slow, "gemm", {"regression"})[:2] == (Outcome.BAD, "regression")
    # a step's word is stored in a 16-character column
    assert all(len(judge(c, "gemm", {"regression"})[1]) <= 16 for c in (broken, no_time, slow))
