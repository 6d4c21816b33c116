# PyTorch's check of tapegrad's layers and of its safetensors export: check_export.py FILE
# Reads export_driver's file with numpy alone (the format of docs/nn.md), loads each dtype's
# parameters into tests/nn/torch_layers.py's TinyGPT by name (strict: every key present, none
# extra), runs the same batch, and compares logits, loss and every gradient with tapegrad's:
# within 1e-10 relative in f64 and 1e-5 in f32 (relative to each tensor's largest value).
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_layers import TinyGPT, read_safetensors  # noqa: E402


tensors = read_safetensors(sys.argv[1])
ids, targets = torch.from_numpy(tensors['ids'].copy()), torch.from_numpy(tensors['targets'].copy())
failures = 0
for dtype, tol in (('f64', 1e-10), ('f32', 1e-5)):
    prefix = dtype + '/'
    torch_dtype = torch.float64 if dtype == 'f64' else torch.float32
    model = TinyGPT(11, 6, 8, 2, 2).to(torch_dtype)
    weights = {k[len(prefix):]: torch.from_numpy(v.copy()) for k, v in tensors.items()
               if k.startswith(prefix) and '/' not in k[len(prefix):] and k[len(prefix):] not in ('logits', 'loss')}
    model.load_state_dict(weights, strict=True)
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    checks = [('logits', logits), ('loss', loss)] + [('grad/' + k, p.grad) for k, p in model.named_parameters()]
    worst = 0.0
    for name, value in checks:
        ours = torch.from_numpy(tensors[prefix + name].copy()).double()
        theirs = value.detach().double()
        scale = max(theirs.abs().max().item(), 1e-30)
        err = (ours - theirs).abs().max().item() / scale
        worst = max(worst, err)
        if not err <= tol:
            failures += 1
            print(f'FAIL {prefix}{name}: largest difference {err:.3g} of its largest value, tolerance {tol:g}')
    print(f'{dtype}: {len(checks)} tensors (logits, loss, {len(checks) - 2} gradients), '
          f'largest relative difference {worst:.3g} (tolerance {tol:g})')
sys.exit(1 if failures else 0)
