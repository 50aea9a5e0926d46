"""The benchmark pages of the documentation (`docs/benchmarks/*.md`), rendered from the result files
the benchmarks write (`bench-results/*.json`), so that a page's figures are the file's and cannot
drift from it.

`python -m tools.docs_pages` writes the pages (and removes pages no benchmark renders any more);
`python -m tools.docs_pages --check` writes nothing and exits 1 naming each page that differs from what
the result files give (stale, missing or left over).

Each benchmark has a page. Its prose is a hand-written intro, `docs/benchmarks/_intro/<name>.md`: what
is measured and how to run it, then, after a line `<!-- figures -->`, what the results say, with every
measured figure written as a placeholder, `{{ path }}` or `{{ path : format }}` (a dotted path into
the result file; a Python format spec, or `len` for how many items a list holds), so the figure in
the sentence is the file's. The part after the marker is left out while no result file is there; a
placeholder that names no figure is an error naming the intro. The tables below the intro are
rendered here from the file, and every page ends with where its figures come from (the file, and the
date and command it records). A result file without `date` and `command` (written before results
carried them) is left out, and said so on stderr.

Output is deterministic: files in name order (sizes in numeric order), keys in a fixed or sorted
order, floats in fixed formats.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"
PAGES = ROOT / "docs" / "benchmarks"
INTROS = PAGES / "_intro"
GENERATOR = "python -m tools.docs_pages"
PLACEHOLDER = re.compile(r"\{\{\s*(?P<path>[^}:]+?)\s*(?::\s*(?P<spec>[^}]*?)\s*)?\}\}")
PROVENANCE_KEYS = ("date", "command")
FIGURES_MARKER = "<!-- figures -->"


class PageError(ValueError):
    """A page cannot be rendered; the message names the intro or result file and what is wrong."""


@dataclass(frozen=True)
class Result:
    """One result file: its name under bench-results/ and what it holds."""

    name: str
    document: dict[str, Any]


@dataclass(frozen=True)
class Benchmark:
    """One page: `docs/benchmarks/<name>.md` from the files `pattern` matches and `_intro/<name>.md`."""

    name: str
    title: str
    command: str
    pattern: str
    tables: Callable[[list[Result]], list[str]]
    order: Callable[[Result], Any] = field(default=lambda result: result.name)


# -- formatting -------------------------------------------------------------------------------------


def number(value: Any, spec: str = "") -> str:
    """A figure as a page shows it: ints with thousands separators, floats with two decimals unless
    `spec` says otherwise, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if spec:
        return format(value, spec)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def ms(value: Any) -> str:
    return number(value, ".2f")


def seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.1f} s"


def ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f} x"


def cell(text: str) -> str:
    """Table cell text: pipes escaped, line breaks flattened."""
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: Iterable[list[str]], numeric: Iterable[int] = ()) -> list[str]:
    """A Markdown table; columns in `numeric` are right-aligned."""
    right = set(numeric)
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|")
    lines.extend("| " + " | ".join(cell(c) for c in row) + " |" for row in rows)
    return [*lines, ""]


def lookup(document: Any, path: str) -> Any:
    """The value at a dotted `path` (dict keys, list indexes) in `document`; KeyError if none."""
    value = document
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(path)
    return value


def fill(template: str, context: dict[str, Any], source: str) -> str:
    """`template` with each placeholder replaced by the figure it names in `context`."""

    def figure(match: re.Match[str]) -> str:
        path, spec = match["path"], match["spec"] or ""
        try:
            value = lookup(context, path)
        except KeyError:
            raise PageError(f"{source}: {{{{ {path} }}}} names no figure in the result file(s)") from None
        if spec == "len" and isinstance(value, dict | list):
            return number(len(value))
        if isinstance(value, dict | list):
            raise PageError(f"{source}: {{{{ {path} }}}} is not a single figure")
        try:
            return number(value, spec)
        except (TypeError, ValueError) as error:
            raise PageError(f"{source}: {{{{ {path} : {spec} }}}}: {error}") from None

    return PLACEHOLDER.sub(figure, template)


# -- tables per benchmark -----------------------------------------------------------------------------


