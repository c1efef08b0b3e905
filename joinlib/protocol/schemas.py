"""The Avro schemas of every message, loaded once from ``schemas/*.avsc`` (the single source of truth), and
the layouts the hand-written encoders of :mod:`joinlib.protocol.avro`, :mod:`joinlib.protocol.wire` and
:mod:`joinlib.protocol.records` write.

Why a module of its own: the schema files are data the whole package reads (and the Spark jobs, through
:data:`SCHEMA_DIR`); keeping the loading and the drift check apart from the encoders lets each encoder module
say only how its messages are written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import UnknownType

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def load_schemas(directory: Path = SCHEMA_DIR) -> dict[str, Any]:
    """Parse every ``*.avsc`` of ``directory``; named types may refer to one another
    across files (``"joinlib.BaseTuple"``), in any order.

    Returns parsed schemas by name: the full name (``"joinlib.Envelope"``) for named
    types and the file stem (``"values"``) for the others.
    """
    pending: dict[str, Any] = {}
    for path in sorted(directory.glob("*.avsc")):
        with open(path, encoding="utf-8") as f:
            pending[path.stem] = json.load(f)
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    while pending:
        progress = False
        missing: dict[str, str] = {}
        for stem, raw in list(pending.items()):
            trial = dict(named)  # a failed parse may leave half-registered names
            try:
                schema = fastavro.parse_schema(raw, trial)
            except UnknownType as e:
                missing[stem] = e.name
                continue
            named = trial
            name = raw.get("name") if isinstance(raw, dict) else None
            if name is not None and "." not in name:
                ns = raw.get("namespace")
                name = f"{ns}.{name}" if ns else name
            parsed[name or stem] = schema
            del pending[stem]
            progress = True
        if not progress:
            raise ValueError(f"unresolvable Avro schemas in {directory}: {missing}")
    return parsed


SCHEMAS = load_schemas()


def _shape(s: Any) -> str:
    """A compact signature of a parsed schema: what the binary encoding depends on."""
    if isinstance(s, str):
        return s
    if isinstance(s, list):
        return "[" + "|".join(_shape(x) for x in s) + "]"
    t = s["type"]
    if t == "record":
        fields = ",".join(f"{f['name']}:{_shape(f['type'])}" for f in s["fields"])
        return f"{s['name']}{{{fields}}}"
    if t == "array":
        return f"array<{_shape(s['items'])}>"
    if t == "map":
        return f"map<{_shape(s['values'])}>"
    if isinstance(t, (str, list)) and "logicalType" not in s and t not in ("enum", "fixed"):
        return _shape(t)
    return repr(s)  # not produced by the hand-written encoder


# The layouts the hand-written encoders write.  If a schema file changes, importing joinlib.protocol.avro
# fails (check_layouts) rather than producing bytes that disagree with the schema.
_V = "[null|boolean|long|double|string]"
_HAND_ENCODED = {
    "joinlib.BaseTuple": (
        f"joinlib.BaseTuple{{pos:int,id:long,ts:long,seq:long,key:array<{_V}>,rest:bytes}}"
    ),
    "joinlib.TupleBatch": "joinlib.TupleBatch{rows:array<joinlib.Row{parts:array<joinlib.BaseTuple>}>}",
    "joinlib.KeyBatch": f"joinlib.KeyBatch{{keys:array<array<{_V}>>}}",
    "joinlib.ExpiryUpdate": "joinlib.ExpiryUpdate{expired:long,arrivals:array<long>}",
    "joinlib.DjaUpdate": (
        f"joinlib.DjaUpdate{{vj:array<array<{_V}>>,vc:array<long>,"
        "sf:array<joinlib.BaseTuple>,arrivals:array<long>}"
    ),
    "joinlib.WindowSnapshot": (
        f"joinlib.WindowSnapshot{{base:long,tuples:array<joinlib.BaseTuple>,keys:array<array<{_V}>>,"
        "counts:array<long>}"
    ),
    "joinlib.KeyFilter": (
        f"joinlib.KeyFilter{{back:long,live:long,keys:array<array<{_V}>>,"
        "bloom:[null|joinlib.Bloom{bits:bytes,hashes:int,n:long}|joinlib.Ages{runs:array<long>}]}"
    ),
    "joinlib.ShippedBatch": "joinlib.ShippedBatch{tuples:array<joinlib.BaseTuple>,arrivals:array<long>}",
    "joinlib.Envelope": (
        "joinlib.Envelope{part:int,gen:int,flow:int,epoch:long,body:[joinlib.TupleBatch|"
        "joinlib.KeyBatch|joinlib.ExpiryUpdate|joinlib.DjaUpdate|joinlib.WindowSnapshot|"
        "joinlib.KeyFilter|joinlib.ShippedBatch]}"
    ),
    "joinlib.SourceBatch": (
        "joinlib.SourceBatch{stream:string,tuples:array<joinlib.BaseTuple>,watermark:long}"
    ),
    "joinlib.ResultBatch": (
        "joinlib.ResultBatch{query:string,site:string,part:int,gen:int,batch:long,emit_ms:long,groups:array<"
        "joinlib.ResultGroup{head:string,head_ts:long,ids:map<long>,last:string,last_ids:array<long>}>}"
    ),
}


def check_layouts(schemas: dict[str, Any]) -> None:
    """Raise ImportError if a schema of ``schemas`` is not laid out as the hand-written encoders write it."""
    for name, expected in _HAND_ENCODED.items():
        actual = _shape(schemas[name]) if name in schemas else "missing"
        if actual != expected:
            raise ImportError(
                f"schema {name} is {actual}, but joinlib.protocol.wire's encoder writes {expected}: "
                "update schemas/ and joinlib/protocol/wire.py together"
            )
