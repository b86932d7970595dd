"""Hypothesis strategies for requests to the worker, built from its OpenAPI schema. With `nasty` a
value is often what the schema does not allow (out-of-range and 64-bit-overflowing integers,
non-finite numbers, lone surrogates and NUL characters, over-long names, wrong types); without, it
stays inside the schema, so that some requests get as far as running a job.

`overrides` replaces the strategy of a named property wherever it appears, so a fuzz can keep jobs
short (few new tokens, few sweep prompts) and point at the models it has. Knows nothing about the
worker beyond its schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

NASTY_TEXT = [
    "",
    " ",
    "\ud800",
    "a\x00b",
    "\udfff\ud800",
    "x" * 300,
    "/no/such/model",
    "notadate",
    "../..",
    "2024-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "auto",
]
NASTY_INTS = [-1, 0, 2**31, 2**63, -(2**63) - 1, 2**80]
NASTY_NUMBERS = [float("nan"), float("inf"), -float("inf"), -1.0, 1e308]
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    query: dict[str, dict]  # parameter name -> schema (path parameters included, by name)
    path_params: tuple[str, ...]
    body: dict | None  # the JSON body's schema, or None


def operations(openapi: dict) -> list[Operation]:
    found = []
    for path, methods in openapi["paths"].items():
        for method, spec in methods.items():
            params = spec.get("parameters", [])
            body = spec.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            found.append(
                Operation(
                    method.upper(),
                    path,
                    {p["name"]: p.get("schema", {}) for p in params},
                    tuple(p["name"] for p in params if p["in"] == "path"),
                    body,
                )
            )
    return found


class SchemaStrategies:
    def __init__(
        self, openapi: dict, overrides: Mapping[str, st.SearchStrategy] | None = None, nasty: bool = True
    ) -> None:
        self.components = openapi.get("components", {}).get("schemas", {})
        self.overrides = dict(overrides or {})
        self.nasty = nasty

    def _or_nasty(self, inside: st.SearchStrategy, nasty: list) -> st.SearchStrategy:
        return inside | st.sampled_from(nasty) if self.nasty else inside

    def value(self, schema: dict, name: str | None = None) -> st.SearchStrategy:
        if name in self.overrides:
            return self.overrides[name]
        if "$ref" in schema:
            return self.value(self.components[schema["$ref"].rsplit("/", 1)[-1]])
        if "anyOf" in schema or "oneOf" in schema:
            return st.one_of(*(self.value(s, name) for s in schema.get("anyOf", schema.get("oneOf"))))
        if "enum" in schema:
            return self._or_nasty(st.sampled_from(schema["enum"]), NASTY_TEXT)
        if "const" in schema:
            return st.just(schema["const"])
        kind = schema.get("type")
        if kind == "string":
            return self._or_nasty(st.text(max_size=24), NASTY_TEXT)
        if kind == "integer":
            low, high = schema.get("minimum"), schema.get("maximum")
            inside = st.integers(int(low) if low is not None else None, int(high) if high is not None else None)
            return self._or_nasty(inside, NASTY_INTS)
        if kind == "number":
            low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")
            inside = st.floats(
                low, high, exclude_min="exclusiveMinimum" in schema, allow_nan=False, allow_infinity=False
            )
            return self._or_nasty(inside, NASTY_NUMBERS)
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        if kind == "array":
            items = self.value(schema.get("items", {}))
            return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 3), 3))
        if kind == "object" or "properties" in schema:
            return self.object(schema)
        return ANY_JSON

    def object(self, schema: dict) -> st.SearchStrategy:
        properties = schema.get("properties", {})
        if not properties:
            return st.dictionaries(st.text(max_size=6), ANY_JSON, max_size=3)
        required = set(schema.get("required", ()))
        fields = {name: self.value(sub, name) for name, sub in properties.items()}
        return st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required},
        )

    def request(self, operation: Operation) -> st.SearchStrategy:
        """(parameters, path ones included; JSON body or None), the body sometimes of the wrong shape."""
        params = {name: self.value(schema, name) for name, schema in operation.query.items()}
        body: st.SearchStrategy[Any] = st.none()
        if operation.body is not None:
            body = self.value(operation.body) | ANY_JSON if self.nasty else self.value(operation.body)
        in_path = {name: params.pop(name) for name in operation.path_params}
        return st.tuples(st.fixed_dictionaries(in_path, optional=params), body)