def flattened(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Every scalar of a result file with its dotted path, keys sorted."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            if not prefix and key in PROVENANCE_KEYS:
                continue
            yield from flattened(value[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and value and all(isinstance(v, dict | list) for v in value):
        for index, item in enumerate(value):
            yield from flattened(item, f"{prefix}.{index}")
    elif isinstance(value, list):
        yield prefix, ", ".join(number(v, ".3f" if isinstance(v, float) else "") for v in value)
    else:
        yield prefix, value


def generic_tables(results: list[Result]) -> list[str]:
    """Every figure of each file, for a benchmark with no tables of its own."""
    lines: list[str] = []
    for result in results:
        if len(results) > 1:
            lines += [f"### `{result.name}`", ""]
        rows = [
            [f"`{path}`", value if isinstance(value, str) else number(value, ".3f" if isinstance(value, float) else "")]
            for path, value in flattened(result.document)
        ]
        lines += table(["figure", "value"], rows, numeric=[1])
    return lines


MODES = (
    ("dra", "Kubernetes 1.37 DRA alone"),
    ("device_plugin", "device plugin"),
    ("native", "native gang scheduling"),
    ("nativedra", "nativedra"),
)


def _side_cell(outcome: dict[str, Any]) -> str:
    if outcome["bound"]:
        return f"bound in {seconds(outcome['seconds'])}, {outcome['evicted']} evicted"
    return f"not bound, {outcome['evicted']} evicted"


def _told(outcome: dict[str, Any]) -> str:
    if outcome.get("message"):
        return f"`{outcome['message']}`"
    if outcome["preempted_events"]:
        return f"{outcome['preempted_events']} `Preempted` events"
    return ""


def _metrics(values: dict[str, Any]) -> list[list[str]]:
    return [[f"`{name}`", number(values[name], ".3f" if values[name] % 1 else ".0f")] for name in sorted(values)]


def preemption_tables(results: list[Result]) -> list[str]:
    """`bench-results/preemption.json`: side by side, the busy cluster, /filter beside it, small cases."""
    doc = results[-1].document
    side = doc["side_by_side"]
    lines = ["## Side by side", ""]
    rows = [
        [what, *(_side_cell(side[mode][shape]) for mode, _ in MODES)]
        for shape, what in (("pod", "8-GPU pod, 2 nodes full of 1-GPU pods"), ("gang", "2 x 8 gang, 4 nodes full"))
    ]
    rows.append(
        [
            "low-priority pods there (pod / gang)",
            *(f"{side[m]['pod']['low_pods']} / {side[m]['gang']['low_pods']}" for m, _ in MODES),
        ]
    )
    rows.append(["what the pod is told", *(_told(side[mode]["pod"]) for mode, _ in MODES)])
    lines += table(["", *(title for _, title in MODES)], rows)
    if side["nativedra"].get("metrics"):
        lines += ["The extender's metrics after the side-by-side run:", ""]
        lines += table(["metric", "value"], _metrics(side["nativedra"]["metrics"]), numeric=[1])

    busy = doc["busy"]
    gang = busy["gang"]
    lines += [f"## A gang on a busy {number(busy['nodes'])}-node cluster", ""]
    lines += table(
        ["figure", "value"],
        [
            ["nodes / idle nodes", f"{number(busy['nodes'])} / {number(busy['idle_nodes'])}"],
            ["gang bound after its creation", seconds(gang["seconds"])],
            ["the same gang on the room it leaves, no preemption", seconds(gang["baseline_seconds"])],
            ["ratio", ratio(gang["ratio"])],
            ["pods evicted / fewest possible", f"{gang['evicted']} / {gang['least_possible']}"],
            ["`Preempted` events", number(gang["preempted_events"])],
            [
                "rack placed in / victims' racks / baseline's rack",
                " / ".join(", ".join(gang[k]) for k in ("racks", "victim_racks", "baseline_racks")),
            ],
            ["`PreemptionNotHelpful` events", number(len(gang["not_helpful_events"]))],
        ],
        numeric=[1],
    )
    if gang.get("metrics"):
        lines += table(["metric", "value"], _metrics(gang["metrics"]), numeric=[1])

    filtering = busy["filter"]
    lines += ["## /filter while preemptors preempt", ""]
    header = ["extender", "p50 ms", "p99 ms", "calls", "p50 ratio", "preemptors", "bound", "evicted"]
    rows = [
        [
            label,
            ms(f["p50_ms"]),
            ms(f["p99_ms"]),
            number(f["samples"]),
            ratio(f["ratio"]),
            number(f["stream_pods"]),
            number(f["stream_bound"]),
            number(f["evicted"]),
        ]
        for label, f in (("`preemption: false`", filtering["without"]), ("`preemption: true`", filtering["with"]))
    ]
    lines += table(header, rows, numeric=range(1, 8))
    lines += [f"p99 with preemption / without: **{ratio(filtering['p99_ratio'])}**.", ""]

    small = doc["small_cases"]
    lines += ["## Victims against brute force", ""]
    lines += table(
        ["cases", "seed", "pods", "gangs", "nothing helps", "of those, refused"],
        [[number(small[k]) for k in ("cases", "seed", "pod", "gang", "no_help", "no_help_agreed")]],
        numeric=range(6),
    )
    header = ["search", "decisions", "brute force's least cost", "its pod count", "pods more in all", "missed"]
    header += ["exact search used", "p50 ms", "p99 ms", "max ms"]
    rows = [
        [
            path,
            *(number(small[path][k]) for k in ("decisions", "optimal_cost", "optimal_pods", "extra_pods", "missed")),
            number(small[path]["exact_used"]),
            ms(small[path]["p50_ms"]),
            ms(small[path]["p99_ms"]),
            ms(small[path]["max_ms"]),
        ]
        for path in ("exact", "reprieve")
    ]
    return lines + table(header, rows, numeric=range(1, 10))


def _victims(by_priority: dict[str, int]) -> str:
    return ", ".join(
        f"{count} x {priority}" for priority, count in sorted(by_priority.items(), key=lambda i: int(i[0]))
    )


def _node(value: int | None) -> str:
    return "none" if value is None else str(value)


def oracle_tables(results: list[Result]) -> list[str]:
    """`bench-results/preemption_oracle.json`: the tally, the mismatches with their reasons, every scenario."""
    doc = results[-1].document
    scenarios = doc["scenarios"]
    lines = ["## Tally", ""]
    lines += table(
        ["scenarios", "scheduler's choice unique", "as its per-node method predicts", "matched", "mismatches"],
        [[number(len(scenarios)), *(number(doc[k]) for k in ("unique", "predicted", "matched", "mismatches"))]],
        numeric=range(5),
    )
    header = [
        "seed",
        "nodes",
        "preemptor GPUs",
        "budget allows",
        "scheduler: node, victims",
        "nativedra: node, victims",
    ]
    mismatched = [s for s in scenarios if not s["match"]]
    if mismatched:
        lines += ["## Mismatches", ""]
        rows = [
            [
                number(s["seed"]),
                *(
                    f"{_node(s[who]['node'])}: {_victims(s[who]['evicted_by_priority']) or 'none'}"
                    for who in ("scheduler", "nativedra")
                ),
                s.get("reason", ""),
            ]
            for s in mismatched
        ]
        lines += table(["seed", "scheduler: node, victims", "nativedra: node, victims", "reason"], rows, numeric=[0])
    lines += ["## Every scenario", ""]
    rows = [
        [
            number(s["seed"]),
            number(s["nodes"]),
            number(s["preemptor_gpus"]),
            "no budget" if s["budget_allows"] is None else number(s["budget_allows"]),
            *(
                f"{_node(s[who]['node'])}: {_victims(s[who]['evicted_by_priority']) or 'none'}"
                for who in ("scheduler", "nativedra")
            ),
            "yes" if s["unique"] else "no",
            "yes" if s["match"] else "**no**",
        ]
        for s in scenarios
    ]
    return lines + table([*header, "unique", "match"], rows, numeric=range(4))


def _timing(figures: dict[str, Any]) -> str:
    return f"{ms(figures['p50_ms'])} / {ms(figures['p99_ms'])} / {ms(figures['max_ms'])} ({number(figures['samples'])})"


def at_scale_tables(results: list[Result]) -> list[str]:
    """`bench-results/preemption_at_scale_<NODES>.json`: one column per cluster size."""
    docs = [result.document for result in results]
    rows = [
        ["devices", *(number(d["devices"]) for d in docs)],
        ["running pods", *(number(d["running_pods"]) for d in docs)],
        ["one decision after a watch event", *(_timing(d["decision"]) for d in docs)],
        ["taking the view alone (the floor)", *(_timing(d["view_floor"]) for d in docs)],
        ["/filter, 1-GPU pod, every node name, alone", *(_timing(d["filter_alone"]) for d in docs)],
        ["/filter beside a decision a second", *(_timing(d["filter_beside_decisions"]) for d in docs)],
        ["/filter p99 beside decisions / alone", *(f"**{ratio(d['filter_p99_ratio'])}**" for d in docs)],
    ]
    header = ["p50 / p99 / max ms (samples)", *(f"{number(d['nodes'])} nodes" for d in docs)]
    return ["## Results", "", *table(header, rows, numeric=range(1, len(docs) + 1))]


def _p50_p99(figures: dict[str, Any] | None) -> str:
    return "-" if not figures else f"{ms(figures['p50_ms'])} / {ms(figures['p99_ms'])}"


_SHAPES = {"plain": "pod without claims", "single": "1-GPU pod", "member": "gang member 16 x 8 GPUs, one rack"}
_MIXES = {"": "1 status event before each", "_usage": "1 event before each, half free or take a GPU"}
_FIRST_CALLS = {
    "floor": "JSON round trip of the request body (the floor)",
    "first_filter": "filter, 1-GPU pod, first call once ready",
    "first_prioritize": "prioritize, 1-GPU pod, first call once ready",
}
_AFTER_CALLS = {
    "prioritize_new_shape": "prioritize, a new pod shape's first call",
    "burst": "apply a burst of 1,000 watch events",
    "filter_after_burst": "filter, 1-GPU pod, first call after the burst",
}


def extender_tables(results: list[Result]) -> list[str]:
    """`bench-results/extender.json`: one column per cluster size."""
    return _latency_tables(results, _p50_p99, "p50 / p99 ms", _SHAPES)


def extender_mixed_tables(results: list[Result]) -> list[str]:
    """`bench-results/extender_mixed.json`: one column per cluster size, maxima included."""
    shapes = {**_SHAPES, "member": "gang member 8 x 8 GPUs, one rack"}
    return _latency_tables(results, _p50_p99_max, "p50 / p99 / max ms", shapes)


def _p50_p99_max(figures: dict[str, Any] | None) -> str:
    return "-" if not figures else f"{ms(figures['p50_ms'])} / {ms(figures['p99_ms'])} / {ms(figures['max_ms'])}"


def _latency_tables(
    results: list[Result], figure: Callable[[dict[str, Any] | None], str], unit: str, shapes: dict[str, str]
) -> list[str]:
    sizes = [latency for result in results for _, latency in sorted(result.document["latency"].items(), key=_size)]
    rows = [["last LIST answered until /readyz answers 200", *(ms(s["ready"]["p50_ms"]) for s in sizes)]]
    if all("list_to_ready" in s for s in sizes):
        rows.append(
            ["every LIST's bytes read until /readyz answers 200", *(ms(s["list_to_ready"]["p50_ms"]) for s in sizes)]
        )
    rows += [[label, *(figure(s.get(key)) for s in sizes)] for key, label in _FIRST_CALLS.items()]
    rows += [
        [f"{verb}, {shape_label}, {mix_label}", *(figure(s.get(f"{verb}_{shape}{mix}")) for s in sizes)]
        for mix, mix_label in _MIXES.items()
        for shape, shape_label in shapes.items()
        for verb in ("filter", "prioritize")
    ]
    rows += [[label, *(figure(s.get(key)) for s in sizes)] for key, label in _AFTER_CALLS.items()]
    rows.append(["process RSS, MiB", *(number(s["rss"]["mib"], ",.0f") for s in sizes)])
    header = [unit, *(f"{number(s['nodes'])} nodes" for s in sizes)]
    return ["## Results", "", *table(header, rows, numeric=range(1, len(sizes) + 1))]


def scheduler_tables(results: list[Result]) -> list[str]:
    """`bench-results/scheduler.json`: per size, each workload's rounds alone and with the extender,
    and each process's CPU per 1-GPU pod."""
    lines: list[str] = []
    for result in results:
        for nodes, size in sorted(result.document["sizes"].items(), key=_size):
            lines += [f"## {number(int(nodes))} nodes", ""]
            rows = [
                _rates_row("1-GPU pods per second, round by round", size["pods"]),
                _rates_row("pods without claims per second (never sent to the extender)", size["plain_pods"]),
                [
                    "gangs complete / partly placed / in one rack, round by round",
                    *(_gang_rounds(size["gangs"][mode]) for mode in ("without", "with")),
                    "",
                ],
                [
                    "gang completion p50 / max, round by round",
                    *(
                        ", ".join(f"{seconds(g['p50_s'])} / {seconds(g['max_s'])}" for g in size["gangs"][mode])
                        for mode in ("without", "with")
                    ),
                    "",
                ],
            ]
            processes = sorted({name for run in size["pods"]["with"] for name in run["spent"]["cpu_s"]})
            rows += [
                [
                    f"CPU per 1-GPU pod, {name}, ms",
                    *(_cpu_per_pod(size["pods"][mode], name) for mode in ("without", "with")),
                    "",
                ]
                for name in processes
            ]
            lines += table(["figure", "scheduler alone", "with the extender", "with / alone"], rows)
    return lines


def _rates_row(label: str, runs: dict[str, Any]) -> list[str]:
    rates = [", ".join(number(run["pods_per_s"], ".1f") for run in runs[mode]) for mode in ("without", "with")]
    rounds = ", ".join(number(r, ".2f") for r in runs["round_ratios"])
    return [label, *rates, f"**{ratio(runs['ratio'])}** ({rounds})"]


def _gang_rounds(runs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{g['complete']}/{g['gangs']} / {g['partial']} / {g['in_one_rack']}" for g in runs)


def _cpu_per_pod(runs: list[dict[str, Any]], process: str) -> str:
    spent = [(run["spent"]["cpu_s"].get(process), run["pods"]) for run in runs]
    return ", ".join("-" if cpu is None else number(cpu * 1000 / pods, ".1f") for cpu, pods in spent)


def _size(item: tuple[str, Any]) -> int:
    return int(item[0])


def prepare_tables(results: list[Result]) -> list[str]:
    """`bench-results/prepare.json`: NodePrepareResources through the kubelet's gRPC API."""
    rows = []
    for result in results:
        d = result.document
        callers = next(key for key in d if key.endswith("_callers"))
        rows += [
            ["one claim GET (the floor)", _p50_p99(d["one_claim_get"]), "-", "-"],
            ["1 caller", *_prepared(d["one_caller"])],
            [f"{callers.split('_')[0]} callers", *_prepared(d[callers])],
            ["1 caller, each prepare after a refused claim", *_prepared(d["one_caller_beside_refusals"])],
            ["the refused prepares", _p50_p99(d["one_caller_beside_refusals"]["refused"]), "-", "-"],
        ]
    header = ["NodePrepareResources of 200 claims", "p50 / p99 ms", "claims/s", "device status in the API after"]
    return ["## Results", "", *table(header, rows, numeric=(1, 2, 3))]


def _prepared(figures: dict[str, Any]) -> list[str]:
    rate = figures.get("claims_per_s")
    return [_p50_p99(figures), "-" if rate is None else number(rate, ",.0f"), seconds(figures.get("status_after_s"))]


def slices_tables(results: list[Result]) -> list[str]:
    """`bench-results/slices.json`: building one node's slices, and publishing them."""
    rows = []
    for result in results:
        d = result.document
        first, again = d["first_publish"], d["republish_unchanged"]
        rows += [
            [
                f"build the slices of {d['profile']} ({d['slices']} slices, {d['devices']} devices)",
                _p50_p99(d["build"]),
            ],
            ["a JSON copy of those slices (the floor)", _p50_p99(d["json_copy"])],
            [f"first publish (API writes per node: {', '.join(map(str, first['writes_per_node']))})", _p50_p99(first)],
            [f"publish again, nothing changed ({again['writes']} API writes in {again['runs']} runs)", _p50_p99(again)],
            ["one LIST of the node's slices", _p50_p99(d["one_list"])],
        ]
    return ["## Results", "", *table(["", "p50 / p99 ms"], rows, numeric=(1,))]


BENCHMARKS = (
    Benchmark("slices", "ResourceSlices: build and publish", "python -m bench slices", "slices.json", slices_tables),
    Benchmark("prepare", "NodePrepareResources", "python -m bench prepare", "prepare.json", prepare_tables),
    Benchmark(
        "extender", "The extender on a busy cluster", "python -m bench extender", "extender.json", extender_tables
    ),
    Benchmark(
        "extender_mixed",
        "The extender on a busy cluster of mixed GPUs, shipped publishing defaults",
        "python -m bench extender_mixed",
        "extender_mixed.json",
        extender_mixed_tables,
    ),
    Benchmark(
        "scheduler",
        "Real kube-scheduler with and without the extender",
        "python -m bench scheduler",
        "scheduler.json",
        scheduler_tables,
    ),
    Benchmark(
        "scheduler_5000",
        "Real kube-scheduler at 5,000 nodes",
        "python -m bench scheduler_5000",
        "scheduler_5000.json",
        generic_tables,
    ),
    Benchmark(
        "native_gang",
        "Native gang scheduling side by side",
        "python -m bench native_gang",
        "native_gang.json",
        generic_tables,
    ),
    Benchmark("preemption", "Preemption", "python -m bench preemption", "preemption.json", preemption_tables),
    Benchmark(
        "recovery",
        "Gang recovery after a GPU fault",
        "python -m bench recovery",
        "recovery.json",
        generic_tables,
    ),
    Benchmark(
        "recovery_spares",
        "Gang recovery with and without a hot spare",
        "python -m bench recovery_spares",
        "recovery_spares.json",
        generic_tables,
    ),
    Benchmark(
        "preemption_oracle",
        "Preemption against kube-scheduler's DefaultPreemption",
        "python -m bench preemption_oracle",
        "preemption_oracle.json",
        oracle_tables,
    ),
    Benchmark(
        "preemption_at_scale",
        "Preemption at scale",
        "python -m bench.preemption_at_scale NODES",
        "preemption_at_scale_*.json",
        at_scale_tables,
        order=lambda result: (result.document.get("nodes", 0), result.name),
    ),
    Benchmark("map", "`nativedra map` on a busy cluster", "python -m bench.bench_map", "map.json", generic_tables),
)


# -- pages --------------------------------------------------------------------------------------------


def load_results(results_dir: Path, benchmark: Benchmark, skipped: list[str]) -> list[Result]:
    """The benchmark's result files that say when and how they were made, in the page's order."""
    results = []
    for path in sorted(results_dir.glob(benchmark.pattern)):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise PageError(f"{path.name}: {error}") from error
        if not isinstance(document, dict) or any(key not in document for key in PROVENANCE_KEYS):
            skipped.append(f"{path.name}: no {' or '.join(PROVENANCE_KEYS)} (written before results carried them)")
            continue
        results.append(Result(path.name, document))
    return sorted(results, key=benchmark.order)


def provenance(results: list[Result]) -> list[str]:
    rows = [
        [
            f"`bench-results/{r.name}`",
            str(r.document["date"]),
            f"`{r.document['command']}`",
            str(r.document.get("kubernetes", "-")),
            number(r.document.get("cpus")),
            seconds(r.document["seconds"]) if isinstance(r.document.get("seconds"), int | float) else "-",
        ]
        for r in results
    ]
    return [
        "## Where the figures come from",
        "",
        *table(["file", "date", "command", "Kubernetes", "CPUs", "run"], rows),
    ]


def header_comment(sources: list[str]) -> str:
    return f"<!-- Generated by `{GENERATOR}` from {', '.join(sources)}: edit those, not this page. -->"


def render_page(benchmark: Benchmark, results: list[Result], intro_dir: Path) -> str:
    intro_path = intro_dir / f"{benchmark.name}.md"
    try:
        intro = intro_path.read_text().strip()
    except OSError as error:
        raise PageError(f"{intro_path}: {error}") from error
    context: dict[str, Any] = {Path(r.name).stem: r.document for r in results}
    if len(results) == 1:
        context.update(results[0].document)
    intro_name = f"docs/benchmarks/_intro/{benchmark.name}.md"
    what, _, reading = (part.strip() for part in intro.partition(FIGURES_MARKER))
    sources = [f"`{intro_name}`", f"`bench-results/{benchmark.pattern}`"]
    lines = [header_comment(sources), "", f"# {benchmark.title}", "", fill(what, context, intro_name), ""]
    lines += [f"Run it: `{benchmark.command}`.", ""]
    if results:
        if reading:
            lines += ["## What it found", "", fill(reading, context, intro_name), ""]
        lines += benchmark.tables(results)
        lines += provenance(results)
    else:
        lines += [
            "## Results",
            "",
            f"No result file is committed for this benchmark (`bench-results/{benchmark.pattern}`). Run it, commit "
            f"the file and run `{GENERATOR}`: this page then shows its figures. Figures recorded before are in "
            "[Recorded figures](../performance.md).",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def render_index(found: dict[str, list[Result]], intro_dir: Path) -> str:
    intro_path = intro_dir / "index.md"
    try:
        intro = intro_path.read_text().strip()
    except OSError as error:
        raise PageError(f"{intro_path}: {error}") from error
    rows = []
    for benchmark in BENCHMARKS:
        results = found[benchmark.name]
        measured = ", ".join(sorted({str(r.document["date"])[:10] for r in results})) or "no result file committed"
        rows.append([f"[{benchmark.title}]({benchmark.name}.md)", f"`{benchmark.command}`", measured])
    sources = ["`docs/benchmarks/_intro/index.md`", "`bench-results/*.json`"]
    lines = [header_comment(sources), "", "# Benchmarks", "", intro, ""]
    lines += table(["benchmark", "run it", "measured"], rows)
    return "\n".join(lines).rstrip() + "\n"


def render_pages(
    results_dir: Path = RESULTS, intro_dir: Path = INTROS, skipped: list[str] | None = None
) -> dict[str, str]:
    """Every benchmark page and the index, by file name under docs/benchmarks/."""
    skipped = [] if skipped is None else skipped
    found = {b.name: load_results(results_dir, b, skipped) for b in BENCHMARKS}
    pages = {f"{b.name}.md": render_page(b, found[b.name], intro_dir) for b in BENCHMARKS}
    pages["index.md"] = render_index(found, intro_dir)
    return dict(sorted(pages.items()))


def differences(pages: dict[str, str], pages_dir: Path) -> list[str]:
    """What on disk differs from `pages`: stale or missing pages, and pages no benchmark renders."""
    problems = []
    for name, text in pages.items():
        path = pages_dir / name
        if not path.is_file():
            problems.append(f"missing: {path}")
        elif path.read_text() != text:
            problems.append(f"stale: {path}")
    problems += [f"left over: {path}" for path in sorted(pages_dir.glob("*.md")) if path.name not in pages]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each page that differs")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the result files (default: bench-results/)")
    parser.add_argument("--pages", type=Path, default=PAGES, help="where the pages go (default: docs/benchmarks/)")
    parser.add_argument("--intros", type=Path, default=INTROS, help="the intros (default: docs/benchmarks/_intro/)")
    args = parser.parse_args(argv)
    skipped: list[str] = []
    try:
        pages = render_pages(args.results, args.intros, skipped)
    except PageError as error:
        print(f"{GENERATOR}: {error}", file=sys.stderr)
        return 2
    for reason in skipped:
        print(f"{GENERATOR}: skipped {reason}", file=sys.stderr)
    if args.check:
        problems = differences(pages, args.pages)
        for problem in problems:
            print(f"{GENERATOR}: {problem} (run `{GENERATOR}` and commit the pages)", file=sys.stderr)
        return 1 if problems else 0
    args.pages.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        path = args.pages / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")
    for path in sorted(args.pages.glob("*.md")):
        if path.name not in pages:
            path.unlink()
            print(f"removed {path} (no benchmark renders it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
