"""A job kind lives in one module (docs/architecture.md, "A job kind"): archiver/kinds/<kind>.py
holds its request (its name, payload and queueing), its typed result, its handler and its
`KIND`, and the registry has a line for each such module and no other."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from types import ModuleType
from typing import Any

import archiver.kinds
from archiver.kinds.kind import Kind
from archiver.kinds.registry import KINDS
from archiver.model import ArchiveRequest, Progress

# Not a kind: what a kind is, and the registry of them all.
NOT_KINDS = {"archiver.kinds.kind", "archiver.kinds.registry"}
# The archive's request is the input of the pipeline that runs it, which stands below the
# kinds; its result is the progress that pipeline checkpoints with each chunk.
PIPELINE: dict[type, str] = {ArchiveRequest: "archiver.kinds.archiving"}
SHARED_RESULTS = {Progress}


def kind_modules() -> list[ModuleType]:
    return [
        importlib.import_module(m.name)
        for m in pkgutil.iter_modules(archiver.kinds.__path__, "archiver.kinds.")
        if m.name not in NOT_KINDS
    ]


def request_class(kind: Kind[Any]) -> type | None:
    """The class whose from_payload the kind reads its payload with (None: no request)."""
    owner = getattr(kind.payload, "__self__", None)
    return owner if isinstance(owner, type) else None


def misplaced(module: ModuleType) -> list[str]:
    """What of a kind's shape its module does not hold."""
    kind = getattr(module, "KIND", None)
    name = module.__name__
    if not isinstance(kind, Kind):
        return [f"{name}: no KIND = Kind.of(Request, handler)"]
    wrong = []
    if kind.run.__module__ != name:
        wrong.append(f"{name}: its handler is {kind.run.__module__}.{kind.run.__qualname__}")
    request = request_class(kind)
    if request is not None and request.__module__ != name and PIPELINE.get(request) != name:
        wrong.append(f"{name}: its request is {request.__module__}.{request.__qualname__}")
    if request is not None and request not in PIPELINE and not hasattr(request, "queueing"):
        wrong.append(f"{name}: its request does not say how it is queued (queueing())")
    result = typing.get_type_hints(kind.run, vars(module)).get("return")
    result = typing.get_args(result)[0] if typing.get_origin(result) is not None else result
    if not inspect.isclass(result) or not all(hasattr(result, m) for m in ("to_json", "said")):
        wrong.append(f"{name}: its handler returns {result!r}, not a Result (to_json, said)")
    elif result.__module__ != name and result not in SHARED_RESULTS:
        wrong.append(f"{name}: its result is {result.__module__}.{result.__qualname__}")
    return wrong


def test_every_kind_is_one_module_holding_its_request_result_and_handler() -> None:
    modules = kind_modules()
    assert len(modules) >= 6
    assert [w for m in modules for w in misplaced(m)] == []
    assert sorted(KINDS) == sorted(m.KIND.name for m in modules)  # a line each, no other
    # the rule sees the old shape: a handler here, its request in model.py, an untyped result
    old = ModuleType("archiver.kinds.old")
    exec(
        "from archiver.kinds.kind import Kind\n"
        "def _purge(ctx, run, request) -> dict: return {}\n"
        "class PurgeRequest:\n"
        "    KIND = 'purge'\n"
        "    @classmethod\n"
        "    def from_payload(cls, payload): return cls()\n"
        "PurgeRequest.__module__ = 'archiver.model'\n"
        "KIND = Kind.of(PurgeRequest, _purge)\n",
        vars(old),
    )
    vars(old)["_purge"].__module__ = "archiver.kinds.old"
    assert misplaced(old) == [
        "archiver.kinds.old: its request is archiver.model.PurgeRequest",
        "archiver.kinds.old: its request does not say how it is queued (queueing())",
        "archiver.kinds.old: its handler returns <class 'dict'>, not a Result (to_json, said)",
    ]
