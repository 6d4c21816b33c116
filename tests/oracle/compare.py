#!/usr/bin/env python3
"""Checks the oracle driver's runs against PyTorch: compare.py RUNS.jsonl

Each line of RUNS is one run of a case (tests/oracle/oracle_driver.cpp): its inputs, tapegrad's
output and every parameter's gradient for loss = sum(out * R) (a 0-d out is the loss itself). This
rebuilds the inputs as torch tensors (float parameters requiring grad in the run's dtype, ids as
int64, masks as bool), evaluates the case's snippet with x0, x1, ... bound, takes the same loss's
backward, and compares the output and the gradients elementwise:

    |tapegrad - torch| <= atol + rtol * |torch|, NaN and infinities in the same places,

with (rtol, atol) = (1e-10, 1e-12) for f64 runs and (1e-4, 1e-5) for f32 runs (and for any run
whose output is f32). A case may set its own looser tolerance, with a reason (the driver's
Case::loose); none does today. Integer and mask outputs must be equal. Prints one line per case and
a summary; exits 0 only if every run passes.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

TOLERANCE = {"f64": (1e-10, 1e-12), "f32": (1e-4, 1e-5)}
TORCH_DTYPE = {"f64": torch.float64, "f32": torch.float32, "i64": torch.int64, "i32": torch.int32, "u8": torch.bool}


def input_tensor(spec, dtype):
    """An input of the run as torch has it: params in `dtype` requiring grad, ids int64, masks bool."""
    shape = spec["shape"]
    if spec["kind"] == "param":
        return torch.tensor(spec["values"], dtype=TORCH_DTYPE[spec["dtype"]]).reshape(shape).requires_grad_(True)
    if spec["kind"] == "ids":
        return torch.tensor(spec["values"], dtype=torch.int64).reshape(shape)
    return torch.tensor(spec["values"], dtype=torch.bool).reshape(shape)


def evaluate(snippet, inputs, dtype):
    """The snippet with x0, x1, ... bound: an expression, or statements that assign `out`."""
    scope = {"torch": torch, "F": F, "math": math, "dtype": dtype}
    scope.update({f"x{k}": x for k, x in enumerate(inputs)})
    try:
        code = compile(snippet, "<case>", "eval")
    except SyntaxError:
        exec(compile(snippet, "<case>", "exec"), scope)
        return scope["out"]
    return eval(code, scope)


def unravel(k, shape):
    """The index of flat position k in a row-major tensor of `shape`, as a list."""
    index = []
    for n in reversed(shape):
        index.append(k % n)
        k //= n
    return index[::-1]


class Check:
    """The worst mismatch of one run, as a fraction of the tolerance (> 1 fails)."""

    def __init__(self, rtol, atol):
        self.rtol, self.atol = rtol, atol
        self.worst, self.worst_abs, self.where, self.failure = 0.0, 0.0, "", None

    def fail(self, what):
        if self.failure is None:
            self.failure = what

    def close(self, name, ours, theirs):
        """ours: tapegrad's JSON tensor; theirs: a torch tensor."""
        if list(ours["shape"]) != list(theirs.shape):
            return self.fail(f"{name}: shape {tuple(ours['shape'])}, torch {tuple(theirs.shape)}")
        a = torch.tensor(ours["values"], dtype=torch.float64).reshape(theirs.shape)
        b = theirs.detach().to(torch.float64)
        if not theirs.dtype.is_floating_point:
            bad = (a != b).nonzero()
            if len(bad):
                i = tuple(bad[0].tolist())
                self.fail(f"{name}{list(i)}: tapegrad {a[i].item()}, torch {b[i].item()}")
            return
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        inf_a, inf_b = torch.isinf(a), torch.isinf(b)
        mismatch = (nan_a != nan_b) | (inf_a != inf_b) | (inf_a & inf_b & (a != b))
        if mismatch.any():
            i = tuple(mismatch.nonzero()[0].tolist())
            return self.fail(f"{name}{list(i)}: tapegrad {a[i].item()}, torch {b[i].item()}")
        finite = torch.isfinite(a) & torch.isfinite(b)
        if not finite.any():
            return
        err = torch.where(finite, (a - b).abs(), torch.zeros_like(a))
        ratio = err / (self.atol + self.rtol * b.abs())
        k = int(ratio.flatten().argmax())
        r = ratio.flatten()[k].item()
        if r >= self.worst:
            i = unravel(k, a.shape)
            self.worst, self.worst_abs = r, err.flatten()[k].item()
            self.where = f"{name}{i if i else ''}: tapegrad {a.flatten()[k].item()!r}, torch {b.flatten()[k].item()!r}"
        if r > 1:
            self.fail(f"{self.where} ({self.worst_abs:.3g} off, {r:.3g} x the tolerance)")


