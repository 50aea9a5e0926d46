"""The oracle benchmark's scenarios, and its account of when the scheduler's choice is unique (the
comparison itself runs against the real kube-scheduler in `python -m bench preemption_oracle`)."""

from __future__ import annotations

from bench.bench_preemption_oracle import GPUS, Running, Scenario


def test_every_scenario_fills_every_node_so_the_preemptor_needs_evictions() -> None:
    for seed in range(50):
        scenario = Scenario.random(seed)
        for node in range(scenario.nodes):
            assert sum(p.gpus for p in scenario.pods if p.node == node) == GPUS
        assert scenario.preemptor_gpus in (2, 4, 8)
        assert len({p.started_s for p in scenario.pods}) == len(scenario.pods), "distinct start times"


def test_the_schedulers_victims_are_reprieved_most_important_first() -> None:
    """Node 0: a 4-GPU pod at 300 and two 2-GPU pods at 100; a 4-GPU preemptor. Removing all and
    reprieving the 300 first leaves the two 100s as victims. Node 1: eight 1-GPU pods at 200, four
    go. Node 0's highest victim (100) is lower: the one best node."""
    pods = [Running("big", 0, 4, 300, 1, False), Running("a", 0, 2, 100, 2, False), Running("b", 0, 2, 100, 3, False)]
    pods += [Running(f"n{i}", 1, 1, 200, 10 + i, False) for i in range(8)]
    scenario = Scenario(0, 2, tuple(pods), None, 4)
    best, victims = scenario.schedulers_choice()
    assert best == [0]
    assert sorted(victims[0]) == ["a", "b"]
    assert len(victims[1]) == 4


def test_two_nodes_equal_on_every_criterion_make_the_choice_not_unique() -> None:
    pods = [Running(f"x{i}", node, 4, 100, 5, False) for node in (0, 1) for i in range(2)]
    scenario = Scenario(0, 2, tuple(pods), None, 4)
    best, _ = scenario.schedulers_choice()
    assert best == [0, 1]


def test_a_budget_makes_the_scheduler_reprieve_its_pods_first() -> None:
    """Two 4-GPU pods at 100 on one node, one under a budget allowing no disruption: the scheduler
    reprieves the guarded one first and evicts the other."""
    pods = (Running("guarded", 0, 4, 100, 1, True), Running("open", 0, 4, 100, 2, False))
    best, victims = Scenario(0, 1, pods, 0, 4).schedulers_choice()
    assert best == [0] and victims[0] == ["open"]
