"""The watch-lag records: what they count and that nothing grows them without bound."""

from __future__ import annotations

from extender.plan.in_flight import IN_FLIGHT_MAX, InFlight, complete_offer, feasible_nodes_to_find


def test_in_flight_counts_the_other_unplaced_members_of_the_gang() -> None:
    flight = InFlight()
    for member in ("a0", "a1", "a2"):
        flight.admit(("ns", member), "ns/a")
    flight.admit(("ns", "b0"), "ns/b")
    placed = {("ns", "a2")}
    assert flight.others("ns/a", ("ns", "a0"), placed.__contains__) == 1  # a1: not a0 itself, not placed a2
    assert flight.others("ns/b", ("ns", "x"), placed.__contains__) == 1


def test_in_flight_keeps_at_most_its_bound_newest_first() -> None:
    flight = InFlight()
    for index in range(IN_FLIGHT_MAX + 500):
        flight.admit(("ns", f"p{index}"), "ns/g")
    assert flight.others("ns/g", ("ns", "none"), lambda _key: False) == IN_FLIGHT_MAX
    flight.admit(("ns", "p0"), "ns/h")  # long dropped: comes back as the newest, pushing one out
    assert flight.others("ns/h", ("ns", "none"), lambda _key: False) == 1
    assert flight.others("ns/g", ("ns", "none"), lambda _key: False) == IN_FLIGHT_MAX - 1


def test_the_scheduler_search_cutoff_follows_kube_scheduler() -> None:
    assert feasible_nodes_to_find(50) == 50  # below 100 nodes: every node
    assert feasible_nodes_to_find(5000) == 5000 * 10 // 100  # 50 - 5000/125 = 10 %
    assert feasible_nodes_to_find(5000, 100) == 5000
    assert complete_offer(499, 5000, 0)
    assert not complete_offer(500, 5000, 0)
