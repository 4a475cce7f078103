"""Checks what safetensors_export_main wrote, through the `safetensors` package (numpy backend).

    check_safetensors_export.py DIR

For every tensor of DIR/reference.json (name, shape; values in DIR/reference.f32, the engine's
GatherMasterParam): model.f32.safetensors holds it with dtype F32, that shape and exactly those
values; model.bf16.safetensors and model.16bit.safetensors hold it as BF16, equal to the fp32
values rounded to nearest even (computed here, independently of the C++ code). No other tensor
is in any file. Exits non-zero naming the first difference.
"""
import json
import os
import sys

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file


def fail(message):
    print(f"check_safetensors_export: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def bf16_bits_rne(values):
    """float32 -> bfloat16 bit patterns, round to nearest, ties to even (no NaNs here)."""
    u = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounding = 0x7FFF + ((u >> 16) & 1)
    return ((u + rounding) >> 16).astype(np.uint16)


def load_bf16(path):
    """name -> (dtype, shape, uint16 bits). The numpy backend has no bfloat16 type, so the
    tensors come from safetensors.deserialize, the package's own parser."""
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for name, view in safetensors.deserialize(data):
        bits = np.frombuffer(bytes(view["data"]), dtype="<u2")
        out[name] = (view["dtype"], list(view["shape"]), bits)
    return out


def main():
    if len(sys.argv) != 2:
        fail("usage: check_safetensors_export.py DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "reference.json")) as f:
        index = json.load(f)
    flat = np.fromfile(os.path.join(d, "reference.f32"), dtype="<f4")
    reference = {}
    at = 0
    for entry in index:
        n = int(np.prod(entry["shape"], dtype=np.int64))
        reference[entry["name"]] = (entry["shape"], flat[at:at + n])
        at += n
    if at != flat.size:
        fail(f"reference.f32 holds {flat.size} values, the index {at}")

    # fp32: through the numpy backend, exact.
    path = os.path.join(d, "model.f32.safetensors")
    tensors = load_file(path)
    with safe_open(path, framework="np") as f:
        metadata = f.metadata() or {}
    if metadata.get("format") != "pt" or metadata.get("producer") != "safetensors_export_main":
        fail(f"{path}: metadata {metadata}")
    if set(tensors) != set(reference):
        fail(f"{path}: names {sorted(set(tensors) ^ set(reference))} differ from the reference")
    for name, (shape, values) in reference.items():
        t = tensors[name]
        if t.dtype != np.float32 or list(t.shape) != shape:
            fail(f"{path}: {name} is {t.dtype} {list(t.shape)}, expected float32 {shape}")
        if not np.array_equal(t.reshape(-1).view(np.uint32), values.view(np.uint32)):
            i = int(np.argmax(t.reshape(-1).view(np.uint32) != values.view(np.uint32)))
            fail(f"{path}: {name}[{i}] = {t.reshape(-1)[i]!r}, expected {values[i]!r}")

    # bf16: the fp32 masters rounded to nearest even.
    for file in ("model.bf16.safetensors", "model.16bit.safetensors"):
        path = os.path.join(d, file)
        tensors = load_bf16(path)
        if set(tensors) != set(reference):
            fail(f"{path}: names {sorted(set(tensors) ^ set(reference))} differ from the reference")
        for name, (shape, values) in reference.items():
            dtype, got_shape, bits = tensors[name]
            if dtype not in ("BF16", "bfloat16") or got_shape != shape:
                fail(f"{path}: {name} is {dtype} {got_shape}, expected BF16 {shape}")
            expected = bf16_bits_rne(values)
            if not np.array_equal(bits, expected):
                i = int(np.argmax(bits != expected))
                fail(f"{path}: {name}[{i}] bits {bits[i]:#06x}, expected {expected[i]:#06x} "
                     f"(fp32 {values[i]!r})")
    print(f"check_safetensors_export: {len(reference)} tensors, {flat.size} values: "
          f"F32 exact, BF16 round-to-nearest-even, in 3 files")


if __name__ == "__main__":
    main()
