"""Upstream mirror streams: CRDs parsed once, in parallel; kustomize renders stubbed schemas.

Nearly all the bytes of the pinned upstream installs are the ``openAPIV3Schema`` bodies of
their CRDs (Argo Workflows v4: 12 MB, four CRDs of 1.2 MB each). ``kubectl kustomize`` needs
~18 s of CPU to carry them through unchanged, and parsing its output again costs as much as
parsing the mirror. So, before rendering, every CRD document of a mirror file is parsed once
(chunks in parallel processes, libyaml) and each ``spec.versions[].schema`` is replaced by a
small marked stub; kustomize renders the stubbed stream (every object, every transformer, the
origin annotations: the render check is unchanged), and :func:`splice` puts the parsed
original schemas back into the rendered CRDs. The checks then see the full upstream objects.

Documents that are not CRDs stay byte-for-byte as in the mirror, and so do CRDs holding a
plain scalar that YAML 1.1 (PyYAML) and 1.2 (kustomize) read differently (``1e3``, ``on``,
``0755``...): the stubbed result is exactly the plain ``kubectl kustomize`` result (a test
compares both; for the pinned mirrors the rendered JSON is byte-identical). A kustomization
that edits a stubbed schema (a patch into an upstream CRD schema, which this repo never does:
upstream is pinned, not edited) is reported as a render failure instead of being validated wrongly.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path

from validation import yamlio

DOC_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.M)
CRD_KIND = re.compile(r"^kind:[ \t]*[\"']?CustomResourceDefinition[\"']?[ \t]*$", re.M)
STUB_PREFIX = "validation-stub:"
HEADER = "# validation: CRD schemas stubbed for rendering, spliced back afterwards\n"


class StubError(RuntimeError):
    """Kustomize changed a stubbed schema."""


# YAML 1.2 core schema (kustomize/kyaml) vs YAML 1.1 (PyYAML): a plain scalar both read the
# same way is a null, true/false, a plain decimal int, a float with a dot, or a string that
# 1.2 would not read as anything else.
_CORE_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_CORE_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_SAFE_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
_SAFE_FLOAT = re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")
_CORE_NUMBER = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|0o[0-7]+|0x[0-9a-fA-F]+"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_TAG = "tag:yaml.org,2002:"


def _same_in_yaml_1_1_and_1_2(node) -> bool:
    """Every plain scalar of a composed node reads the same in YAML 1.1 and 1.2."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n.value, list):
            for item in n.value:
                stack.extend(item if isinstance(item, tuple) else (item,))
            continue
        if n.style:  # quoted or block scalar: a string in both (plain: None, or "" in libyaml)
            continue
        tag, v = n.tag, n.value
        if tag == _TAG + "str":
            ok = not (_CORE_NULL.match(v) or _CORE_BOOL.match(v) or _CORE_NUMBER.match(v))
        elif tag == _TAG + "null":
            ok = bool(_CORE_NULL.match(v))
        elif tag == _TAG + "bool":
            ok = bool(_CORE_BOOL.match(v))
        elif tag == _TAG + "int":
            ok = bool(_SAFE_INT.match(v))
        elif tag == _TAG + "float":
            ok = bool(_SAFE_FLOAT.match(v))
        else:  # timestamps, sexagesimals, merge keys, ...
            ok = False
        if not ok:
            return False
    return True


def _parse_chunk(text: str) -> list | None:
    """The document of one CRD chunk; None when it must not be stubbed (several documents, or
    plain scalars YAML 1.1 and kustomize's YAML 1.2 read differently: kustomize renders those
    CRDs in full, so the result stays exactly what a plain render gives)."""
    loader = yamlio.LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None or not _same_in_yaml_1_1_and_1_2(node):
            return None
        return [loader.construct_document(node)]
    except yamlio.YAMLError:
        return None
    finally:
        loader.dispose()


def process_pool(workers: int) -> Executor:
    """A process pool (fork where available: workers inherit the loaded modules)."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def stub_schema(marker: str) -> dict:
    """What stands in for one CRD version's schema while kustomize renders."""
    return {"openAPIV3Schema": {"type": "object", "description": marker}}


def stub_files(files: list[Path], workers: int | None = None) -> dict[str, dict]:
    """Rewrite mirror files in place with stubbed CRD schemas; returns marker -> schema.

    Each CRD document is parsed exactly once (in a process pool when there are several);
    a document that does not parse alone, or is not one CRD, is left as it is.
    """
    chunks: dict[Path, list[str]] = {f: DOC_SEPARATOR.split(f.read_text()) for f in files}
    jobs = [(f, i) for f, cs in chunks.items() for i, c in enumerate(cs) if CRD_KIND.search(c)]
    # biggest first: the slowest chunk starts first
    jobs.sort(key=lambda j: len(chunks[j[0]][j[1]]), reverse=True)
    texts = [chunks[f][i] for f, i in jobs]
    n = workers or os.cpu_count() or 1
    if n > 1 and len(jobs) > 1:
        with process_pool(min(n, len(jobs))) as pool:
            parsed = list(pool.map(_parse_chunk, texts))
    else:
        parsed = [_parse_chunk(t) for t in texts]
    schemas: dict[str, dict] = {}
    changed: set[Path] = set()
    for (f, i), docs in zip(jobs, parsed, strict=True):
        if not docs or len(docs) != 1 or not isinstance(docs[0], dict):
            continue
        doc = docs[0]
        if doc.get("kind") != "CustomResourceDefinition":
            continue
        versions = (doc.get("spec") or {}).get("versions") or []
        stubbed = False
        for v, version in enumerate(versions):
            if isinstance(version, dict) and isinstance(version.get("schema"), dict):
                name = (doc.get("metadata") or {}).get("name")
                marker = f"{STUB_PREFIX}{f.name}:{i}:{v}:{name}"
                schemas[marker] = version["schema"]
                version["schema"] = stub_schema(marker)
                stubbed = True
        if stubbed:
            chunks[f][i] = "\n" + yamlio.dump(doc)
            changed.add(f)
    for f in changed:
        f.write_text(HEADER + "---".join(chunks[f]))
    return schemas


def splice(docs: list[dict], schemas: dict[str, dict]) -> None:
    """Put the original schemas back into rendered CRDs (in place); StubError if edited.

    Every stubbed CRD must come back with pristine stubs only: anything else means the
    kustomization edited an upstream schema.
    """
    if not schemas:
        return
    stubbed = {m.rsplit(":", 1)[1] for m in schemas}  # names of the stubbed CRDs
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        meta = doc.get("metadata") or {}
        from_stub = meta.get("name") in stubbed
        for version in (doc.get("spec") or {}).get("versions") or []:
            schema = version.get("schema") if isinstance(version, dict) else None
            if not isinstance(schema, dict):
                continue
            marker = str((schema.get("openAPIV3Schema") or {}).get("description", ""))
            if not marker.startswith(STUB_PREFIX) and not from_stub:
                continue
            if marker not in schemas or schema != stub_schema(marker):
                raise StubError(
                    f"CustomResourceDefinition {meta.get('name')}: the rendering changed its "
                    f"upstream schema ({version.get('name')}); upstream CRD schemas are pinned, "
                    "not patched"
                )
            version["schema"] = schemas[marker]
