"""Validate ROS 2 XML launch files without `launch`/`launch_ros` (they are not on PyPI).

What a robot's ``ros2 launch`` would trip over is checked against an installed workspace (the
ament index): the file parses; every ``$(find-pkg-share …)`` and ``$(var …)`` resolves; every
``<include>`` is itself valid; every ``<node>``'s package is installed and its executable exists
under ``lib/<pkg>/``; every parameter file exists and is a ROS parameter file; and every parameter
set (from a file or inline) is one the node declares. It understands the subset of the XML
frontend our launch files use and rejects any other tag, so it never passes what it did not check.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from reflexlab.config import read_yaml

_SUBST = re.compile(r"\$\((find-pkg-share|var)\s+([^)\s]+)\)")
_TAGS = {"launch", "arg", "node", "param", "include"}


class LaunchError(ValueError):
    """A launch file that would fail under ``ros2 launch``; the message names the file and the element."""


@dataclass
class NodeLaunch:
    package: str
    executable: str
    name: str
    parameters: dict[str, object] = field(default_factory=dict)
    parameter_files: list[Path] = field(default_factory=list)


def check_launch_file(
    path: Path,
    declared: Mapping[str, Mapping[str, type]],
    args: Mapping[str, str] | None = None,
    share_dir: Callable[[str], str] | None = None,
) -> list[NodeLaunch]:
    """Validate ``path`` (and its includes); returns the nodes it would start.

    Args:
        declared: executable name → {parameter name: Python type} its node declares
            (`declared_parameters` of an instance).
        args: launch arguments given on the command line (required ones without default must be here).
        share_dir: package → share directory (``ament_index_python``'s by default).
    """
    if share_dir is None:
        from ament_index_python.packages import get_package_share_directory

        share_dir = get_package_share_directory
    nodes: list[NodeLaunch] = []
    _check(Path(path), dict(args or {}), declared, share_dir, nodes, depth=0)
    return nodes


def _check(
    path: Path,
    args: dict[str, str],
    declared: Mapping[str, Mapping[str, type]],
    share_dir: Callable[[str], str],
    nodes: list[NodeLaunch],
    depth: int,
) -> None:
    if depth > 8:
        raise LaunchError(f"{path}: includes nest deeper than 8 (a cycle?)")
    if not path.is_file():
        raise LaunchError(f"launch file {path} does not exist")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise LaunchError(f"{path}: not well-formed XML: {e}") from e
    if root.tag != "launch":
        raise LaunchError(f"{path}: root element is <{root.tag}>, expected <launch>")
    scope = dict(args)

    def subst(text: str, where: str) -> str:
        def one(m: re.Match) -> str:
            kind, value = m.groups()
            if kind == "var":
                if value not in scope:
                    raise LaunchError(f"{path}: {where} uses $(var {value}), which no <arg> defines or sets")
                return scope[value]
            try:
                return str(share_dir(value))
            except (LookupError, OSError) as e:
                raise LaunchError(f"{path}: {where}: package {value!r} is not installed ({e})") from e

        return _SUBST.sub(one, text)

    for el in root:
        if el.tag not in _TAGS:
            raise LaunchError(f"{path}: element <{el.tag}> is not one this checker understands")
        where = f"<{el.tag} {' '.join(f'{k}={v!r}' for k, v in el.attrib.items())}>"
        if el.tag == "arg":
            name = el.get("name")
            if not name:
                raise LaunchError(f"{path}: {where} has no name")
            if name not in scope:
                if el.get("default") is None:
                    raise LaunchError(f"{path}: required launch argument {name!r} was not given")
                scope[name] = subst(el.get("default"), where)
        elif el.tag == "include":
            child_args = {}
            for a in el:
                if a.tag != "arg" or not a.get("name") or a.get("value") is None:
                    raise LaunchError(f"{path}: {where} may only hold <arg name=… value=…/>")
                child_args[a.get("name")] = subst(a.get("value"), where)
            _check(Path(subst(el.get("file", ""), where)), child_args, declared, share_dir, nodes, depth + 1)
        elif el.tag == "node":
            nodes.append(_check_node(path, el, where, subst, declared, share_dir))
        else:
            raise LaunchError(f"{path}: {where} belongs inside a <node>")


def _check_node(
    path: Path,
    el: ET.Element,
    where: str,
    subst: Callable[[str, str], str],
    declared: Mapping[str, Mapping[str, type]],
    share_dir: Callable[[str], str],
) -> NodeLaunch:
    pkg, exe, name = el.get("pkg"), el.get("exec"), el.get("name")
    if not (pkg and exe and name):
        raise LaunchError(f"{path}: {where} needs pkg, exec and name")
    try:
        prefix = Path(share_dir(pkg)).parents[1]
    except (LookupError, OSError) as e:
        raise LaunchError(f"{path}: {where}: package {pkg!r} is not installed ({e})") from e
    binary = prefix / "lib" / pkg / exe
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise LaunchError(f"{path}: {where}: executable {binary} does not exist (ros2 run {pkg} {exe} would fail)")
    if exe not in declared:
        raise LaunchError(f"{path}: {where}: no parameter declarations known for executable {exe!r}")
    node = NodeLaunch(pkg, exe, name)
    for p in el:
        if p.tag != "param":
            raise LaunchError(f"{path}: {where} holds <{p.tag}>; only <param> is checked")
        if p.get("from") is not None:
            file = Path(subst(p.get("from"), where))
            node.parameter_files.append(file)
            node.parameters.update(_parameter_file(file, name))
        elif p.get("name") and p.get("value") is not None:
            # the XML frontend reads inline values as YAML scalars (1000.0 is a double, a path a string)
            node.parameters[p.get("name")] = yaml.safe_load(subst(p.get("value"), where))
        else:
            raise LaunchError(f"{path}: {where}: <param> needs from=… or name=… value=…")
    types = declared[exe]
    unknown = sorted(set(node.parameters) - set(types))
    if unknown:
        raise LaunchError(
            f"{path}: node {name!r} ({exe}) does not declare parameter(s) {unknown}; it declares {sorted(types)}"
        )
    for key, value in node.parameters.items():
        if not _same_type(value, types[key]):
            raise LaunchError(
                f"{path}: node {name!r} parameter {key!r} = {value!r} is a {type(value).__name__}, "
                f"the node declares a {types[key].__name__} (ROS 2 refuses the mismatch at startup)"
            )
    return node


def _same_type(value: object, expected: type) -> bool:
    if expected is bool or isinstance(value, bool):
        return isinstance(value, bool) and expected is bool
    return isinstance(value, expected)


def declared_parameters(node: object) -> dict[str, type]:
    """Parameter name → Python type of every parameter an rclpy node has declared."""
    from rclpy.parameter import Parameter

    python = {
        Parameter.Type.BOOL: bool,
        Parameter.Type.INTEGER: int,
        Parameter.Type.DOUBLE: float,
        Parameter.Type.STRING: str,
        Parameter.Type.BYTE_ARRAY: list,
        Parameter.Type.BOOL_ARRAY: list,
        Parameter.Type.INTEGER_ARRAY: list,
        Parameter.Type.DOUBLE_ARRAY: list,
        Parameter.Type.STRING_ARRAY: list,
    }
    return {name: python[p.type_] for name, p in node._parameters.items() if p.type_ in python}


def _parameter_file(file: Path, node_name: str) -> dict[str, object]:
    """The parameters a ROS parameter file sets for ``node_name`` (its own section and ``/**``)."""
    data = read_yaml(file, what="parameter file", error=LaunchError)
    if not isinstance(data, dict):
        raise LaunchError(f"parameter file {file} must map node names to ros__parameters")
    out: dict[str, object] = {}
    for key, section in data.items():
        if not isinstance(section, dict) or "ros__parameters" not in section:
            raise LaunchError(f"parameter file {file}: section {key!r} lacks ros__parameters")
        if key in ("/**", node_name, f"/{node_name}"):
            out.update(_flatten(section["ros__parameters"]))
    return out


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
