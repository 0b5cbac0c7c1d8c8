"""What TensorFlow Serving's REST API answers for a predict body: the reference of the parity test.

A transcription of ``tensorflow_serving/util/json_tensor.cc`` (``FillPredictRequestFromJson``,
``FillTensorMapFromInstancesList``, ``FillTensorMapFromInputsMap``, ``FillTensorProto``) and of
``absl::Base64Unescape`` for a signature with one ``tf.string`` input, written independently of
``serving.request``; the tensor is then fed to the SavedModel's signature the way TF Serving
runs it (``tf.saved_model.load`` + the signature on a string tensor).
"""

from __future__ import annotations

import json

import numpy as np

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_SPACE = " \t\n\v\f\r"


class Rejected(Exception):
    """TF Serving answers 400 (InvalidArgument) or another 4xx."""


def absl_base64_unescape(text: str) -> bytes:
    """``absl::Base64Unescape``: skip whitespace; padding ('=' or '.') optional but exact."""
    raw = text.encode("utf-8")
    bits, nbits, out, i = 0, 0, bytearray(), 0
    while i < len(raw):
        ch = chr(raw[i])
        if ch in _SPACE:
            i += 1
            continue
        if ch in "=.":
            break
        if ch not in _ALPHABET or raw[i] == 0:
            raise Rejected("Unable to base64 decode")
        bits, nbits = (bits << 6) | _ALPHABET.index(ch), nbits + 6
        if nbits >= 8:
            nbits -= 8
            out.append((bits >> nbits) & 0xFF)
        i += 1
    chars = sum(1 for c in raw[:i] if chr(c) not in _SPACE)
    state = chars % 4
    if state == 1:
        raise Rejected("Unable to base64 decode")
    expected = {0: 0, 2: 2, 3: 1}[state]
    equals = 0
    for c in raw[i:]:
        if chr(c) in "=.":
            equals += 1
        elif chr(c) not in _SPACE:
            raise Rejected("Unable to base64 decode")
    if equals not in (0, expected):
        raise Rejected("Unable to base64 decode")
    return bytes(out)


def _is_b64(val) -> bool:
    return isinstance(val, dict) and len(val) == 1 and isinstance(val.get("b64"), str)


def _shape(val) -> list[int]:
    shape = []
    while isinstance(val, list):
        shape.append(len(val))
        if not val:
            break
        val = val[0]
    return shape


def _fill(val, level: int, shape: list[int], out: list[bytes]) -> None:
    if not isinstance(val, list):
        if level != len(shape):
            raise Rejected("value at incorrect level")
        if isinstance(val, dict):
            if not _is_b64(val):
                raise Rejected("not formatted correctly for base64 data")
            out.append(absl_base64_unescape(val["b64"]))
        elif isinstance(val, str):
            out.append(val.encode("utf-8"))
        else:
            raise Rejected("is not of expected type: string")
        return
    if level >= len(shape) or len(val) != shape[level]:
        raise Rejected("list at unexpected level or size")
    for item in val:
        _fill(item, level + 1, shape, out)


def _tensor(val) -> tuple[list[int], list[bytes]]:
    shape, values = _shape(val), []
    _fill(val, 0, shape, values)
    return shape, values


def _from_instances(instances, input_name: str) -> tuple[list[int], list[bytes]]:
    def is_element_object(v):
        return isinstance(v, dict) and not _is_b64(v)

    objects = is_element_object(instances[0])
    item_shape, values = None, []
    for elem in instances:
        if objects:
            if not is_element_object(elem):
                raise Rejected("Expecting object but got list")
            for key in elem:
                if key != input_name:
                    raise Rejected(f"does not have named input: {key}")
            if set(elem) != {input_name}:
                raise Rejected("keys must be equal to input names")
            elem = elem[input_name]
        elif is_element_object(elem):
            raise Rejected("Expecting value/list but got object")
        shape, vals = _tensor(elem)
        if item_shape is not None and shape != item_shape:
            raise Rejected("Expecting shape")
        item_shape = shape
        values += vals
    return [len(instances), *item_shape], values


def predict(body: bytes, signature, input_name: str, output_name: str) -> tuple[int, dict]:
    """(HTTP status, JSON answer) of TF Serving for ``body`` against ``signature``.

    Args:
        body: the request body bytes.
        signature: a loaded SavedModel signature (one ``tf.string [None]`` input).
        input_name / output_name: the signature's input and output names.
    """
    import tensorflow as tf

    try:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise Rejected(f"JSON Parse error: {exc}") from exc
        if not isinstance(doc, dict):
            raise Rejected("Is not object")
        name = doc.get("signature_name", "serving_default")
        if not isinstance(name, str):
            raise Rejected("'signature_name' key must be a string value.")
        if name not in ("", "serving_default"):
            raise Rejected(f"Serving signature name: {name} not found")
        if "instances" in doc and "inputs" in doc:
            raise Rejected("expecting only one of 'inputs' or 'instances'")
        if "instances" in doc:
            columnar, instances = False, doc["instances"]
            if not isinstance(instances, list):
                raise Rejected("Excepting 'instances' to be an list/array")
            if not instances:
                raise Rejected("No values in 'instances' array")
            shape, values = _from_instances(instances, input_name)
        elif "inputs" in doc:
            columnar, inputs = True, doc["inputs"]
            if isinstance(inputs, dict) and not _is_b64(inputs):
                if input_name not in inputs:
                    raise Rejected(f"Missing named input: {input_name}")
                inputs = inputs[input_name]
            shape, values = _tensor(inputs)
        else:
            raise Rejected("Missing 'inputs' or 'instances' key")
        if len(shape) != 1:  # the signature's input is tf.string [None]
            raise Rejected(f"input shape {shape} is not compatible with [None]")
        try:
            out = signature(**{input_name: tf.constant(values, dtype=tf.string, shape=shape)})
        except tf.errors.InvalidArgumentError as exc:
            raise Rejected(exc.message) from exc
    except Rejected as exc:
        return 400, {"error": str(exc)}
    probs = np.asarray(out[output_name]).tolist()
    return 200, {"outputs" if columnar else "predictions": probs}
