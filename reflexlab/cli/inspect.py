"""`reflexlab inspect`: what an exported policy expects, read from its ONNX metadata without torch.

By default a person's view: what to feed each input, what the graph already does, what the output
is and how it becomes a robot target; ``--json`` prints everything `deploy.artifact.read_metadata`
returns, for programs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Annotated, Any

import tyro

WIDTH = 110  # wrap prose here; tables are narrower


def inspect(model: tyro.conf.Positional[Path], json_only: Annotated[bool, tyro.conf.arg(name="json")] = False) -> None:
    """Print what an exported ONNX policy takes, what it outputs and how its actions reach a robot.

    Args:
        model: the .onnx file.
        json_only: print the metadata, the parsed self-description and the Spec as one JSON object.
    """
    from deploy.artifact import read_metadata

    meta = read_metadata(model)
    if json_only:
        spec = meta.pop("spec")
        interface = meta.pop("interface")
        print(json.dumps({"metadata": meta, "interface": interface, "spec": spec}, indent=2))
        return
    print("\n".join(describe(Path(model).name, meta)))


def describe(name: str, meta: dict[str, Any]) -> list[str]:
    """The lines `inspect` prints for ``meta`` (as `read_metadata` returns it)."""
    meta = dict(meta)
    spec, interface = meta.pop("spec"), meta.pop("interface")
    graph_inputs, graph_outputs = meta.pop("inputs"), meta.pop("outputs")
    version = meta.pop("reflexlab_version", "?")
    if interface is None:
        return [
            f"{name}: reflexlab model for {spec['robot']} / {spec['task']} (reflexlab {version})",
            "Exported before models described themselves (metadata format reflexlab.onnx/1): what the",
            "graph applies to observations and actions is not recorded. Re-export it; --json shows the Spec.",
            *_section(
                "graph",
                [f"input {k} {_shape(v)}" for k, v in graph_inputs.items()]
                + [f"output {k} {_shape(v)}" for k, v in graph_outputs.items()],
            ),
            *_section("other metadata", [f"{k}: {v}" for k, v in meta.items()]),
        ]
    lines = [
        f"{name}: reflexlab {interface['kind']} for {spec['robot']} / {spec['task']} "
        f"({interface['format']}, reflexlab {version})",
        *textwrap.wrap(interface["usage"], WIDTH),
    ]
    lines += _section("inputs", [line for k, v in interface["inputs"].items() for line in _input(k, v)])
    lines += _section("outputs", [line for k, v in interface["outputs"].items() for line in _output(k, v)])
    lines += _section(f"action -> robot target ({interface['action']['kind']})", _action(interface["action"]))
    if "chunk" in interface:
        lines += _section("action chunk", _chunk(interface["chunk"]))
    if "sampling" in interface:
        s = interface["sampling"]
        lines += _section("sampling", [f"{s['method']}, {s['network_evaluations']} network evaluation(s) per chunk"])
    lines += _section("timing", [f"control rate {interface['control_rate_hz']:g} Hz"])
    lines += _section("other metadata", [f"{k}: {v}" for k, v in meta.items()])
    return lines


def _section(title: str, body: list[str]) -> list[str]:
    """A titled block, its lines indented and long ones wrapped under their own indentation."""
    out = ["", title]
    for line in body:
        indent = " " * (2 + len(line) - len(line.lstrip()))
        out += textwrap.wrap(line.strip(), WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") or [""]
    return out


def _shape(shape: list[Any]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _input(name: str, spec: dict[str, Any]) -> list[str]:
    out = [f"{name}: {spec['dtype']} {_shape(spec['shape'])}, {spec['holds']}"]
    if "distribution" in spec:
        out.append(f"  distribution: {spec['distribution']} (mean {spec['mean']:g}, std {spec['std']:g})")
    if "terms" not in spec:
        return out
    scales = "applies" if spec["spec_scales_applied_in_graph"] else "does not use"
    out.append(
        f"  scaling by the caller: {spec['caller_scaling']} (feed raw values); the graph {scales} the Spec's scales "
        f"and normalises: {spec['normalization_in_graph']} ({spec['normalization_in_graph_means']})"
    )
    if "history" in spec:
        h = spec["history"]
        out.append(
            f"  history: {h['length']} observations, {h['order']}; at an episode's start: {h['at_episode_start']}"
        )
    width = max(len(t["name"]) for t in spec["terms"])
    out.append(f"  {'term':<{width}}  start  size  spec scale  units")
    for t in spec["terms"]:
        out.append(f"  {t['name']:<{width}}  {t['start']:>5}  {t['size']:>4}  {t['spec_scale']:>10g}  {t['units']}")
    return out


def _output(name: str, spec: dict[str, Any]) -> list[str]:
    out = [f"{name}: {spec['dtype']} {_shape(spec['shape'])}, {spec['holds']}"]
    bounds = spec["clipped_in_graph_to"]
    if bounds is not None:
        out.append("  clipped in the graph to (per action dimension):")
        out += _per_name(spec["names"], {"lower": bounds["lower"], "upper": bounds["upper"]})
    return out


def _action(a: dict[str, Any]) -> list[str]:
    rate = "no limit" if a["max_rate"] is None else f"{a['max_rate']:g} per second, on {a['max_rate_limits']}"
    return [
        f"target = {a['target']}",
        f"scale {a['scale']:g}; max rate {rate}; applied in the graph: {'yes' if a['applied_in_graph'] else 'no'}",
        a["note"],
        *_per_name(a["names"], {"offset": a["offset"], "lower": a["lower"], "upper": a["upper"]}),
    ]


def _chunk(c: dict[str, Any]) -> list[str]:
    return [
        f"{c['length']} actions of {c['action_size']}, one per {c['step_period_s']:g} s; "
        f"current step: index {c['current_index']} (observation horizon {c['observation_horizon']})",
        c["index_meaning"],
        f"execute at most {c['execute_steps']}: {c['execute']}",
    ]


def _per_name(names: list[str], columns: dict[str, list[float]]) -> list[str]:
    width = max(len(n) for n in names)
    out = [f"  {'name':<{width}}" + "".join(f"  {k:>10}" for k in columns)]
    for i, n in enumerate(names):
        out.append(f"  {n:<{width}}" + "".join(f"  {v[i]:>10.4g}" for v in columns.values()))
    return out
