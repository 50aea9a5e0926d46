"""Device selectors evaluated as the DRA allocator would; costly or unknown ones fail open, and
the caches stay bounded."""

from __future__ import annotations

import copy
import logging
import threading
import time
import tracemalloc
from typing import Any

import cel
import pytest

from extender.devices.cel_eval import Selectors, device_view
from extender.plan.capacity import Matcher
from testkit.builders import DRIVER, gpu_nodes, node_objects

PRODUCT = f"device.attributes['{DRIVER}'].productName"


def _view() -> dict[str, Any]:
    _, slices = node_objects({"n": {}}, profile="h100-8x")
    device = next(s["spec"] for s in slices if "devices" in s["spec"])["devices"][0]
    return device_view(DRIVER, device)


def test_cel_selectors_with_quantities_versions_and_missing_attributes() -> None:
    view = _view()
    selectors = Selectors()
    assert selectors.matches(f"device.capacity['{DRIVER}'].memory.compareTo(quantity('80Gi')) < 0", view)
    assert selectors.matches(f"device.capacity['{DRIVER}'].memory.compareTo(quantity('64Gi')) >= 0", view)
    assert selectors.matches(f"device.attributes['{DRIVER}'].driverVersion.compareTo(semver('550.0.0')) >= 0", view)
    assert selectors.matches("device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'", view)
    assert not selectors.matches("device.attributes['other.vendor.com'].type == 'gpu'", view), "runtime error: no match"
    assert selectors.matches(f"device.attributes['{DRIVER}'].?numaNode.orValue(0) == 0", view), (
        "syntax the library cannot parse matches (the scheduler's own DRA filter decides)"
    )


@pytest.mark.parametrize(
    "spelling",
    [
        "device.attributes['{d}'].uuid == '{u}'",
        "device .attributes['{d}'].uuid == '{u}'",
        "device. attributes [ '{d}' ] . uuid == '{u}'",
        "device.attributes['{d}']['uuid'] == '{u}'",
        "device['attributes']['{d}'].uuid == '{u}'",
        "device.attributes['{d}'].exists(k, k == 'uuid' && device.attributes['{d}'][k] == '{u}')",
    ],
)
def test_a_selector_reads_the_device_it_names_however_it_is_spelled(spelling: str) -> None:
    """The result cache keys an expression by the device entries it reads: a spelling the reader
    missed would make every GPU answer as the first one met did (issue 48: a space before the dot
    made the GPU with that uuid not match)."""
    first = _view()
    second = copy.deepcopy(first)
    second["attributes"][DRIVER]["uuid"] = "GPU-other"
    expression = spelling.format(d=DRIVER, u="GPU-other")
    selectors = Selectors()
    assert (selectors.matches(expression, first), selectors.matches(expression, second)) == (False, True)


def test_kubernetes_library_functions_evaluate_as_the_api_server_does() -> None:
    view, selectors = _view(), Selectors()
    assert selectors.matches(f"{PRODUCT}.lowerAscii().contains('h100')", view)
    assert not selectors.matches(f"{PRODUCT}.lowerAscii().contains('a100')", view)
    assert selectors.matches(f"{PRODUCT}.upperAscii().split(' ').exists(p, p == 'H100')", view)
    assert selectors.matches(f"{PRODUCT}.replace('NVIDIA ', '').trim().indexOf('H100') == 0", view)
    assert selectors.matches("['a', 'b'].join('-') == 'a-b' && [1, 2, 3].isSorted() && [3, 9, 1].max() == 9", view)
    assert selectors.matches("semver('1.2.3').major() == 1 && quantity('1Gi').isGreaterThan(quantity('1Mi'))", view)


def test_a_function_nobody_taught_fails_open_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    view, selectors = _view(), Selectors()
    with caplog.at_level(logging.WARNING, logger="extender.devices.cel_eval"):
        for _ in range(3):
            assert selectors.matches("ip('10.0.0.1').family() == 4", view)
    assert len([r for r in caplog.records if "ip" in r.getMessage()]) == 1


def test_a_costly_selector_is_bounded_before_it_runs() -> None:
    """A nested comprehension over list literals (accepted by the API server) takes ~0.5 s per
    evaluation and holds the GIL; its cost estimate fails it open before it runs."""
    numbers = "[" + ", ".join(str(i) for i in range(1000)) + "]"
    expression = f"{numbers}.all(x, {numbers}.all(y, x + y >= 0 && {PRODUCT} != ''))"
    selectors, view = Selectors(), _view()
    started = time.perf_counter()
    for index in range(8):  # eight GPUs of distinct signatures
        assert selectors.matches(expression, {**view, "driver": f"d{index}"})
    assert time.perf_counter() - started < 0.1


def test_evaluation_holds_no_lock_that_other_selectors_wait_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation that takes long (a stand-in program that sleeps) does not delay another."""
    real_compile = cel.compile

    class Sleepy:
        def execute(self, context: Any) -> bool:
            time.sleep(0.5)
            return True

    monkeypatch.setattr(cel, "compile", lambda e: Sleepy() if e == "slow" else real_compile(e))
    selectors, view = Selectors(), _view()
    slow = threading.Thread(target=selectors.matches, args=("slow", view))
    slow.start()
    time.sleep(0.05)
    started = time.perf_counter()
    assert selectors.matches(f"{PRODUCT} != ''", view)
    waited = time.perf_counter() - started
    slow.join()
    assert waited < 0.2, f"an unrelated selector waited {waited:.2f}s behind a slow one"


def test_caches_stay_bounded_while_50k_distinct_selectors_churn() -> None:
    selectors = Selectors(program_cache_size=512, result_cache_size=1024)
    node = gpu_nodes({"n": {}})["n"]
    matcher = Matcher(selectors, DRIVER, cache_size=512)

    def churn(start: int, count: int) -> None:
        for index in range(start, start + count):
            matcher.matching(node, ((f"device.driver != 'x{index}'",), ()))

    churn(0, 42_000)
    tracemalloc.start()  # traced after the caches are full: what one more churn leaves behind
    try:
        churn(42_000, 4000)
        settled = tracemalloc.get_traced_memory()[0]
        churn(46_000, 4000)
        grown = tracemalloc.get_traced_memory()[0] - settled
    finally:
        tracemalloc.stop()
    programs, results = selectors.sizes()
    assert 256 <= programs <= 512 and 512 <= results <= 1024 and 256 <= len(matcher) <= 512
    assert grown < 256 * 1024, f"4000 more distinct selectors grew memory by {grown / 1024:.0f} KiB"
