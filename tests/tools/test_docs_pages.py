"""The documentation: the benchmark pages committed as the result files give them, their figures taken
from those files, no commit named in hand-written prose, and the README's first commands and links."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tools.docs_pages import INTROS, PAGES, RESULTS, ROOT, PageError, differences, main, render_pages

# A commit as a diary names it: 7 to 40 hex digits, with at least one digit and one letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def timing(p50: float) -> dict[str, Any]:
    return {"p50_ms": p50, "p99_ms": p50 * 2, "max_ms": p50 * 3, "samples": 60}


def at_scale(nodes: int, decision_p50: float, **extra: Any) -> dict[str, Any]:
    """A result of `python -m bench.preemption_at_scale NODES`, as it writes one."""
    return {
        "date": "2030-01-02T03:04:05+00:00",
        "command": f"python -m bench.preemption_at_scale {nodes}",
        "nodes": nodes,
        "devices": nodes * 112,
        "running_pods": nodes * 4,
        "decision": timing(decision_p50),
        "view_floor": timing(0.25),
        "filter_alone": timing(1.5),
        "filter_beside_decisions": timing(1.75),
        "filter_p99_ratio": 1.1666,
        **extra,
    }


def write(directory: Path, name: str, document: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(document))


def test_committed_pages_are_what_the_result_files_give() -> None:
    problems = differences(render_pages(RESULTS, INTROS), PAGES)
    assert not problems, "run `python -m tools.docs_pages` and commit docs/benchmarks/:\n" + "\n".join(problems)


def test_a_figure_of_a_result_file_is_on_its_page(tmp_path: Path) -> None:
    write(tmp_path, "preemption_at_scale_123.json", at_scale(123, 987.654))
    pages = render_pages(tmp_path, INTROS)
    page = pages["preemption_at_scale.md"]
    assert "| p50 / p99 / max ms (samples) | 123 nodes |" in page
    assert "| one decision after a watch event | 987.65 / 1975.31 / 2962.96 (60) |" in page
    assert "**1.17 x**" in page
    assert "`python -m bench.preemption_at_scale 123`" in page
    assert "No result file is committed" in pages["preemption.md"]
    assert "| [Preemption at scale](preemption_at_scale.md) | " in pages["index.md"]
    assert "2030-01-02" in pages["index.md"]


def test_sizes_are_in_numeric_order_and_a_result_without_provenance_is_left_out(tmp_path: Path) -> None:
    write(tmp_path, "preemption_at_scale_10000.json", at_scale(10000, 30.0))
    write(tmp_path, "preemption_at_scale_500.json", at_scale(500, 5.0))
    undated = at_scale(2000, 444.0)
    del undated["date"]
    write(tmp_path, "preemption_at_scale_2000.json", undated)
    skipped: list[str] = []
    page = render_pages(tmp_path, INTROS, skipped)["preemption_at_scale.md"]
    assert "| p50 / p99 / max ms (samples) | 500 nodes | 10,000 nodes |" in page
    assert "444.00" not in page
    assert skipped == ["preemption_at_scale_2000.json: no date or command (written before results carried them)"]


def test_an_intro_placeholder_is_the_figure_of_the_file(tmp_path: Path) -> None:
    intros = tmp_path / "intros"
    shutil.copytree(INTROS, intros)
    (intros / "preemption_at_scale.md").write_text(
        "A decision took {{ decision.p50_ms : .3f }} ms on {{ nodes }} nodes ({{ command }})."
    )
    write(tmp_path / "results", "preemption_at_scale_4321.json", at_scale(4321, 12.3456))
    page = render_pages(tmp_path / "results", intros)["preemption_at_scale.md"]
    assert "A decision took 12.346 ms on 4,321 nodes (python -m bench.preemption_at_scale 4321)." in page

    (intros / "preemption_at_scale.md").write_text("Took {{ decision.p51_ms }} ms.")
    with pytest.raises(PageError, match=r"_intro/preemption_at_scale\.md: \{\{ decision\.p51_ms \}\} names no figure"):
        render_pages(tmp_path / "results", intros)


def test_check_names_each_page_that_differs_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, pages = tmp_path / "results", tmp_path / "pages"
    write(results, "preemption_at_scale_64.json", at_scale(64, 1.0))
    arguments = ["--results", str(results), "--pages", str(pages), "--intros", str(INTROS)]
    assert main(arguments) == 0
    assert main([*arguments, "--check"]) == 0

    write(results, "preemption_at_scale_64.json", at_scale(64, 2.0))
    (pages / "old.md").write_text("# a benchmark that is gone\n")
    before = (pages / "preemption_at_scale.md").read_text()
    capsys.readouterr()
    assert main([*arguments, "--check"]) == 1
    errors = capsys.readouterr().err
    assert f"stale: {pages / 'preemption_at_scale.md'}" in errors
    assert f"left over: {pages / 'old.md'}" in errors
    assert "stale: " + str(pages / "preemption.md") not in errors
    assert (pages / "preemption_at_scale.md").read_text() == before

    assert main(arguments) == 0
    assert not (pages / "old.md").exists()
    assert main([*arguments, "--check"]) == 0


def test_rendering_is_deterministic() -> None:
    assert render_pages(RESULTS, INTROS) == render_pages(RESULTS, INTROS)


def test_hand_written_pages_name_no_commit() -> None:
    hand_written = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(INTROS.glob("*.md"))]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match}"
        for path in hand_written
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in COMMIT.findall(line)
    ]
    assert not found, "commits belong in the history, not in prose:\n" + "\n".join(found)


def test_readme_starts_with_the_two_commands_and_links_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]
    assert len(readme.splitlines()) <= 300
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets
    missing = [target for target in targets if not target.startswith("http") and not (ROOT / target).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