def check_run(rec):
    """The Check of one run."""
    dtype = rec["dtype"]
    out_dtype = rec.get("out", {}).get("dtype", dtype)
    rtol, atol = TOLERANCE["f32" if "f32" in (dtype, out_dtype) else "f64"]
    if "tolerance" in rec:  # a case's own, with its reason: it loosens, never tightens
        rtol, atol = max(rtol, rec["tolerance"]["rtol"]), max(atol, rec["tolerance"]["atol"])
    check = Check(rtol, atol)
    if "error" in rec:
        check.fail(f"tapegrad threw: {rec['error']}")
        return check
    inputs = [input_tensor(s, TORCH_DTYPE[dtype]) for s in rec["inputs"]]
    try:
        out = evaluate(rec["torch"], inputs, TORCH_DTYPE[dtype])
    except Exception as e:  # the snippet itself is wrong: say so
        check.fail(f"torch snippet raised {type(e).__name__}: {e}")
        return check
    if TORCH_DTYPE[rec["out"]["dtype"]] != out.dtype:
        check.fail(f"out: dtype {rec['out']['dtype']}, torch {out.dtype}")
        return check
    check.close("out", rec["out"], out)
    grads = rec["grads"]
    if not out.requires_grad:
        if grads:
            check.fail("tapegrad gave gradients where torch's output takes none")
        return check
    if not grads:
        check.fail("tapegrad gave no gradients where torch's output takes them")
        return check
    loss = out if out.dim() == 0 else (out * torch.tensor(rec["R"]["values"], dtype=out.dtype).reshape(out.shape)).sum()
    loss.backward()
    for k, (x, ours) in enumerate(zip(inputs, grads)):
        if rec["inputs"][k]["kind"] != "param":
            continue
        if ours is None and x.grad is None:
            continue
        if ours is None:  # no gradient reached it: zeros
            ours = {"shape": list(x.shape), "values": [0.0] * x.numel()}
        check.close(f"grad x{k}", ours, x.grad if x.grad is not None else torch.zeros_like(x))
    return check


def main():
    if len(sys.argv) != 2:
        print("usage: compare.py RUNS.jsonl", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    cases = {}  # name -> {dtype: (worst fraction of the tolerance, its absolute error, where)}
    failures = {}  # name -> the first failure of its runs
    loosened = {}  # name -> the case's own tolerance and its reason
    runs = 0
    with open(sys.argv[1]) as f:
        for line in f:
            rec = json.loads(line)
            runs += 1
            try:
                check = check_run(rec)
            except Exception as e:  # torch refused the backward, or the record is malformed
                check = Check(0, 0)
                check.fail(f"{type(e).__name__}: {e}")
            if "tolerance" in rec:
                loosened[rec["case"]] = rec["tolerance"]
            per_dtype = cases.setdefault(rec["case"], {})
            best = per_dtype.get(rec["dtype"])
            if best is None or check.worst > best[0]:
                per_dtype[rec["dtype"]] = (check.worst, check.worst_abs, check.where)
            if check.failure is not None:
                failures.setdefault(rec["case"], f"{rec['dtype']} seed {rec['seed']}: {check.failure}")
    for name, per_dtype in cases.items():
        worst = "  ".join(f"{d} {w[1]:.1e} ({w[0]:.2g} of tol)" for d, w in per_dtype.items())
        if name in loosened:
            t = loosened[name]
            worst += f"; tolerance ({t['rtol']:g}, {t['atol']:g}): {t['reason']}"
        if name in failures:
            print(f"FAIL  {name}: {failures[name]}")
        else:
            print(f"PASS  {name}  [{worst}]")
    print(f"oracle: {len(cases)} cases, {runs} runs: {len(cases) - len(failures)} passed, {len(failures)} failed")
    return 0 if runs > 0 and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
