"""Fuzz the predict endpoint: 1,000 random bodies, never a 5xx."""

from __future__ import annotations

import base64
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PREDICT = "/v1/models/fashion-mnist:predict"

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
b64_strings = st.one_of(
    st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()),
    st.binary(max_size=300).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789+/=-_\n ", max_size=80),
    st.sampled_from(["/9j/4AAQSkZJRgABAQ==", "iVBORw0KGgo=", "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB"]),
)
instances = st.lists(
    st.one_of(
        st.builds(lambda s: {"b64": s}, b64_strings),
        st.builds(lambda s: {"image_bytes": {"b64": s}}, b64_strings),
        json_values,
    ),
    max_size=4,
)
bodies = st.one_of(
    st.builds(lambda i: json.dumps({"instances": i}).encode(), instances),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.binary(max_size=200),
    st.builds(
        lambda i, extra: json.dumps({"instances": i, **extra}).encode(),
        instances,
        st.dictionaries(st.text(max_size=8), json_values, max_size=2),
    ),
)
content_types = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "text/plain", None, "image/png"]
)


@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=bodies, ctype=content_types)
def test_random_bodies_never_5xx(client, data, ctype):
    headers = {"content-type": ctype} if ctype else {}
    resp = client.post(PREDICT, content=data, headers=headers)
    assert resp.status_code < 500, (data[:200], ctype, resp.text[:300])
    if resp.status_code != 200:
        assert 400 <= resp.status_code < 500
        assert isinstance(resp.json().get("error"), str)
