"""JSON <-> Instance and Plan, with every problem named by its JSON path.

The field rules are those of :data:`chainpipe.instance.RULES`; the JSON Schema
shipped beside this module (``schema/instance.schema.json``) says the same
thing for other tools, and a test keeps the two in step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .instance import (
    FORMAT,
    RULES,
    Datacenter,
    DeviceGroup,
    Instance,
    InstanceError,
    Layer,
    Link,
    Model,
    Training,
    _fmt,
    json_kind,
    name_rule,
    text_rule,
)
from .plan import Plan

SCHEMA_PATH = Path(__file__).with_name("schema") / "instance.schema.json"


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def load_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; unreadable files and bad JSON raise :class:`InstanceError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InstanceError([f"{path}: cannot read file: {reason}"]) from None
    try:
        return json.loads(text, parse_constant=_reject_constant,
                          object_pairs_hook=_reject_duplicate_keys)
    except ValueError as exc:
        raise InstanceError([f"{path}: invalid JSON: {exc}"]) from None


# --------------------------------------------------------------------------- parsing
class _Collector:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def obj(self, data: Any, path: str, keys: tuple[str, ...]) -> dict | None:
        if not isinstance(data, dict):
            self.add(path or "(instance)", f"must be an object, got {json_kind(data)}")
            return None
        for key in keys:
            if key not in data:
                self.add(f"{path}.{key}" if path else key, "missing field")
        for key in data:
            if key not in keys:
                self.add(f"{path}.{key}" if path else key, "unknown field")
        return data

    def fields(self, kind: str, data: dict, path: str) -> dict:
        """Apply the rules of ``kind`` to the fields present; returns the good ones."""
        good = {}
        for key, rule in RULES[kind].items():
            if key in data:
                msg = rule(data[key])
                if msg:
                    self.add(f"{path}.{key}", msg)
                else:
                    good[key] = data[key]
        return good

    def items(self, data: dict, key: str, path: str, min_len: int = 0) -> list:
        if key not in data:
            return []
        val = data[key]
        if not isinstance(val, list):
            self.add(f"{path}.{key}" if path else key, f"must be an array, got {json_kind(val)}")
            return []
        if len(val) < min_len:
            self.add(f"{path}.{key}" if path else key, "must not be empty" if min_len == 1
                     else f"must hold at least {min_len} entries")
        return val


def _link(c: _Collector, data: Any, path: str) -> Link | None:
    d = c.obj(data, path, tuple(RULES["link"]))
    if d is None:
        return None
    good = c.fields("link", d, path)
    return Link(**good) if len(good) == len(RULES["link"]) else None


def instance_from_dict(data: Any) -> Instance:
    """Build an :class:`Instance` from parsed JSON, or raise with every problem found."""
    c = _Collector()
    top = c.obj(data, "", ("format", "name", "model", "training", "datacenters", "links"))
    if top is None:
        raise InstanceError(c.problems)
    if "format" in top and top["format"] != FORMAT:
        c.add("format", f"must be {FORMAT!r}, got {_fmt(top['format'])}")
    if "name" in top and (msg := text_rule(top["name"])):
        c.add("name", msg)

    layers: list[Layer | None] = []
    model_name = None
    if "model" in top:
        m = c.obj(top["model"], "model", ("name", "layers"))
        if m is not None:
            if "name" in m and (msg := text_rule(m["name"])):
                c.add("model.name", msg)
            model_name = m.get("name")
            for i, ly in enumerate(c.items(m, "layers", "model", min_len=1)):
                p = f"model.layers[{i}]"
                d = c.obj(ly, p, tuple(RULES["layer"]))
                good = c.fields("layer", d, p) if d is not None else {}
                layers.append(Layer(**good) if len(good) == len(RULES["layer"]) else None)

    training = None
    if "training" in top:
        t = c.obj(top["training"], "training", tuple(RULES["training"]))
        if t is not None:
            good = c.fields("training", t, "training")
            if len(good) == len(RULES["training"]):
                training = Training(**good)

    dcs: list[Datacenter | None] = []
    for k, dc in enumerate(c.items(top, "datacenters", "", min_len=1)):
        p = f"datacenters[{k}]"
        d = c.obj(dc, p, ("name", "devices", "link"))
        if d is None:
            dcs.append(None)
            continue
        if "name" in d and (msg := name_rule(d["name"])):
            c.add(f"{p}.name", msg)
        groups: list[DeviceGroup | None] = []
        for g, grp in enumerate(c.items(d, "devices", p, min_len=1)):
            pg = f"{p}.devices[{g}]"
            dg = c.obj(grp, pg, tuple(RULES["device_group"]))
            good = c.fields("device_group", dg, pg) if dg is not None else {}
            groups.append(
                DeviceGroup(**good) if len(good) == len(RULES["device_group"]) else None
            )
        seen: dict[str, int] = {}
        duplicate = False
        for g, grp in enumerate(d["devices"] if isinstance(d.get("devices"), list) else []):
            t = grp.get("type") if isinstance(grp, dict) else None
            if name_rule(t):
                continue
            if t in seen:
                duplicate = True
                c.add(f"{p}.devices[{g}].type",
                      f"duplicate device type {t!r} (also devices[{seen[t]}])")
            seen.setdefault(t, g)
        link = _link(c, d["link"], f"{p}.link") if "link" in d else None
        ok = link and groups and all(groups) and not duplicate and not name_rule(d.get("name"))
        dcs.append(Datacenter(d["name"], tuple(groups), link) if ok else None)

    names: dict[str, int] = {}
    for k, dc in enumerate(top["datacenters"] if isinstance(top.get("datacenters"), list) else []):
        n = dc.get("name") if isinstance(dc, dict) else None
        if name_rule(n):
            continue
        if n in names:
            c.add(f"datacenters[{k}].name",
                  f"duplicate datacenter name {n!r} (also datacenters[{names[n]}])")
        names.setdefault(n, k)

    links: list[Link | None] = []
    if "links" in top:
        raw = c.items(top, "links", "")
        want = max(len(dcs) - 1, 0)
        # the count is judged only against a datacenter list that exists
        if isinstance(top["links"], list) and isinstance(top.get("datacenters"), list) \
                and len(raw) != want:
            c.add("links", f"must have exactly {want} entries (one per pair of neighbouring "
                           f"datacenters), got {len(raw)}")
        for j, lk in enumerate(raw):
            links.append(_link(c, lk, f"links[{j}]"))

    if c.problems:
        raise InstanceError(c.problems)
    return Instance(
        name=top["name"],
        model=Model(model_name, tuple(layers)),
        training=training,
        datacenters=tuple(dcs),
        links=tuple(links),
    )


def instance_to_dict(instance: Instance) -> dict:
    return {
        "format": FORMAT,
        "name": instance.name,
        "model": {
            "name": instance.model.name,
            "layers": [
                {
                    "name": ly.name,
                    "fwd_flop": ly.fwd_flop,
                    "bwd_flop": ly.bwd_flop,
                    "params": ly.params,
                    "activation_bytes": ly.activation_bytes,
                    "output_bytes": ly.output_bytes,
                }
                for ly in instance.layers
            ],
        },
        "training": {
            "microbatches": instance.training.microbatches,
            "schedule": instance.training.schedule,
            "bytes_per_param": instance.training.bytes_per_param,
        },
        "datacenters": [
            {
                "name": dc.name,
                "devices": [
                    {
                        "type": g.type,
                        "count": g.count,
                        "flop_per_s": g.flop_per_s,
                        "memory_bytes": g.memory_bytes,
                    }
                    for g in dc.devices
                ],
                "link": _link_dict(dc.link),
            }
            for dc in instance.datacenters
        ],
        "links": [_link_dict(lk) for lk in instance.links],
    }


def _link_dict(link: Link) -> dict:
    return {"bandwidth_bytes_per_s": link.bandwidth_bytes_per_s, "latency_s": link.latency_s}


# --------------------------------------------------------------------------- files
def read(path: str | os.PathLike) -> Instance:
    """Read and validate an instance file; every problem line starts with ``path: ``."""
    data = load_json(path)  # its problems already name the file
    try:
        return instance_from_dict(data)
    except InstanceError as exc:
        raise InstanceError([f"{path}: {p}" for p in exc.problems]) from None


def write_json(data: Any, path: str | os.PathLike) -> None:
    """Write JSON atomically: a temporary file beside the target, then a rename."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"  # fails before any file exists
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave a partial file behind
        raise


def write(instance: Instance, path: str | os.PathLike) -> None:
    write_json(instance_to_dict(instance), path)


def read_plan(path: str | os.PathLike) -> Plan:
    data = load_json(path)
    try:
        # accept a plan file or a whole result object that carries one
        if isinstance(data, dict) and "plan" in data and "stages" not in data:
            if data["plan"] is None:
                raise InstanceError(["plan: the result holds no plan"])
            return Plan.from_dict(data["plan"], "plan")
        return Plan.from_dict(data)
    except InstanceError as exc:
        raise InstanceError([f"{path}: {p}" for p in exc.problems]) from None


def write_plan(plan: Plan, path: str | os.PathLike) -> None:
    write_json(plan.to_dict(), path)


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


