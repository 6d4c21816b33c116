"""Writes a changed copy of a gpt checkpoint, its CRC made good, for tests/gpt/hostile_test.sh.

A checkpoint is the envelope of src/io/envelope.hpp holding a state dict (Note [state dict files]
in src/nn/state_dict.cpp): the schema identity lists each tensor's name, dtype, shape, offset and
byte count in the one plane; the learner identity is the run's settings text.

    edit_checkpoint.py IN OUT [--step N] [--setting KEY=VALUE ...] [--f64 NAME=VALUE ...] [--nan NAME ...]
    edit_checkpoint.py IN < JOBS      each line of JOBS: OUT and its options, as above

--step sets the step field (any u64); --setting sets a word of the settings text (dtype=f16);
--f64 sets a () f64 tensor; --nan fills an f32 tensor with NaNs.
"""
import argparse
import shlex
import struct
import sys
import zlib


def parse(data):
    if data[:8] != b"CKPTENV1":
        raise SystemExit("not a checkpoint envelope")
    at = 12
    identities = []
    for _ in range(4):
        (n,) = struct.unpack_from("<I", data, at)
        identities.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    payload, chunk, updates, step = struct.unpack_from("<QQQQ", data, at)
    at += 32
    (count,) = struct.unpack_from("<I", data, at)
    at += 4
    plane = bytearray(data[at : at + payload])
    return identities, chunk, updates, step, count, plane


def build(data, identities, chunk, updates, step, count, plane):
    out = bytearray(data[:12])
    for identity in identities:
        out += struct.pack("<I", len(identity)) + identity
    out += struct.pack("<QQQQ", len(plane), chunk, updates, step) + struct.pack("<I", count) + plane
    return bytes(out) + struct.pack("<I", zlib.crc32(bytes(out)))


def tensor_range(schema, name):
    for line in schema.decode().splitlines()[1:]:
        words = line.split()
        if words[0] == name:
            return words[1], int(words[3]), int(words[4])
    raise SystemExit(f"no tensor {name} in the checkpoint")


def edited(data, a):
    identities, chunk, updates, step, count, plane = parse(data)
    if a.step is not None:
        step = a.step
    for change in a.setting:
        key, value = change.split("=", 1)
        words = identities[1].decode().split(" ")
        hits = [i for i, w in enumerate(words) if w.startswith(key + "=")]
        if not hits:
            raise SystemExit(f"no setting {key} in {identities[1].decode()}")
        words[hits[0]] = key + "=" + value
        identities[1] = " ".join(words).encode()
    for change in a.f64:
        name, value = change.split("=", 1)
        dtype, offset, size = tensor_range(identities[0], name)
        assert dtype == "f64" and size == 8, (name, dtype, size)
        plane[offset : offset + 8] = struct.pack("<d", float(value))
    for name in a.nan:
        dtype, offset, size = tensor_range(identities[0], name)
        assert dtype == "f32", (name, dtype)
        plane[offset : offset + size] = struct.pack("<f", float("nan")) * (size // 4)
    return build(data, identities, chunk, updates, step, count, plane)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("--step", type=int)
    parser.add_argument("--setting", action="append", default=[])
    parser.add_argument("--f64", action="append", default=[])
    parser.add_argument("--nan", action="append", default=[])
    source, rest = sys.argv[1], sys.argv[2:]
    data = open(source, "rb").read()
    jobs = [rest] if rest else [shlex.split(line) for line in sys.stdin if line.strip()]
    for job in jobs:
        a = parser.parse_args(job)
        open(a.target, "wb").write(edited(data, a))


if __name__ == "__main__":
    main()
